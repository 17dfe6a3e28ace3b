//! Code generation: the `impl Job`, the inventory registration and the
//! `Perform` check, or, when the input has mistakes, the errors beside a stub
//! `impl Job` (thiserror's fallback) so that one typo does not cascade.
//!
//! Everything is emitted inside `const _: () = { ... };` and names the runtime
//! only through absolute `::fairjob::__private` paths. Parsing and checking
//! happen before this module; it reports no errors of its own.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::DeriveInput;
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use crate::ast::{Container, Shape};
use crate::attr::{Concurrency, FieldRef, RateKey, RateLimitAttr, Retry, Throttle};
use crate::ctxt::Ctxt;
use crate::validate::{self, DEFAULT_QUEUE, Resolved, Source};

/// `#[derive(Job)]` on `input`: the implementation, or the errors and a stub.
pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    let mut cx = Ctxt::new();
    let container = ast_and_rules(&mut cx, input);
    match (cx.finish(), container) {
        (Ok(()), Some((container, resolved))) => implementation(&container, &resolved),
        (Err(errors), _) => fallback(input, &errors),
        // `from_ast` reports an error whenever it returns `None`.
        (Ok(()), None) => fallback(
            input,
            &syn::Error::new(
                Span::call_site(),
                "`#[derive(Job)]` could not read this type",
            ),
        ),
    }
}

fn ast_and_rules<'a>(cx: &mut Ctxt, input: &'a DeriveInput) -> Option<(Container<'a>, Resolved)> {
    let container = Container::from_ast(cx, input)?;
    let resolved = validate::check(cx, &container);
    Some((container, resolved))
}

/// The class name: `#[job(class)]`, else the type's name (without `r#`).
fn class(container: &Container<'_>) -> String {
    container.attrs.job.class.as_ref().map_or_else(
        || container.ident.unraw().to_string(),
        |class| class.value(),
    )
}

