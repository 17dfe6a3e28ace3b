//! The Postgres path: fairjob's transactional enqueue and pump, and (with
//! `--peers graphile-worker,pg-boss`) the queues that live in PostgreSQL, side
//! by side on one private PostgreSQL (each system in a database of its own)
//! with the same job shapes. Prints one markdown table, `| measure | fairjob |
//! graphile-worker | pg-boss |`, whose rows are issue 36's goals:
//!
//! - commit → start p50 / p99: one job per transaction, `--rate` jobs/s
//!   offered by one producer, `--latency-jobs` of them, each system at its
//!   default settings (fairjob: a `Pump::new` as a user gets it, polling, no
//!   `notify_pumps`, and a default `Worker`); the job records its start time.
//!   fairjob's direct `perform_async` and a listening pump woken by
//!   `notify_pumps` after each commit run in the same rep as extra rows;
//! - jobs/s end to end: `--producers` concurrent producers each committing
//!   one job per transaction (`--e2e-jobs` in all) while the system's pump and
//!   worker (or its worker) run; from the first transaction to the last no-op
//!   performed;
//! - jobs/s through the pump from a backlog of `--backlog` committed rows
//!   (fairjob: `pump_once` in a loop until the outbox is empty, into Redis,
//!   against a direct `push_bulk` of the same jobs, with Redis commands per job
//!   from `INFO commandstats`; the peers: their worker processes draining as
//!   many jobs added in bulk, first job start → last job done), and the same
//!   with 2 and 4 pumps (worker processes) against 1;
//! - the application's own commits/s (`--producers` concurrent producers,
//!   `--app-txs` transactions, each an `INSERT` into an application table)
//!   with the system's enqueue in the same transaction, against the same
//!   transactions without (no pump or worker running); for fairjob also the
//!   same transactions with a second plain `INSERT` into the application's
//!   table instead of the enqueue: what any one more row costs them.
//!
//! Every figure is the median of `--reps` repetitions; in each rep every
//! measure runs each system in turn, the order rotating rep by rep.
//!
//! The peers' side is `tests/peers/pg/bench.mjs` (its header says what each
//! system runs and with which settings), installed with `npm ci` from
//! `tests/peers/pg/package-lock.json` into `$FAIRJOB_PG_PEERS_DIR` (default
//! `<target dir>/pg-peers`, kept between runs and installed again when the
//! lock changes). A peer is skipped, saying why, when node or npm is missing or
//! the install or its schema set-up fails.
//!
//! ```text
//! cargo build --release -p fairjob-tests --bin pump_bench
//! target/release/pump_bench [--peers graphile-worker,pg-boss] [--reps 3] [--rate 200] [--latency-jobs 2000]
//!     [--e2e-jobs 20000] [--backlog 200000] [--producers 8] [--app-txs 20000] [--concurrency 8]
//!     [--tenants 10] [--batch 500] [--pgboss-batch 500] [--quick]
//! ```
//!
//! `--quick` is a smoke run at tiny sizes (one rep).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use fairjob::prelude::*;
use fairjob_examples::EchoJob;
use fairjob_postgres::testing::PostgresServer;
use fairjob_postgres::{EnqueueTx, Pump, migrate, notify_pumps, perform_bulk_tx};
use fairjob_tests::{Redis, RunningWorker, percentile};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;

// ---------------------------------------------------------------------------
// Command line

/// The Postgres path against graphile-worker and pg-boss (issue 36's table).
#[derive(Debug, Parser)]
#[command(name = "pump_bench")]
struct Args {
    /// Repetitions; every figure is the median of these
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Commit → start: jobs/s offered (one job per transaction)
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Commit → start: jobs per system and rep
    #[arg(long, default_value_t = 2000)]
    latency_jobs: usize,
    /// End to end: jobs (one per transaction) per system and rep
    #[arg(long, default_value_t = 20_000)]
    e2e_jobs: usize,
    /// Committed rows (jobs added in bulk for the peers) drained per run
    #[arg(long, default_value_t = 200_000)]
    backlog: usize,
    /// Concurrent producers (end to end, application commits)
    #[arg(long, default_value_t = 8)]
    producers: usize,
    /// Application commits: transactions per run
    #[arg(long, default_value_t = 20_000)]
    app_txs: usize,
    /// Worker concurrency for the throughput runs (every system)
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Tenants the backlog's jobs are spread over (fairjob)
    #[arg(long, default_value_t = 10)]
    tenants: usize,
    /// Rows a pump claims per batch in the backlog runs (the pump's default: 500)
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// pg-boss's batchSize per fetch in its throughput settings
    #[arg(long, default_value_t = 500)]
    pgboss_batch: usize,
    /// Peers to measure beside fairjob: graphile-worker, pg-boss (node + npm)
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// A smoke run at tiny sizes, one rep
    #[arg(long)]
    quick: bool,
}

impl Args {
    fn sized(mut self) -> Args {
        if self.quick {
            self.reps = 1;
            self.latency_jobs = 100;
            self.e2e_jobs = 1000;
            self.backlog = 3000;
            self.app_txs = 1000;
        }
        self.reps = self.reps.max(1);
        self.producers = self.producers.max(1);
        self
    }
}

fn main() -> ExitCode {
    let args = Args::parse().sized();
    fairjob_tests::run_main("pump_bench", run(args))
}

// ---------------------------------------------------------------------------
// fairjob's jobs

const STARTS: &str = "bench-starts";

/// Records `<id> <start time>` when it starts.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PumpLatencyJob", queue = "latency")]
struct PumpLatencyJob(u64);

impl Perform for PumpLatencyJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let started = fairjob::wire::now_f64();
        let b = cx.client().broker();
        let key = format!("{}{STARTS}", b.keys().prefix());
        fairjob_tests::query::<i64>(
            b,
            redis::cmd("RPUSH")
                .arg(key)
                .arg(format!("{} {started}", self.0)),
        )
        .await?;
        Ok(())
    }
}

