//! Parsing of the container attributes `#[job]`, `#[fair_tenant]`, `#[throttle]`
//! and `#[concurrency]`, one key at a time with `parse_nested_meta`, keeping
//! each value with its span.
//!
//! This module checks only what one attribute can check alone: key names,
//! repeated keys, literal types, ranges and `per` durations. Rules that involve
//! several attributes or the struct's fields belong to `validate`; nothing here
//! generates code.

use std::str::FromStr;
use std::time::Duration;

use proc_macro2::{Ident, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::{Attribute, Expr, ExprPath, Lit, LitInt, LitStr, Path, Token};

use crate::ctxt::Ctxt;

/// The helper attributes that `#[derive(Job)]` declares.
pub(crate) const HELPERS: [&str; 8] = [
    "job",
    "fair_tenant",
    "throttle",
    "concurrency",
    "iterable",
    "rate_limit",
    "cron",
    "unique",
];

/// The window of a `#[throttle]` rule that gives no `per`: one day, the
/// largest window of sidekiq-fair_tenant.
pub(crate) const DEFAULT_PER: Duration = Duration::from_secs(86_400);

/// What the container attributes of one type say.
#[derive(Default)]
pub(crate) struct Attrs {
    /// `#[job(...)]`, merged over every `#[job]` attribute.
    pub(crate) job: JobAttr,
    /// `#[fair_tenant(...)]`, if given (and valid).
    pub(crate) fair_tenant: Option<FairTenant>,
    /// The valid `#[throttle(...)]` rules, in declaration order.
    pub(crate) throttles: Vec<Throttle>,
    /// `#[concurrency(...)]`, if given (and valid).
    pub(crate) concurrency: Option<Concurrency>,
    /// `#[rate_limit(...)]`, if given (and valid).
    pub(crate) rate_limit: Option<RateLimitAttr>,
    /// The valid `#[cron(...)]` schedules, in declaration order.
    pub(crate) crons: Vec<crate::attr_cron::Cron>,
    /// `#[unique(...)]`, if given (and valid).
    pub(crate) unique: Option<Unique>,
    /// `#[iterable(...)]`, if given (and valid).
    pub(crate) iterable: Option<Iterable>,
}

/// `#[iterable(checkpoint = "5s", slice = "10m")]`; `None` where a key was
/// not given (the runtime's default).
#[derive(Debug, Clone, Default)]
pub(crate) struct Iterable {
    /// How often the cursor is saved.
    pub(crate) checkpoint: Option<Duration>,
    /// How long one run goes on before it yields.
    pub(crate) slice: Option<Duration>,
    /// The span of `checkpoint`'s value (else of `iterable`), for errors across keys.
    pub(crate) span: Option<proc_macro2::Span>,
}

/// The keys of `#[job(...)]`; `None` where a key was not given.
#[derive(Default)]
pub(crate) struct JobAttr {
    /// `class = "Name"`.
    pub(crate) class: Option<LitStr>,
    /// `queue = "name"`.
    pub(crate) queue: Option<LitStr>,
    /// `retry = true | false | N`.
    pub(crate) retry: Option<Retry>,
    /// `shard_by_tenant` or `shard_by_tenant = bool`.
    pub(crate) shard_by_tenant: bool,
    /// `timeout = "5m"`: a run longer than this is cancelled and fails.
    pub(crate) timeout: Option<Duration>,
    /// `active_job` or `active_job = bool`: a Rails ActiveJob class.
    pub(crate) active_job: bool,
}

/// The `retry` key, mirroring the runtime's `Retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// `retry = true`.
    Default,
    /// `retry = false`.
    Never,
    /// `retry = N`.
    Times(u32),
}

/// A field named by an attribute: `account_id` or, in a tuple struct, `0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldRef {
    /// A named field.
    Named(Ident),
    /// A tuple field, with the span of the index literal.
    Index(syn::Index),
}

/// `#[fair_tenant(...)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FairTenant {
    /// `#[fair_tenant(field)]` or `#[fair_tenant(0)]`.
    Field(FieldRef),
    /// `#[fair_tenant(with = path::to::function)]`.
    With(ExprPath),
}

/// One `#[throttle(...)]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Throttle {
    /// The slower queue, kept as written for later errors.
    pub(crate) queue: LitStr,
    /// Jobs allowed within the window.
    pub(crate) threshold: u64,
    /// The window, a whole number of seconds.
    pub(crate) per: Duration,
    /// The fetch weight of `queue`.
    pub(crate) weight: Option<u32>,
}

/// `#[concurrency(...)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Concurrency {
    /// Slots per key.
    pub(crate) limit: u32,
    /// Where the key comes from.
    pub(crate) key: KeyRef,
    /// A key group shared by several job types.
    pub(crate) group: Option<LitStr>,
}

