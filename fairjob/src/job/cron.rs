//! `#[cron("0 3 * * *")]` on a `Default` job: the derive submits one
//! [`CronDeclaration`] per attribute, and a worker whose registry holds the
//! class declares the schedule ([`declared_crons`]), reconciled at start-up.

use crate::client::{CronSpec, PushJob};
use crate::error::Result;
use crate::wire::cron::{CronEntry, CronSource, Overlap};

use super::Registry;

/// A schedule declared with `#[cron]`, collected with `inventory`.
#[derive(Clone, Copy)]
pub struct CronDeclaration {
    /// The schedule's name (the class name unless `name = "..."`).
    pub name: &'static str,
    /// The class it enqueues.
    pub class: &'static str,
    /// The expression (checked by the derive).
    pub expr: &'static str,
    /// The zone (checked by the derive).
    pub tz: &'static str,
    /// `"none"` or a grace.
    pub catch_up: &'static str,
    /// Skip while the previous run is live.
    pub skip_overlap: bool,
    /// The job: the type's `Default` value.
    pub job: fn() -> Result<PushJob>,
}

impl std::fmt::Debug for CronDeclaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronDeclaration")
            .field("name", &self.name)
            .field("class", &self.class)
            .field("expr", &self.expr)
            .field("tz", &self.tz)
            .finish_non_exhaustive()
    }
}

inventory::collect!(CronDeclaration);

/// The schedules `#[cron]` declares on the classes of `registry`.
pub(crate) fn declared_crons(registry: &Registry) -> Result<Vec<CronEntry>> {
    let mut out = Vec::new();
    for d in inventory::iter::<CronDeclaration> {
        if registry.get(d.class).is_none() {
            continue;
        }
        let spec = CronSpec::new(d.name, d.expr, (d.job)()?)
            .tz(d.tz)
            .catch_up(d.catch_up)
            .overlap(if d.skip_overlap {
                Overlap::Skip
            } else {
                Overlap::Allow
            });
        out.push(spec.into_entry(CronSource::Code)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}
