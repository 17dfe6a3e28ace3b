//! The sentences of "why is this job waiting": each typed
//! [`Reason`] of [`fairjob::inspect::Explanation`] rendered for a person, the
//! same words on the dashboard, in its JSON twin's `text` and in the CLI.

use fairjob::inspect::{Explanation, Reason, Refusal};

use crate::fmt::{format_count, format_duration, format_time, ordinal};

/// The sentence of why Redis refuses writes (the overview's banner, the
/// health endpoints' "degraded", the CLI).
pub fn refusal_text(refusal: &Refusal) -> String {
    refusal.sentence()
}

/// A tenant as the sentences name it.
fn who(tenant: &Option<String>) -> &str {
    tenant.as_deref().unwrap_or("(no tenant)")
}

/// "in 5 min", or how long ago a due job was due.
fn relative(secs: f64) -> String {
    if secs >= 0.0 {
        format!("in {}", format_duration(secs))
    } else {
        format!(
            "due {} ago; the scheduler enqueues it at its next poll",
            format_duration(-secs)
        )
    }
}

/// The sentence of one reason.
pub fn reason_text(reason: &Reason) -> String {
    match reason {
        Reason::Running {
            identity,
            since,
            elapsed_secs,
        } => format!(
            "running on {identity} since {} ({})",
            format_time(*since),
            format_duration(*elapsed_secs)
        ),
        Reason::YieldRequested {
            asked_at,
            why,
            ignored,
        } => format!(
            "asked to yield at {} by fair yield (reason {}): it gives its slot back at its next \
             step or check of should_yield{}",
            format_time(*asked_at),
            why.as_deref().unwrap_or("unknown"),
            if *ignored {
                "; unhonoured past the cool-down, it keeps running (never killed)"
            } else {
                ""
            }
        ),
        Reason::Fetched { identity } => format!(
            "fetched by {identity}: starting (taking a slot, or just started and not yet in its \
             heartbeat)"
        ),
        Reason::QueuePosition {
            queue,
            position,
            length,
        } => format!(
            "position {} of {} in `{queue}`: {} job(s) will be fetched before it",
            format_count(*position),
            format_count(*length),
            format_count(position.saturating_sub(1))
        ),
        Reason::InboxPosition {
            queue,
            tenant,
            position,
            length,
        } => format!(
            "position {} of {} in the inbox of sharded queue `{queue}`: the next fetches sort it \
             into {}'s list",
            format_count(*position),
            format_count(*length),
            who(tenant)
        ),
        Reason::ShardPosition {
            queue,
            tenant,
            position,
            length,
        } => format!(
            "position {} of {} in {}'s list of sharded queue `{queue}`",
            format_count(*position),
            format_count(*length),
            who(tenant)
        ),
        Reason::QueuePaused { queue } => {
            format!("`{queue}` is paused: workers do not fetch it until it is resumed")
        }
        Reason::Rerouted {
            original,
            tenant,
            class,
            count,
            window_secs,
            threshold,
        } => format!(
            "rerouted from `{original}`: {} enqueued {} {class} in the {} window (threshold {})",
            who(tenant),
            format_count(*count),
            format_duration(*window_secs as f64),
            format_count(*threshold)
        ),
        Reason::RerouteOutlook {
            tenant,
            original,
            next_queue,
            back_in_secs,
        } => match (back_in_secs, next_queue == original) {
            (_, true) => format!(
                "new jobs of {} already go to `{original}` again",
                who(tenant)
            ),
            (Some(s), false) => format!(
                "new jobs of {} go to `{next_queue}` now, and back to `{original}` in {}",
                who(tenant),
                format_duration(*s as f64)
            ),
            (None, false) => format!("new jobs of {} go to `{next_queue}` now", who(tenant)),
        },
        Reason::TenantPaused { queue, tenant } => format!(
            "{} is paused in `{queue}`: its running limit is 0",
            who(tenant)
        ),
        Reason::TenantAtLimit {
            queue,
            running,
            limit,
        } => format!(
            "tenant at its running limit {running}/{limit} in `{queue}`: its next job starts when \
             one of its running jobs ends"
        ),
        Reason::DispatchOrder {
            queue,
            tenant,
            rank,
            runnable,
            under_floor,
        } => format!(
            "{} is {} in `{queue}`'s dispatch order ({runnable} tenants runnable{})",
            who(tenant),
            ordinal(*rank),
            if *under_floor {
                "; under its floor, so served first"
            } else {
                ""
            }
        ),
        Reason::TenantRateWait {
            queue,
            tenant,
            rate,
            in_secs,
        } => format!(
            "{} waits for its rate on `{queue}` ({rate}): back in the dispatch order, its place kept, in {in_secs:.1} s",
            who(tenant)
        ),
        Reason::EntersDispatchOrder { queue, tenant } => format!(
            "{} enters `{queue}`'s dispatch order at the next fetch",
            who(tenant)
        ),
        Reason::SlotWait {
            key,
            position,
            waiting,
            running,
            limit,
            holders,
        } => {
            let held: Vec<String> = holders
                .iter()
                .map(|h| {
                    format!(
                        "{} on {} since {}",
                        h.jid.as_deref().unwrap_or("?"),
                        h.identity,
                        format_time(h.since_ms as f64 / 1000.0)
                    )
                })
                .collect();
            format!(
                "{} waiter for `{key}` ({waiting} waiting; {running} of {} slots held{}{})",
                ordinal(*position),
                limit.map_or_else(|| "?".to_owned(), |l| l.to_string()),
                if held.is_empty() {
                    String::new()
                } else {
                    format!(", by {}", held.join(", "))
                },
                if *running as usize > held.len() {
                    ", …"
                } else {
                    ""
                }
            )
        }
        Reason::SlotPaused { key } => format!("`{key}` is paused: its limit is 0"),
        Reason::RateWait {
            key,
            ahead,
            waiting,
            rate,
            next_release_in_secs,
        } => format!(
            "waits for the {key} limiter: {ahead} ahead ({waiting} waiting{}){}",
            rate.filter(|r| !r.is_paused())
                .map_or_else(String::new, |r| format!(
                    "; {}",
                    crate::fmt::rate(r.limit, r.per_ms)
                )),
            next_release_in_secs
                .map_or_else(String::new, |s| format!(", next release in {s:.1} s"))
        ),
        Reason::RatePaused { key } => format!("the {key} limiter is paused: its limit is 0"),
        Reason::Scheduled { at, due_in_secs } => format!(
            "scheduled for {} ({})",
            format_time(*at),
            relative(*due_in_secs)
        ),
        Reason::Retry {
            attempt,
            max,
            at,
            due_in_secs,
        } => format!(
            "retry {attempt} of {max} scheduled for {} ({})",
            format_time(*at),
            relative(*due_in_secs)
        ),
        Reason::Dead {
            at,
            ago_secs,
            retries,
        } => format!(
            "dead since {} ({} ago) after {retries} retries: it runs again only when retried by \
             hand",
            format_time(*at),
            format_duration(*ago_secs)
        ),
        Reason::LastError {
            error_class,
            error_message,
            ..
        } => format!(
            "last error: {}: {}",
            error_class.as_deref().unwrap_or("?"),
            error_message.as_deref().unwrap_or_default()
        ),
        Reason::NotFoundYet { scanned, total } => format!(
            "not found yet: scanned {} of {} entries; continue to look further",
            format_count(*scanned),
            format_count(*total)
        ),
        Reason::Duplicate { holder, class, at } => format!(
            "not enqueued: duplicate of {holder} (a unique `{class}` refused at {} because job \
             {holder} held its key)",
            format_time(*at)
        ),
        Reason::NotFound { scanned } => format!(
            "not found in any queue, tenant list, slot wait list, `retry`, `schedule`, `dead` or \
             running job ({} entries scanned): it has finished (fairjob keeps no record of \
             finished jobs), or was deleted, or the jid is wrong",
            format_count(*scanned)
        ),
        Reason::BatchMember {
            bid,
            description,
            pending,
            total,
            workflow,
            step,
        } => {
            let about = if description.is_empty() {
                String::new()
            } else {
                format!(
                    " (\u{201c}{}\u{201d})",
                    crate::fmt::shorten(description, 200)
                )
            };
            match (workflow, step) {
                (true, Some(step)) => format!(
                    "step `{step}` of workflow {bid}{about}: {} of its {} steps have not run yet",
                    format_count(*pending),
                    format_count(*total)
                ),
                _ => format!(
                    "member of batch {bid}{about}: {} of its {} members have not run yet",
                    format_count(*pending),
                    format_count(*total)
                ),
            }
        }
        Reason::WorkflowHeld {
            step,
            waiting_for,
            waiting,
            dependencies,
            ..
        } => {
            let named: Vec<String> = waiting_for.iter().map(|d| format!("`{d}`")).collect();
            let more = waiting.saturating_sub(named.len() as u64);
            let list = match (named.is_empty(), more) {
                (true, _) => format!("{} dependencies", format_count(*waiting)),
                (false, 0) => named.join(", "),
                (false, m) => format!("{} and {} more", named.join(", "), format_count(m)),
            };
            format!(
                "held as step `{step}` in no queue: waiting for {list} ({} of its {} dependencies \
                 not yet succeeded); the end of the last one releases it into its queue",
                format_count(*waiting),
                format_count(*dependencies)
            )
        }
        _ => format!("{reason:?}"),
    }
}