/// `#[rate_limit(...)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateLimitAttr {
    /// Starts per period.
    pub(crate) limit: u32,
    /// The period.
    pub(crate) per: Duration,
    /// Extra starts allowed at once.
    pub(crate) burst: u32,
    /// Where the key comes from; `None`: one limiter for the class or group.
    pub(crate) key: Option<RateKey>,
    /// A limiter shared by several job types.
    pub(crate) group: Option<LitStr>,
}

/// The `key` of `#[rate_limit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RateKey {
    /// `key = tenant`: the job's tenant.
    Tenant,
    /// A field or a function, as in `#[concurrency]`.
    Key(KeyRef),
}

/// The `key` of `#[concurrency]` as written; `validate` decides whether a
/// single identifier names a field or a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyRef {
    /// `key = 0`: a tuple field.
    Index(syn::Index),
    /// `key = name` or `key = path::to::function`.
    Path(ExprPath),
}

/// `#[unique(...)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unique {
    /// `for = "10m"`: the lock's longest life (required).
    pub(crate) lock_for: Duration,
    /// `by(field, ...)`: the fields that make the key; empty: all arguments.
    pub(crate) by: Vec<FieldRef>,
    /// `until = "start"`; `false` for `"success"` (the default).
    pub(crate) until_start: bool,
    /// `on_conflict = "replace"`; `false` for `"reject"` (the default).
    pub(crate) replace: bool,
}

impl Attrs {
    /// Parses every container attribute, reporting each mistake into `cx`.
    pub(crate) fn parse(cx: &mut Ctxt, attrs: &[Attribute]) -> Self {
        let mut out = Attrs::default();
        let mut job_keys = Keys::new(
            "job",
            &[
                "active_job",
                "class",
                "queue",
                "retry",
                "shard_by_tenant",
                "timeout",
            ],
        );
        // Attributes that may appear once, as they are met.
        let mut seen: Vec<&'static str> = Vec::new();
        for attr in attrs {
            let path = attr.path();
            if path.is_ident("job") {
                parse_job(cx, attr, &mut job_keys, &mut out.job);
            } else if path.is_ident("fair_tenant") {
                if !first_of(cx, attr, "fair_tenant", &mut seen) {
                    continue;
                }
                match attr.parse_args_with(parse_fair_tenant) {
                    Ok(tenant) => out.fair_tenant = Some(tenant),
                    Err(err) => cx.syn_error(err),
                }
            } else if path.is_ident("throttle") {
                if let Some(rule) = parse_throttle(cx, attr) {
                    out.throttles.push(rule);
                }
            } else if path.is_ident("concurrency") {
                if !first_of(cx, attr, "concurrency", &mut seen) {
                    continue;
                }
                out.concurrency = parse_concurrency(cx, attr);
            } else if path.is_ident("iterable") {
                if !first_of(cx, attr, "iterable", &mut seen) {
                    continue;
                }
                out.iterable = parse_iterable(cx, attr);
            } else if path.is_ident("rate_limit") {
                if !first_of(cx, attr, "rate_limit", &mut seen) {
                    continue;
                }
                out.rate_limit = parse_rate_limit(cx, attr);
            } else if path.is_ident("unique") {
                if !first_of(cx, attr, "unique", &mut seen) {
                    continue;
                }
                out.unique = parse_unique(cx, attr);
            } else if path.is_ident("cron")
                && let Some(cron) = crate::attr_cron::parse(cx, attr)
            {
                out.crons.push(cron);
            }
        }
        out
    }
}

/// Whether `attr` is the first `#[name]` of the type; a repeat is reported
/// at the repeat (`seen` lists the names met so far).
fn first_of(
    cx: &mut Ctxt,
    attr: &Attribute,
    name: &'static str,
    seen: &mut Vec<&'static str>,
) -> bool {
    if seen.contains(&name) {
        cx.error_spanned_by(attr, format_args!("`#[{name}]` may appear only once"));
        return false;
    }
    seen.push(name);
    true
}

/// The keys one attribute accepts and the ones already seen, for the
/// "unknown" and "duplicate" errors.
struct Keys {
    attr: &'static str,
    known: &'static [&'static str],
    seen: Vec<&'static str>,
}

impl Keys {
    fn new(attr: &'static str, known: &'static [&'static str]) -> Self {
        Keys {
            attr,
            known,
            seen: Vec::new(),
        }
    }

    /// The key at `meta` when it is known and not a repeat. Otherwise reports
    /// the mistake at the key, skips its value and returns `None`.
    fn accept(
        &mut self,
        cx: &mut Ctxt,
        meta: &ParseNestedMeta<'_>,
    ) -> syn::Result<Option<&'static str>> {
        let attr = self.attr;
        match self.known.iter().copied().find(|k| meta.path.is_ident(k)) {
            None => {
                let expected: Vec<String> = self.known.iter().map(|k| format!("`{k}`")).collect();
                cx.error_spanned_by(
                    &meta.path,
                    format_args!(
                        "unknown `{attr}` attribute `{}`; expected one of {}",
                        path_to_string(&meta.path),
                        expected.join(", ")
                    ),
                );
                skip_value(meta)?;
                Ok(None)
            }
            Some(key) if self.seen.contains(&key) => {
                cx.error_spanned_by(
                    &meta.path,
                    format_args!("duplicate `{attr}` attribute `{key}`"),
                );
                skip_value(meta)?;
                Ok(None)
            }
            Some(key) => {
                self.seen.push(key);
                Ok(Some(key))
            }
        }
    }

