//! Rules that span several attributes or need the struct's fields: a throttle
//! never reroutes to the job's own queue, no two throttles share a queue, and
//! `#[fair_tenant]` / `#[concurrency(key)]` name fields that exist.
//!
//! Checks made by one attribute alone belong to `attr`; this module generates
//! no code, it only resolves what the code will read.

use std::time::Duration;

use quote::ToTokens;
use syn::{ExprPath, Member};

use crate::ast::Container;
use crate::attr::{FairTenant, FieldRef, KeyRef, RateKey};
use crate::ctxt::Ctxt;

/// The queue of a job without `#[job(queue)]`.
pub(crate) const DEFAULT_QUEUE: &str = "default";

/// Where a job's tenant or concurrency key comes from.
pub(crate) enum Source {
    /// `self.<member>`.
    Field(Member),
    /// `<path>(self)`.
    Call(ExprPath),
}

/// What the attributes resolve to once fields are known.
pub(crate) struct Resolved {
    /// The source of `Job::fair_tenant`, if the type declares one.
    pub(crate) fair_tenant: Option<Source>,
    /// The source of `Job::concurrency_key`, if the type declares one.
    pub(crate) concurrency_key: Option<Source>,
    /// The source of `Job::rate_key`, if the type declares a `#[rate_limit]`
    /// keyed by a field or a function (`key = tenant` needs none).
    pub(crate) rate_key: Option<Source>,
    /// The fields of `#[unique(by(...))]`, resolved (empty: all arguments).
    pub(crate) unique_by: Vec<Member>,
}

/// Checks the cross-attribute rules into `cx` and resolves field references.
pub(crate) fn check(cx: &mut Ctxt, container: &Container<'_>) -> Resolved {
    check_throttles(cx, container);
    check_iterable(cx, container);
    check_crons(cx, container);
    let fair_tenant = container
        .attrs
        .fair_tenant
        .as_ref()
        .and_then(|tenant| match tenant {
            FairTenant::Field(field) => field_member(cx, container, field).map(Source::Field),
            FairTenant::With(path) => Some(Source::Call(path.clone())),
        });
    let concurrency_key = container
        .attrs
        .concurrency
        .as_ref()
        .and_then(|concurrency| match &concurrency.key {
            KeyRef::Index(index) => {
                field_member(cx, container, &FieldRef::Index(index.clone())).map(Source::Field)
            }
            KeyRef::Path(path) => Some(key_source(container, path)),
        });
    let rate_key = container
        .attrs
        .rate_limit
        .as_ref()
        .and_then(|rate| match &rate.key {
            Some(RateKey::Key(KeyRef::Index(index))) => {
                field_member(cx, container, &FieldRef::Index(index.clone())).map(Source::Field)
            }
            Some(RateKey::Key(KeyRef::Path(path))) => Some(key_source(container, path)),
            Some(RateKey::Tenant) | None => None,
        });
    let unique_by = container
        .attrs
        .unique
        .as_ref()
        .map(|u| {
            u.by.iter()
                .filter_map(|field| field_member(cx, container, field))
                .collect()
        })
        .unwrap_or_default();
    Resolved {
        fair_tenant,
        concurrency_key,
        rate_key,
        unique_by,
    }
}

/// Two `#[cron]` schedules of one type need different names (the default
/// name is the class name).
fn check_crons(cx: &mut Ctxt, container: &Container<'_>) {
    let mut seen: Vec<Option<String>> = Vec::new();
    for cron in &container.attrs.crons {
        let name = cron.name.as_ref().map(|n| n.value());
        if seen.contains(&name) {
            match &cron.name {
                Some(n) => cx.error_spanned_by(
                    n,
                    format_args!("two `#[cron]` schedules are named `{}`", n.value()),
                ),
                None => cx.error_spanned_by(
                    &cron.attr,
                    "a second `#[cron]` on this job needs its own `name = \"...\"`",
                ),
            }
        }
        seen.push(name);
    }
}

/// The default checkpoint interval and slice of an iterable job (the
/// runtime's `IterableOptions::DEFAULT`).
pub(crate) const DEFAULT_CHECKPOINT: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_SLICE: Duration = Duration::from_secs(600);

/// An iterable job checkpoints at least once per slice.
fn check_iterable(cx: &mut Ctxt, container: &Container<'_>) {
    let Some(it) = &container.attrs.iterable else {
        return;
    };
    let checkpoint = it.checkpoint.unwrap_or(DEFAULT_CHECKPOINT);
    let slice = it.slice.unwrap_or(DEFAULT_SLICE);
    if checkpoint > slice
        && let Some(span) = it.span
    {
        cx.syn_error(syn::Error::new(
            span,
            format_args!(
                "`checkpoint` ({}) must not be longer than `slice` ({}): the cursor is saved at least once per slice",
                humantime::format_duration(checkpoint),
                humantime::format_duration(slice)
            ),
        ));
    }
}

