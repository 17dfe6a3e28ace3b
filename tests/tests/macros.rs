//! Compile tests of `#[derive(Job)]`: `ui/pass_*.rs` must build and run,
//! each `ui/fail_*.rs` must fail with exactly its `.stderr`.
//!
//! One mistake per file, named after it. Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p fairjob-tests --test macros` and read the
//! diff: every error must point at the offending token.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
    t.compile_fail("tests/ui/fail_*.rs");
}