fn implementation(container: &Container<'_>, resolved: &Resolved) -> TokenStream {
    let ident = container.ident;
    let class = class(container);
    let options = options(container);
    let args = args_shape(container.shape);
    let fair_tenant = resolved.fair_tenant.as_ref().map(|source| {
        let value = match source {
            Source::Field(member) => quote_spanned! {member.span()=>
                ::fairjob::__private::tenant_of(&self.#member)
            },
            Source::Call(path) => quote_spanned! {path.span()=>
                ::fairjob::__private::tenant_opt(#path(self))
            },
        };
        quote! {
            fn fair_tenant(&self) -> ::core::option::Option<::std::string::String> {
                #value
            }
        }
    });
    let concurrency_key = resolved.concurrency_key.as_ref().map(|source| {
        let value = match source {
            Source::Field(member) => quote_spanned! {member.span()=>
                ::fairjob::__private::key_of(&self.#member)
            },
            Source::Call(path) => quote_spanned! {path.span()=>
                ::fairjob::__private::key_of(&#path(self))
            },
        };
        quote! {
            fn concurrency_key(&self) -> ::core::option::Option<::std::string::String> {
                #value
            }
        }
    });
    let rate_key = resolved.rate_key.as_ref().map(|source| {
        let value = match source {
            Source::Field(member) => quote_spanned! {member.span()=>
                ::fairjob::__private::key_of(&self.#member)
            },
            Source::Call(path) => quote_spanned! {path.span()=>
                ::fairjob::__private::key_of(&#path(self))
            },
        };
        quote! {
            fn rate_key(&self) -> ::core::option::Option<::std::string::String> {
                #value
            }
        }
    });
    let unique_key = (!resolved.unique_by.is_empty()).then(|| {
        let fields = &resolved.unique_by;
        quote! {
            fn unique_key_json(
                &self,
            ) -> ::core::option::Option<
                ::core::result::Result<::std::string::String, ::fairjob::__private::JsonError>,
            > {
                ::core::option::Option::Some(::fairjob::__private::unique_key(&(#(&self.#fields,)*)))
            }
        }
    });
    let registration = registration(ident, container.attrs.iterable.is_some());
    let sharded = container.attrs.job.shard_by_tenant.then(|| {
        let queue = container
            .attrs
            .job
            .queue
            .as_ref()
            .map_or_else(|| DEFAULT_QUEUE.to_owned(), |q| q.value());
        quote! {
            ::fairjob::__private::inventory::submit! {
                ::fairjob::__private::DeclaredShardedQueue(#queue)
            }
        }
    });
    let crons = container.attrs.crons.iter().map(|c| cron(ident, &class, c));
    quote! {
        const _: () = {
            #[automatically_derived]
            impl ::fairjob::Job for #ident {
                const CLASS: &'static str = #class;
                const OPTIONS: ::fairjob::__private::JobOptions = #options;
                const ARGS: ::fairjob::__private::ArgsShape = #args;
                #fair_tenant
                #concurrency_key
                #rate_key
                #unique_key
            }
            #registration
            #sharded
            #(#crons)*
        };
    }
}

/// One `#[cron]` schedule's registration. The job is `Self::default()`,
/// spanned at the attribute, so a job without `Default` is an error there.
fn cron(ident: &Ident, class: &str, cron: &crate::attr_cron::Cron) -> TokenStream {
    let name = cron
        .name
        .as_ref()
        .map_or_else(|| class.to_owned(), |n| n.value());
    let expr = &cron.expr;
    let tz = &cron.tz;
    let catch_up = &cron.catch_up;
    let skip = cron.skip_overlap;
    let default = quote_spanned! {cron.attr.span()=>
        <#ident as ::core::default::Default>::default()
    };
    quote! {
        ::fairjob::__private::inventory::submit! {
            ::fairjob::__private::CronDeclaration {
                name: #name,
                class: #class,
                expr: #expr,
                tz: #tz,
                catch_up: #catch_up,
                skip_overlap: #skip,
                job: || ::fairjob::IntoPush::into_push(#default),
            }
        }
    }
}

/// The inventory registration, which also checks that the type implements
/// `Perform`.
///
/// `JobRegistration::new` requires `T: Perform`, and the call is spanned at
/// the struct's name: a missing `impl Perform` is then one error, carrying
/// `Perform`'s `#[diagnostic::on_unimplemented]` message, at the struct.
/// (A separate `assert_perform::<T>()` would report the same error a second
/// time, since each body reports its own unsatisfied bounds.)
///
/// An `#[iterable]` type registers with `JobRegistration::new_iterable`,
/// which requires `T: Iterate` the same way (and no `Perform`).
fn registration(ident: &Ident, iterable: bool) -> TokenStream {
    let name = ident.unraw().to_string();
    let new = if iterable {
        quote_spanned! {ident.span()=>
            ::fairjob::__private::JobRegistration::new_iterable::<#ident>
        }
    } else {
        quote_spanned! {ident.span()=>
            ::fairjob::__private::JobRegistration::new::<#ident>
        }
    };
    quote! {
        ::fairjob::__private::inventory::submit! {
            #new(::core::concat!(::core::module_path!(), "::", #name))
        }
    }
}

fn options(container: &Container<'_>) -> TokenStream {
    let job = &container.attrs.job;
    let queue = job
        .queue
        .as_ref()
        .map_or_else(|| DEFAULT_QUEUE.to_owned(), |q| q.value());
    let retry = match job.retry.unwrap_or(Retry::Default) {
        Retry::Default => quote!(::fairjob::__private::Retry::Default),
        Retry::Never => quote!(::fairjob::__private::Retry::Never),
        Retry::Times(n) => quote!(::fairjob::__private::Retry::Times(#n)),
    };
    let throttles = container.attrs.throttles.iter().map(throttle);
    let shard_by_tenant = job.shard_by_tenant;
    let active_job = job.active_job;
    let concurrency = match &container.attrs.concurrency {
        Some(concurrency) => {
            let limit = concurrency_limit(concurrency);
            quote!(::core::option::Option::Some(#limit))
        }
        None => quote!(::core::option::Option::None),
    };
    let rate_limit = option(container.attrs.rate_limit.as_ref().map(rate_limit));
    let unique = option(container.attrs.unique.as_ref().map(|u| {
        let ms = u.lock_for.as_millis() as u64;
        let by = u.by.iter().map(|f| match f {
            FieldRef::Named(i) => i.unraw().to_string(),
            FieldRef::Index(i) => i.index.to_string(),
        });
        let until = if u.until_start {
            quote!(::fairjob::__private::UniqueUntil::Start)
        } else {
            quote!(::fairjob::__private::UniqueUntil::Success)
        };
        let on_conflict = if u.replace {
            quote!(::fairjob::__private::OnConflict::Replace)
        } else {
            quote!(::fairjob::__private::OnConflict::Reject)
        };
        quote! {
            ::fairjob::__private::UniqueOptions {
                lock_for: ::core::time::Duration::from_millis(#ms),
                by: &[#(#by),*],
                until: #until,
                on_conflict: #on_conflict,
            }
        }
    }));
    let timeout = option(job.timeout.map(|d| {
        let ms = d.as_millis() as u64;
        quote!(::core::time::Duration::from_millis(#ms))
    }));
    let iterable = option(container.attrs.iterable.as_ref().map(|it| {
        let checkpoint = it
            .checkpoint
            .unwrap_or(validate::DEFAULT_CHECKPOINT)
            .as_millis() as u64;
        let slice = it.slice.unwrap_or(validate::DEFAULT_SLICE).as_millis() as u64;
        quote! {
            ::fairjob::__private::IterableOptions {
                checkpoint: ::core::time::Duration::from_millis(#checkpoint),
                slice: ::core::time::Duration::from_millis(#slice),
            }
        }
    }));
    quote! {
        ::fairjob::__private::JobOptions {
            queue: #queue,
            retry: #retry,
            throttles: &[#(#throttles),*],
            shard_by_tenant: #shard_by_tenant,
            concurrency: #concurrency,
            rate_limit: #rate_limit,
            unique: #unique,
            timeout: #timeout,
            active_job: #active_job,
            iterable: #iterable,
        }
    }
}

fn throttle(rule: &Throttle) -> TokenStream {
    let queue = rule.queue.value();
    let threshold = rule.threshold;
    let secs = rule.per.as_secs();
    let weight = option(rule.weight.map(|w| quote!(#w)));
    quote! {
        ::fairjob::__private::ThrottleRule {
            queue: #queue,
            threshold: #threshold,
            per: ::core::time::Duration::from_secs(#secs),
            weight: #weight,
        }
    }
}

fn rate_limit(rate: &RateLimitAttr) -> TokenStream {
    let limit = rate.limit;
    let micros = rate.per.as_micros() as u64;
    let burst = rate.burst;
    let by_tenant = matches!(rate.key, Some(RateKey::Tenant));
    let group = option(rate.group.as_ref().map(|g| {
        let g = g.value();
        quote!(#g)
    }));
    quote! {
        ::fairjob::__private::RateLimit {
            limit: #limit,
            per: ::core::time::Duration::from_micros(#micros),
            burst: #burst,
            group: #group,
            by_tenant: #by_tenant,
        }
    }
}

fn concurrency_limit(concurrency: &Concurrency) -> TokenStream {
    let limit = concurrency.limit;
    let group = option(concurrency.group.as_ref().map(|g| {
        let g = g.value();
        quote!(#g)
    }));
    quote! {
        ::fairjob::__private::ConcurrencyLimit {
            limit: #limit,
            group: #group,
        }
    }
}

fn option(value: Option<TokenStream>) -> TokenStream {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}

fn args_shape(shape: Shape) -> TokenStream {
    match shape {
        Shape::Unit => quote!(::fairjob::__private::ArgsShape::Unit),
        Shape::Newtype => quote!(::fairjob::__private::ArgsShape::Newtype),
        Shape::Tuple(n) => quote!(::fairjob::__private::ArgsShape::Tuple(#n)),
        Shape::Named => quote!(::fairjob::__private::ArgsShape::Named),
    }
}

/// The errors, plus (for a non-generic struct or enum) a stub `impl Job` with
/// default options and no registration, so that uses of the type elsewhere
/// do not add errors of their own.
fn fallback(input: &DeriveInput, errors: &syn::Error) -> TokenStream {
    let errors = errors.to_compile_error();
    let shape = match &input.data {
        _ if !input.generics.params.is_empty() => None,
        syn::Data::Struct(data) => Some(Shape::of(&data.fields)),
        // An enum is serialized as one value: `args: [v]`.
        syn::Data::Enum(_) => Some(Shape::Newtype),
        syn::Data::Union(_) => None,
    };
    let Some(shape) = shape else {
        return errors;
    };
    let ident = &input.ident;
    let class = ident.unraw().to_string();
    let args = args_shape(shape);
    quote! {
        #errors
        const _: () = {
            #[automatically_derived]
            impl ::fairjob::Job for #ident {
                const CLASS: &'static str = #class;
                const OPTIONS: ::fairjob::__private::JobOptions =
                    ::fairjob::__private::JobOptions::DEFAULT;
                const ARGS: ::fairjob::__private::ArgsShape = #args;
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn expand(input: DeriveInput) -> String {
        derive(&input).to_string()
    }

    fn squash(tokens: TokenStream) -> String {
        tokens.to_string()
    }

    #[test]
    fn defaults() {
        let out = expand(parse_quote!(
            struct Hello(String);
        ));
        assert!(
            out.contains(&squash(quote!(
                const CLASS: &'static str = "Hello";
            ))),
            "{out}"
        );
        assert!(out.contains(&squash(quote!(queue: "default"))), "{out}");
        assert!(
            out.contains(&squash(quote!(retry: ::fairjob::__private::Retry::Default))),
            "{out}"
        );
        assert!(out.contains(&squash(quote!(throttles: &[]))), "{out}");
        assert!(
            out.contains(&squash(quote!(concurrency: ::core::option::Option::None))),
            "{out}"
        );
        assert!(
            out.contains(&squash(quote!(::fairjob::__private::ArgsShape::Newtype))),
            "{out}"
        );
        assert!(out.contains("inventory :: submit !"), "{out}");
        assert!(
            out.contains(&squash(quote!(JobRegistration::new::<Hello>))),
            "{out}"
        );
        assert!(!out.contains("fn fair_tenant"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn every_option() {
        let out = expand(parse_quote! {
            #[job(class = "Billing::Import", queue = "imports", retry = false, shard_by_tenant, active_job)]
            #[fair_tenant(account_id)]
            #[throttle(queue = "imports_slow", threshold = 100, per = "1h", weight = 2)]
            #[throttle(queue = "imports_slowest", threshold = 1000)]
            #[concurrency(limit = 3, key = account_id, group = "imports")]
            struct Import { account_id: u64 }
        });
        for expected in [
            quote!(
                const CLASS: &'static str = "Billing::Import";
            ),
            quote!(queue: "imports"),
            quote!(retry: ::fairjob::__private::Retry::Never),
            quote!(shard_by_tenant: true),
            quote!(active_job: true),
            quote! {
                ::fairjob::__private::ThrottleRule {
                    queue: "imports_slow",
                    threshold: 100u64,
                    per: ::core::time::Duration::from_secs(3600u64),
                    weight: ::core::option::Option::Some(2u32),
                }
            },
            quote!(per: ::core::time::Duration::from_secs(86400u64), weight: ::core::option::Option::None),
            quote! {
                concurrency: ::core::option::Option::Some(::fairjob::__private::ConcurrencyLimit {
                    limit: 3u32,
                    group: ::core::option::Option::Some("imports"),
                })
            },
            quote!(::fairjob::__private::ArgsShape::Named),
            quote!(::fairjob::__private::tenant_of(&self.account_id)),
            quote!(::fairjob::__private::key_of(&self.account_id)),
        ] {
            assert!(
                out.contains(&squash(expected.clone())),
                "{expected}\n\nnot in\n\n{out}"
            );
        }
    }

    #[test]
    fn functions_and_indexes() {
        let out = expand(parse_quote! {
            #[job(retry = 7)]
            #[fair_tenant(with = tenants::of)]
            #[concurrency(limit = 1, key = 1)]
            struct Pair(u64, String);
        });
        for expected in [
            quote!(::fairjob::__private::Retry::Times(7u32)),
            quote!(::fairjob::__private::tenant_opt(tenants::of(self))),
            quote!(::fairjob::__private::key_of(&self.1)),
            quote!(::fairjob::__private::ArgsShape::Tuple(2usize)),
        ] {
            assert!(
                out.contains(&squash(expected.clone())),
                "{expected}\n\nnot in\n\n{out}"
            );
        }
        let out = expand(parse_quote! {
            #[concurrency(limit = 1, key = key_of)]
            struct Unit;
        });
        assert!(
            out.contains(&squash(quote!(key_of(&key_of(self))))),
            "{out}"
        );
        assert!(out.contains(&squash(quote!(ArgsShape::Unit))), "{out}");
    }

    #[test]
    fn class_of_a_raw_identifier_has_no_prefix() {
        let out = expand(parse_quote!(
            struct r#Match;
        ));
        assert!(
            out.contains(&squash(quote!(
                const CLASS: &'static str = "Match";
            ))),
            "{out}"
        );
    }

    #[test]
    fn errors_come_with_a_stub_and_no_registration() {
        let out = expand(parse_quote! {
            #[job(queu = "a")]
            #[throttle(queue = "b", threshold = 0)]
            struct Typo(u8, u8);
        });
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
        assert!(out.contains("unknown `job` attribute `queu`"), "{out}");
        assert!(out.contains("`threshold` must be at least 1"), "{out}");
        assert!(
            out.contains(&squash(quote!(::fairjob::__private::JobOptions::DEFAULT))),
            "{out}"
        );
        assert!(
            out.contains(&squash(quote!(ArgsShape::Tuple(2usize)))),
            "{out}"
        );
        assert!(!out.contains("inventory"), "{out}");
        assert!(!out.contains("JobRegistration"), "{out}");
    }

    #[test]
    fn generics_and_unions_get_no_stub() {
        for input in [
            parse_quote!(
                struct G<T>(T);
            ),
            parse_quote!(union U { a: u32 }),
        ] {
            let out = expand(input);
            assert!(out.contains("compile_error"), "{out}");
            assert!(!out.contains("impl"), "{out}");
        }
        let out = expand(parse_quote!(
            enum E {
                A,
            }
        ));
        assert!(out.contains("supports only structs"), "{out}");
        assert!(out.contains(&squash(quote!(ArgsShape::Newtype))), "{out}");
    }
}
