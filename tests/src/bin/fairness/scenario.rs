//! The scenarios and the modes they run in.

use crate::Args;
use crate::jobs::Kind;

/// The name of the greedy tenant (greedy + small).
pub(crate) const GREEDY: &str = "greedy";
/// The trickle tenant's name.
pub(crate) const TRICKLE: &str = "trickle";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Greedy + small only: the small tenants alone (plain queue).
    Idle,
    Fifo,
    Reroute,
    /// Tenant shards, every tenant weight 1 (round robin).
    ShardRr,
    /// Tenant shards with the scenario's weights and floors.
    ShardWeighted,
}

impl Mode {
    pub(crate) const ALL: [Mode; 5] = [
        Mode::Idle,
        Mode::Fifo,
        Mode::Reroute,
        Mode::ShardRr,
        Mode::ShardWeighted,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Idle => "idle baseline",
            Mode::Fifo => "FIFO",
            Mode::Reroute => "reroute",
            Mode::ShardRr => "shards, equal weights",
            Mode::ShardWeighted => "shards, weighted",
        }
    }

    pub(crate) fn key(self) -> &'static str {
        match self {
            Mode::Idle => "idle",
            Mode::Fifo => "fifo",
            Mode::Reroute => "reroute",
            Mode::ShardRr => "shards_rr",
            Mode::ShardWeighted => "shards_weighted",
        }
    }

    pub(crate) fn kind(self) -> Kind {
        match self {
            Mode::Idle | Mode::Fifo => Kind::Plain,
            Mode::Reroute => Kind::Rules,
            Mode::ShardRr | Mode::ShardWeighted => Kind::Shard,
        }
    }
}

/// A tenant with a backlog, pushed before the run (or, for the greedy tenant,
/// by a separate process once the worker runs).
#[derive(Debug, Clone)]
pub(crate) struct Tenant {
    pub(crate) name: String,
    /// Its row in the wait columns and its line in the chart.
    pub(crate) group: &'static str,
    pub(crate) weight: f64,
    pub(crate) floor: u32,
    pub(crate) backlog: u64,
    /// Job classes its backlog is spread over (1, or 10 for the sybil).
    pub(crate) classes: usize,
}

/// Tenants that enqueue one job at a time during the run.
#[derive(Debug, Clone)]
pub(crate) enum Stream {
    /// `tenants` small tenants × `jobs` each, spread evenly over `spread` s.
    Small {
        tenants: u64,
        jobs: u64,
        spread: f64,
    },
    /// One job every `every` s until `until` of the backlog has started.
    Trickle { every: f64, until: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Id {
    Greedy,
    Balanced,
    Skew,
    Weighted,
    Trickle,
    Sybil,
    HeavyIdle,
    Floor,
}

#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(crate) id: Id,
    pub(crate) key: &'static str,
    pub(crate) title: &'static str,
    pub(crate) what: String,
    pub(crate) tenants: Vec<Tenant>,
    pub(crate) stream: Option<Stream>,
    /// The first tenant's backlog is pushed by another process after the worker started.
    pub(crate) greedy_child: bool,
}

impl Scenario {
    pub(crate) fn modes(&self) -> Vec<Mode> {
        Mode::ALL
            .into_iter()
            .filter(|m| *m != Mode::Idle || self.id == Id::Greedy)
            .collect()
    }

    /// The scenario's weight and floor of `tenant` (streaming tenants: 1, 0).
    pub(crate) fn policy(&self, tenant: &str) -> (f64, u32) {
        self.tenants
            .iter()
            .find(|t| t.name == tenant)
            .map_or((1.0, 0), |t| (t.weight, t.floor))
    }

    pub(crate) fn group_of(&self, tenant: &str) -> &'static str {
        if let Some(t) = self.tenants.iter().find(|t| t.name == tenant) {
            return t.group;
        }
        match self.stream {
            Some(Stream::Small { .. }) => "small",
            _ => "trickle",
        }
    }

    /// Groups in display order.
    pub(crate) fn groups(&self) -> Vec<&'static str> {
        let mut g: Vec<&'static str> = Vec::new();
        for t in &self.tenants {
            if !g.contains(&t.group) {
                g.push(t.group);
            }
        }
        match self.stream {
            Some(Stream::Small { .. }) => g.push("small"),
            Some(Stream::Trickle { .. }) => g.push("trickle"),
            None => {}
        }
        g
    }

    pub(crate) fn backlog_total(&self) -> u64 {
        self.tenants.iter().map(|t| t.backlog).sum()
    }
}

fn tenant(name: impl Into<String>, group: &'static str, backlog: u64) -> Tenant {
    Tenant {
        name: name.into(),
        group,
        weight: 1.0,
        floor: 0,
        backlog,
        classes: 1,
    }
}

pub(crate) const ALL_KEYS: [&str; 8] = [
    "greedy",
    "balanced",
    "skew",
    "weighted",
    "trickle",
    "sybil",
    "heavy-idle",
    "floor",
];

