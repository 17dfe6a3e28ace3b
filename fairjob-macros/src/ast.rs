//! A typed view of the derive input: the struct's name, how its fields map to
//! Sidekiq's `args`, and its parsed attributes.
//!
//! This module rejects what `#[derive(Job)]` cannot take (enums, unions,
//! generic parameters, helper attributes on fields) and answers "which field
//! is this?". Rules across attributes live in `validate`; it generates no code.

use proc_macro2::Ident;
use syn::ext::IdentExt;
use syn::{Data, DeriveInput, Fields, Member};

use crate::attr::{Attrs, FieldRef, HELPERS};
use crate::ctxt::Ctxt;

/// A struct that `#[derive(Job)]` can implement `Job` for.
pub(crate) struct Container<'a> {
    /// The type's name.
    pub(crate) ident: &'a Ident,
    /// How its serde form maps to `args`.
    pub(crate) shape: Shape,
    /// Its fields, to resolve `#[fair_tenant]` and `#[concurrency(key)]`.
    pub(crate) fields: &'a Fields,
    /// Its container attributes.
    pub(crate) attrs: Attrs,
}

/// The runtime's `ArgsShape`, decided from the struct's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `struct A;`: `args: []`.
    Unit,
    /// `struct A(T);`: `args: [t]`.
    Newtype,
    /// `struct A(T, U, ...);` (and the empty `struct A();`): one arg per field.
    Tuple(usize),
    /// `struct A { ... }`, even with no fields: `args: [{...}]`.
    Named,
}

impl Shape {
    /// The shape of a struct with these fields.
    pub(crate) fn of(fields: &Fields) -> Shape {
        match fields {
            Fields::Unit => Shape::Unit,
            Fields::Named(_) => Shape::Named,
            Fields::Unnamed(f) if f.unnamed.len() == 1 => Shape::Newtype,
            Fields::Unnamed(f) => Shape::Tuple(f.unnamed.len()),
        }
    }
}

impl<'a> Container<'a> {
    /// The typed view of `input`, or `None` (with errors in `cx`) when it is
    /// not a non-generic struct. Attributes are parsed either way, so their
    /// mistakes are reported too.
    pub(crate) fn from_ast(cx: &mut Ctxt, input: &'a DeriveInput) -> Option<Self> {
        let attrs = Attrs::parse(cx, &input.attrs);
        if !input.generics.params.is_empty() {
            cx.error_spanned_by(
                &input.generics,
                "`#[derive(Job)]` does not support generic parameters",
            );
        }
        let fields = match &input.data {
            Data::Struct(data) => &data.fields,
            Data::Enum(data) => {
                cx.error_spanned_by(data.enum_token, "`#[derive(Job)]` supports only structs");
                return None;
            }
            Data::Union(data) => {
                cx.error_spanned_by(data.union_token, "`#[derive(Job)]` supports only structs");
                return None;
            }
        };
        reject_field_attrs(cx, fields);
        if !input.generics.params.is_empty() {
            return None;
        }
        Some(Container {
            ident: &input.ident,
            shape: Shape::of(fields),
            fields,
            attrs,
        })
    }

    /// The member that `field` names, spanned where the attribute names it,
    /// or `None` when the struct has no such field.
    pub(crate) fn member(&self, field: &FieldRef) -> Option<Member> {
        match (field, self.fields) {
            (FieldRef::Named(name), Fields::Named(fields)) => fields
                .named
                .iter()
                .filter_map(|f| f.ident.as_ref())
                .find(|ident| ident.unraw() == name.unraw())
                .map(|ident| {
                    let mut ident = ident.clone();
                    ident.set_span(name.span());
                    Member::Named(ident)
                }),
            (FieldRef::Index(index), Fields::Unnamed(fields))
                if (index.index as usize) < fields.unnamed.len() =>
            {
                Some(Member::Unnamed(index.clone()))
            }
            _ => None,
        }
    }
}

