//! The worker's queue list: ordered tiers of weighted queues, and the per-fetch
//! order Sidekiq's `BasicFetch` would use.
//!
//! Inside a tier, Sidekiq's rules: with no weights the queues are checked in the
//! order given (strict); with weights each queue is repeated by its weight, the
//! list is shuffled and de-duplicated, and the first non-empty queue wins (a
//! queue comes first with probability weight / total). Tiers are strict: a tier
//! is reached only when every queue of the tiers before it is empty.
//!
//! Layer 3: a setting and its pure fetch order; the worker uses it.

use std::collections::BTreeMap;
use std::fmt;

use rand::seq::SliceRandom;

use crate::error::{Error, Result};
use crate::fair;
use crate::wire::JobOptions;

/// Ordered tiers of queues with weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    tiers: Vec<Tier>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tier {
    /// (queue, weight); weight 0 = "no weight given".
    queues: Vec<(String, u32)>,
    strict: bool,
    expanded: Vec<usize>,
}

impl QueueSpec {
    /// One tier from Sidekiq-style entries: `"name"` or `"name,weight"`. An entry is
    /// one queue, whatever characters its name holds (except a comma, which the
    /// client refuses in queue names).
    pub fn parse(entries: &[String]) -> Result<QueueSpec> {
        Self::parse_tiers(&[entries.to_vec()])
    }

    /// Several tiers, most urgent first.
    pub fn parse_tiers(tiers: &[Vec<String>]) -> Result<QueueSpec> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for entries in tiers {
            let mut queues = Vec::new();
            for e in entries {
                {
                    let part = e.as_str();
                    let (name, weight) = match part.rsplit_once(',') {
                        Some((n, w)) => (
                            n,
                            w.parse::<u32>().map_err(|_| {
                                Error::Config(format!("invalid weight in queue `{part}`"))
                            })?,
                        ),
                        None => (part, 0),
                    };
                    if name.is_empty() {
                        return Err(Error::Config(format!("empty queue name in `{part}`")));
                    }
                    if !seen.insert(name.to_owned()) {
                        return Err(Error::Config(format!("queue `{name}` is listed twice")));
                    }
                    queues.push((name.to_owned(), weight));
                }
            }
            if !queues.is_empty() {
                out.push(Tier::new(queues));
            }
        }
        if out.is_empty() {
            return Err(Error::Config("no queues given".into()));
        }
        Ok(QueueSpec { tiers: out })
    }

    /// Derives the queue list from jobs' options: each job's queue and its
    /// throttle queues, with weights from `weight =` or halving per rule
    /// ([`fair::default_weights`]); one weighted tier.
    pub fn from_options<'a>(jobs: impl IntoIterator<Item = &'a JobOptions>) -> QueueSpec {
        let mut weights: BTreeMap<String, u32> = BTreeMap::new();
        for o in jobs {
            for (q, w) in fair::default_weights(o.queue, o.throttles) {
                let e = weights.entry(q).or_insert(0);
                *e = (*e).max(w);
            }
        }
        if weights.is_empty() {
            weights.insert("default".into(), 1);
        }
        QueueSpec {
            tiers: vec![Tier::new(weights.into_iter().collect())],
        }
    }

    /// Every queue, tier by tier.
    pub fn queues(&self) -> impl Iterator<Item = &str> {
        self.tiers
            .iter()
            .flat_map(|t| t.queues.iter().map(|(q, _)| q.as_str()))
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.tiers.iter().map(|t| t.queues.len()).sum()
    }

    /// True when there are no queues (never, for a parsed spec).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sidekiq's per-fetch order as indices into [`QueueSpec::queues`].
    pub fn fetch_order(&self, rng: &mut impl rand::Rng, out: &mut Vec<usize>) {
        out.clear();
        let mut base = 0;
        for tier in &self.tiers {
            if tier.strict {
                out.extend(base..base + tier.queues.len());
            } else {
                let mut expanded = tier.expanded.clone();
                expanded.shuffle(rng);
                let start = out.len();
                for i in expanded {
                    if !out[start..].contains(&(base + i)) {
                        out.push(base + i);
                    }
                }
            }
            base += tier.queues.len();
        }
    }

    /// `(queue, weight)` pairs per tier, for display and the heartbeat.
    pub fn tiers(&self) -> Vec<Vec<(String, u32)>> {
        self.tiers.iter().map(|t| t.queues.clone()).collect()
    }
}