/// The scenarios at `--scale`, in report order.
pub(crate) fn all(a: &Args) -> Vec<Scenario> {
    let n = |x: f64| ((x * a.scale).round() as u64).max(1);
    let mut out = Vec::new();

    let greedy = n(12_000.0);
    out.push(Scenario {
        id: Id::Greedy,
        key: "greedy",
        title: "greedy + small",
        what: format!(
            "1 greedy tenant `push_bulk`s {greedy} jobs from a separate process once the worker runs; {} small tenants × {} jobs (`push`, one at a time) spread evenly over {} s. Weighted mode: all weights 1 (as equal weights).",
            a.small_tenants, a.small_jobs, a.small_spread
        ),
        tenants: vec![tenant(GREEDY, "greedy", greedy)],
        stream: Some(Stream::Small {
            tenants: a.small_tenants,
            jobs: a.small_jobs,
            spread: a.small_spread,
        }),
        greedy_child: true,
    });

    let per = n(400.0);
    out.push(Scenario {
        id: Id::Balanced,
        key: "balanced",
        title: "balanced",
        what: format!(
            "10 tenants × {per} jobs, backlogs pushed t01 … t10 before the worker starts. Weighted mode: all weights 1."
        ),
        tenants: (1..=10)
            .map(|i| {
                let g = match i {
                    1 => "t01 (pushed first)",
                    10 => "t10 (pushed last)",
                    _ => "t02–t09",
                };
                tenant(format!("t{i:02}"), g, per)
            })
            .collect(),
        stream: None,
        greedy_child: false,
    });

    let light = n(40.0);
    let mut skew = vec![tenant("heavy", "heavy", light * 100)];
    skew.extend((1..=9).map(|i| tenant(format!("l{i}"), "light", light)));
    out.push(Scenario {
        id: Id::Skew,
        key: "skew",
        title: "skew",
        what: format!(
            "1 heavy tenant with {} jobs (pushed first) and 9 light tenants × {light} (100× less). Weighted mode: all weights 1.",
            light * 100
        ),
        tenants: skew,
        stream: None,
        greedy_child: false,
    });

    let w = n(1_500.0);
    out.push(Scenario {
        id: Id::Weighted,
        key: "weighted",
        title: "weighted 3:1:1",
        what: format!(
            "tenants a, b, c × {w} jobs each, all backlogged (pushed a, b, c); weights 3, 1, 1."
        ),
        tenants: vec![
            Tenant {
                weight: 3.0,
                ..tenant("a", "a (w 3)", w)
            },
            tenant("b", "b (w 1)", w),
            tenant("c", "c (w 1)", w),
        ],
        stream: None,
        greedy_child: false,
    });

    let tb = n(800.0);
    out.push(Scenario {
        id: Id::Trickle,
        key: "trickle",
        title: "trickle",
        what: format!(
            "5 tenants × {tb} jobs backlogged; a light tenant `push`es one job every {} ms until 70% of the backlog has started. Weighted mode: all weights 1.",
            a.trickle_ms
        ),
        tenants: (1..=5)
            .map(|i| tenant(format!("b{i}"), "backlog", tb))
            .collect(),
        stream: Some(Stream::Trickle {
            every: a.trickle_ms / 1000.0,
            until: 0.7,
        }),
        greedy_child: false,
    });

    let sy = n(200.0);
    let mut sybil = vec![Tenant {
        classes: crate::jobs::CLASSES,
        ..tenant("sybil", "sybil (10 classes)", sy * 10)
    }];
    sybil.extend((1..=9).map(|i| tenant(format!("h{i}"), "honest", sy)));
    out.push(Scenario {
        id: Id::Sybil,
        key: "sybil",
        title: "sybil",
        what: format!(
            "1 tenant spreads {} jobs over 10 job classes on one queue ({sy} per class, pushed first); 9 honest tenants × {sy} jobs of one class. Weighted mode: all weights 1.",
            sy * 10
        ),
        tenants: sybil,
        stream: None,
        greedy_child: false,
    });

    let hi = n(3_000.0);
    out.push(Scenario {
        id: Id::HeavyIdle,
        key: "heavy-idle",
        title: "heavy-idle",
        what: format!(
            "1 tenant alone with {hi} jobs and the whole worker free: work conservation (makespan vs FIFO). Weighted mode: its weight is 0.25."
        ),
        tenants: vec![Tenant {
            weight: 0.25,
            ..tenant("alone", "alone", hi)
        }],
        stream: None,
        greedy_child: false,
    });

    let fl = n(150.0);
    let mut floor: Vec<Tenant> = (1..=50)
        .map(|i| tenant(format!("o{i:02}"), "50 others (w 1)", fl))
        .collect();
    floor.push(Tenant {
        floor: 2,
        ..tenant("f", "f (floor 2)", fl * 20 / 3)
    });
    out.push(Scenario {
        id: Id::Floor,
        key: "floor",
        title: "floor",
        what: format!(
            "tenant f (floor 2, {} jobs, pushed last) among 50 backlogged tenants of weight 1 × {fl}; worker concurrency {}.",
            fl * 20 / 3,
            a.concurrency
        ),
        tenants: floor,
        stream: None,
        greedy_child: false,
    });

    out.retain(|s| a.only.is_empty() || a.only.iter().any(|o| o == s.key));
    out
}