/// The helper attributes belong on the struct; on a field they would be
/// silently ignored, so they are an error there.
fn reject_field_attrs(cx: &mut Ctxt, fields: &Fields) {
    for (i, field) in fields.iter().enumerate() {
        for attr in &field.attrs {
            let Some(helper) = HELPERS.iter().find(|h| attr.path().is_ident(h)) else {
                continue;
            };
            if *helper == "fair_tenant" {
                let name = field
                    .ident
                    .as_ref()
                    .map_or_else(|| i.to_string(), |ident| ident.unraw().to_string());
                cx.error_spanned_by(
                    attr,
                    format_args!(
                        "`#[fair_tenant]` goes on the struct, not on a field: `#[fair_tenant({name})]`"
                    ),
                );
            } else {
                cx.error_spanned_by(
                    attr,
                    format_args!("`#[{helper}]` goes on the struct, not on a field"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn shape(input: DeriveInput) -> Shape {
        let mut cx = Ctxt::new();
        let shape = Container::from_ast(&mut cx, &input).unwrap().shape;
        assert_eq!(cx.error_count(), 0);
        shape
    }

    fn errors(input: &DeriveInput) -> Vec<String> {
        let mut cx = Ctxt::new();
        let _ = Container::from_ast(&mut cx, input);
        match cx.finish() {
            Ok(()) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn shapes() {
        assert_eq!(
            shape(parse_quote!(
                struct A;
            )),
            Shape::Unit
        );
        assert_eq!(
            shape(parse_quote!(
                struct A(u32);
            )),
            Shape::Newtype
        );
        assert_eq!(
            shape(parse_quote!(
                struct A(u32, String);
            )),
            Shape::Tuple(2)
        );
        assert_eq!(
            shape(parse_quote!(
                struct A();
            )),
            Shape::Tuple(0)
        );
        assert_eq!(
            shape(parse_quote!(
                struct A {
                    id: u32,
                }
            )),
            Shape::Named
        );
        assert_eq!(
            shape(parse_quote!(
                struct A {}
            )),
            Shape::Named
        );
    }

    #[test]
    fn rejects_enums_unions_and_generics_and_still_reads_attributes() {
        assert_eq!(
            errors(&parse_quote! {
                #[job(queu = "a")]
                enum E { A }
            }),
            [
                "unknown `job` attribute `queu`; expected one of `active_job`, `class`, `queue`, `retry`, `shard_by_tenant`, `timeout`",
                "`#[derive(Job)]` supports only structs",
            ]
        );
        assert_eq!(
            errors(&parse_quote!(union U { a: u32 })),
            ["`#[derive(Job)]` supports only structs"]
        );
        for input in [
            parse_quote!(
                struct A<T>(T);
            ),
            parse_quote!(
                struct A<'a>(&'a str);
            ),
            parse_quote!(
                struct A<const N: usize>([u8; N]);
            ),
        ] {
            assert_eq!(
                errors(&input),
                ["`#[derive(Job)]` does not support generic parameters"]
            );
        }
    }

    #[test]
    fn helper_attributes_on_fields_are_errors() {
        assert_eq!(
            errors(&parse_quote! {
                struct A {
                    #[fair_tenant]
                    account: u64,
                    #[throttle(queue = "x", threshold = 1)]
                    other: u64,
                }
            }),
            [
                "`#[fair_tenant]` goes on the struct, not on a field: `#[fair_tenant(account)]`",
                "`#[throttle]` goes on the struct, not on a field",
            ]
        );
    }

    #[test]
    fn members() {
        let named: DeriveInput = parse_quote!(
            struct A {
                r#type: String,
                b: u8,
            }
        );
        let mut cx = Ctxt::new();
        let c = Container::from_ast(&mut cx, &named).unwrap();
        assert!(c.member(&FieldRef::Named(parse_quote!(b))).is_some());
        assert!(c.member(&FieldRef::Named(parse_quote!(r#type))).is_some());
        assert!(c.member(&FieldRef::Named(parse_quote!(c))).is_none());
        assert!(c.member(&FieldRef::Index(parse_quote!(0))).is_none());

        let tuple: DeriveInput = parse_quote!(
            struct T(u8, u8);
        );
        let c = Container::from_ast(&mut cx, &tuple).unwrap();
        assert!(c.member(&FieldRef::Index(parse_quote!(1))).is_some());
        assert!(c.member(&FieldRef::Index(parse_quote!(2))).is_none());
        assert!(c.member(&FieldRef::Named(parse_quote!(a))).is_none());
        assert_eq!(cx.error_count(), 0);
    }
}
