//! Every struct form, with every attribute form.

use fairjob::{
    ArgsShape, ConcurrencyLimit, Job, JobContext, JobError, OnConflict, Perform, Registry, Retry,
    ThrottleRule, UniqueOptions, UniqueUntil,
};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Serialize, Deserialize, Job)]
struct Ping;

#[derive(Serialize, Deserialize, Job)]
#[job(queue = "mail", retry = false)]
#[fair_tenant(0)]
#[unique(for = "30s")]
struct Mail(String);

#[derive(Serialize, Deserialize, Job)]
#[job(
    class = "Billing::Charge",
    queue = "billing",
    retry = 5,
    shard_by_tenant
)]
#[fair_tenant(with = Self::tenant)]
#[concurrency(limit = 2, key = 1)]
#[unique(for = "10m", by(1), until = "start")]
struct Charge(u64, u64, String);

impl Charge {
    fn tenant(&self) -> Option<u64> {
        Some(self.0)
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(queue = "imports", retry = true)]
#[fair_tenant(account_id)]
#[throttle(queue = "imports_throttled", threshold = 100, per = "1h", weight = 2)]
#[throttle(queue = "imports_slow", threshold = 1000)]
#[concurrency(limit = 10, key = account_id, group = "imports")]
#[rate_limit(limit = 100, per = "1m", burst = 5, key = account_id, group = "stripe")]
#[unique(for = "1h", by(account_id), on_conflict = "replace")]
struct Import {
    account_id: u64,
    file: String,
}

#[derive(Serialize, Deserialize, Job)]
#[job(shard_by_tenant = false)]
#[fair_tenant(with = tenants::of_report)]
#[concurrency(limit = 1, key = tenants::region)]
#[rate_limit(limit = 20, per = "1s", key = tenant)]
struct Report {}

mod tenants {
    pub fn of_report(_: &super::Report) -> Option<String> {
        None
    }

    pub fn region(_: &super::Report) -> &'static str {
        "eu"
    }
}

macro_rules! perform {
    ($($job:ty),*) => {$(
        impl Perform for $job {
            async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
                Ok(())
            }
        }
    )*};
}

perform!(Ping, Mail, Charge, Import, Report);

fn main() {
    assert_eq!(<Ping as Job>::CLASS, "Ping");
    assert_eq!(Ping::ARGS, ArgsShape::Unit);
    assert_eq!(Ping::OPTIONS, fairjob::JobOptions::DEFAULT);
    assert_eq!(Ping.fair_tenant(), None);
    assert_eq!(Ping.concurrency_key(), None);

    assert_eq!(Mail::ARGS, ArgsShape::Newtype);
    assert_eq!(Mail::OPTIONS.queue, "mail");
    assert_eq!(Mail::OPTIONS.retry, Retry::Never);
    assert_eq!(Mail("acme".into()).fair_tenant().as_deref(), Some("acme"));
    assert_eq!(Mail(String::new()).fair_tenant(), None);

    assert_eq!(<Charge as Job>::CLASS, "Billing::Charge");
    assert_eq!(Charge::ARGS, ArgsShape::Tuple(3));
    assert_eq!(Charge::OPTIONS.retry, Retry::Times(5));
    assert!(Charge::OPTIONS.shard_by_tenant);
    assert_eq!(
        Charge::OPTIONS.concurrency,
        Some(ConcurrencyLimit {
            limit: 2,
            group: None
        })
    );
    let charge = Charge(7, 42, "eur".into());
    assert_eq!(charge.fair_tenant().as_deref(), Some("7"));
    assert_eq!(charge.concurrency_key().as_deref(), Some("42"));
    assert_eq!(
        Charge::OPTIONS.unique,
        Some(UniqueOptions {
            lock_for: Duration::from_secs(600),
            by: &["1"],
            until: UniqueUntil::Start,
            on_conflict: OnConflict::Reject,
        })
    );
    assert_eq!(charge.unique_key_json().unwrap().unwrap(), "[42]");
    assert!(Mail("a".into()).unique_key_json().is_none());
    assert_eq!(
        Mail::OPTIONS.unique.map(|u| (u.lock_for, u.until)),
        Some((Duration::from_secs(30), UniqueUntil::Success))
    );
    let import = Import {
        account_id: 9,
        file: "a.csv".into(),
    };
    assert_eq!(import.unique_key_json().unwrap().unwrap(), "[9]");
    assert_eq!(
        Import::OPTIONS.unique.map(|u| (u.by, u.on_conflict)),
        Some((&["account_id"][..], OnConflict::Replace))
    );

    assert_eq!(Import::ARGS, ArgsShape::Named);
    assert_eq!(Import::OPTIONS.retry, Retry::Default);
    assert_eq!(
        Import::OPTIONS.throttles,
        [
            ThrottleRule {
                queue: "imports_throttled",
                threshold: 100,
                per: Duration::from_secs(3600),
                weight: Some(2),
            },
            ThrottleRule {
                queue: "imports_slow",
                threshold: 1000,
                per: Duration::from_secs(86_400),
                weight: None,
            },
        ]
    );
    assert_eq!(
        Import::OPTIONS.concurrency,
        Some(ConcurrencyLimit {
            limit: 10,
            group: Some("imports")
        })
    );
    let import = Import {
        account_id: 3,
        file: "a.csv".into(),
    };
    assert_eq!(import.fair_tenant().as_deref(), Some("3"));
    assert_eq!(import.concurrency_key().as_deref(), Some("3"));
    assert_eq!(import.file, "a.csv");
    assert_eq!(
        Import::OPTIONS.rate_limit,
        Some(fairjob::RateLimit {
            limit: 100,
            per: Duration::from_secs(60),
            burst: 5,
            group: Some("stripe"),
            by_tenant: false,
        })
    );
    assert_eq!(import.rate_key().as_deref(), Some("3"));
    assert_eq!(Report {}.rate_key(), None);
    assert!(Report::OPTIONS.rate_limit.is_some_and(|r| r.by_tenant && r.burst == 0));

    assert_eq!(Report::ARGS, ArgsShape::Named);
    assert!(!Report::OPTIONS.shard_by_tenant);
    assert_eq!(Report {}.fair_tenant(), None);
    assert_eq!(Report {}.concurrency_key().as_deref(), Some("eu"));

    // The derive registered all five with inventory.
    let registry = Registry::from_inventory().unwrap();
    for class in ["Ping", "Mail", "Billing::Charge", "Import", "Report"] {
        let registration = registry
            .get(class)
            .unwrap_or_else(|| panic!("{class} not registered"));
        assert!(
            registration
                .type_name
                .ends_with(class.rsplit("::").next().unwrap())
        );
    }
}
