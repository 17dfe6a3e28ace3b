//! The Markdown report: a table per scenario, then the weighted-shard goals.

use std::fmt::Write as _;

use crate::metrics::{Metrics, of};
use crate::scenario::{Id, Mode, Scenario};

/// Share ratio, throughput and small-tenant p99 goals of weighted shards.
pub(crate) const GOAL_SHARE: f64 = 0.95;
pub(crate) const GOAL_THROUGHPUT: f64 = 0.95;
pub(crate) const GOAL_SMALL_P99: f64 = 1.5;

fn fmt_ms(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("–".into(), |x| format!("{x:.digits$}"))
}

fn group_p99(m: &Metrics, group: &str) -> Option<f64> {
    m.groups.iter().find(|g| g.group == group).map(|g| g.p99_ms)
}

/// The floor of a small tenant's p99 wait under a work-conserving scheduler
/// with `c` slots kept busy by a greedy tenant (ms): the idle baseline's p99,
/// plus the p99 of the time until the first of the `c` busy slots frees. A
/// busy slot's remaining time is taken as uniform over a job's time in a slot
/// under load, `S` = FIFO's makespan × c ÷ the jobs it ran (sleep plus
/// overhead; per run), so P(none frees within x) = (1 − x/S)^c and the p99 is
/// S × (1 − 0.01^(1/c)): 0.37 S at c = 10. No scheduler that starts a waiting
/// job only when a slot frees can do better on average over the run.
pub(crate) fn small_floor_ms(ms: &[Metrics], concurrency: usize) -> Option<f64> {
    let idle = group_p99(of(ms, Mode::Idle)?, "small")?;
    let fifo = of(ms, Mode::Fifo)?;
    if fifo.ran == 0 || !fifo.makespan.is_finite() {
        return None;
    }
    let c = concurrency.max(1) as f64;
    // `ran` adds up every run; `makespan` is the median run's.
    let per_run = fifo.ran as f64 / fifo.reps.max(1) as f64;
    let slot_ms = fifo.makespan * 1000.0 * c / per_run;
    Some(idle + slot_ms * (1.0 - 0.01f64.powf(1.0 / c)))
}

/// Small-tenant p99 ÷ the floor of a work-conserving scheduler.
pub(crate) fn small_vs_floor(ms: &[Metrics], m: &Metrics, concurrency: usize) -> Option<f64> {
    Some(group_p99(m, "small")? / small_floor_ms(ms, concurrency)?)
}

/// Small-tenant p99 ÷ the idle baseline's.
pub(crate) fn small_vs_idle(ms: &[Metrics], m: &Metrics) -> Option<f64> {
    let idle = group_p99(of(ms, Mode::Idle)?, "small")?;
    Some(group_p99(m, "small")? / idle)
}

pub(crate) fn throughput_vs_fifo(m: &Metrics) -> Option<f64> {
    m.throughput_vs_fifo
}

/// `0.95 [0.90–1.02]`.
fn with_range(x: Option<f64>, range: Option<[f64; 2]>, reps: usize) -> String {
    match (x, range) {
        (Some(x), Some([lo, hi])) if reps > 1 => format!("{x:.2} [{lo:.2}–{hi:.2}]"),
        (Some(x), _) => format!("{x:.2}"),
        _ => "–".into(),
    }
}

/// Scripts over 1 ms: `3 (1 + 2) [0–5]`.
fn scripts(m: &Metrics) -> String {
    let [lo, hi] = m.slow_scripts_range;
    let range = if m.reps > 1 {
        format!(" [{lo}–{hi}]")
    } else {
        String::new()
    };
    format!(
        "{} ({} + {}){range}",
        m.slow.scripts(),
        m.slow.push_scripts,
        m.slow.worker_scripts
    )
}

