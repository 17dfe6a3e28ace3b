//! Share during contention, Jain's index, waits and throughput of one run.
//!
//! Contention is the interval from the first job start to the moment the first
//! backlogged tenant drains (its last job starts). A backlogged tenant that
//! still had jobs waiting then was backlogged throughout: its demand is
//! unbounded. Any other tenant's *demand* is its jobs enqueued by the end of
//! contention. Its *fair share* is the weighted max-min fair split of all the
//! jobs started during contention (water-filling: nobody is owed more than its
//! demand, the rest is split by weight; a floor `f` at concurrency `c`
//! guarantees at least `f / c` of them); its *share ratio* is jobs started ÷
//! fair share. Tenants owed under half a job are left out.

use std::collections::BTreeMap;

use fairjob_tests::percentile;
use serde::Serialize;

use crate::run::{Run, Slow};
use crate::scenario::{Mode, Scenario};

#[derive(Debug, Clone, Serialize)]
pub(crate) struct GroupWait {
    pub(crate) group: String,
    pub(crate) jobs: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct TenantStat {
    pub(crate) tenant: String,
    pub(crate) jobs: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Jobs started during contention.
    pub(crate) started: usize,
    /// None: backlogged throughout contention (unbounded).
    pub(crate) demand: Option<usize>,
    pub(crate) fair: f64,
    pub(crate) ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Metrics {
    pub(crate) mode: &'static str,
    pub(crate) label: &'static str,
    pub(crate) ran: usize,
    pub(crate) expected: usize,
    /// Contention interval, seconds after the first start.
    pub(crate) contention: Option<[f64; 2]>,
    /// Jobs started during contention.
    pub(crate) contention_jobs: usize,
    pub(crate) worst_ratio: Option<f64>,
    pub(crate) worst_tenant: Option<String>,
    pub(crate) jain: Option<f64>,
    pub(crate) groups: Vec<GroupWait>,
    pub(crate) tenants: Vec<TenantStat>,
    /// First start to last end, s.
    pub(crate) makespan: f64,
    pub(crate) jobs_per_sec: f64,
    pub(crate) slow: Slow,
    /// Floor scenario: the fraction of its contention time a floored tenant
    /// had at least its floor of jobs performing.
    pub(crate) floor_held: Option<f64>,
    /// The same with its `running` count in Redis (dispatched, not yet
    /// acknowledged), sampled every 2 ms: tenant-sharded modes only.
    pub(crate) floor_dispatched: Option<f64>,
    pub(crate) prepush_secs: f64,
    pub(crate) greedy_push_secs: Option<f64>,
    /// Repetitions this is the median of (figure by figure).
    pub(crate) reps: usize,
    /// Median and range over the repetitions of jobs/s ÷ the same repetition's FIFO jobs/s.
    pub(crate) throughput_vs_fifo: Option<f64>,
    pub(crate) throughput_vs_fifo_range: Option<[f64; 2]>,
    /// Range over the repetitions of the count of scripts over 1 ms.
    pub(crate) slow_scripts_range: [u64; 2],
    /// Per group: (s after the first start, fraction of the group's jobs
    /// started), for the chart.
    #[serde(skip)]
    pub(crate) curves: Vec<(String, Vec<(f64, f64)>)>,
}

/// Weighted max-min fair split of `total` over `demand`, with lower bounds.
pub(crate) fn fair_split(total: f64, demand: &[f64], weight: &[f64], lower: &[f64]) -> Vec<f64> {
    let alloc = |lam: f64| -> Vec<f64> {
        demand
            .iter()
            .zip(weight)
            .zip(lower)
            .map(|((d, w), l)| d.min((lam * w).max(*l)))
            .collect()
    };
    if demand.iter().sum::<f64>() <= total {
        return demand.to_vec();
    }
    // Some demand is unbounded or the demands exceed the total: raise λ until
    // the split covers the total, then bisect.
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while alloc(hi).iter().sum::<f64>() < total {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if alloc(mid).iter().sum::<f64>() < total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    alloc(hi)
}

pub(crate) fn jain(x: &[f64]) -> Option<f64> {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && s2 > 0.0).then(|| s * s / (x.len() as f64 * s2))
}

fn pcts(mut w: Vec<f64>) -> (f64, f64) {
    w.sort_by(f64::total_cmp);
    (percentile(&w, 50.0), percentile(&w, 99.0))
}

pub(crate) fn measure(s: &Scenario, r: &Run, concurrency: usize) -> Metrics {
    let recs = &r.records;
    let first = recs.iter().map(|r| r.start).fold(f64::INFINITY, f64::min);
    let last_end = recs.iter().map(|r| r.end).fold(f64::NEG_INFINITY, f64::max);
    let makespan = (last_end - first).max(1e-9);

    let mut by_tenant: BTreeMap<&str, Vec<&crate::jobs::Rec>> = BTreeMap::new();
    for rec in recs {
        by_tenant.entry(rec.tenant.as_str()).or_default().push(rec);
    }
    // The end of contention: the first backlogged tenant's last start.
    let end = s
        .tenants
        .iter()
        .filter_map(|t| by_tenant.get(t.name.as_str()))
        .map(|v| v.iter().map(|r| r.start).fold(f64::NEG_INFINITY, f64::max))
        .fold(f64::INFINITY, f64::min);
    let contended = by_tenant.len() >= 2 && end.is_finite();

    let mut tenants = Vec::new();
    let (mut names, mut started, mut demand, mut weight, mut lower) =
        (vec![], vec![], vec![], vec![], vec![]);
    for (t, v) in &by_tenant {
        let (p50, p99) = pcts(v.iter().map(|r| (r.start - r.enq) * 1000.0).collect());
        let st = v.iter().filter(|r| r.start <= end).count();
        let last_start = v.iter().map(|r| r.start).fold(f64::NEG_INFINITY, f64::max);
        let backlogged = s.tenants.iter().any(|x| x.name == *t) && last_start >= end;
        let de = (!backlogged).then(|| v.iter().filter(|r| r.enq <= end).count());
        let (w, f) = s.policy(t);
        names.push(*t);
        started.push(st as f64);
        demand.push(de.map_or(f64::INFINITY, |d| d as f64));
        weight.push(w);
        lower.push(f64::from(f) / concurrency as f64);
        tenants.push(TenantStat {
            tenant: (*t).to_owned(),
            jobs: v.len(),
            p50_ms: p50,
            p99_ms: p99,
            started: st,
            demand: de,
            fair: 0.0,
            ratio: None,
        });
    }
    let total: f64 = started.iter().sum();
    let (mut worst_ratio, mut worst_tenant, mut jain_idx, mut contention) =
        (None, None, None, None);
    let (mut floor_held, mut floor_dispatched) = (None, None);
    if contended {
        let lower: Vec<f64> = lower.iter().map(|l| l.min(1.0) * total).collect();
        let fair = fair_split(total, &demand, &weight, &lower);
        let mut ratios = Vec::new();
        for (i, t) in tenants.iter_mut().enumerate() {
            t.fair = fair[i];
            if fair[i] >= 0.5 {
                let x = started[i] / fair[i];
                t.ratio = Some(x);
                ratios.push(x);
                if worst_ratio.is_none_or(|w| x < w) {
                    worst_ratio = Some(x);
                    worst_tenant = Some(names[i].to_owned());
                }
            }
        }
        jain_idx = jain(&ratios);
        contention = Some([0.0, end - first]);
        // Floored tenants: time at or above their floor while they had jobs waiting.
        for t in s.tenants.iter().filter(|t| t.floor > 0) {
            let Some(v) = by_tenant.get(t.name.as_str()) else {
                continue;
            };
            let stop = end.min(v.iter().map(|r| r.start).fold(f64::NEG_INFINITY, f64::max));
            let mut ev: Vec<(f64, i32)> =
                v.iter().flat_map(|r| [(r.start, 1), (r.end, -1)]).collect();
            ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (mut running, mut at, mut held) = (0i32, first, 0.0);
            for (time, d) in ev {
                let time = time.clamp(first, stop);
                if running >= t.floor as i32 {
                    held += time - at;
                }
                at = time;
                running += d;
            }
            if stop > first {
                floor_held = Some(held / (stop - first));
            }
            let during: Vec<u32> = r
                .floor_samples
                .iter()
                .filter(|(at, _)| *at >= first && *at <= stop)
                .map(|(_, n)| *n)
                .collect();
            if !during.is_empty() {
                let ok = during.iter().filter(|n| **n >= t.floor).count();
                floor_dispatched = Some(ok as f64 / during.len() as f64);
            }
        }
    }

    let mut groups = Vec::new();
    let mut curves = Vec::new();
    for g in s.groups() {
        let v: Vec<&crate::jobs::Rec> =
            recs.iter().filter(|r| s.group_of(&r.tenant) == g).collect();
        if v.is_empty() {
            continue;
        }
        let (p50, p99) = pcts(v.iter().map(|r| (r.start - r.enq) * 1000.0).collect());
        groups.push(GroupWait {
            group: g.to_owned(),
            jobs: v.len(),
            p50_ms: p50,
            p99_ms: p99,
        });
        let mut starts: Vec<f64> = v.iter().map(|r| r.start - first).collect();
        starts.sort_by(f64::total_cmp);
        let n = starts.len() as f64;
        let step = starts.len().div_ceil(800).max(1);
        let mut pts = vec![(0.0, 0.0)];
        for (i, x) in starts.iter().enumerate() {
            if i % step == 0 || i + 1 == starts.len() {
                pts.push((*x, (i + 1) as f64 / n));
            }
        }
        curves.push((g.to_owned(), pts));
    }

    Metrics {
        mode: r.mode.key(),
        label: r.mode.label(),
        ran: recs.len(),
        expected: r.expected,
        contention,
        contention_jobs: if contended { total as usize } else { 0 },
        worst_ratio,
        worst_tenant,
        jain: jain_idx,
        groups,
        tenants,
        makespan,
        jobs_per_sec: recs.len() as f64 / makespan,
        slow: r.slow.clone(),
        floor_held,
        floor_dispatched,
        prepush_secs: r.prepush_secs,
        greedy_push_secs: r.greedy_push_secs,
        reps: 1,
        throughput_vs_fifo: None,
        throughput_vs_fifo_range: None,
        slow_scripts_range: [r.slow.scripts(), r.slow.scripts()],
        curves,
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| (v[(n - 1) / 2] + v[n / 2]) / 2.0)
}

fn median_u(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    let n = v.len();
    (v[(n - 1) / 2] + v[n / 2]).div_ceil(2)
}

/// One mode's repetitions (in order) into one row: each figure the median of
/// its repetitions; the worst tenant, per-tenant figures and chart curves are
/// those of the repetition with the median share ratio. `fifo` holds the FIFO
/// repetitions, for the throughput ratios.
pub(crate) fn aggregate(reps: Vec<Metrics>, fifo: &[Metrics]) -> Metrics {
    let ratios: Vec<f64> = reps
        .iter()
        .zip(fifo)
        .map(|(m, f)| m.jobs_per_sec / f.jobs_per_sec)
        .collect();
    let mut by_ratio: Vec<usize> = (0..reps.len()).collect();
    by_ratio.sort_by(|a, b| {
        let k = |i: &usize| reps[*i].worst_ratio.unwrap_or(f64::NAN);
        k(a).total_cmp(&k(b))
    });
    let mid = by_ratio[(by_ratio.len() - 1) / 2];
    let f = |g: &dyn Fn(&Metrics) -> f64| median(reps.iter().map(g).collect());
    let fo = |g: &dyn Fn(&Metrics) -> Option<f64>| median(reps.iter().filter_map(g).collect());
    let scripts: Vec<u64> = reps.iter().map(|m| m.slow.scripts()).collect();
    let mut out = reps[mid].clone();
    out.reps = reps.len();
    out.ran = reps.iter().map(|m| m.ran).sum();
    out.expected = reps.iter().map(|m| m.expected).sum();
    out.worst_ratio = out.worst_ratio.and(fo(&|m| m.worst_ratio));
    out.jain = out.jain.and(fo(&|m| m.jain));
    for g in &mut out.groups {
        let of_group = |m: &Metrics| m.groups.iter().find(|x| x.group == g.group).cloned();
        g.p50_ms = fo(&|m| of_group(m).map(|x| x.p50_ms)).unwrap_or(f64::NAN);
        g.p99_ms = fo(&|m| of_group(m).map(|x| x.p99_ms)).unwrap_or(f64::NAN);
    }
    out.makespan = f(&|m| m.makespan).unwrap_or(f64::NAN);
    out.jobs_per_sec = f(&|m| m.jobs_per_sec).unwrap_or(f64::NAN);
    out.floor_held = out.floor_held.and(fo(&|m| m.floor_held));
    out.floor_dispatched = out.floor_dispatched.and(fo(&|m| m.floor_dispatched));
    out.contention = out
        .contention
        .map(|c| [c[0], fo(&|m| m.contention.map(|c| c[1])).unwrap_or(c[1])]);
    out.contention_jobs =
        median_u(reps.iter().map(|m| m.contention_jobs as u64).collect()) as usize;
    out.prepush_secs = f(&|m| m.prepush_secs).unwrap_or(0.0);
    out.greedy_push_secs = fo(&|m| m.greedy_push_secs);
    out.slow = Slow {
        push_scripts: median_u(reps.iter().map(|m| m.slow.push_scripts).collect()),
        worker_scripts: median_u(reps.iter().map(|m| m.slow.worker_scripts).collect()),
        other: median_u(reps.iter().map(|m| m.slow.other).collect()),
        max_us: reps.iter().map(|m| m.slow.max_us).max().unwrap_or(0),
    };
    out.slow_scripts_range = [
        scripts.iter().copied().min().unwrap_or(0),
        scripts.iter().copied().max().unwrap_or(0),
    ];
    if !fifo.is_empty() {
        out.throughput_vs_fifo = median(ratios.clone());
        out.throughput_vs_fifo_range = Some([
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ]);
    }
    out
}

/// A mode's metrics in a scenario's list.
pub(crate) fn of(ms: &[Metrics], mode: Mode) -> Option<&Metrics> {
    ms.iter().find(|m| m.mode == mode.key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_filling() {
        let f = fair_split(10.0, &[100.0, 100.0, 1.0], &[3.0, 1.0, 1.0], &[0.0; 3]);
        assert!(
            (f[2] - 1.0).abs() < 1e-6 && (f[0] - 6.75).abs() < 1e-6,
            "{f:?}"
        );
        let inf = f64::INFINITY;
        let f = fair_split(100.0, &[inf, inf, 1e3], &[1.0; 3], &[50.0, 0.0, 0.0]);
        assert!(
            (f[0] - 50.0).abs() < 1e-6 && (f[1] - 25.0).abs() < 1e-6,
            "{f:?}"
        );
    }
}
