//! `#[cron("expr", tz = "Zone", catch_up = "10m", overlap = "skip", name =
//! "schedule")]`: parsed and checked at the token with the runtime's own
//! expression grammar (the `fairjob-cron` crate) and the
//! system's time zone database, so a malformed expression or an unknown zone
//! is a compile error pointing at its literal.

use syn::parse::ParseStream;
use syn::{Attribute, Ident, LitStr, Token};

use crate::ctxt::Ctxt;

use fairjob_cron as expr;

/// One `#[cron(...)]`.
pub(crate) struct Cron {
    /// The whole attribute, for errors about it (needs `Default`, a repeated name).
    pub(crate) attr: Attribute,
    /// The expression.
    pub(crate) expr: LitStr,
    /// `name = "..."`; the class name when absent.
    pub(crate) name: Option<LitStr>,
    /// `tz = "..."`, default `"UTC"`.
    pub(crate) tz: String,
    /// `catch_up = "..."`, default `"10m"`.
    pub(crate) catch_up: String,
    /// `overlap = "skip"`.
    pub(crate) skip_overlap: bool,
}

const KEYS: &[&str] = &["name", "tz", "catch_up", "overlap"];

/// Parses one `#[cron]`, reporting each mistake into `cx`.
pub(crate) fn parse(cx: &mut Ctxt, attr: &Attribute) -> Option<Cron> {
    let mut out = None;
    let parsed = attr.parse_args_with(|input: ParseStream<'_>| {
        if !input.peek(LitStr) {
            return Err(input.error(
                "`#[cron]` starts with the expression, like `#[cron(\"0 3 * * *\")]`",
            ));
        }
        let expr: LitStr = input.parse()?;
        if let Err(e) = expr::parse_fields(&expr.value()) {
            cx.error_spanned_by(&expr, format_args!("invalid cron expression: {}", e.reason));
        }
        let mut cron = Cron {
            attr: attr.clone(),
            expr,
            name: None,
            tz: "UTC".into(),
            catch_up: "10m".into(),
            skip_overlap: false,
        };
        let mut seen: Vec<String> = Vec::new();
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            let value: LitStr = input.parse()?;
            let k = key.to_string();
            if !KEYS.contains(&k.as_str()) {
                cx.error_spanned_by(
                    &key,
                    format_args!(
                        "unknown `cron` attribute `{k}`; expected one of `name`, `tz`, `catch_up`, `overlap`"
                    ),
                );
                continue;
            }
            if seen.contains(&k) {
                cx.error_spanned_by(&key, format_args!("duplicate `cron` attribute `{k}`"));
                continue;
            }
            seen.push(k.clone());
            let v = value.value();
            match k.as_str() {
                "name" if v.is_empty() => cx.error_spanned_by(&value, "`name` must not be empty"),
                "name" => cron.name = Some(value),
                "tz" => {
                    if !v.eq_ignore_ascii_case("utc") && jiff::tz::TimeZone::get(&v).is_err() {
                        cx.error_spanned_by(
                            &value,
                            format_args!(
                                "unknown time zone `{v}`; expected an IANA name such as `Europe/Berlin`, or `UTC`"
                            ),
                        );
                    }
                    cron.tz = v;
                }
                "catch_up" => {
                    if let Err(e) = expr::parse_catch_up(&v) {
                        cx.error_spanned_by(&value, e.reason);
                    }
                    cron.catch_up = v;
                }
                _ => match v.as_str() {
                    "allow" => cron.skip_overlap = false,
                    "skip" => cron.skip_overlap = true,
                    _ => cx.error_spanned_by(
                        &value,
                        format_args!("`overlap` must be `\"allow\"` or `\"skip\"`, not `{v}`"),
                    ),
                },
            }
        }
        out = Some(cron);
        Ok(())
    });
    if let Err(err) = parsed {
        cx.syn_error(err);
        return None;
    }
    out
}