pub(crate) fn scenario_table(
    s: &Scenario,
    ms: &[Metrics],
    chart: &str,
    concurrency: usize,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### {}\n", s.title);
    let _ = writeln!(o, "{}\n", s.what);
    let _ = writeln!(
        o,
        "![{}: jobs started over time per mode]({chart})\n",
        s.title
    );
    let groups: Vec<String> = ms
        .iter()
        .flat_map(|m| m.groups.iter().map(|g| g.group.clone()))
        .fold(Vec::new(), |mut v, g| {
            if !v.contains(&g) {
                v.push(g);
            }
            v
        });
    let mut head = String::from("| mode | share ÷ fair, worst (tenant) | Jain |");
    for g in &groups {
        let _ = write!(head, " {g} wait p50 / p99 ms |");
    }
    head.push_str(" makespan s | throughput ÷ FIFO |");
    match s.id {
        Id::Greedy => head.push_str(" small p99 ÷ idle | small p99 ÷ floor |"),
        Id::Floor => head.push_str(" f ≥ 2 performing | f ≥ 2 dispatched |"),
        _ => {}
    }
    head.push_str(" scripts > 1 ms (push + worker) [range] | slowest ms | jobs ran |");
    let cols = head.matches('|').count() - 1;
    let _ = writeln!(o, "{head}");
    let _ = writeln!(o, "|{}", "---|".repeat(cols));
    for m in ms {
        let share = match (m.worst_ratio, &m.worst_tenant) {
            (Some(r), Some(t)) => format!("{r:.2} ({t})"),
            _ => "n/a".into(),
        };
        let mut row = format!("| {} | {share} | {} |", m.label, opt(m.jain, 2));
        for g in &groups {
            match m.groups.iter().find(|x| &x.group == g) {
                Some(x) => {
                    let _ = write!(row, " {} / {} |", fmt_ms(x.p50_ms), fmt_ms(x.p99_ms));
                }
                None => row.push_str(" – |"),
            }
        }
        let _ = write!(
            row,
            " {:.2} | {} |",
            m.makespan,
            with_range(m.throughput_vs_fifo, m.throughput_vs_fifo_range, m.reps)
        );
        match s.id {
            Id::Greedy => {
                let _ = write!(
                    row,
                    " {} | {} |",
                    opt(small_vs_idle(ms, m), 2),
                    opt(small_vs_floor(ms, m, concurrency), 2)
                );
            }
            Id::Floor => {
                let pct = |x: Option<f64>| x.map_or("–".into(), |f| format!("{:.0}%", f * 100.0));
                let _ = write!(
                    row,
                    " {} | {} |",
                    pct(m.floor_held),
                    pct(m.floor_dispatched)
                );
            }
            _ => {}
        }
        let _ = write!(
            row,
            " {} | {:.1} | {}/{} |",
            scripts(m),
            m.slow.max_us as f64 / 1000.0,
            m.ran,
            m.expected
        );
        let _ = writeln!(o, "{row}");
    }
    let _ = writeln!(o);
    let notes: Vec<String> = ms
        .iter()
        .filter_map(|m| {
            m.greedy_push_secs
                .map(|g| format!("{} {g:.2} s", m.label))
                .or_else(|| {
                    (m.prepush_secs > 0.0).then(|| format!("{} {:.2} s", m.label, m.prepush_secs))
                })
        })
        .collect();
    let what = if s.greedy_child {
        "the greedy `push_bulk` took"
    } else {
        "backlog pushes took"
    };
    let contention: Vec<String> = ms
        .iter()
        .filter_map(|m| {
            m.contention
                .map(|c| format!("{} {:.2} s / {} jobs", m.label, c[1], m.contention_jobs))
        })
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(o, "- {what}: {}", notes.join(", "));
    }
    if !contention.is_empty() {
        let _ = writeln!(o, "- contention lasted: {}", contention.join(", "));
    }
    if s.id == Id::Greedy
        && let Some(f) = small_floor_ms(ms, concurrency)
    {
        let _ = writeln!(
            o,
            "- small p99 floor (work-conserving): {f:.2} ms = idle p99 + the p99 time until the first of {concurrency} busy slots frees"
        );
    }
    let _ = writeln!(o);
    o
}

/// A goal's verdict: `0.97 ✅`.
fn verdict(x: Option<f64>, ok: impl Fn(f64) -> bool, digits: usize) -> String {
    match x {
        Some(v) => format!("{v:.digits$} {}", if ok(v) { "✅" } else { "❌" }),
        None => "n/a".into(),
    }
}

pub(crate) fn goals(all: &[(Scenario, Vec<Metrics>)], concurrency: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "### Goals, weighted shards\n\n| scenario | share ÷ fair ≥ {GOAL_SHARE} | throughput ≥ {GOAL_THROUGHPUT}× FIFO | 0 scripts > 1 ms in every run: median (push + worker) [range] | FIFO's, for scale | small p99 ≤ {GOAL_SMALL_P99}× the floor (÷ idle) |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for (s, ms) in all {
        let Some(m) = of(ms, Mode::ShardWeighted) else {
            continue;
        };
        let fifo_scripts = of(ms, Mode::Fifo).map_or("–".into(), scripts);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} {} | {fifo_scripts} | {} |",
            s.title,
            verdict(m.worst_ratio, |v| v >= GOAL_SHARE, 2),
            verdict(throughput_vs_fifo(m), |v| v >= GOAL_THROUGHPUT, 3),
            scripts(m),
            if m.slow_scripts_range[1] == 0 {
                "✅"
            } else {
                "❌"
            },
            if s.id == Id::Greedy {
                format!(
                    "{} ({})",
                    verdict(
                        small_vs_floor(ms, m, concurrency),
                        |v| v <= GOAL_SMALL_P99,
                        2
                    ),
                    opt(small_vs_idle(ms, m), 2)
                )
            } else {
                "–".into()
            },
        );
    }
    let _ = writeln!(o);
    o
}
