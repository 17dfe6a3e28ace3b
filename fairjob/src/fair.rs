//! Fairness between tenants at enqueue time: tenant detection and the reroute
//! rules of `#[throttle]`, with the semantics of the `sidekiq-fair_tenant` gem.
//!
//! Per job class and tenant, a sorted set of `jid:<jid>` scored by enqueue time
//! (integer seconds of Redis's clock). On push the job is registered first, old
//! entries are trimmed, the key's expiry refreshed, then every rule with
//! `threshold < count(now - per ..= +inf)` matches and the last matching rule (by
//! declaration order) picks the queue. All of it runs inside `push.lua`, in the
//! same step as the push. This module only prepares that step: it reads the
//! rules and tenant from the payload and says which queues are candidates.
//!
//! Differences from the gem, on purpose: a queue chosen at enqueue is recorded
//! (`fairjob_queue_pinned`) and never rerouted or counted, also on retry; a
//! rerouted job remembers its declared queue (`fairjob_original_queue`), so its
//! retries are judged against it; the whole check is atomic; `now` is Redis's.
//!
//! Layer 3: policy over the wire format and the broker's push; no IO here.

use std::time::Duration;

use crate::broker::{Candidate, Keys, RerouteSpec};
use crate::wire::{Payload, ThrottleRule, WireRule, fields, reroute_window, rule_window};

/// The gem's default maximum window: one day.
pub const DEFAULT_MAX_WINDOW: Duration = Duration::from_secs(86_400);

/// The rules carried by a payload.
pub fn rules_of(payload: &Payload) -> Vec<WireRule> {
    payload
        .get::<Vec<WireRule>>(fields::FAIR_TENANT_QUEUES)
        .unwrap_or_default()
}

/// What a push of this payload will do: candidates (own queue first, then each
/// rule's queue) and, if the job is subject to rerouting, the window to count in.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub base_queue: String,
    pub candidates: Vec<Candidate>,
    pub reroute: Option<RerouteSpec>,
    pub rules: Vec<WireRule>,
}

/// Prepares the push of `payload`: `max_window` is the configured window (the gem's
/// 1 day by default), raised to the longest `per` among the rules.
pub(crate) fn plan(
    payload: &Payload,
    keys: &Keys,
    max_window: Duration,
    is_sharded: &dyn Fn(&str) -> bool,
) -> Plan {
    let tenant = payload.tenant();
    let pinned = payload.get::<bool>(fields::QUEUE_PINNED).unwrap_or(false);
    let base_queue = payload
        .get_str(fields::ORIGINAL_QUEUE)
        .unwrap_or_else(|| payload.queue());
    let candidate = |queue: &str| Candidate {
        queue: queue.to_owned(),
        sharded: is_sharded(queue),
        tenant: tenant.clone(),
    };
    let own_queue = if pinned {
        payload.queue()
    } else {
        base_queue.clone()
    };
    let mut candidates = vec![candidate(&own_queue)];
    let rules = if pinned {
        Vec::new()
    } else {
        rules_of(payload)
    };
    let reroute = match (&tenant, rules.is_empty()) {
        (Some(tenant), false) => {
            let max_window = reroute_window(&rules, max_window.as_secs());
            candidates.extend(rules.iter().map(|r| candidate(&r.queue)));
            Some(RerouteSpec {
                window_key: keys.fair_window(&payload.class(), tenant, &base_queue),
                member: format!("jid:{}", payload.jid()),
                max_window_secs: max_window,
                rules: rules
                    .iter()
                    .map(|r| (r.threshold, rule_window(r, max_window)))
                    .collect(),
            })
        }
        _ => None,
    };
    Plan {
        base_queue,
        candidates,
        reroute,
        rules,
    }
}

/// The default fetch weights of a job's queues when the worker derives its queue
/// list: the job's own queue 2^n for n rules, each successive rule halving it
/// (the gem's README suggests 4, 2, 1 for two rules), unless a rule sets `weight`.
pub fn default_weights(queue: &str, rules: &[ThrottleRule]) -> Vec<(String, u32)> {
    let n = rules.len() as u32;
    let mut out = vec![(queue.to_owned(), 1u32 << n.min(16))];
    for (i, r) in rules.iter().enumerate() {
        let w = r.weight.unwrap_or(1u32 << (n - 1 - i as u32).min(16));
        out.push((r.queue.to_owned(), w.max(1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(extra: &str) -> Payload {
        Payload::parse(
            format!(r#"{{"class":"TJob","args":[],"jid":"abc","queue":"whatever"{extra}}}"#)
                .into_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn plan_counts_only_with_a_tenant_and_rules_and_not_when_pinned() {
        let keys = Keys::new(None);
        let rules = r#","fair_tenant_queues":[{"queue":"slow","threshold":1,"per":3600}]"#;
        let none = |_: &str| false;
        let p = plan(&payload(rules), &keys, DEFAULT_MAX_WINDOW, &none);
        assert!(p.reroute.is_none(), "no tenant, no counting");
        let p = plan(
            &payload(&format!(r#"{rules},"fair_tenant":"acme""#)),
            &keys,
            DEFAULT_MAX_WINDOW,
            &none,
        );
        let r = p.reroute.unwrap();
        assert_eq!(
            r.window_key,
            "sidekiq-fair_tenant:enqueued:TJob:tenant:acme"
        );
        assert_eq!(r.member, "jid:abc");
        assert_eq!(r.max_window_secs, 86_400);
        assert_eq!(p.candidates.len(), 2);
        let p = plan(
            &payload(&format!(
                r#"{rules},"fair_tenant":"acme","fairjob_queue_pinned":true"#
            )),
            &keys,
            DEFAULT_MAX_WINDOW,
            &none,
        );
        assert!(p.reroute.is_none());
        assert_eq!(p.candidates.len(), 1);
    }

    #[test]
    fn max_window_is_raised_to_the_longest_rule() {
        let keys = Keys::new(None);
        let p = plan(
            &payload(
                r#","fair_tenant":"a","fair_tenant_queues":[{"queue":"slow","threshold":1,"per":604800}]"#,
            ),
            &keys,
            DEFAULT_MAX_WINDOW,
            &|_| false,
        );
        assert_eq!(p.reroute.unwrap().max_window_secs, 604_800);
    }

    #[test]
    fn retries_are_judged_against_the_original_queue() {
        let keys = Keys::new(None);
        let p = plan(
            &payload(
                r#","fair_tenant":"a","fairjob_original_queue":"default","fair_tenant_queues":[{"queue":"whatever","threshold":1,"per":60}]"#,
            ),
            &keys,
            DEFAULT_MAX_WINDOW,
            &|_| false,
        );
        assert_eq!(p.base_queue, "default");
        assert_eq!(p.candidates[0].queue, "default");
    }

    #[test]
    fn default_weights_halve_per_rule() {
        let rules = [
            ThrottleRule {
                queue: "semi",
                threshold: 1,
                per: Duration::from_secs(60),
                weight: None,
            },
            ThrottleRule {
                queue: "supa",
                threshold: 1,
                per: Duration::from_secs(60),
                weight: None,
            },
        ];
        assert_eq!(
            default_weights("default", &rules),
            vec![
                ("default".into(), 4),
                ("semi".into(), 2),
                ("supa".into(), 1)
            ]
        );
    }
}
