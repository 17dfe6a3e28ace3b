//! Fair-share yield on tenant-sharded queues: which running jobs to ask to
//! give their slot back (iterable jobs, and plain jobs that poll
//! `cx.should_yield()`), so a tenant that waits gets its share without
//! anything being killed, and which tenants dispatch holds at their share.
//!
//! The rule, from one snapshot of a queue (its tenants' running and pending
//! jobs, settings and how long they have waited; its running iterable jobs):
//!
//! - The slots are the jobs running now (a free slot needs no yield: the
//!   waiting tenant is simply dispatched). They are shared out by weighted
//!   water-filling over the tenants with work (running or pending): a
//!   tenant's floor first, then by weight, never more than its demand
//!   (running + pending) nor its cap; a tenant's `burst` counts only while no
//!   other tenant waits.
//! - A tenant *waits* when it has pending work and has waited at least the
//!   grace; its *deficit* is what it would get (whole slots) minus what it
//!   runs. A tenant above what it would get (rounded up) is *over share*.
//! - With fewer slots than tenants (a share under one slot), a waiting tenant
//!   that runs nothing is still owed one slot, taken from a tenant running
//!   more than its (fractional) share: tenants take turns, each at least the
//!   grace plus the minimum run long, so nobody waits for a whole long job.
//! - One request per missing slot: `min(sum of deficits, sum of excesses)`,
//!   minus requests still outstanding (asked within the cool-down), each to
//!   the over-share tenant with the largest excess left, to its job that ran
//!   longest since its last yield, among those that ran at least the minimum
//!   run and were not asked within the cool-down (in this run or an earlier
//!   one: a job asked, yielded and started again is not asked again before
//!   the cool-down has passed).
//! - A tenant above its cap while another tenant waits (it burst while alone)
//!   is asked for every job above its cap (reason `burst`).
//! - With fewer than two tenants with work nobody is asked (work conserving).
//! - Share holds ([`share_holds`]): stride order counts *starts*, so a tenant
//!   whose jobs run longer than another's would be started above its share of
//!   slot-time again and again (and asked to yield again and again). While two
//!   or more tenants have pending work, each of them running at or above its
//!   share is held there: dispatch does not start it above its share (rounded
//!   up) while another tenant is in the dispatch order (`h:<tenant>` in the
//!   policy hash, a few seconds, renewed by the deciding ticks; see
//!   [`super::dispatch::limit`]). A held tenant is started again when
//!   nobody else is in the order (at once when one of its jobs ends, else at
//!   the next tick, within 250 ms). Holds are kept only
//!   while the queue runs yieldable jobs (with short jobs only, stride order
//!   alone shares slot-time out).
//!
//! Pure, no IO (layer 1): the worker's fair-yield tick reads the snapshot
//! (`broker::yields`, `shard_yield.lua`) and writes the requests and holds.

use std::collections::BTreeMap;
use std::time::Duration;

/// A queue's fair-yield settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YieldSettings {
    /// How long a tenant with pending work waits below its share before a
    /// job of an over-share tenant is asked to yield.
    pub grace: Duration,
    /// A job is never asked before it has run this long (since its last yield).
    pub min_run: Duration,
    /// A job is not asked again within this; an ask not honoured within it
    /// counts as ignored.
    pub cooldown: Duration,
    /// Off: nobody is asked (bursting still stops at the cap when others wait).
    pub enabled: bool,
}

impl YieldSettings {
    /// Grace 1 s, minimum run 1 s, cool-down 10 s, on.
    pub const DEFAULT: YieldSettings = YieldSettings {
        grace: Duration::from_secs(1),
        min_run: Duration::from_secs(1),
        cooldown: Duration::from_secs(10),
        enabled: true,
    };
}