/// Performed no-op jobs, and when the last one was (f64 bits, Unix seconds).
static NOOP_DONE: AtomicU64 = AtomicU64::new(0);
static NOOP_LAST: AtomicU64 = AtomicU64::new(0);

/// Does nothing; counted in this process.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "PumpNoopJob", queue = "noop")]
struct PumpNoopJob(u64);

impl Perform for PumpNoopJob {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        NOOP_LAST.store(fairjob::wire::now_f64().to_bits(), Ordering::Relaxed);
        NOOP_DONE.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The backlog's jobs `from..to`, spread over `tenants`.
fn jobs(from: usize, to: usize, tenants: usize) -> impl Iterator<Item = fairjob::Enqueue<EchoJob>> {
    (from..to).map(move |i| EchoJob(i.to_string()).set_tenant(format!("t{}", i % tenants.max(1))))
}

/// `n` split into chunks of 10,000: `(from, to)`.
fn chunks(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n)
        .step_by(10_000)
        .map(move |i| (i, (i + 10_000).min(n)))
}

// ---------------------------------------------------------------------------
// The systems

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PeerKind {
    Graphile,
    PgBoss,
}

impl PeerKind {
    const ALL: [PeerKind; 2] = [PeerKind::Graphile, PeerKind::PgBoss];

    fn name(self) -> &'static str {
        match self {
            PeerKind::Graphile => "graphile-worker",
            PeerKind::PgBoss => "pg-boss",
        }
    }

    fn database(self) -> &'static str {
        match self {
            PeerKind::Graphile => "bench_graphile",
            PeerKind::PgBoss => "bench_pgboss",
        }
    }
}

/// A requested peer: ready (its install dir, its database URL and version)
/// or skipped and why.
#[derive(Debug)]
struct Peer {
    kind: PeerKind,
    state: std::result::Result<PeerReady, String>,
}

#[derive(Debug)]
struct PeerReady {
    dir: PathBuf,
    url: String,
    version: String,
}

/// One system's runs in a measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sys {
    Fairjob,
    Peer(PeerKind),
}

impl Sys {
    fn name(self) -> &'static str {
        match self {
            Sys::Fairjob => "fairjob",
            Sys::Peer(k) => k.name(),
        }
    }
}

/// Rotated by `rep`: each rep starts with the next system.
fn rotated<T: Copy>(xs: &[T], rep: usize) -> Vec<T> {
    (0..xs.len()).map(|k| xs[(k + rep) % xs.len()]).collect()
}

fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------
// The run

/// Every sample, keyed by (measure, system).
#[derive(Debug, Default)]
struct Samples(HashMap<(String, String), Vec<f64>>);

impl Samples {
    fn add(&mut self, measure: &str, sys: &str, v: f64) {
        self.0
            .entry((measure.to_owned(), sys.to_owned()))
            .or_default()
            .push(v);
    }

