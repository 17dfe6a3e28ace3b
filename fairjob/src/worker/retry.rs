//! Sidekiq's retry rules, as pure functions: what a job's result means for it
//! ([`outcome`]: ack, retry after a backoff, or dead, with the payload's retry
//! fields edited as Sidekiq edits them) and the backoff itself ([`backoff`]).
//! No IO: the processor writes what these decide.

use std::time::Duration;

use rand::Rng;

use crate::error::{JobError, JobErrorKind};
use crate::wire::{Payload, now_f64};

/// What to do with a job after it ran.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Done (or failed with `retry: false`, which Sidekiq does not keep).
    Ack,
    /// To `retry` with this payload, due after this delay.
    Retry(String, Duration),
    /// To `dead` with this payload.
    Dead(String),
}

/// The outcome of a run that returned `result`.
pub(crate) fn outcome(payload: &Payload, result: &Result<(), JobError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Ack,
        Err(e) => failure(payload, e),
    }
}

/// Sidekiq's retry handling of a failure: the edited payload and where it goes.
pub(crate) fn failure(original: &Payload, e: &JobError) -> Outcome {
    let mut p = original.clone();
    let now = now_f64();
    let count = match p.retry_count() {
        Some(c) => {
            p.set("retried_at", now);
            c + 1
        }
        None => {
            p.set("failed_at", now);
            0
        }
    };
    p.set("retry_count", count);
    p.set("error_class", e.class());
    let mut message = e.message().to_owned();
    if message.len() > 10_000 {
        let mut cut = 10_000;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    p.set("error_message", message);
    if let Some(q) = p.get_str("retry_queue") {
        p.set("queue", q);
    }
    if p.retry_disabled() {
        // Sidekiq: `retry: false` fails once and is not kept in `dead`.
        return Outcome::Ack;
    }
    let dead_allowed = p.get::<bool>("dead") != Some(false);
    if e.is_discard() || count >= p.max_retries() {
        return if dead_allowed {
            Outcome::Dead(p.to_json())
        } else {
            Outcome::Ack
        };
    }
    let delay = match e.kind() {
        JobErrorKind::RetryIn(d) => d,
        _ => backoff(count),
    };
    Outcome::Retry(p.to_json(), delay)
}

/// Sidekiq 6/7's delay before retry `count` (0-based): `count^4 + 15 + rand(10) * (count + 1)` seconds.
pub fn backoff(count: u32) -> Duration {
    let c = count as u64;
    let jitter = rand::rng().random_range(0..10u64) * (c + 1);
    Duration::from_secs(
        c.saturating_pow(4)
            .saturating_add(15)
            .saturating_add(jitter),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(extra: &str) -> Payload {
        Payload::parse(
            format!(r#"{{"class":"A","args":[],"jid":"j","queue":"q"{extra}}}"#).into_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn first_failure_is_retry_count_zero_with_sidekiq_backoff() {
        match failure(&p(r#","retry":true"#), &JobError::retry("boom")) {
            Outcome::Retry(json, delay) => {
                let out = Payload::parse(json.into_bytes()).unwrap();
                assert_eq!(out.retry_count(), Some(0));
                assert!(out.has("failed_at"));
                assert!(!out.has("retried_at"));
                assert_eq!(out.get_str("error_message").as_deref(), Some("boom"));
                assert_eq!(out.get_str("error_class").as_deref(), Some("JobError"));
                assert!((15..=24).contains(&delay.as_secs()), "{delay:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn later_failures_count_up_and_stamp_retried_at() {
        match failure(&p(r#","retry":5,"retry_count":2"#), &JobError::retry("x")) {
            Outcome::Retry(json, delay) => {
                let out = Payload::parse(json.into_bytes()).unwrap();
                assert_eq!(out.retry_count(), Some(3));
                assert!(out.has("retried_at"));
                let base = 3u64.pow(4) + 15;
                assert!((base..=base + 36).contains(&delay.as_secs()), "{delay:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exhausted_goes_dead_and_retry_false_is_dropped() {
        assert!(matches!(
            failure(&p(r#","retry":2,"retry_count":1"#), &JobError::retry("x")),
            Outcome::Dead(_)
        ));
        assert_eq!(
            failure(&p(r#","retry":false"#), &JobError::retry("x")),
            Outcome::Ack
        );
        assert!(matches!(
            failure(&p(r#","retry":true"#), &JobError::discard("x")),
            Outcome::Dead(_)
        ));
        assert!(matches!(
            failure(&p(r#","retry":0"#), &JobError::retry("x")),
            Outcome::Dead(_)
        ));
        assert_eq!(
            failure(&p(r#","retry":0,"dead":false"#), &JobError::retry("x")),
            Outcome::Ack
        );
    }

    #[test]
    fn retry_in_overrides_the_backoff_and_retry_queue_moves_the_job() {
        let e = JobError::retry_in(Duration::from_secs(3), "later");
        match failure(&p(r#","retry":true,"retry_queue":"slow""#), &e) {
            Outcome::Retry(json, delay) => {
                assert_eq!(delay, Duration::from_secs(3));
                let out = Payload::parse(json.into_bytes()).unwrap();
                assert_eq!(out.queue(), "slow");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let msg = "é".repeat(6_000);
        match failure(&p(r#","retry":true"#), &JobError::retry(msg)) {
            Outcome::Retry(json, _) => {
                let out = Payload::parse(json.into_bytes()).unwrap();
                let m = out.get_str("error_message").unwrap();
                assert!(m.len() <= 10_000 && m.len() >= 9_998, "{}", m.len());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn success_is_an_ack() {
        assert_eq!(outcome(&p(""), &Ok(())), Outcome::Ack);
    }

    #[test]
    fn backoff_matches_sidekiq_6_and_7() {
        for count in [0u32, 1, 5, 24] {
            let d = backoff(count).as_secs();
            let base = (count as u64).pow(4) + 15;
            assert!(
                d >= base && d <= base + 9 * (count as u64 + 1),
                "{count}: {d}"
            );
        }
    }
}