/// A reason as the JSON twin and the page carry it: its group, its
/// sentence, and its typed facts.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RenderedReason {
    /// The group ([`Reason::kind`]).
    pub kind: &'static str,
    /// The sentence.
    pub text: String,
    /// The typed facts.
    pub detail: Reason,
}

impl From<&Reason> for RenderedReason {
    fn from(r: &Reason) -> Self {
        RenderedReason {
            kind: r.kind(),
            text: reason_text(r),
            detail: r.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairjob::inspect::JobSet;

    #[test]
    fn batch_members_and_held_steps_say_where_they_belong() {
        let r = Reason::BatchMember {
            bid: "b1".into(),
            description: "<i>import</i>".into(),
            pending: 3,
            total: 1200,
            workflow: false,
            step: None,
        };
        assert_eq!(r.kind(), "batch");
        assert_eq!(
            reason_text(&r),
            "member of batch b1 (\u{201c}<i>import</i>\u{201d}): 3 of its 1,200 members have not run yet"
        );
        let r = Reason::WorkflowHeld {
            bid: "w1".into(),
            step: "load".into(),
            waiting_for: vec!["extract".into()],
            waiting: 3,
            dependencies: 4,
        };
        assert_eq!(r.kind(), "workflow");
        assert_eq!(
            reason_text(&r),
            "held as step `load` in no queue: waiting for `extract` and 2 more (3 of its 4 \
             dependencies not yet succeeded); the end of the last one releases it into its queue"
        );
    }

    #[test]
    fn reasons_read_as_before() {
        let r = Reason::TenantAtLimit {
            queue: "conversions".into(),
            running: 1,
            limit: 1,
        };
        assert!(reason_text(&r).contains("tenant at its running limit 1/1 in `conversions`"));
        let r = Reason::LastError {
            set: JobSet::Dead,
            error_class: Some("Boom".into()),
            error_message: None,
        };
        assert_eq!(r.kind(), "dead");
        assert_eq!(reason_text(&r), "last error: Boom: ");
        let r = Reason::DispatchOrder {
            queue: "q".into(),
            tenant: None,
            rank: 2,
            runnable: 3,
            under_floor: true,
        };
        assert_eq!(
            reason_text(&r),
            "(no tenant) is 2nd in `q`'s dispatch order (3 tenants runnable; under its floor, so \
             served first)"
        );
        let r = Reason::TenantRateWait {
            queue: "q".into(),
            tenant: Some("acme".into()),
            rate: "5/1s".into(),
            in_secs: 0.4,
        };
        assert_eq!(r.kind(), "tenant_rate");
        assert_eq!(
            reason_text(&r),
            "acme waits for its rate on `q` (5/1s): back in the dispatch order, its place kept, \
             in 0.4 s"
        );
    }
}

/// An explanation as the JSON twin serves it: every field of
/// [`Explanation`], with each reason rendered ([`RenderedReason`]), and what
/// the places besides Redis know of the jid (`elsewhere`, when there are any).
#[derive(Debug, serde::Serialize)]
pub(crate) struct ExplanationJson {
    #[serde(flatten)]
    explanation: Explanation,
    reasons: Vec<RenderedReason>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) elsewhere: Vec<crate::load::SourceView>,
}

impl From<Explanation> for ExplanationJson {
    fn from(mut explanation: Explanation) -> Self {
        let reasons = explanation
            .reasons
            .iter()
            .map(RenderedReason::from)
            .collect();
        explanation.reasons.clear();
        ExplanationJson {
            explanation,
            reasons,
            elsewhere: Vec::new(),
        }
    }
}
