//! Reroute, the `sidekiq-fair_tenant` gem's sliding window: which queue a
//! tenant's job goes to (the twin of `broker/scripts/lib/reroute.lua`).
//!
//! Per (job class, tenant) a window: a sorted set of `jid:<jid>` scored by
//! enqueue second. A push registers its jid first (a re-push of a jid moves
//! its score and uses no new quota), trims entries older than the longest
//! window, refreshes the key's expiry, then every rule with
//! `threshold < count(now - per ..= +inf)` matches and the last matching rule
//! picks the queue ([`reroute_target`]). [`Window::choose`] is that step on
//! one window; the inspect views read counts and call [`reroute_next_queue`].

use std::collections::HashMap;

use crate::wire::WireRule;

/// The reroute rule, written once (`push.lua` is its only other statement):
/// given each rule's threshold and its window's count *with the job being
/// pushed already counted*, every rule with `threshold < count` matches and
/// the last matching one (in declaration order) wins. Returns 0 for the
/// declared queue, `i + 1` for rule `i`.
pub fn reroute_target(thresholds_and_counts: impl IntoIterator<Item = (u64, u64)>) -> usize {
    let mut chosen = 0;
    for (i, (threshold, count)) in thresholds_and_counts.into_iter().enumerate() {
        if threshold < count {
            chosen = i + 1;
        }
    }
    chosen
}

/// The queue a tenant's next job goes to, given each rule's count now
/// (before the job): [`reroute_target`] with the job counted.
pub fn reroute_next_queue<'a>(
    base_queue: &'a str,
    rules: &'a [WireRule],
    counts: &[u64],
) -> &'a str {
    match reroute_target(rules.iter().zip(counts).map(|(r, n)| (r.threshold, n + 1))) {
        0 => base_queue,
        i => &rules[i - 1].queue,
    }
}

/// While a rule matches, seconds until a tenant's next job no longer does:
/// `oldest_kept` is the score (epoch seconds) of the entry whose leaving the
/// window brings the next job's count back to the threshold, `window` the
/// rule's window, `now` Redis's clock.
pub fn reroute_clears_in(oldest_kept: i64, window: u64, now: i64) -> u64 {
    (oldest_kept + window as i64 - now).max(0) as u64 + 1
}

/// One reroute window: `jid:<jid>` → whole seconds, and when its key would
/// expire (epoch seconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// The members and their scores.
    pub members: HashMap<String, i64>,
    /// When the key expires (`EXPIRE` the longest window at each push).
    pub expires_at: f64,
}

impl Window {
    /// A push of `member` at `now` (whole seconds; `now_f` the same with its
    /// fraction, for the expiry) judged by `rules` ((threshold, per seconds)
    /// each) over a longest window of `maxw` seconds: the member is
    /// registered, old entries trimmed, and the 0-based candidate chosen (0 =
    /// the job's own queue, `r + 1` = rule `r`'s).
    pub fn choose(
        &mut self,
        now: i64,
        now_f: f64,
        member: &str,
        maxw: i64,
        rules: &[(u64, u64)],
    ) -> usize {
        if !self.members.is_empty() && self.expires_at < now_f {
            self.members.clear();
        }
        self.members.insert(member.to_owned(), now);
        self.members.retain(|_, score| *score >= now - maxw);
        self.expires_at = now_f + maxw as f64;
        reroute_target(rules.iter().map(|(threshold, per)| {
            let from = now - *per as i64;
            (
                *threshold,
                self.members.values().filter(|s| **s >= from).count() as u64,
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_matching_rule_wins() {
        assert_eq!(reroute_target([(2, 3), (4, 5)]), 2);
        assert_eq!(reroute_target([(2, 3), (4, 4)]), 1);
        assert_eq!(reroute_target([(2, 2), (4, 4)]), 0);
    }

    #[test]
    fn a_window_counts_the_push_and_forgets_what_is_older_than_the_longest_rule() {
        let mut w = Window::default();
        let rules = [(1, 60)];
        assert_eq!(w.choose(1000, 1000.0, "jid:a", 100, &rules), 0);
        assert_eq!(w.choose(1010, 1010.0, "jid:b", 100, &rules), 1);
        // A re-push of a jid uses no new quota.
        assert_eq!(w.choose(1020, 1020.0, "jid:b", 100, &rules), 1);
        assert_eq!(w.members.len(), 2);
        // Past the window, the old entries are trimmed.
        assert_eq!(w.choose(1200, 1200.0, "jid:c", 100, &rules), 0);
        assert_eq!(w.members.len(), 1);
    }
}