fn check_throttles(cx: &mut Ctxt, container: &Container<'_>) {
    let own_queue = container
        .attrs
        .job
        .queue
        .as_ref()
        .map_or_else(|| DEFAULT_QUEUE.to_owned(), |q| q.value());
    let mut seen: Vec<String> = Vec::new();
    for rule in &container.attrs.throttles {
        let queue = rule.queue.value();
        if queue == own_queue {
            cx.error_spanned_by(
                &rule.queue,
                format_args!(
                    "throttle queue `{queue}` is the job's own queue; a throttle reroutes to a different queue"
                ),
            );
        } else if seen.contains(&queue) {
            cx.error_spanned_by(
                &rule.queue,
                format_args!(
                    "duplicate throttle queue `{queue}`; each `#[throttle]` needs its own queue"
                ),
            );
        } else {
            seen.push(queue);
        }
    }
}

/// A single identifier naming a named field is that field; anything else is
/// a function called with `&Self`.
fn key_source(container: &Container<'_>, path: &ExprPath) -> Source {
    if path.qself.is_none()
        && let Some(ident) = path.path.get_ident()
        && let Some(member) = container.member(&FieldRef::Named(ident.clone()))
    {
        return Source::Field(member);
    }
    Source::Call(path.clone())
}

fn field_member(cx: &mut Ctxt, container: &Container<'_>, field: &FieldRef) -> Option<Member> {
    let member = container.member(field);
    if member.is_none() {
        let (name, tokens) = match field {
            FieldRef::Named(ident) => (ident.to_string(), ident.to_token_stream()),
            FieldRef::Index(index) => (index.index.to_string(), index.to_token_stream()),
        };
        let hint = match (field, container.fields) {
            (FieldRef::Named(_), syn::Fields::Unnamed(_)) => "; its fields are numbered, like `0`",
            (FieldRef::Index(_), syn::Fields::Named(_)) => "; its fields have names",
            _ => "",
        };
        cx.error_spanned_by(
            tokens,
            format_args!("no field `{name}` on `{}`{hint}", container.ident),
        );
    }
    member
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::{DeriveInput, parse_quote};

    fn run(input: &DeriveInput) -> (Option<Resolved>, Vec<String>) {
        let mut cx = Ctxt::new();
        let resolved = Container::from_ast(&mut cx, input).map(|c| check(&mut cx, &c));
        let errors = match cx.finish() {
            Ok(()) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        };
        (resolved, errors)
    }

    #[test]
    fn throttle_queue_rules() {
        let (_, errors) = run(&parse_quote! {
            #[job(queue = "imports")]
            #[throttle(queue = "imports_slow", threshold = 10)]
            #[throttle(queue = "imports", threshold = 20)]
            #[throttle(queue = "imports_slow", threshold = 30)]
            struct A;
        });
        assert_eq!(
            errors,
            [
                "throttle queue `imports` is the job's own queue; a throttle reroutes to a different queue",
                "duplicate throttle queue `imports_slow`; each `#[throttle]` needs its own queue",
            ]
        );
        let (_, errors) = run(&parse_quote! {
            #[throttle(queue = "default", threshold = 10)]
            struct A;
        });
        assert_eq!(
            errors,
            [
                "throttle queue `default` is the job's own queue; a throttle reroutes to a different queue"
            ]
        );
    }

    #[test]
    fn missing_fields_are_named() {
        let (_, errors) = run(&parse_quote! {
            #[fair_tenant(acount_id)]
            #[concurrency(limit = 2, key = 3)]
            struct MyJob { account_id: u64 }
        });
        assert_eq!(
            errors,
            [
                "no field `acount_id` on `MyJob`",
                "no field `3` on `MyJob`; its fields have names",
            ]
        );
        let (_, errors) = run(&parse_quote! {
            #[fair_tenant(account_id)]
            struct MyJob(u64);
        });
        assert_eq!(
            errors,
            ["no field `account_id` on `MyJob`; its fields are numbered, like `0`"]
        );
    }

    #[test]
    fn concurrency_key_is_a_field_when_one_has_that_name() {
        let (resolved, errors) = run(&parse_quote! {
            #[concurrency(limit = 2, key = account_id)]
            struct A { account_id: u64 }
        });
        assert!(errors.is_empty());
        assert!(matches!(
            resolved.unwrap().concurrency_key,
            Some(Source::Field(_))
        ));

        for input in [
            parse_quote! {
                #[concurrency(limit = 2, key = account_of)]
                struct A { account_id: u64 }
            },
            parse_quote! {
                #[concurrency(limit = 2, key = keys::account)]
                struct A { account_id: u64 }
            },
        ] {
            let (resolved, errors) = run(&input);
            assert!(errors.is_empty());
            assert!(matches!(
                resolved.unwrap().concurrency_key,
                Some(Source::Call(_))
            ));
        }
    }
}