impl Tier {
    fn new(queues: Vec<(String, u32)>) -> Tier {
        let strict = is_strict(&queues);
        let expanded = queues
            .iter()
            .enumerate()
            .flat_map(|(i, (_, w))| std::iter::repeat_n(i, effective_weight(*w) as usize))
            .collect();
        Tier {
            queues,
            strict,
            expanded,
        }
    }
}

impl fmt::Display for QueueSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.tiers.iter().enumerate() {
            if i > 0 {
                f.write_str(" > ")?;
            }
            for (j, (q, w)) in t.queues.iter().enumerate() {
                if j > 0 {
                    f.write_str(" ")?;
                }
                if *w > 0 {
                    write!(f, "{q},{w}")?;
                } else {
                    f.write_str(q)?;
                }
            }
        }
        Ok(())
    }
}

/// The weight rule, stated once: a tier whose weights are all 0 is strict
/// (its queues are tried in order, the first with work always wins).
pub fn is_strict(tier: &[(String, u32)]) -> bool {
    tier.iter().all(|(_, w)| *w == 0)
}

/// The weight rule, stated once: in a weighted tier a queue counts with at
/// least weight 1.
pub fn effective_weight(weight: u32) -> u32 {
    weight.max(1)
}

/// Planned shares of one tier of a fetch plan, from the weight rule
/// ([`is_strict`], [`effective_weight`]): weight / total in a weighted tier;
/// a strict tier gives its first queue everything while it has work.
pub fn planned_shares(tier: &[(String, u32)]) -> Vec<f64> {
    if is_strict(tier) {
        return (0..tier.len())
            .map(|i| if i == 0 { 1.0 } else { 0.0 })
            .collect();
    }
    let total: u32 = tier.iter().map(|(_, w)| effective_weight(*w)).sum();
    tier.iter()
        .map(|(_, w)| effective_weight(*w) as f64 / total as f64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_shares_follow_weights_or_strict_order() {
        let w = planned_shares(&[("a".into(), 4), ("b".into(), 2), ("c".into(), 2)]);
        assert_eq!(w, vec![0.5, 0.25, 0.25]);
        let s = planned_shares(&[("a".into(), 0), ("b".into(), 0)]);
        assert_eq!(s, vec![1.0, 0.0]);
    }
    use rand::SeedableRng;

    #[test]
    fn strict_without_weights() {
        let s = QueueSpec::parse(&["critical".into(), "default".into()]).unwrap();
        let mut out = Vec::new();
        s.fetch_order(&mut rand::rngs::StdRng::seed_from_u64(1), &mut out);
        assert_eq!(out, vec![0, 1]);
    }

    #[test]
    fn weighted_first_choice_follows_weights() {
        let s = QueueSpec::parse(&["a,4".into(), "b,2".into(), "c,1".into()]).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut counts = [0u32; 3];
        let mut out = Vec::new();
        for _ in 0..70_000 {
            s.fetch_order(&mut rng, &mut out);
            assert_eq!(out.len(), 3);
            counts[out[0]] += 1;
        }
        let share = |i: usize| counts[i] as f64 / 70_000.0;
        assert!((share(0) - 4.0 / 7.0).abs() < 0.01, "{counts:?}");
        assert!((share(2) - 1.0 / 7.0).abs() < 0.01, "{counts:?}");
    }

    #[test]
    fn tiers_are_strict_between_and_weighted_within() {
        let s = QueueSpec::parse_tiers(&[
            vec!["critical".into()],
            vec!["default,4".into(), "slow,1".into()],
        ])
        .unwrap();
        assert_eq!(s.to_string(), "critical > default,4 slow,1");
        let mut out = Vec::new();
        s.fetch_order(&mut rand::rng(), &mut out);
        assert_eq!(out[0], 0);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn mistakes_are_errors() {
        assert!(QueueSpec::parse(&["a".into(), "a,2".into()]).is_err());
        assert!(QueueSpec::parse(&["a,x".into()]).is_err());
        assert!(QueueSpec::parse(&[]).is_err());
    }
}