impl Default for YieldSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One tenant of the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantLoad {
    /// The tenant (as the shard keys encode it).
    pub tenant: String,
    /// Jobs running.
    pub running: u32,
    /// Jobs pending in its list.
    pub pending: u64,
    /// Weight (> 0).
    pub weight: f64,
    /// Floor.
    pub floor: u32,
    /// Cap, if any.
    pub cap: Option<u32>,
    /// Burst (a cap while no other tenant waits), if any.
    pub burst: Option<u32>,
    /// Seconds it has been waiting (pending, runnable, not served), if it is.
    pub waited: Option<f64>,
}

/// One running yieldable job of the snapshot (iterable, or a plain job that
/// polls `cx.should_yield()`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunningJob {
    /// Its jid.
    pub jid: String,
    /// Its tenant.
    pub tenant: String,
    /// Seconds since this run started (its last yield).
    pub ran: f64,
    /// Seconds since this run was asked to yield, if it was (an
    /// outstanding request while under the cool-down).
    pub asked: Option<f64>,
    /// Seconds since any run of the job was last asked (this one or one
    /// before a yield), if one was: the job is not asked again within the
    /// cool-down of it. `None`: see `asked`.
    pub last_asked: Option<f64>,
}

/// Why a job is asked to yield (the `reason` label of the requests metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AskReason {
    /// Its tenant runs above its fair share while another waits below.
    Share,
    /// Another tenant waits below its floor.
    Floor,
    /// Its tenant runs above its cap (it burst) while another waits.
    Burst,
}

impl AskReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            AskReason::Share => "share",
            AskReason::Floor => "floor",
            AskReason::Burst => "burst",
        }
    }
}

/// A request to yield.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The job.
    pub jid: String,
    /// Its tenant.
    pub tenant: String,
    /// Why.
    pub reason: AskReason,
}

/// The running limit of `t` right now: its burst (if above its cap) while no
/// other tenant has pending work, its cap otherwise.
pub fn effective_cap(cap: Option<u32>, burst: Option<u32>, others_pending: bool) -> Option<u32> {
    match (cap, burst) {
        (Some(c), Some(b)) if b > c && !others_pending => Some(b),
        (c, _) => c,
    }
}

/// What each tenant would run of `slots` slots: floors first, then weighted
/// water-filling, each at most its demand. Fractional.
pub fn fair_allocation(tenants: &[TenantLoad], slots: f64) -> Vec<f64> {
    let demand: Vec<f64> = tenants
        .iter()
        .map(|t| {
            let others = tenants
                .iter()
                .any(|u| u.tenant != t.tenant && u.pending > 0);
            let want = f64::from(t.running) + t.pending as f64;
            match effective_cap(t.cap, t.burst, others) {
                Some(c) => want.min(f64::from(c)),
                None => want,
            }
        })
        .collect();
    let mut alloc: Vec<f64> = tenants
        .iter()
        .zip(&demand)
        .map(|(t, d)| f64::from(t.floor).min(*d))
        .collect();
    let floors: f64 = alloc.iter().sum();
    if floors > slots {
        // Floors oversubscribed: scaled down alike.
        return alloc.iter().map(|a| a * slots / floors).collect();
    }
    let mut left = slots - floors;
    for _ in 0..tenants.len() {
        let open: Vec<usize> = (0..tenants.len())
            .filter(|&i| alloc[i] + 1e-9 < demand[i])
            .collect();
        if open.is_empty() || left <= 1e-9 {
            break;
        }
        let total_w: f64 = open.iter().map(|&i| tenants[i].weight).sum();
        let mut given = 0.0;
        for &i in &open {
            let share = left * tenants[i].weight / total_w;
            let take = share.min(demand[i] - alloc[i]);
            alloc[i] += take;
            given += take;
        }
        left -= given;
    }
    alloc
}