    /// Reports each `(key, example)` of `required` that the attribute did not
    /// give, unless the attribute already had a mistake (errors beyond
    /// `errors_before`): after the typo `treshold`, "missing `threshold`"
    /// would only repeat it.
    fn require(
        &self,
        cx: &mut Ctxt,
        attr: &Attribute,
        errors_before: usize,
        required: &[(&str, &str)],
    ) {
        if cx.error_count() > errors_before {
            return;
        }
        for (key, example) in required {
            if !self.seen.contains(key) {
                cx.error_spanned_by(
                    attr,
                    format_args!("`#[{}]` needs `{key}`, like `{example}`", self.attr),
                );
            }
        }
    }
}

fn parse_job(cx: &mut Ctxt, attr: &Attribute, keys: &mut Keys, out: &mut JobAttr) {
    let parsed = attr.parse_nested_meta(|meta| {
        let Some(key) = keys.accept(cx, &meta)? else {
            return Ok(());
        };
        if key == "shard_by_tenant" && !meta.input.peek(Token![=]) {
            out.shard_by_tenant = true;
            return Ok(());
        }
        if key == "active_job" && !meta.input.peek(Token![=]) {
            out.active_job = true;
            return Ok(());
        }
        let example = match key {
            "class" => "class = \"HardWorker\"",
            "queue" => "queue = \"default\"",
            "retry" => "retry = 5",
            "timeout" => "timeout = \"5m\"",
            "active_job" => "active_job = true",
            _ => "shard_by_tenant = true",
        };
        let Some(value) = value(cx, &meta, key, example)? else {
            return Ok(());
        };
        match key {
            "class" => out.class = string(cx, key, &value, example),
            "queue" => out.queue = string(cx, key, &value, example),
            "retry" => out.retry = retry(cx, &value),
            "timeout" => out.timeout = duration(cx, "timeout", &value, false),
            "active_job" => match lit(&value) {
                Some(Lit::Bool(b)) => out.active_job = b.value,
                _ => cx.error_spanned_by(&value, "`active_job` must be `true` or `false`"),
            },
            _ => match lit(&value) {
                Some(Lit::Bool(b)) => out.shard_by_tenant = b.value,
                _ => cx.error_spanned_by(&value, "`shard_by_tenant` must be `true` or `false`"),
            },
        }
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
    }
}

fn retry(cx: &mut Ctxt, value: &Expr) -> Option<Retry> {
    match lit(value) {
        Some(Lit::Bool(b)) if b.value => Some(Retry::Default),
        Some(Lit::Bool(_)) => Some(Retry::Never),
        Some(Lit::Int(n)) => match n.base10_parse::<u32>() {
            Ok(n) => Some(Retry::Times(n)),
            Err(err) => {
                cx.syn_error(err);
                None
            }
        },
        _ => {
            cx.error_spanned_by(
                value,
                "`retry` must be `true`, `false` or a number of retries, like `retry = 5`",
            );
            None
        }
    }
}

fn parse_fair_tenant(input: ParseStream<'_>) -> syn::Result<FairTenant> {
    const EXPECTED: &str = "expected a field name, a field index or `with = path::to::function`, like `#[fair_tenant(account_id)]`";
    let tenant = if input.peek(LitInt) {
        FairTenant::Field(FieldRef::Index(field_index(&input.parse()?)?))
    } else if input.peek(syn::Ident) && input.peek2(Token![=]) {
        let key: Ident = input.parse()?;
        if key != "with" {
            return Err(syn::Error::new(
                key.span(),
                format_args!(
                    "unknown `fair_tenant` attribute `{key}`; expected a field name, a field index or `with = path::to::function`"
                ),
            ));
        }
        input.parse::<Token![=]>()?;
        let value: Expr = input.parse()?;
        match value {
            Expr::Path(path) if path.attrs.is_empty() => FairTenant::With(path),
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "`with` must be a path to a function `fn(&Self) -> Option<impl Display>`",
                ));
            }
        }
    } else if input.peek(syn::Ident) {
        FairTenant::Field(FieldRef::Named(input.parse()?))
    } else {
        return Err(input.error(EXPECTED));
    };
    input.parse::<Option<Token![,]>>()?;
    if !input.is_empty() {
        return Err(input.error("`#[fair_tenant]` takes one field or one `with = path`"));
    }
    Ok(tenant)
}