    fn get(&self, measure: &str, sys: &str) -> &[f64] {
        self.0
            .get(&(measure.to_owned(), sys.to_owned()))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn median(&self, measure: &str, sys: &str) -> f64 {
        median(self.get(measure, sys))
    }
}

struct Env {
    a: Args,
    pool: PgPool,
    redis: Redis,
    peers: Vec<Peer>,
}

async fn run(a: Args) -> Result<()> {
    let kinds = peer_kinds(&a.peers)?;
    let pg = PostgresServer::start().context("starting a private PostgreSQL")?;
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&pg.url())
        .await?;
    let mut databases = vec!["bench_fairjob"];
    databases.extend(kinds.iter().map(|k| k.database()));
    for db in &databases {
        // The names are the constants above.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .execute(&admin)
            .await?;
    }
    admin.close().await;
    let url = |db: &str| format!("postgres://postgres@127.0.0.1:{}/{db}", pg.port());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(a.producers as u32 + 4)
        .idle_timeout(Duration::from_secs(2))
        .connect(&url("bench_fairjob"))
        .await?;
    migrate(&pool).await?;
    sqlx::query(
        "CREATE TABLE bench_app (id bigserial PRIMARY KEY, body text NOT NULL, at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&pool)
    .await?;
    let redis = Redis::start().await;
    let peers = prepare_peers(&kinds, |k| url(k.database()));

    let mut env = Env {
        a,
        pool,
        redis,
        peers,
    };
    let a = &env.a;
    println!(
        "pump_bench: {} rep(s), systems alternated; commit → start {} jobs at {}/s; end to end {} jobs by {} producers; \
         backlog {} rows; application commits {} transactions by {} producers; worker concurrency {}",
        a.reps,
        a.latency_jobs,
        a.rate,
        a.e2e_jobs,
        a.producers,
        a.backlog,
        a.app_txs,
        a.producers,
        a.concurrency
    );
    let mut s = Samples::default();
    let mut notes = Vec::new();
    for rep in 0..env.a.reps {
        let systems = rotated(&systems(&env.peers), rep);
        latency_rep(&env, rep, &mut s, &mut notes).await?;
        for &sys in &systems {
            e2e(&env, sys, rep, &mut s).await?;
        }
        for &sys in &systems {
            backlog(&env, sys, rep, &mut s).await?;
        }
        for &sys in &systems {
            app_commits(&env, sys, rep, &mut s).await?;
        }
    }
    println!();
    println!("{}", report(&env, &s, &notes));
    env.peers.clear();
    Ok(())
}

fn systems(peers: &[Peer]) -> Vec<Sys> {
    let mut v = vec![Sys::Fairjob];
    v.extend(
        peers
            .iter()
            .filter(|p| p.state.is_ok())
            .map(|p| Sys::Peer(p.kind)),
    );
    v
}

fn peer(env: &Env, kind: PeerKind) -> &PeerReady {
    env.peers
        .iter()
        .find(|p| p.kind == kind)
        .and_then(|p| p.state.as_ref().ok())
        .expect("only ready peers run")
}

/// Logs a peer's failed run and goes on (its cell stays empty).
fn peer_result(sys: Sys, what: &str, r: Result<()>) {
    if let Err(e) = r {
        eprintln!("[pump_bench] {} {what} failed: {e:#}", sys.name());
    }
}

// ---------------------------------------------------------------------------
// Commit → start

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LatencyPath {
    /// fairjob: `perform_async` straight into Redis.
    Direct,
    /// fairjob: transactional enqueue, a default (polling) pump.
    Polling,
    /// fairjob: transactional enqueue, a listening pump, `notify_pumps` after each commit.
    Notify,
    /// A peer at its defaults.
    Peer(PeerKind),
    /// pg-boss at its default polling interval with batches big enough to keep up.
    PgBossBatched,
}

impl LatencyPath {
    fn key(self) -> String {
        match self {
            LatencyPath::Direct => "fairjob direct".into(),
            LatencyPath::Polling => "fairjob".into(),
            LatencyPath::Notify => "fairjob notify".into(),
            LatencyPath::Peer(k) => k.name().into(),
            LatencyPath::PgBossBatched => "pg-boss batched".into(),
        }
    }
}

async fn latency_rep(
    env: &Env,
    rep: usize,
    s: &mut Samples,
    notes: &mut Vec<String>,
) -> Result<()> {
    let mut paths = vec![
        LatencyPath::Direct,
        LatencyPath::Polling,
        LatencyPath::Notify,
    ];
    for sys in systems(&env.peers) {
        if let Sys::Peer(k) = sys {
            paths.push(LatencyPath::Peer(k));
            if k == PeerKind::PgBoss {
                paths.push(LatencyPath::PgBossBatched);
            }
        }
    }
    for path in rotated(&paths, rep) {
        let base = (rep as u64 + 1) * 10_000_000
            + paths.iter().position(|p| *p == path).unwrap_or(0) as u64 * 1_000_000;
        let got = match path {
            LatencyPath::Direct | LatencyPath::Polling | LatencyPath::Notify => {
                Some(fairjob_latency(env, path, base).await?)
            }
            LatencyPath::Peer(k) => {
                let r = peer_latency(env, k, "default", base).await;
                r.map_err(|e| eprintln!("[pump_bench] {} commit → start failed: {e:#}", k.name()))
                    .ok()
            }
            LatencyPath::PgBossBatched => {
                let r = peer_latency(env, PeerKind::PgBoss, "default-batched", base).await;
                r.map_err(|e| {
                    eprintln!("[pump_bench] pg-boss (batched) commit → start failed: {e:#}")
                })
                .ok()
            }
        };
        let Some(ms) = got else { continue };
        let n = env.a.latency_jobs;
        let (p50, p99) = (percentile(&ms, 50.0), percentile(&ms, 99.0));
        println!(
            "rep {}: commit → start, {}: p50 {p50:.1} ms, p99 {p99:.1} ms, max {:.1} ms ({} of {n} started)",
            rep + 1,
            path.key(),
            ms.last().copied().unwrap_or(f64::NAN),
            ms.len()
        );
        let key = path.key();
        s.add("lat started", &key, ms.len() as f64);
        if ms.len() < n {
            notes.push(format!(
                "rep {}: {key}: only {} of {n} jobs started within {} s of the last commit",
                rep + 1,
                ms.len(),
                GRACE.as_secs()
            ));
        }
        if ms.len() * 10 >= n * 9 {
            s.add("lat p50", &key, p50);
            s.add("lat p99", &key, p99);
        }
    }
    Ok(())
}

/// How long after the last commit a commit → start run waits for its jobs.
const GRACE: Duration = Duration::from_secs(10);

/// Sorted commit → start latencies (ms) from `committed` (id → Unix s) and
/// `started` (id, Unix s).
fn latencies(committed: &HashMap<u64, f64>, started: &[(u64, f64)]) -> Vec<f64> {
    let mut out: Vec<f64> = started
        .iter()
        .filter_map(|(id, at)| committed.get(id).map(|c| (at - c) * 1000.0))
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// A default worker (as `Worker::builder` gives it) on `queue`.
async fn default_worker(
    redis: &Redis,
    queue: &str,
    concurrency: Option<usize>,
) -> Result<RunningWorker> {
    let mut b = fairjob::Worker::builder(redis.url())
        .namespace(redis.ns())
        .queues(fairjob_tests::queues(&[queue]))
        .shutdown_timeout(Duration::from_secs(3));
    if let Some(c) = concurrency {
        b = b.concurrency(c);
    }
    Ok(fairjob_tests::spawn(b.build().await?))
}

/// A pump running in the background until `stop`.
struct RunningPump {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<fairjob_postgres::Result<()>>,
}

impl RunningPump {
    fn start(pump: Pump) -> RunningPump {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(pump.run(async {
            let _ = stopped.await;
        }));
        RunningPump { stop, task }
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

async fn fairjob_latency(env: &Env, path: LatencyPath, base: u64) -> Result<Vec<f64>> {
    let (redis, pool) = (&env.redis, &env.pool);
    let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
    let worker = default_worker(redis, "latency", None).await?;
    let pump = if path == LatencyPath::Direct {
        None
    } else {
        // The defaults a user gets; listening only for the notify path.
        let pump =
            Pump::new(pool.clone(), redis.client().await).listen(path == LatencyPath::Notify);
        Some(RunningPump::start(pump))
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = redis.client().await;
    let (n, rate) = (env.a.latency_jobs, env.a.rate);
    let mut committed: HashMap<u64, f64> = HashMap::new();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let t0 = Instant::now();
    for i in 0..n as u64 {
        let id = base + i;
        if path == LatencyPath::Direct {
            let at = fairjob::wire::now_f64();
            PumpLatencyJob(id).perform_async(&client).await?;
            committed.insert(id, at);
        } else {
            let mut tx = pool.begin().await?;
            PumpLatencyJob(id).perform_async_tx(&mut *tx).await?;
            tx.commit().await?;
            committed.insert(id, fairjob::wire::now_f64());
            if path == LatencyPath::Notify {
                notify_pumps(pool).await?;
            }
        }
        if let Some(wait) = (gap * (i as u32 + 1)).checked_sub(t0.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    let key = redis.key(STARTS);
    let deadline = Instant::now() + GRACE;
    let ms = loop {
        let started: Vec<(u64, f64)> = redis
            .lrange(&key)
            .await
            .iter()
            .filter_map(|l| {
                let (id, at) = l.split_once(' ')?;
                Some((id.parse().ok()?, at.parse().ok()?))
            })
            .collect();
        if started.len() >= n || Instant::now() > deadline {
            break latencies(&committed, &started);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if let Some(p) = pump {
        p.stop().await?;
    }
    worker.stop().await;
    Ok(ms)
}

async fn peer_latency(env: &Env, kind: PeerKind, settings: &str, base: u64) -> Result<Vec<f64>> {
    let p = peer(env, kind);
    node_once(p, kind, "clean", &[])?;
    // pg-boss fetches once per 2 s by default: a batch of 4 s of jobs keeps up.
    let batch = ((env.a.rate * 4.0).ceil() as usize).max(1).to_string();
    let settings_arg = if settings == "default-batched" {
        "default-batched"
    } else {
        "default"
    };
    let mut worker = NodeWorker::spawn(
        p,
        kind,
        &[
            "--mode",
            "latency",
            "--settings",
            settings_arg,
            "--batch",
            &batch,
        ],
    )?;
    let out = node_once(
        p,
        kind,
        "produce",
        &[
            "--kind",
            "latency",
            "--jobs",
            &env.a.latency_jobs.to_string(),
            "--producers",
            "1",
            "--rate",
            &env.a.rate.to_string(),
            "--base",
            &base.to_string(),
        ],
    );
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            worker.stop();
            return Err(e);
        }
    };
    let committed: HashMap<u64, f64> = out
        .iter()
        .filter_map(|v| Some((v["id"].as_u64()?, v["committed"].as_f64()?)))
        .collect();
    let deadline = Instant::now() + GRACE;
    let mut started: Vec<(u64, f64)> = Vec::new();
    loop {
        for v in worker.drain() {
            if let (Some(id), Some(at)) = (v["id"].as_u64(), v["started"].as_f64()) {
                started.push((id, at));
            }
        }
        if started.len() >= env.a.latency_jobs || Instant::now() > deadline || !worker.alive() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.stop();
    Ok(latencies(&committed, &started))
}

// ---------------------------------------------------------------------------
// End to end

async fn e2e(env: &Env, sys: Sys, rep: usize, s: &mut Samples) -> Result<()> {
    let n = env.a.e2e_jobs;
    let rate = match sys {
        Sys::Fairjob => Some(fairjob_e2e(env).await?),
        Sys::Peer(k) => {
            let r = peer_e2e(env, k).await;
            match r {
                Ok(v) => Some(v),
                Err(e) => {
                    peer_result(sys, "end to end", Err(e));
                    None
                }
            }
        }
    };
    if let Some(rate) = rate {
        println!(
            "rep {}: end to end, {}: {rate:.0} jobs/s ({n} jobs)",
            rep + 1,
            sys.name()
        );
        s.add("e2e", sys.name(), rate);
    }
    Ok(())
}

/// Producers committing `n` transactions in all: `insert` adds the
/// application's row, `enqueue` the job. Returns the seconds taken.
async fn fairjob_producers(
    pool: &PgPool,
    producers: usize,
    n: usize,
    insert: bool,
    enqueue: bool,
) -> Result<f64> {
    producers_with(pool, producers, n, insert, enqueue, false).await
}

/// [`fairjob_producers`], with a second `INSERT INTO bench_app` per
/// transaction when `second_insert`.
async fn producers_with(
    pool: &PgPool,
    producers: usize,
    n: usize,
    insert: bool,
    enqueue: bool,
    second_insert: bool,
) -> Result<f64> {
    let next = std::sync::Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (pool, next) = (pool.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n as u64 {
                    return anyhow::Ok(());
                }
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                if insert {
                    sqlx::query("INSERT INTO bench_app (body) VALUES ($1)")
                        .bind(format!("order {i}"))
                        .execute(&mut *tx)
                        .await?;
                }
                if enqueue {
                    PumpNoopJob(i).perform_async_tx(&mut *tx).await?;
                }
                if second_insert {
                    sqlx::query("INSERT INTO bench_app (body) VALUES ($1)")
                        .bind(format!("line {i}"))
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(t0.elapsed().as_secs_f64())
}

async fn fairjob_e2e(env: &Env) -> Result<f64> {
    let (redis, pool, n) = (&env.redis, &env.pool, env.a.e2e_jobs);
    let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
    NOOP_DONE.store(0, Ordering::Relaxed);
    let worker = default_worker(redis, "noop", Some(env.a.concurrency)).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The pump as a user gets it, started with the producers.
    let pump = RunningPump::start(Pump::new(pool.clone(), redis.client().await));
    let t0 = fairjob::wire::now_f64();
    fairjob_producers(pool, env.a.producers, n, false, true).await?;
    let deadline =
        Instant::now() + Duration::from_secs(60) + Duration::from_secs_f64(n as f64 / 200.0);
    while NOOP_DONE.load(Ordering::Relaxed) < n as u64 {
        if Instant::now() > deadline {
            bail!(
                "end to end: {} of {n} jobs performed by the deadline",
                NOOP_DONE.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last = f64::from_bits(NOOP_LAST.load(Ordering::Relaxed));
    pump.stop().await?;
    worker.stop().await;
    Ok(n as f64 / (last - t0))
}

async fn peer_e2e(env: &Env, kind: PeerKind) -> Result<f64> {
    let p = peer(env, kind);
    let n = env.a.e2e_jobs;
    node_once(p, kind, "clean", &[])?;
    let mut worker = NodeWorker::spawn(p, kind, &throughput_args(env, "noop"))?;
    let out = node_once(
        p,
        kind,
        "produce",
        &[
            "--kind",
            "noop",
            "--jobs",
            &n.to_string(),
            "--producers",
            &env.a.producers.to_string(),
        ],
    );
    let result = match out {
        Ok(out) => {
            let started = out
                .iter()
                .find_map(|v| v["started"].as_f64())
                .context("the producer printed no start time")?;
            let timeout = Duration::from_secs(60) + Duration::from_secs_f64(n as f64 / 200.0);
            wait_noop(std::slice::from_mut(&mut worker), n, timeout)
                .await
                .map(|(_, last)| n as f64 / (last - started))
        }
        Err(e) => Err(e),
    };
    worker.stop();
    result
}

fn throughput_args(env: &Env, mode: &str) -> Vec<String> {
    [
        "--mode",
        mode,
        "--settings",
        "throughput",
        "--concurrency",
        &env.a.concurrency.to_string(),
        "--batch",
        &env.a.pgboss_batch.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Waits until the workers' no-op counts add up to `n`; returns (first start, last done).
async fn wait_noop(workers: &mut [NodeWorker], n: usize, timeout: Duration) -> Result<(f64, f64)> {
    let deadline = Instant::now() + timeout;
    let mut latest: Vec<(u64, f64, f64)> = vec![(0, f64::INFINITY, 0.0); workers.len()];
    loop {
        for (w, l) in workers.iter_mut().zip(latest.iter_mut()) {
            for v in w.drain() {
                if let (Some(c), Some(f), Some(t)) =
                    (v["count"].as_u64(), v["first"].as_f64(), v["last"].as_f64())
                {
                    *l = (c, f, t);
                }
            }
        }
        let done: u64 = latest.iter().map(|l| l.0).sum();
        if done >= n as u64 {
            let first = latest.iter().map(|l| l.1).fold(f64::INFINITY, f64::min);
            let last = latest.iter().map(|l| l.2).fold(0.0, f64::max);
            return Ok((first, last));
        }
        if Instant::now() > deadline {
            bail!("{done} of {n} jobs done within {:?}", timeout);
        }
        for w in workers.iter_mut() {
            if !w.alive() {
                bail!("a worker process exited early ({})", w.status());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------
// The backlog

/// 0 = a direct `push_bulk`, else that many pumps (worker processes).
const BACKLOG_PATHS: [usize; 4] = [0, 1, 2, 4];

fn backlog_key(k: usize) -> String {
    match k {
        0 => "direct push_bulk".to_owned(),
        1 => "1 pump".to_owned(),
        n => format!("{n} pumps"),
    }
}

async fn backlog(env: &Env, sys: Sys, rep: usize, s: &mut Samples) -> Result<()> {
    let n = env.a.backlog;
    let paths: Vec<usize> = match sys {
        Sys::Fairjob => BACKLOG_PATHS.to_vec(),
        Sys::Peer(_) => BACKLOG_PATHS[1..].to_vec(),
    };
    for k in rotated(&paths, rep) {
        match sys {
            Sys::Fairjob => {
                let (rate, cmds) = fairjob_backlog(env, k).await?;
                println!(
                    "rep {}: backlog, fairjob, {}: {rate:.0} jobs/s into Redis, {cmds:.3} Redis commands per job",
                    rep + 1,
                    backlog_key(k)
                );
                s.add(&format!("backlog {k}"), sys.name(), rate);
                s.add(&format!("backlog cmds {k}"), sys.name(), cmds);
            }
            Sys::Peer(kind) => match peer_backlog(env, kind, k).await {
                Ok((rate, bulk)) => {
                    println!(
                        "rep {}: backlog, {}, {k} worker process(es): {rate:.0} jobs/s performed ({n} jobs added in bulk at {bulk:.0} jobs/s)",
                        rep + 1,
                        sys.name()
                    );
                    s.add(&format!("backlog {k}"), sys.name(), rate);
                    s.add("bulk add", sys.name(), bulk);
                }
                Err(e) => peer_result(sys, &format!("backlog with {k} process(es)"), Err(e)),
            },
        }
    }
    Ok(())
}

/// (jobs/s into Redis, Redis commands per job).
async fn fairjob_backlog(env: &Env, pumps: usize) -> Result<(f64, f64)> {
    let (redis, pool, n, tenants) = (&env.redis, &env.pool, env.a.backlog, env.a.tenants);
    let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
    fairjob_tests::reset_redis_stats(redis.url()).await;
    let rate = if pumps == 0 {
        let client = redis.client().await;
        fairjob_tests::reset_redis_stats(redis.url()).await;
        let t = Instant::now();
        for (from, to) in chunks(n) {
            client.push_bulk(jobs(from, to, tenants)).await?;
        }
        n as f64 / t.elapsed().as_secs_f64()
    } else {
        let mut tx = pool.begin().await?;
        for (from, to) in chunks(n) {
            perform_bulk_tx(&mut *tx, jobs(from, to, tenants)).await?;
        }
        tx.commit().await?;
        let mut ps = Vec::new();
        for _ in 0..pumps {
            ps.push(Pump::new(pool.clone(), redis.client().await).batch(env.a.batch));
        }
        fairjob_tests::reset_redis_stats(redis.url()).await;
        let t = Instant::now();
        let mut handles = Vec::new();
        for pump in ps {
            handles.push(tokio::spawn(async move {
                while pump.pump_once().await?.claimed > 0 {}
                anyhow::Ok(())
            }));
        }
        for h in handles {
            h.await??;
        }
        n as f64 / t.elapsed().as_secs_f64()
    };
    let in_redis = redis.llen(redis.keys().queue(EchoJob::OPTIONS.queue)).await;
    if in_redis != n {
        bail!("{} in Redis after the backlog run, {n} expected", in_redis);
    }
    // Less the `LLEN` just above.
    let cmds = (fairjob_tests::redis_commands(redis.url()).await - 1) as f64 / n as f64;
    Ok((rate, cmds))
}

/// (jobs/s performed by `procs` worker processes, jobs/s of the bulk add).
async fn peer_backlog(env: &Env, kind: PeerKind, procs: usize) -> Result<(f64, f64)> {
    let p = peer(env, kind);
    let n = env.a.backlog;
    node_once(p, kind, "clean", &[])?;
    let out = node_once(
        p,
        kind,
        "bulk",
        &["--jobs", &n.to_string(), "--batch", "1000"],
    )?;
    let bulk = out
        .iter()
        .find_map(|v| v["secs"].as_f64())
        .map(|s| n as f64 / s)
        .unwrap_or(f64::NAN);
    let mut workers = Vec::new();
    for _ in 0..procs {
        match NodeWorker::spawn(p, kind, &throughput_args(env, "noop")) {
            Ok(w) => workers.push(w),
            Err(e) => {
                workers.iter_mut().for_each(NodeWorker::stop);
                return Err(e);
            }
        }
    }
    let timeout = Duration::from_secs(60) + Duration::from_secs_f64(n as f64 / 400.0);
    let r = wait_noop(&mut workers, n, timeout).await;
    workers.iter_mut().for_each(NodeWorker::stop);
    let (first, last) = r?;
    Ok((n as f64 / (last - first), bulk))
}

// ---------------------------------------------------------------------------
// The application's commits

async fn app_commits(env: &Env, sys: Sys, rep: usize, s: &mut Samples) -> Result<()> {
    let n = env.a.app_txs;
    // Alternate which goes first, rep by rep.
    let order = if rep.is_multiple_of(2) {
        [false, true]
    } else {
        [true, false]
    };
    let mut cps = [f64::NAN; 2];
    for enqueue in order {
        let r = match sys {
            Sys::Fairjob => {
                let secs = fairjob_producers(&env.pool, env.a.producers, n, true, enqueue).await?;
                sqlx::query("TRUNCATE bench_app, fairjob.outbox")
                    .execute(&env.pool)
                    .await?;
                Ok(n as f64 / secs)
            }
            Sys::Peer(k) => peer_app(env, k, enqueue),
        };
        match r {
            Ok(v) => cps[usize::from(enqueue)] = v,
            Err(e) => {
                peer_result(sys, "application commits", Err(e));
                return Ok(());
            }
        }
    }
    let ratio = cps[1] / cps[0];
    println!(
        "rep {}: application commits, {}: {:.0} commits/s with the enqueue, {:.0} without: {ratio:.2}×",
        rep + 1,
        sys.name(),
        cps[1],
        cps[0]
    );
    s.add("app ratio", sys.name(), ratio);
    s.add("app with", sys.name(), cps[1]);
    s.add("app without", sys.name(), cps[0]);
    if sys == Sys::Fairjob {
        // The reference: one more plain row instead of the enqueue.
        let secs = producers_with(&env.pool, env.a.producers, n, true, false, true).await?;
        sqlx::query("TRUNCATE bench_app").execute(&env.pool).await?;
        let r = n as f64 / secs / cps[0];
        println!(
            "rep {}: application commits, a second plain INSERT instead: {:.0} commits/s: {r:.2}×",
            rep + 1,
            n as f64 / secs
        );
        s.add("app second insert ratio", sys.name(), r);
    }
    Ok(())
}

fn peer_app(env: &Env, kind: PeerKind, enqueue: bool) -> Result<f64> {
    let p = peer(env, kind);
    node_once(p, kind, "clean", &[])?;
    let n = env.a.app_txs;
    let out = node_once(
        p,
        kind,
        "produce",
        &[
            "--kind",
            if enqueue { "noop" } else { "none" },
            "--jobs",
            &n.to_string(),
            "--producers",
            &env.a.producers.to_string(),
            "--app",
            "1",
        ],
    )?;
    let (started, ended) = out
        .iter()
        .find_map(|v| Some((v["started"].as_f64()?, v["ended"].as_f64()?)))
        .context("the producer printed no times")?;
    Ok(n as f64 / (ended - started))
}

// ---------------------------------------------------------------------------
// The peers: install, set up, run

fn peer_kinds(names: &[String]) -> Result<Vec<PeerKind>> {
    let mut kinds = Vec::new();
    for name in names {
        let kind = PeerKind::ALL
            .into_iter()
            .find(|k| k.name() == name.as_str())
            .with_context(|| format!("unknown peer {name:?} (graphile-worker, pg-boss)"))?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("peers")
        .join("pg")
}

/// `$FAIRJOB_PG_PEERS_DIR`, else `pg-peers` in the target directory this
/// binary was built into.
fn install_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FAIRJOB_PG_PEERS_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/pump_bench
    exe.parent()
        .and_then(Path::parent)
        .map(|t| t.join("pg-peers"))
        .unwrap_or_else(|| std::env::temp_dir().join("fairjob-pg-peers"))
}

/// `<program> --version` works: the first line it prints, or why not.
fn tool_version(program: &str) -> std::result::Result<String, String> {
    match Command::new(program).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned()),
        Ok(o) => Err(format!("`{program} --version` exited with {}", o.status)),
        Err(e) => Err(format!("`{program}` not found ({e})")),
    }
}

/// Why a command failed, on one line: its lines naming an error, or else
/// the last three lines of its stderr.
fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.to_ascii_lowercase().contains("error"))
        .take(2)
        .collect();
    if errors.is_empty() {
        lines[lines.len().saturating_sub(3)..].join(" / ")
    } else {
        errors.join(" / ")
    }
}

/// Installs tests/peers/pg with `npm ci` into [`install_dir`] unless the
/// same lock is already installed there; returns the directory.
fn install_peers() -> std::result::Result<(PathBuf, String), String> {
    let node = tool_version("node")?;
    tool_version("npm")?;
    let dir = install_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let src = source_dir();
    let read = |f: &str| {
        std::fs::read(src.join(f)).map_err(|e| format!("reading tests/peers/pg/{f}: {e}"))
    };
    let (manifest, lock) = (read("package.json")?, read("package-lock.json")?);
    let stamp = dir.join(".installed-lock");
    let installed =
        std::fs::read(&stamp).ok() == Some(lock.clone()) && dir.join("node_modules").is_dir();
    for f in ["package.json", "package-lock.json", "bench.mjs"] {
        std::fs::copy(src.join(f), dir.join(f)).map_err(|e| format!("copying {f}: {e}"))?;
    }
    drop(manifest);
    if !installed {
        eprintln!(
            "[pump_bench] npm ci of graphile-worker and pg-boss in {}",
            dir.display()
        );
        let _ = std::fs::remove_file(&stamp);
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running npm: {e}"))?;
        if !out.status.success() {
            return Err(format!("npm ci failed: {}", stderr_tail(&out.stderr)));
        }
        std::fs::write(&stamp, &lock).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    }
    Ok((dir, node))
}

/// Installs the peers once and sets each one's schema up in its database.
fn prepare_peers(kinds: &[PeerKind], url: impl Fn(PeerKind) -> String) -> Vec<Peer> {
    if kinds.is_empty() {
        return Vec::new();
    }
    let installed = install_peers();
    kinds
        .iter()
        .map(|&kind| {
            let state = installed.clone().and_then(|(dir, node)| {
                let mut ready = PeerReady {
                    dir,
                    url: url(kind),
                    version: String::new(),
                };
                let out = node_once(&ready, kind, "setup", &[])
                    .map_err(|e| format!("set-up failed: {e:#}"))?;
                let v = out
                    .iter()
                    .find_map(|v| v["version"].as_str().map(str::to_owned));
                ready.version = format!("{}, {node}", v.unwrap_or_default());
                Ok(ready)
            });
            match &state {
                Ok(r) => eprintln!("[pump_bench] {} {} ready", kind.name(), r.version),
                Err(why) => eprintln!("[pump_bench] {} skipped: {why}", kind.name()),
            }
            Peer { kind, state }
        })
        .collect()
}

fn node_command(p: &PeerReady, kind: PeerKind, cmd: &str, args: &[&str]) -> Command {
    let mut c = Command::new("node");
    c.arg(p.dir.join("bench.mjs"))
        .args([kind.name(), cmd, "--url", &p.url])
        .args(args)
        .current_dir(&p.dir);
    c
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Runs a one-shot command (setup, clean, produce, bulk); its JSON lines.
fn node_once(p: &PeerReady, kind: PeerKind, cmd: &str, args: &[&str]) -> Result<Vec<Value>> {
    let out = node_command(p, kind, cmd, args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running node for {} {cmd}", kind.name()))?;
    if !out.status.success() {
        bail!(
            "{} {cmd} exited with {}: {}",
            kind.name(),
            out.status,
            stderr_tail(&out.stderr)
        );
    }
    Ok(json_lines(&out.stdout))
}

/// A running `work` process: its JSON lines arrive on a channel. Closing its
/// stdin stops it.
struct NodeWorker {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl NodeWorker {
    /// Starts a worker and waits until it says it is ready.
    fn spawn(p: &PeerReady, kind: PeerKind, args: &[impl AsRef<str>]) -> Result<NodeWorker> {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let mut child = node_command(p, kind, "work", &args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting node for {} work", kind.name()))?;
        let stdout = child.stdout.take().context("the worker's stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut w = NodeWorker { child, lines: rx };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match w.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(v) if v.get("ready").is_some() => return Ok(w),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline && w.alive() => {}
                Err(_) => {
                    let status = w.status();
                    w.stop();
                    bail!("{} worker did not start ({status})", kind.name());
                }
            }
        }
    }

    fn drain(&mut self) -> Vec<Value> {
        self.lines.try_iter().collect()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn status(&mut self) -> String {
        match self.child.try_wait() {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => "running".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Closes its stdin (it stops its workers and exits), killing it after 10 s.
    fn stop(&mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeWorker {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// The report

fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn report(env: &Env, s: &Samples, notes: &[String]) -> String {
    let a = &env.a;
    let mut cols: Vec<(String, Option<String>)> = vec![("fairjob".into(), None)];
    for p in &env.peers {
        cols.push((p.kind.name().into(), p.state.as_ref().err().cloned()));
    }
    let mut o = String::new();
    let header: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    let _ = writeln!(o, "| measure | {} |", header.join(" | "));
    let _ = writeln!(o, "|---|{}", "---|".repeat(cols.len()));
    let row = |o: &mut String, name: &str, cell: &dyn Fn(&str) -> String| {
        let cells: Vec<String> = cols
            .iter()
            .map(|(sys, skipped)| match skipped {
                Some(_) => "skipped".to_owned(),
                None => cell(sys),
            })
            .collect();
        let _ = writeln!(o, "| {name} | {} |", cells.join(" | "));
    };
    let lat = |key: &str| -> String {
        let p50 = s.median("lat p50", key);
        if p50.is_nan() {
            let started = s.median("lat started", key);
            if started.is_finite() {
                return format!("falls behind: {started:.0} of {} started", a.latency_jobs);
            }
            return "—".into();
        }
        format!("{p50:.1} / {:.1} ms", s.median("lat p99", key))
    };
    row(
        &mut o,
        &format!(
            "commit → start p50 / p99, one job per transaction, {} jobs/s offered, default settings",
            a.rate
        ),
        &|sys| match sys {
            "fairjob" => format!(
                "{} (direct `perform_async`: {})",
                lat("fairjob"),
                lat("fairjob direct")
            ),
            "pg-boss" => format!(
                "{} (batchSize {}: {})",
                lat(sys),
                (a.rate * 4.0).ceil(),
                lat("pg-boss batched")
            ),
            other => lat(other),
        },
    );
    row(
        &mut o,
        "commit → start p50 / p99 with `notify_pumps` after each commit (a listening pump)",
        &|sys| match sys {
            "fairjob" => lat("fairjob notify"),
            _ => "n/a".into(),
        },
    );
    let rate = |m: &str, sys: &str| {
        let v = s.median(m, sys);
        if v.is_nan() {
            "—".into()
        } else {
            format!("{v:.0}")
        }
    };
    row(
        &mut o,
        &format!(
            "jobs/s end to end (transactional enqueue of one job per transaction by {} concurrent producers → no-op performed)",
            a.producers
        ),
        &|sys| rate("e2e", sys),
    );
    row(
        &mut o,
        &format!(
            "jobs/s through the pump from a backlog of {} committed rows",
            thousands(a.backlog)
        ),
        &|sys| match sys {
            "fairjob" => format!(
                "{} (direct `push_bulk`: {})",
                rate("backlog 1", sys),
                rate("backlog 0", sys)
            ),
            _ => rate("backlog 1", sys),
        },
    );
    row(&mut o, "2 and 4 pumps against 1", &|sys| {
        let one = s.median("backlog 1", sys);
        let r = |k: usize| s.median(&format!("backlog {k}"), sys) / one;
        let (r2, r4) = (r(2), r(4));
        if r2.is_nan() || r4.is_nan() {
            "—".into()
        } else {
            format!("{r2:.2}× / {r4:.2}×")
        }
    });
    row(
        &mut o,
        "the application's own commits/s with fairjob enqueueing in them, against the same transactions without",
        &|sys| {
            let r = s.median("app ratio", sys);
            if r.is_nan() {
                "—".into()
            } else {
                let second = s.median("app second insert ratio", sys);
                let reference = if second.is_nan() {
                    String::new()
                } else {
                    format!("; a second plain `INSERT` instead: {second:.2}×")
                };
                format!(
                    "{r:.2}× ({:.0} / {:.0} commits/s{reference})",
                    s.median("app with", sys),
                    s.median("app without", sys)
                )
            }
        },
    );

    let _ = writeln!(
        o,
        "\nfairjob's pumps from the backlog of {} rows, into Redis:\n",
        thousands(a.backlog)
    );
    let _ = writeln!(
        o,
        "| path | jobs/s (median) | reps | Redis commands per job |"
    );
    let _ = writeln!(o, "|---|---|---|---|");
    for k in BACKLOG_PATHS {
        let runs: Vec<String> = s
            .get(&format!("backlog {k}"), "fairjob")
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect();
        let _ = writeln!(
            o,
            "| {} | {:.0} | {} | {:.3} |",
            backlog_key(k),
            s.median(&format!("backlog {k}"), "fairjob"),
            runs.join(" · "),
            s.median(&format!("backlog cmds {k}"), "fairjob")
        );
    }

    let _ = writeln!(o, "\nNotes:\n");
    let _ = writeln!(
        o,
        "- medians of {} rep(s), the systems alternated in each; one private PostgreSQL (fsync off, synchronous_commit off), a database per system; \
         fairjob's producers in Rust (sqlx), the peers' in node (pg); worker concurrency {} in the throughput rows.",
        a.reps, a.concurrency
    );
    let _ = writeln!(
        o,
        "- commit → start: one producer, {} jobs per system and rep; fairjob: `Pump::new` (polling, 100 ms while busy, up to 2 s idle) and a default `Worker`; \
         graphile-worker: `run()` defaults (concurrency 1, LISTEN/NOTIFY from `add_job`, poll 2 s); pg-boss: `work()` defaults (batchSize 1, a fetch every 2 s, \
         about 0.5 jobs/s), and in brackets the same with batchSize {} so that it keeps up.",
        a.latency_jobs,
        (a.rate * 4.0).ceil()
    );
    let _ = writeln!(
        o,
        "- end to end and the backlog: fairjob's pump as a user gets it (`Pump::new(..).run`, started with the producers) and a worker at concurrency {c}; \
         graphile-worker with concurrency {c}, a pool of {p} and a local queue of 500; pg-boss with {c} `work()` loops of batchSize {b} polling every 0.5 s, a pool of {p}.",
        c = a.concurrency,
        p = a.concurrency + 1,
        b = a.pgboss_batch
    );
    let _ = writeln!(
        o,
        "- the backlog: fairjob's row is its pumps (`pump_once` until the outbox is empty, batches of {}) moving {} committed rows into Redis, no worker; \
         the peers' equivalent is their worker processes (1, 2, 4) performing {} no-op jobs added in bulk (graphile-worker `addJobs`, pg-boss `insert`, \
         batches of 1,000), from the first job's start to the last one's end.",
        a.batch,
        thousands(a.backlog),
        thousands(a.backlog)
    );
    let _ = writeln!(
        o,
        "- the application's commits: {} producers, {} transactions each way, each `INSERT INTO bench_app`; the enqueue in the same transaction is \
         fairjob's `perform_async_tx(&mut *tx)`, graphile-worker's `SELECT graphile_worker.add_job(..)` (which sends a NOTIFY), pg-boss's \
         `send(.., {{ db }})` on the transaction's connection; no pump or worker runs meanwhile. Ratio with ÷ without; each harness against its own baseline.",
        a.producers, a.app_txs
    );
    for p in &env.peers {
        match &p.state {
            Ok(r) => {
                let _ = writeln!(o, "- {}: {}", p.kind.name(), r.version);
            }
            Err(why) => {
                let _ = writeln!(o, "- {} skipped: {why}", p.kind.name());
            }
        }
    }
    for sys in systems(&env.peers) {
        let bulk = s.median("bulk add", sys.name());
        if bulk.is_finite() {
            let _ = writeln!(o, "- {}'s bulk add: {bulk:.0} jobs/s", sys.name());
        }
    }
    for n in notes {
        let _ = writeln!(o, "- {n}");
    }
    o
}
