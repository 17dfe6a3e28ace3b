//! `#[derive(Job)]` for [fairjob](https://docs.rs/fairjob). Use it through
//! `fairjob::Job`, which re-exports it; the generated code names only
//! `::fairjob` paths.
//!
//! The input flows through `attr` (parse each attribute, keep spans) → `ast`
//! (a typed view of the struct) → `validate` (rules across attributes) →
//! `expand` (code, or errors beside a stub). Errors are collected in a `ctxt`
//! so that all mistakes are reported at once.

mod ast;
mod attr;
mod attr_cron;
mod ctxt;
mod expand;
mod validate;

use proc_macro::TokenStream;

/// Implements `fairjob::Job` for a struct and registers it for the bundled
/// worker.
///
/// The struct must also implement `fairjob::Perform`, `serde::Serialize` and
/// `serde::Deserialize`, and must not have generic parameters. Its form decides
/// Sidekiq's positional `args`: a unit struct has none, a newtype `Job(v)` has
/// `[v]`, a tuple struct `Job(a, b)` has `[a, b]`, and a struct with named
/// fields has one object `[{...}]`.
///
/// # Attributes
///
/// All of them go on the struct, never on a field.
///
/// - `#[job(class = "Name", queue = "q", retry = 5, shard_by_tenant)]`, every
///   key optional: `class` defaults to the type's name and `queue` to
///   `"default"`; `retry` is `true` (Sidekiq's 25 retries, the default),
///   `false` (no retries) or a number. `active_job` declares a Rails
///   ActiveJob class (`class` is the Ruby job class): the type runs the
///   payloads ActiveJob's Sidekiq adapter writes for it, with their
///   arguments decoded from ActiveJob's serialization, and is pushed in that
///   form.
/// - `#[fair_tenant(field)]`, `#[fair_tenant(0)]` or
///   `#[fair_tenant(with = path::to::function)]`: where the job's tenant comes
///   from. The field must implement `Display`; the function is
///   `fn(&Self) -> Option<T>` with `T: Display`. An empty string is no tenant.
/// - `#[throttle(queue = "q_slow", threshold = 100, per = "1h", weight = 1)]`,
///   repeatable: once more than `threshold` jobs of one tenant were enqueued
///   within `per` (a humantime duration, default `"1d"`), reroute to `queue`,
///   fetched with `weight`. The last matching rule wins. (Clippy's
///   `duplicated_attributes` lint wrongly flags two rules that share a value,
///   such as the same `per`; allow it on the struct.)
/// - `#[concurrency(limit = 10, key = account_id, group = "imports")]`: at
///   most `limit` jobs of one key run at once. `key` is a field (a name or a
///   tuple index) or a function `fn(&Self) -> T` with `T: Display`; `group`
///   shares the slots between job types.
/// - `#[iterable]` or `#[iterable(checkpoint = "5s", slice = "10m")]`: a
///   resumable job. The struct implements `fairjob::Iterate` (steps over a
///   cursor) instead of `Perform`. `checkpoint` (default 5 s) is how often
///   the cursor is saved, `slice` (default 10 minutes, not shorter than
///   `checkpoint`) how long one run goes on before the job goes back to its
///   queue's tail.
/// - `#[rate_limit(limit = 100, per = "1m", burst = 0, key = account_id, group = "stripe")]`:
///   at most `limit` starts of one key per `per` (plus `burst` at once; by
///   default starts are spread evenly). `key` is a field, a function as in
///   `#[concurrency]`, or `tenant` (the job's tenant); without `key`, one
///   limiter for the class (or group). A job over the limit waits without
///   holding a worker and is released when the limiter has room.
/// - `#[cron("0 3 * * *", tz = "Europe/Berlin", catch_up = "10m", overlap =
///   "skip", name = "nightly")]`, repeatable, on a job that implements
///   `Default`: a periodic schedule enqueuing `Self::default()` (5 fields, 6
///   with seconds first, or `@hourly`, `@daily`…; `tz` defaults to UTC,
///   `catch_up` to `"10m"` (or `"none"`), `overlap` to `"allow"`, `name` to
///   the class name). A malformed expression or an unknown zone is a compile
///   error at its literal.
/// - `#[unique(for = "10m", by(account_id), until = "start", on_conflict = "replace")]`:
///   at most one job per key is queued, scheduled or running. `for` (the
///   lock's longest life) is required; `by` picks the key's fields (default:
///   all arguments); `until` is `"success"` (default) or `"start"`;
///   `on_conflict` is `"reject"` (default: `Error::Duplicate`) or
///   `"replace"` (the waiting job takes the new arguments and due time).
///
/// # Example
///
/// ```text
/// use fairjob::{Job, JobContext, JobError, Perform};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "imports", retry = 5)]
/// #[fair_tenant(account_id)]
/// #[throttle(queue = "imports_throttled", threshold = 100, per = "1h")]
/// struct Import {
///     account_id: u64,
///     file: String,
/// }
///
/// impl Perform for Import {
///     async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
///         Ok(())
///     }
/// }
/// ```
#[proc_macro_derive(
    Job,
    attributes(
        job,
        fair_tenant,
        throttle,
        concurrency,
        iterable,
        rate_limit,
        cron,
        unique
    )
)]
pub fn derive_job(input: TokenStream) -> TokenStream {
    expand::derive(&syn::parse_macro_input!(input as syn::DeriveInput)).into()
}