fn parse_throttle(cx: &mut Ctxt, attr: &Attribute) -> Option<Throttle> {
    let errors_before = cx.error_count();
    let mut keys = Keys::new("throttle", &["queue", "threshold", "per", "weight"]);
    let mut queue = None;
    let mut threshold = None;
    let mut per = None;
    let mut weight = None;
    let parsed = attr.parse_nested_meta(|meta| {
        let Some(key) = keys.accept(cx, &meta)? else {
            return Ok(());
        };
        let example = match key {
            "queue" => "queue = \"default_throttled\"",
            "threshold" => "threshold = 100",
            "per" => "per = \"1h\"",
            _ => "weight = 1",
        };
        let Some(value) = value(cx, &meta, key, example)? else {
            return Ok(());
        };
        match key {
            "queue" => queue = string(cx, key, &value, example),
            "threshold" => threshold = positive::<u64>(cx, key, &value, example),
            "per" => per = duration(cx, "per", &value, true),
            _ => weight = positive::<u32>(cx, key, &value, example),
        }
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
        return None;
    }
    keys.require(
        cx,
        attr,
        errors_before,
        &[
            ("queue", "queue = \"default_throttled\""),
            ("threshold", "threshold = 100"),
        ],
    );
    if cx.error_count() > errors_before {
        return None;
    }
    Some(Throttle {
        queue: queue?,
        threshold: threshold?,
        per: per.unwrap_or(DEFAULT_PER),
        weight,
    })
}

fn parse_concurrency(cx: &mut Ctxt, attr: &Attribute) -> Option<Concurrency> {
    let errors_before = cx.error_count();
    let mut keys = Keys::new("concurrency", &["limit", "key", "group"]);
    let mut limit = None;
    let mut key_ref = None;
    let mut group = None;
    let parsed = attr.parse_nested_meta(|meta| {
        let Some(key) = keys.accept(cx, &meta)? else {
            return Ok(());
        };
        let example = match key {
            "limit" => "limit = 10",
            "key" => "key = account_id",
            _ => "group = \"imports\"",
        };
        let Some(value) = value(cx, &meta, key, example)? else {
            return Ok(());
        };
        match key {
            "limit" => limit = positive::<u32>(cx, key, &value, example),
            "key" => key_ref = concurrency_key(cx, &value),
            _ => group = string(cx, key, &value, example),
        }
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
        return None;
    }
    keys.require(
        cx,
        attr,
        errors_before,
        &[("limit", "limit = 10"), ("key", "key = account_id")],
    );
    if cx.error_count() > errors_before {
        return None;
    }
    Some(Concurrency {
        limit: limit?,
        key: key_ref?,
        group,
    })
}

/// `#[iterable]` alone, or with `checkpoint` and `slice` durations.
fn parse_iterable(cx: &mut Ctxt, attr: &Attribute) -> Option<Iterable> {
    let mut out = Iterable {
        span: Some(syn::spanned::Spanned::span(attr.path())),
        ..Iterable::default()
    };
    if matches!(attr.meta, syn::Meta::Path(_)) {
        return Some(out);
    }
    let errors_before = cx.error_count();
    let mut keys = Keys::new("iterable", &["checkpoint", "slice"]);
    let parsed = attr.parse_nested_meta(|meta| {
        let Some(key) = keys.accept(cx, &meta)? else {
            return Ok(());
        };
        let example = if key == "checkpoint" {
            "checkpoint = \"5s\""
        } else {
            "slice = \"10m\""
        };
        let Some(value) = value(cx, &meta, key, example)? else {
            return Ok(());
        };
        let d = duration(cx, key, &value, false);
        if key == "checkpoint" {
            out.span = Some(syn::spanned::Spanned::span(&value));
            out.checkpoint = d;
        } else {
            out.slice = d;
        }
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
    }
    (cx.error_count() == errors_before).then_some(out)
}

fn parse_rate_limit(cx: &mut Ctxt, attr: &Attribute) -> Option<RateLimitAttr> {
    let errors_before = cx.error_count();
    let mut keys = Keys::new("rate_limit", &["limit", "per", "burst", "key", "group"]);
    let mut limit = None;
    let mut per = None;
    let mut burst = None;
    let mut key_ref = None;
    let mut group = None;
    let parsed = attr.parse_nested_meta(|meta| {
        let Some(key) = keys.accept(cx, &meta)? else {
            return Ok(());
        };
        let example = match key {
            "limit" => "limit = 100",
            "per" => "per = \"1m\"",
            "burst" => "burst = 10",
            "key" => "key = account_id",
            _ => "group = \"stripe\"",
        };
        let Some(value) = value(cx, &meta, key, example)? else {
            return Ok(());
        };
        match key {
            "limit" => limit = positive::<u32>(cx, key, &value, example),
            "per" => per = duration(cx, "per", &value, false),
            "burst" => burst = whole::<u32>(cx, key, &value, example),
            "key" => {
                key_ref = match &value {
                    Expr::Path(p) if p.path.is_ident("tenant") => Some(RateKey::Tenant),
                    other => concurrency_key(cx, other).map(RateKey::Key),
                }
            }
            _ => group = string(cx, key, &value, example),
        }
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
        return None;
    }
    keys.require(
        cx,
        attr,
        errors_before,
        &[("limit", "limit = 100"), ("per", "per = \"1m\"")],
    );
    if cx.error_count() > errors_before {
        return None;
    }
    Some(RateLimitAttr {
        limit: limit?,
        per: per?,
        burst: burst.unwrap_or(0),
        key: key_ref,
        group,
    })
}

/// A whole number, 0 allowed.
fn whole<N>(cx: &mut Ctxt, key: &str, value: &Expr, example: &str) -> Option<N>
where
    N: FromStr,
    N::Err: std::fmt::Display,
{
    let Some(Lit::Int(int)) = lit(value) else {
        cx.error_spanned_by(
            value,
            format_args!("`{key}` must be a whole number, like `{example}`"),
        );
        return None;
    };
    match int.base10_parse::<N>() {
        Ok(n) => Some(n),
        Err(err) => {
            cx.syn_error(err);
            None
        }
    }
}

fn parse_unique(cx: &mut Ctxt, attr: &Attribute) -> Option<Unique> {
    let errors_before = cx.error_count();
    let mut keys = Keys::new("unique", &["for", "by", "until", "on_conflict"]);
    let mut lock_for = None;
    let mut by = Vec::new();
    let mut until_start = false;
    let mut replace = false;
    let parsed = attr.parse_nested_meta(|meta| {
        let Some(key) = keys.accept(cx, &meta)? else {
            return Ok(());
        };
        if key == "by" {
            if !meta.input.peek(syn::token::Paren) {
                cx.syn_error(meta.error("`by` lists fields, like `by(account_id)`"));
                skip_value(&meta)?;
                return Ok(());
            }
            let content;
            syn::parenthesized!(content in meta.input);
            let fields = content.parse_terminated(parse_field_ref, Token![,])?;
            if fields.is_empty() {
                cx.error_spanned_by(
                    &meta.path,
                    "`by` needs at least one field, like `by(account_id)`",
                );
            }
            for field in fields {
                if by.contains(&field) {
                    let tokens = match &field {
                        FieldRef::Named(i) => quote::quote!(#i),
                        FieldRef::Index(i) => quote::quote!(#i),
                    };
                    cx.error_spanned_by(tokens, "this field is already in `by`");
                } else {
                    by.push(field);
                }
            }
            return Ok(());
        }
        let example = match key {
            "for" => "for = \"10m\"",
            "until" => "until = \"start\"",
            _ => "on_conflict = \"replace\"",
        };
        let Some(value) = value(cx, &meta, key, example)? else {
            return Ok(());
        };
        match key {
            "for" => lock_for = duration(cx, "for", &value, false),
            "until" => {
                if let Some(v) = choice(cx, key, &value, &["success", "start"]) {
                    until_start = v == "start";
                }
            }
            _ => {
                if let Some(v) = choice(cx, key, &value, &["reject", "replace"]) {
                    replace = v == "replace";
                }
            }
        }
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
        return None;
    }
    if cx.error_count() == errors_before && !keys.seen.contains(&"for") {
        cx.error_spanned_by(
            attr,
            "`#[unique]` needs `for`, the lock's longest life, like `#[unique(for = \"10m\")]`",
        );
    }
    if cx.error_count() > errors_before {
        return None;
    }
    Some(Unique {
        lock_for: lock_for?,
        by,
        until_start,
        replace,
    })
}

/// A field in a list: `name` or a tuple index `0`.
fn parse_field_ref(input: ParseStream<'_>) -> syn::Result<FieldRef> {
    if input.peek(LitInt) {
        Ok(FieldRef::Index(field_index(&input.parse()?)?))
    } else {
        Ok(FieldRef::Named(input.parse()?))
    }
}

/// A string literal among `choices`.
fn choice(cx: &mut Ctxt, key: &str, value: &Expr, choices: &[&str]) -> Option<String> {
    let expected: Vec<String> = choices.iter().map(|c| format!("`\"{c}\"`")).collect();
    match lit(value) {
        Some(Lit::Str(s)) if choices.contains(&s.value().as_str()) => Some(s.value()),
        Some(Lit::Str(s)) => {
            cx.error_spanned_by(
                s,
                format_args!(
                    "unknown `{key}` value {:?}; expected {}",
                    s.value(),
                    expected.join(" or ")
                ),
            );
            None
        }
        _ => {
            cx.error_spanned_by(
                value,
                format_args!("`{key}` must be a string: {}", expected.join(" or ")),
            );
            None
        }
    }
}

fn concurrency_key(cx: &mut Ctxt, value: &Expr) -> Option<KeyRef> {
    match value {
        Expr::Path(path) if path.attrs.is_empty() => Some(KeyRef::Path(path.clone())),
        Expr::Group(group) => concurrency_key(cx, &group.expr),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(index),
            ..
        }) => match field_index(index) {
            Ok(index) => Some(KeyRef::Index(index)),
            Err(err) => {
                cx.syn_error(err);
                None
            }
        },
        _ => {
            cx.error_spanned_by(
                value,
                "`key` must be a field or a path to a function `fn(&Self) -> impl Display`, like `key = account_id`",
            );
            None
        }
    }
}

/// A tuple-field index such as the `0` of `#[fair_tenant(0)]`.
fn field_index(lit: &LitInt) -> syn::Result<syn::Index> {
    if !lit.suffix().is_empty() {
        return Err(syn::Error::new(lit.span(), "a field index takes no suffix"));
    }
    Ok(syn::Index {
        index: lit.base10_parse()?,
        span: lit.span(),
    })
}

/// The expression after `key =`. A key without `=` is reported (and anything
/// in parentheses after it skipped) and yields `None`.
fn value(
    cx: &mut Ctxt,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
) -> syn::Result<Option<Expr>> {
    if meta.input.peek(Token![=]) {
        return meta.value()?.parse().map(Some);
    }
    cx.syn_error(meta.error(format_args!("`{key}` needs a value, like `{example}`")));
    skip_value(meta)?;
    Ok(None)
}

/// Consumes `= expr` or `(...)` after a key that is being rejected, so that
/// parsing continues with the next key.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// The literal an expression consists of, looking through invisible groups
/// that `macro_rules!` inserts.
fn lit(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Lit(lit) if lit.attrs.is_empty() => Some(&lit.lit),
        Expr::Group(group) => lit(&group.expr),
        _ => None,
    }
}

/// A non-empty string literal.
fn string(cx: &mut Ctxt, key: &str, value: &Expr, example: &str) -> Option<LitStr> {
    match lit(value) {
        Some(Lit::Str(s)) if s.value().is_empty() => {
            cx.error_spanned_by(s, format_args!("`{key}` must not be empty"));
            None
        }
        Some(Lit::Str(s)) => Some(s.clone()),
        _ => {
            cx.error_spanned_by(
                value,
                format_args!("`{key}` must be a string literal, like `{example}`"),
            );
            None
        }
    }
}

/// An integer literal of at least 1 that fits `N`.
fn positive<N>(cx: &mut Ctxt, key: &str, value: &Expr, example: &str) -> Option<N>
where
    N: FromStr + PartialOrd + From<u8>,
    N::Err: std::fmt::Display,
{
    let Some(Lit::Int(int)) = lit(value) else {
        cx.error_spanned_by(
            value,
            format_args!("`{key}` must be an integer, like `{example}`"),
        );
        return None;
    };
    match int.base10_parse::<N>() {
        Ok(n) if n < N::from(1) => {
            cx.error_spanned_by(int, format_args!("`{key}` must be at least 1"));
            None
        }
        Ok(n) => Some(n),
        Err(err) => {
            cx.syn_error(err);
            None
        }
    }
}

/// A duration (`per`, `timeout`): a humantime string, not zero, and a whole
/// number of seconds when `whole_seconds`.
fn duration(cx: &mut Ctxt, key: &str, value: &Expr, whole_seconds: bool) -> Option<Duration> {
    let Some(Lit::Str(s)) = lit(value) else {
        cx.error_spanned_by(
            value,
            format_args!("`{key}` must be a duration string, like `{key} = \"1h\"`"),
        );
        return None;
    };
    let text = s.value();
    match humantime::parse_duration(&text) {
        Err(err) => {
            cx.error_spanned_by(s, format_args!("invalid `{key}` duration {text:?}: {err}"));
            None
        }
        Ok(d) if d.is_zero() => {
            cx.error_spanned_by(s, format_args!("`{key}` must be longer than zero"));
            None
        }
        Ok(d) if whole_seconds && d.subsec_nanos() != 0 => {
            cx.error_spanned_by(s, format_args!("`{key}` must be a whole number of seconds"));
            None
        }
        Ok(d) => Some(d),
    }
}

/// `a::b` as the user wrote it, for messages.
pub(crate) fn path_to_string(path: &Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let joined = segments.join("::");
    if path.leading_colon.is_some() {
        format!("::{joined}")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn parse(attrs: &[Attribute]) -> (Attrs, Vec<String>) {
        let mut cx = Ctxt::new();
        let parsed = Attrs::parse(&mut cx, attrs);
        let errors = match cx.finish() {
            Ok(()) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        };
        (parsed, errors)
    }

    fn errors(attrs: &[Attribute]) -> Vec<String> {
        parse(attrs).1
    }

    #[test]
    fn job_keys() {
        let (attrs, errs) = parse(&[
            parse_quote!(#[job(class = "Hard", queue = "low", retry = 5, shard_by_tenant)]),
        ]);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(attrs.job.class.unwrap().value(), "Hard");
        assert_eq!(attrs.job.queue.unwrap().value(), "low");
        assert_eq!(attrs.job.retry, Some(Retry::Times(5)));
        assert!(attrs.job.shard_by_tenant);
        assert_eq!(attrs.job.timeout, None);
        let (attrs, errs) = parse(&[parse_quote!(#[job(timeout = "1m 30s")])]);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(attrs.job.timeout, Some(Duration::from_secs(90)));
        let (attrs, _) = parse(&[parse_quote!(#[job(timeout = "250ms")])]);
        assert_eq!(attrs.job.timeout, Some(Duration::from_millis(250)));
        assert_eq!(
            errors(&[parse_quote!(#[job(timeout = "0s")])]),
            ["`timeout` must be longer than zero"]
        );
    }

    #[test]
    fn retry_forms() {
        for (attr, expected) in [
            (parse_quote!(#[job(retry = true)]), Retry::Default),
            (parse_quote!(#[job(retry = false)]), Retry::Never),
            (parse_quote!(#[job(retry = 0)]), Retry::Times(0)),
        ] {
            let (attrs, errs) = parse(&[attr]);
            assert!(errs.is_empty(), "{errs:?}");
            assert_eq!(attrs.job.retry, Some(expected));
        }
        assert_eq!(
            errors(&[parse_quote!(#[job(retry = "x")])]),
            ["`retry` must be `true`, `false` or a number of retries, like `retry = 5`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[job(retry = 4294967296)])]),
            ["number too large to fit in target type"]
        );
    }

    #[test]
    fn active_job_flag_or_bool() {
        let (attrs, errs) = parse(&[parse_quote!(#[job(active_job, class = "ReportJob")])]);
        assert!(errs.is_empty() && attrs.job.active_job);
        let (attrs, errs) = parse(&[parse_quote!(#[job(active_job = false)])]);
        assert!(errs.is_empty() && !attrs.job.active_job);
        assert_eq!(
            errors(&[parse_quote!(#[job(active_job = 1)])]),
            ["`active_job` must be `true` or `false`"]
        );
    }

    #[test]
    fn shard_by_tenant_flag_or_bool() {
        let (attrs, errs) = parse(&[parse_quote!(#[job(shard_by_tenant = false)])]);
        assert!(errs.is_empty() && !attrs.job.shard_by_tenant);
        let (attrs, errs) = parse(&[parse_quote!(#[job(shard_by_tenant = true)])]);
        assert!(errs.is_empty() && attrs.job.shard_by_tenant);
        assert_eq!(
            errors(&[parse_quote!(#[job(shard_by_tenant = "yes")])]),
            ["`shard_by_tenant` must be `true` or `false`"]
        );
    }

    #[test]
    fn unknown_and_duplicate_keys_are_all_reported() {
        assert_eq!(
            errors(&[
                parse_quote!(#[job(queu = "a", queue = "b")]),
                parse_quote!(#[job(queue = "c", retry(3))]),
            ]),
            [
                "unknown `job` attribute `queu`; expected one of `active_job`, `class`, `queue`, `retry`, `shard_by_tenant`, `timeout`",
                "duplicate `job` attribute `queue`",
                "`retry` needs a value, like `retry = 5`",
            ]
        );
    }

    #[test]
    fn wrong_literal_types_and_empty_strings() {
        assert_eq!(
            errors(&[parse_quote!(#[job(queue = 5, class = "")])]),
            [
                "`queue` must be a string literal, like `queue = \"default\"`",
                "`class` must not be empty",
            ]
        );
    }

    #[test]
    fn throttle_per_parses_humantime_and_defaults_to_a_day() {
        let (attrs, errs) = parse(&[
            parse_quote!(#[throttle(queue = "a", threshold = 100, per = "1h", weight = 2)]),
            parse_quote!(#[throttle(queue = "b", threshold = 5)]),
            parse_quote!(#[throttle(queue = "c", threshold = 5, per = "1day 30min")]),
        ]);
        assert!(errs.is_empty(), "{errs:?}");
        let rules: Vec<_> = attrs
            .throttles
            .iter()
            .map(|t| (t.queue.value(), t.threshold, t.per.as_secs(), t.weight))
            .collect();
        assert_eq!(
            rules,
            [
                ("a".to_owned(), 100, 3600, Some(2)),
                ("b".to_owned(), 5, 86_400, None),
                ("c".to_owned(), 5, 88_200, None),
            ]
        );
    }

    #[test]
    fn throttle_errors() {
        let errs =
            errors(&[parse_quote!(#[throttle(queue = "a", threshold = 1, per = "3 fortnights")])]);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("invalid `per` duration \"3 fortnights\": unknown time unit"),
            "{errs:?}"
        );
        assert_eq!(
            errors(&[
                parse_quote!(#[throttle(queue = "a", threshold = 0)]),
                parse_quote!(#[throttle(queue = "b", threshold = 1, per = "0s")]),
                parse_quote!(#[throttle(queue = "c", threshold = 1, per = "1500ms")]),
                parse_quote!(#[throttle(queue = "d", threshold = 1, weight = 0)]),
                parse_quote!(#[throttle(queue = "e", treshold = 1)]),
                parse_quote!(#[throttle(threshold = "1")]),
            ]),
            [
                "`threshold` must be at least 1",
                "`per` must be longer than zero",
                "`per` must be a whole number of seconds",
                "`weight` must be at least 1",
                "unknown `throttle` attribute `treshold`; expected one of `queue`, `threshold`, `per`, `weight`",
                "`threshold` must be an integer, like `threshold = 100`",
            ]
        );
    }

    #[test]
    fn fair_tenant_forms() {
        let (attrs, _) = parse(&[parse_quote!(#[fair_tenant(account_id)])]);
        assert_eq!(
            attrs.fair_tenant,
            Some(FairTenant::Field(FieldRef::Named(parse_quote!(account_id))))
        );
        let (attrs, _) = parse(&[parse_quote!(#[fair_tenant(1)])]);
        assert!(matches!(
            attrs.fair_tenant,
            Some(FairTenant::Field(FieldRef::Index(syn::Index {
                index: 1,
                ..
            })))
        ));
        let (attrs, errs) = parse(&[parse_quote!(#[fair_tenant(with = crate::tenants::of)])]);
        assert!(errs.is_empty(), "{errs:?}");
        let Some(FairTenant::With(path)) = attrs.fair_tenant else {
            panic!("expected `with`");
        };
        assert_eq!(path_to_string(&path.path), "crate::tenants::of");
    }

    #[test]
    fn fair_tenant_errors() {
        assert_eq!(
            errors(&[
                parse_quote!(#[fair_tenant(a)]),
                parse_quote!(#[fair_tenant(b)])
            ]),
            ["`#[fair_tenant]` may appear only once"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[fair_tenant(from = x)])]),
            [
                "unknown `fair_tenant` attribute `from`; expected a field name, a field index or `with = path::to::function`"
            ]
        );
        assert_eq!(
            errors(&[parse_quote!(#[fair_tenant(a, b)])]),
            ["`#[fair_tenant]` takes one field or one `with = path`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[fair_tenant(with = |j| j.a)])]),
            ["`with` must be a path to a function `fn(&Self) -> Option<impl Display>`"]
        );
    }

    #[test]
    fn concurrency_forms_and_errors() {
        let (attrs, errs) =
            parse(&[parse_quote!(#[concurrency(limit = 3, key = 0, group = "imports")])]);
        assert!(errs.is_empty(), "{errs:?}");
        let c = attrs.concurrency.unwrap();
        assert_eq!(c.limit, 3);
        assert!(matches!(c.key, KeyRef::Index(syn::Index { index: 0, .. })));
        assert_eq!(c.group.unwrap().value(), "imports");

        let (attrs, _) = parse(&[parse_quote!(#[concurrency(limit = 1, key = keys::of)])]);
        assert!(matches!(attrs.concurrency.unwrap().key, KeyRef::Path(_)));

        assert_eq!(
            errors(&[parse_quote!(#[concurrency(key = account_id)])]),
            ["`#[concurrency]` needs `limit`, like `limit = 10`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[throttle(per = "1h")])]),
            [
                "`#[throttle]` needs `queue`, like `queue = \"default_throttled\"`",
                "`#[throttle]` needs `threshold`, like `threshold = 100`",
            ]
        );
        assert_eq!(
            errors(&[
                parse_quote!(#[concurrency(limit = 0, key = "a")]),
                parse_quote!(#[concurrency(limit = 1, key = a)]),
            ]),
            [
                "`limit` must be at least 1",
                "`key` must be a field or a path to a function `fn(&Self) -> impl Display`, like `key = account_id`",
                "`#[concurrency]` may appear only once",
            ]
        );
    }

    #[test]
    fn unique_forms_and_errors() {
        let (attrs, errs) = parse(&[
            parse_quote!(#[unique(for = "10m", by(account, 1), until = "start", on_conflict = "replace")]),
        ]);
        assert!(errs.is_empty(), "{errs:?}");
        let u = attrs.unique.unwrap();
        assert_eq!(u.lock_for, Duration::from_secs(600));
        assert_eq!(u.by.len(), 2);
        assert!(u.until_start && u.replace);
        let (attrs, errs) = parse(&[parse_quote!(#[unique(for = "30s")])]);
        assert!(errs.is_empty(), "{errs:?}");
        let u = attrs.unique.unwrap();
        assert!(u.by.is_empty() && !u.until_start && !u.replace);
        assert_eq!(
            errors(&[parse_quote!(#[unique(by(a))])]),
            ["`#[unique]` needs `for`, the lock's longest life, like `#[unique(for = \"10m\")]`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[unique(for = "1m", until = "done")])]),
            ["unknown `until` value \"done\"; expected `\"success\"` or `\"start\"`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[unique(for = "1m", on_conflict = "skip")])]),
            ["unknown `on_conflict` value \"skip\"; expected `\"reject\"` or `\"replace\"`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[unique(for = "0s")])]),
            ["`for` must be longer than zero"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[unique(for = "1m", by(a, a))])]),
            ["this field is already in `by`"]
        );
        assert_eq!(
            errors(&[parse_quote!(#[unique(for = "1m", by())])]),
            ["`by` needs at least one field, like `by(account_id)`"]
        );
    }
}
