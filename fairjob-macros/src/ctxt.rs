//! Error collection for one `#[derive(Job)]` invocation (serde's `Ctxt`).
//!
//! Every phase reports into one [`Ctxt`] instead of returning early, so the
//! user sees all mistakes at once. This module only gathers errors; it knows
//! nothing about attributes or code generation.

use std::fmt::Display;

use quote::ToTokens;

/// The errors found so far, merged with [`syn::Error::combine`].
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: Option<syn::Error>,
    count: usize,
}

impl Ctxt {
    /// An empty context.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records an error that spans all of `tokens`.
    pub(crate) fn error_spanned_by(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.syn_error(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error produced by syn (or built elsewhere).
    pub(crate) fn syn_error(&mut self, error: syn::Error) {
        self.count += error.clone().into_iter().count();
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    /// How many errors were recorded so far; compare two counts to learn
    /// whether one attribute added any.
    pub(crate) fn error_count(&self) -> usize {
        self.count
    }

    /// All recorded errors, or `Ok` when there were none.
    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        match self.errors {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::Span;

    #[test]
    fn keeps_every_error_in_order() {
        let mut cx = Ctxt::new();
        assert_eq!(cx.error_count(), 0);
        cx.syn_error(syn::Error::new(Span::call_site(), "first"));
        cx.error_spanned_by(quote::quote!(a b), "second");
        assert_eq!(cx.error_count(), 2);
        let messages: Vec<String> = cx
            .finish()
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages, ["first", "second"]);
    }
}