/// The share holds to keep now (see the module doc): while two or more
/// tenants have pending work, each of them that runs at or above its share
/// is held there (its share rounded up, at least 1): dispatch does not start
/// it above that while another tenant is in the dispatch order. Empty when
/// fair yield is off or fewer than two tenants have pending work.
pub fn share_holds(tenants: &[TenantLoad], s: &YieldSettings) -> Vec<(String, u32)> {
    let pending = tenants.iter().filter(|t| t.pending > 0).count();
    if !s.enabled || pending < 2 {
        return Vec::new();
    }
    let slots: f64 = tenants.iter().map(|t| f64::from(t.running)).sum();
    let alloc = fair_allocation(tenants, slots);
    tenants
        .iter()
        .zip(&alloc)
        .filter_map(|(t, a)| {
            let limit = (a - 1e-9).ceil().max(1.0) as u32;
            (t.pending > 0 && t.running >= limit).then(|| (t.tenant.clone(), limit))
        })
        .collect()
}

/// The requests to send now (see the module doc).
pub fn decide(tenants: &[TenantLoad], jobs: &[RunningJob], s: &YieldSettings) -> Vec<Ask> {
    let with_work = tenants
        .iter()
        .filter(|t| t.running > 0 || t.pending > 0)
        .count();
    if with_work < 2 {
        return Vec::new();
    }
    let grace = s.grace.as_secs_f64();
    let waits = |t: &TenantLoad| t.pending > 0 && t.waited.is_some_and(|w| w >= grace);
    if !tenants.iter().any(waits) {
        return Vec::new();
    }
    let cooldown = s.cooldown.as_secs_f64();
    let min_run = s.min_run.as_secs_f64();
    let outstanding = |j: &RunningJob| j.asked.is_some_and(|a| a < cooldown);
    let mut asked_of: BTreeMap<&str, u32> = BTreeMap::new();
    for j in jobs.iter().filter(|j| outstanding(j)) {
        *asked_of.entry(j.tenant.as_str()).or_default() += 1;
    }
    // Candidates per tenant, longest run first.
    let mut candidates: BTreeMap<&str, Vec<&RunningJob>> = BTreeMap::new();
    for j in jobs {
        let last = match (j.asked, j.last_asked) {
            (Some(a), Some(l)) => Some(a.min(l)),
            (a, l) => a.or(l),
        };
        if j.ran >= min_run && last.is_none_or(|a| a >= cooldown) {
            candidates.entry(j.tenant.as_str()).or_default().push(j);
        }
    }
    for list in candidates.values_mut() {
        list.sort_by(|a, b| b.ran.total_cmp(&a.ran).then_with(|| a.jid.cmp(&b.jid)));
    }
    let mut out = Vec::new();
    fn take(
        candidates: &mut BTreeMap<&str, Vec<&RunningJob>>,
        tenant: &str,
        reason: AskReason,
        out: &mut Vec<Ask>,
    ) -> bool {
        let Some(list) = candidates.get_mut(tenant) else {
            return false;
        };
        if list.is_empty() {
            return false;
        }
        let j = list.remove(0);
        out.push(Ask {
            jid: j.jid.clone(),
            tenant: j.tenant.clone(),
            reason,
        });
        true
    }

    // Above the cap while another waits: every job above it.
    let mut burst_asked: BTreeMap<&str, u32> = BTreeMap::new();
    for t in tenants {
        let others_wait = tenants.iter().any(|u| u.tenant != t.tenant && waits(u));
        let Some(cap) = effective_cap(t.cap, t.burst, others_wait) else {
            continue;
        };
        if !others_wait || t.running <= cap {
            continue;
        }
        let excess =
            (t.running - cap).saturating_sub(asked_of.get(t.tenant.as_str()).copied().unwrap_or(0));
        for _ in 0..excess {
            if !take(&mut candidates, &t.tenant, AskReason::Burst, &mut out) {
                break;
            }
            *burst_asked.entry(t.tenant.as_str()).or_default() += 1;
        }
    }
    if !s.enabled {
        // Bursting still comes back down to the cap; no share requests.
        return out;
    }

    let slots: f64 = tenants.iter().map(|t| f64::from(t.running)).sum();
    let alloc = fair_allocation(tenants, slots);
    let mut deficit = 0u32;
    let mut floor_deficit = false;
    for (t, a) in tenants.iter().zip(&alloc) {
        if !waits(t) {
            continue;
        }
        let whole = (a + 1e-9).floor() as u32;
        let floor_need = t
            .floor
            .min(t.running + t.pending.min(u64::from(u32::MAX)) as u32);
        let mut need = whole.max(floor_need).saturating_sub(t.running);
        if need == 0 && t.running == 0 && *a > 1e-9 {
            // Fewer slots than tenants: a share under one slot still earns a
            // turn, so nobody waits for a whole long job (tenants take turns
            // of at least the grace plus the minimum run).
            need = 1;
        }
        if t.running < floor_need {
            floor_deficit = true;
        }
        deficit += need;
    }
    let mut excess: Vec<(u32, &str)> = tenants
        .iter()
        .zip(&alloc)
        .filter_map(|(t, a)| {
            let whole = (a - 1e-9).ceil().max(0.0) as u32;
            let pending_asks = asked_of.get(t.tenant.as_str()).copied().unwrap_or(0)
                + burst_asked.get(t.tenant.as_str()).copied().unwrap_or(0);
            let mut over = t.running.saturating_sub(whole);
            if over == 0 && f64::from(t.running) > a + 1e-9 {
                // Above a share of under one slot: may give a turn.
                over = 1;
            }
            let over = over.saturating_sub(pending_asks);
            (over > 0).then_some((over, t.tenant.as_str()))
        })
        .collect();
    let outstanding_total: u32 = asked_of.values().sum::<u32>() + burst_asked.values().sum::<u32>();
    let total_excess: u32 = excess.iter().map(|(e, _)| e).sum();
    let mut wanted = deficit.saturating_sub(outstanding_total).min(total_excess);
    let reason = if floor_deficit {
        AskReason::Floor
    } else {
        AskReason::Share
    };
    while wanted > 0 {
        // The tenant with the largest excess left (ties: by name).
        excess.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        let Some(pos) = excess
            .iter()
            .position(|(e, t)| *e > 0 && candidates.get(t).is_some_and(|l| !l.is_empty()))
        else {
            break;
        };
        let tenant = excess[pos].1;
        take(&mut candidates, tenant, reason, &mut out);
        excess[pos].0 -= 1;
        wanted -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str, running: u32, pending: u64, waited: Option<f64>) -> TenantLoad {
        TenantLoad {
            tenant: name.into(),
            running,
            pending,
            weight: 1.0,
            floor: 0,
            cap: None,
            burst: None,
            waited,
        }
    }

    fn job(jid: &str, tenant: &str, ran: f64) -> RunningJob {
        RunningJob {
            jid: jid.into(),
            tenant: tenant.into(),
            ran,
            asked: None,
            last_asked: None,
        }
    }

    fn a_jobs(n: usize) -> Vec<RunningJob> {
        (0..n)
            .map(|i| job(&format!("a{i}"), "a", 10.0 + i as f64))
            .collect()
    }

    const S: YieldSettings = YieldSettings::DEFAULT;

    #[test]
    fn thron_one_newcomer_gets_one_slot_from_the_longest_run() {
        let t = [tenant("a", 4, 100, Some(5.0)), tenant("b", 0, 1, Some(1.5))];
        let asks = decide(&t, &a_jobs(4), &S);
        assert_eq!(
            asks,
            vec![Ask {
                jid: "a3".into(),
                tenant: "a".into(),
                reason: AskReason::Share
            }]
        );
    }

    #[test]
    fn a_lone_tenant_is_never_asked() {
        let t = [tenant("a", 4, 100, Some(60.0))];
        assert!(decide(&t, &a_jobs(4), &S).is_empty());
        let t = [tenant("a", 4, 100, Some(60.0)), tenant("b", 0, 0, None)];
        assert!(decide(&t, &a_jobs(4), &S).is_empty());
    }

    #[test]
    fn nobody_is_asked_within_the_grace() {
        let t = [tenant("a", 4, 100, None), tenant("b", 0, 1, Some(0.5))];
        assert!(decide(&t, &a_jobs(4), &S).is_empty());
    }

    #[test]
    fn young_runs_and_recent_asks_are_left_alone() {
        let t = [tenant("a", 4, 100, None), tenant("b", 0, 3, Some(2.0))];
        let mut jobs = a_jobs(4);
        jobs[0].ran = 0.5; // below the minimum run
        jobs[1].asked = Some(2.0); // outstanding: counts as one of b's slots
        let asks = decide(&t, &jobs, &S);
        // b would get 2: one outstanding, one new, from the longest run.
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].jid, "a3");
        // An ask past the cool-down is not outstanding any more (ignored).
        jobs[1].asked = Some(11.0);
        let asks: Vec<String> = decide(&t, &jobs, &S).into_iter().map(|a| a.jid).collect();
        assert_eq!(asks, vec!["a3", "a2"]);
    }

    #[test]
    fn a_job_asked_in_an_earlier_run_waits_out_the_cool_down() {
        let t = [tenant("a", 2, 10, None), tenant("b", 0, 2, Some(2.0))];
        let mut jobs = a_jobs(2);
        // a1 yielded 4 s ago and runs again: not asked before 10 s.
        jobs[1].last_asked = Some(4.0);
        let asks: Vec<String> = decide(&t, &jobs, &S).into_iter().map(|a| a.jid).collect();
        assert_eq!(asks, vec!["a0"]);
        jobs[1].last_asked = Some(10.5);
        let asks: Vec<String> = decide(&t, &jobs, &S).into_iter().map(|a| a.jid).collect();
        assert_eq!(asks, vec!["a1"]);
    }

    #[test]
    fn holds_keep_each_tenant_with_pending_work_at_its_share() {
        let mut t = [tenant("a", 3, 50, None), tenant("b", 1, 50, None)];
        t[0].weight = 3.0;
        assert_eq!(
            share_holds(&t, &S),
            vec![("a".to_owned(), 3), ("b".to_owned(), 1)]
        );
        // Below its share: not held (it is the one to start).
        t[0].running = 2;
        assert_eq!(share_holds(&t, &S), vec![("b".to_owned(), 1)]);
        // A lone tenant with pending work, or fair yield off: no holds.
        t[1].pending = 0;
        assert!(share_holds(&t, &S).is_empty());
        t[1].pending = 50;
        let off = YieldSettings {
            enabled: false,
            ..S
        };
        assert!(share_holds(&t, &off).is_empty());
        // Under one slot of share: held at 1, never 0.
        let t: Vec<TenantLoad> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| tenant(n, u32::from(*n != "e"), 5, None))
            .collect();
        assert!(share_holds(&t, &S).iter().all(|(_, l)| *l == 1));
    }

    #[test]
    fn one_request_per_waiting_slot_no_more() {
        // Two waiting tenants of one job each: two asks; a third tenant at its share is left.
        let t = [
            tenant("a", 6, 50, None),
            tenant("b", 0, 1, Some(3.0)),
            tenant("c", 0, 1, Some(3.0)),
            tenant("d", 2, 0, None),
        ];
        let mut jobs = a_jobs(6);
        jobs.push(job("d0", "d", 100.0));
        jobs.push(job("d1", "d", 100.0));
        let asks = decide(&t, &jobs, &S);
        assert_eq!(asks.len(), 2, "{asks:?}");
        assert!(asks.iter().all(|a| a.tenant == "a"));
    }

    #[test]
    fn weights_decide_the_shares() {
        // 3:1 over 4 slots: a gets 3, b 1. a at 3 is within its share.
        let mut t = [tenant("a", 3, 50, None), tenant("b", 1, 50, Some(9.0))];
        t[0].weight = 3.0;
        let mut jobs = a_jobs(3);
        jobs.push(job("b0", "b", 50.0));
        assert!(decide(&t, &jobs, &S).is_empty());
        // b running 2 and a waiting: b over its 1.
        t[0].running = 2;
        t[0].waited = Some(2.0);
        t[1].running = 2;
        t[1].waited = None;
        jobs.truncate(2);
        jobs.push(job("b0", "b", 50.0));
        jobs.push(job("b1", "b", 60.0));
        let asks = decide(&t, &jobs, &S);
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].jid, "b1");
    }

    #[test]
    fn a_floor_is_served_first() {
        // b's floor 2 over 4 slots with weight 1:1: share would be 2 anyway;
        // with a weight of 10 for a, the floor still gives b 2.
        let mut t = [tenant("a", 4, 50, None), tenant("b", 0, 5, Some(2.0))];
        t[0].weight = 10.0;
        t[1].floor = 2;
        let asks = decide(&t, &a_jobs(4), &S);
        assert_eq!(asks.len(), 2);
        assert!(asks.iter().all(|a| a.reason == AskReason::Floor));
    }

    #[test]
    fn bursting_comes_back_to_the_cap_when_another_waits() {
        let mut t = [tenant("a", 4, 50, None), tenant("b", 0, 10, Some(1.2))];
        t[0].cap = Some(2);
        t[0].burst = Some(4);
        let asks = decide(&t, &a_jobs(4), &S);
        assert_eq!(asks.len(), 2);
        assert!(asks.iter().all(|a| a.reason == AskReason::Burst));
        // Alone, a may run its burst.
        let alone = [t[0].clone()];
        assert!(decide(&alone, &a_jobs(4), &S).is_empty());
        // Off: share requests stop, the burst still comes down.
        let off = YieldSettings {
            enabled: false,
            ..S
        };
        assert_eq!(decide(&t, &a_jobs(4), &off).len(), 2);
        t[0].burst = None;
        t[0].cap = None;
        assert!(decide(&t, &a_jobs(4), &off).is_empty());
    }

    #[test]
    fn with_fewer_slots_than_tenants_they_take_turns() {
        // One slot: b's share is half a slot; it still gets a turn.
        let t = [tenant("a", 1, 0, None), tenant("b", 0, 1, Some(1.0))];
        let asks = decide(&t, &a_jobs(1), &S);
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].jid, "a0");
        // Five tenants on four slots: the one running nothing gets a turn
        // from one of the others.
        let mut t: Vec<TenantLoad> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| tenant(n, 1, 10, None))
            .collect();
        t.push(tenant("e", 0, 10, Some(2.0)));
        let mut jobs: Vec<RunningJob> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| job(&format!("{n}0"), n, 5.0))
            .collect();
        assert_eq!(decide(&t, &jobs, &S).len(), 1);
        // Next turn: a waits, e's young run is left alone.
        t[4].running = 1;
        t[4].waited = None;
        t[0].running = 0;
        t[0].waited = Some(2.0);
        jobs[0] = job("e0", "e", 0.5);
        let asks = decide(&t, &jobs, &S);
        assert_eq!(asks.len(), 1);
        assert_ne!(asks[0].tenant, "e", "{asks:?}");
    }

    #[test]
    fn effective_cap_follows_the_others() {
        assert_eq!(effective_cap(Some(2), Some(5), false), Some(5));
        assert_eq!(effective_cap(Some(2), Some(5), true), Some(2));
        assert_eq!(effective_cap(Some(2), Some(1), false), Some(2));
        assert_eq!(effective_cap(None, Some(5), false), None);
    }

    #[test]
    fn allocation_is_weighted_water_filling_within_demand() {
        let mut t = [tenant("a", 4, 100, None), tenant("b", 0, 1, None)];
        assert_eq!(fair_allocation(&t, 4.0), vec![3.0, 1.0]);
        t[1].pending = 10;
        t[1].weight = 3.0;
        assert_eq!(fair_allocation(&t, 4.0), vec![1.0, 3.0]);
    }
}
