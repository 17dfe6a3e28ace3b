//! Compile tests of `#[derive(Job)]` and of the typed APIs that take job
//! types (`Fake::enqueued::<T>()`: the fixtures build fairjob with its
//! `testing` feature): `ui/pass_*.rs` must build and run, each `ui/fail_*.rs`
//! must fail with exactly its `.stderr`.
//!
//! One mistake per file, named after it. Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p fairjob-macros --test ui` and read the
//! diff: every error must point at the offending token. The fixtures are built
//! with this crate's few dev-dependencies (fairjob without TLS), which keeps
//! trybuild's separate build short.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
    t.compile_fail("tests/ui/fail_*.rs");
}
