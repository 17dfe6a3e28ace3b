//! Tenant-sharded queues (issue 5): round-robin fairness across tenants and FIFO
//! within one, running limits kept in Redis (changed at runtime, 0 pauses), the
//! running count released exactly once through crashes and stalls, the
//! `queue:<name>` inbox for producers that know nothing of shards, retries and
//! scheduled jobs back to their tenant's shard, the `shards`/`shard-limit`
//! commands, and scale (10,000 tenants + one tenant with 100,000 jobs; the full
//! size runs in `--bin shards_scale`).
//!
//! Every test runs its own private redis-server.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairjob::broker::keys::{Keys, ShardKeys, encode};
use fairjob::{Job, QueueSpec};
use fairjob_tests::jobs::{GaugeJob, ScaleJob, ShardFailJob, ShardJob};
use fairjob_tests::{WorkerProcess, bin, client, namespace, raw, redis, wait_until, worker};
use redis::AsyncCommands;
use serde_json::{Value, json};

const Q: &str = "conversions";

fn shard_keys(ns: &str) -> ShardKeys {
    Keys::new(Some(ns)).shard(Q)
}

fn queues(q: &str) -> QueueSpec {
    QueueSpec::parse(&[q.to_owned()]).unwrap()
}

async fn records(url: &str, ns: &str) -> Vec<String> {
    raw(url)
        .await
        .lrange(format!("{ns}:record"), 0, -1)
        .await
        .unwrap()
}

async fn llen(url: &str, key: &str) -> usize {
    raw(url).await.llen(key).await.unwrap()
}

async fn scard(url: &str, key: &str) -> usize {
    raw(url).await.scard(key).await.unwrap()
}

/// Splits a record line `"<tenant> <n>"` (the tenant may contain spaces).
fn split_record(line: &str) -> (String, u32) {
    let (t, n) = line.rsplit_once(' ').expect("<tenant> <n>");
    (t.to_owned(), n.parse().expect("n"))
}

/// Round-robin, read off a start order (one worker at concurrency 1, so starts
/// are fetches, in order): between two consecutive jobs of one tenant no other
/// tenant runs twice; and each tenant's jobs run in enqueue order.
fn assert_round_robin_and_fifo(order: &[(String, u32)]) {
    let mut last_seen: HashMap<&str, usize> = HashMap::new();
    let mut next_n: HashMap<&str, u32> = HashMap::new();
    for (i, (t, n)) in order.iter().enumerate() {
        let expected = next_n.entry(t.as_str()).or_insert(0);
        assert_eq!(*n, *expected, "FIFO broken for tenant {t} at start #{i}");
        *expected += 1;
        if let Some(&p) = last_seen.get(t.as_str()) {
            let mut between = HashSet::new();
            for (u, _) in &order[p + 1..i] {
                assert!(
                    between.insert(u.as_str()),
                    "tenant {u} ran twice between two consecutive jobs of {t} (starts #{p}..#{i}): {:?}",
                    &order[p..=i]
                );
            }
        }
        last_seen.insert(t.as_str(), i);
    }
}

/// Checks, in one atomic step, that every tenant's running count equals the
/// number of its jobs in the in-progress records of all workers (so a count
/// released twice, never released, or negative shows up); returns the
/// violations and the running HASH.
const INVARIANT: &str = r"
local counts = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  for _, f in ipairs(redis.call('HKEYS', k)) do
    local q, t = string.match(f, '^%d+|([^|]*)|(.*)$')
    if q == ARGV[2] then counts[t] = (counts[t] or 0) + 1 end
  end
end
local bad = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local t, r = flat[i], tonumber(flat[i + 1])
  local c = counts[t] or 0
  if r ~= c then bad[#bad + 1] = t .. ': running ' .. r .. ', in progress ' .. c end
  counts[t] = nil
end
for t, c in pairs(counts) do bad[#bad + 1] = t .. ': running 0, in progress ' .. c end
return {bad, flat}
";

/// Samples [`INVARIANT`] every few ms until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<SamplerState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct SamplerState {
    samples: usize,
    violations: Vec<String>,
    /// Highest running count seen per (encoded) tenant.
    max_running: HashMap<String, i64>,
    /// Running count of one watched tenant over time.
    watched: Vec<(Instant, i64)>,
}

impl Sampler {
    fn start(url: &str, ns: &str, watch: Option<&str>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(SamplerState::default()));
        let (url, ns) = (url.to_owned(), ns.to_owned());
        let watch = watch.map(encode);
        let (s, st) = (stop.clone(), state.clone());
        let task = tokio::spawn(async move {
            let mut r = raw(&url).await;
            let script = redis::Script::new(INVARIANT);
            let running = shard_keys(&ns).running;
            let pattern = format!("{}*", shard_keys(&ns).inflight_prefix);
            while !s.load(Ordering::Relaxed) {
                let (bad, flat): (Vec<String>, Vec<String>) = script
                    .key(&running)
                    .arg(&pattern)
                    .arg(encode(Q))
                    .invoke_async(&mut r)
                    .await
                    .unwrap();
                let now = Instant::now();
                {
                    let mut st = st.lock().unwrap();
                    st.samples += 1;
                    st.violations.extend(bad);
                    let mut watched_now = 0;
                    for pair in flat.chunks(2) {
                        let n: i64 = pair[1].parse().unwrap();
                        let m = st.max_running.entry(pair[0].clone()).or_insert(n);
                        *m = (*m).max(n);
                        if Some(&pair[0]) == watch.as_ref() {
                            watched_now = n;
                        }
                    }
                    if watch.is_some() {
                        st.watched.push((now, watched_now));
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        });
        Sampler { stop, state, task }
    }

    async fn finish(self) -> SamplerState {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        Arc::try_unwrap(self.state)
            .ok()
            .expect("sampler done")
            .into_inner()
            .unwrap()
    }
}

/// Runs the real `test-worker` binary with a subcommand; returns stdout.
fn cli(url: &str, ns: &str, args: &[&str]) -> String {
    let out = Command::new(bin("test-worker"))
        .arg("-r")
        .arg(url)
        .arg("--namespace")
        .arg(ns)
        .args(args)
        .env("FAIRJOB_LOG", "warn")
        .output()
        .expect("test-worker runs");
    assert!(
        out.status.success(),
        "test-worker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// In-progress tokens of the worker process with `pid`.
async fn inflight_of_pid(url: &str, ns: &str, pid: u32) -> Vec<String> {
    let mut r = raw(url).await;
    let keys: Vec<String> = r
        .keys(format!("{}*%3A{pid}%3A*", shard_keys(ns).inflight_prefix))
        .await
        .unwrap();
    let mut out = Vec::new();
    for k in keys {
        let fields: Vec<String> = r.hkeys(&k).await.unwrap();
        out.extend(fields);
    }
    out
}

fn sidekiq_payload(class: &str, args: Value, tenant: Option<Value>) -> String {
    let mut p = json!({
        "class": class,
        "args": args,
        "retry": true,
        "queue": Q,
        "jid": fairjob::payload::new_jid(),
        "created_at": 1_700_000_000.5,
        "enqueued_at": 1_700_000_000.5,
    });
    if let Some(t) = tenant {
        p["fair_tenant"] = t;
    }
    p.to_string()
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_tenant_cannot_starve_ten_small_ones() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    assert!(c.is_sharded(Q), "ShardJob declares `conversions` sharded");
    c.push_bulk((0..10_000).map(|n| ShardJob {
        tenant: "A".into(),
        n,
        ms: 0,
    }))
    .await
    .unwrap();
    let w = worker(&url, &ns)
        .concurrency(1)
        .queues(queues(Q))
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    // A's backlog is being worked through when the small tenants arrive.
    assert!(
        wait_until(Duration::from_secs(20), || async {
            llen(&url, &format!("{ns}:record")).await >= 300
        })
        .await
    );
    let small: Vec<String> = ('B'..='K').map(|t| t.to_string()).collect();
    let mut enqueued_at = BTreeMap::new();
    for t in &small {
        c.push_bulk((0..10).map(|n| ShardJob {
            tenant: t.clone(),
            n,
            ms: 0,
        }))
        .await
        .unwrap();
        // Starts recorded by now include every job fetched before the push but
        // one (the job in flight at concurrency 1).
        enqueued_at.insert(t.clone(), llen(&url, &format!("{ns}:record")).await);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert!(
        wait_until(Duration::from_secs(120), || async {
            llen(&url, &format!("{ns}:record")).await >= 10_100
        })
        .await,
        "all 10,100 jobs run"
    );
    run.stop().await;

    let order: Vec<(String, u32)> = records(&url, &ns)
        .await
        .iter()
        .map(|l| split_record(l))
        .collect();
    assert_eq!(order.len(), 10_100, "each job ran once");
    for t in &small {
        let first = order
            .iter()
            .position(|(u, _)| u == t)
            .unwrap_or_else(|| panic!("{t} never ran"));
        let seen = enqueued_at[t];
        assert!(
            first <= seen + 11,
            "tenant {t}: first job started at #{first}, but it was enqueued when {seen} jobs had started \
             (at most 11 tenants share the rotation, so it must start within 11 fetches)"
        );
    }
    assert_round_robin_and_fifo(&order);
    // A tenant's last job is done: it left the rotation and the tenant list.
    let sk = shard_keys(&ns);
    let mut r = raw(&url).await;
    let ring: usize = r.zcard(&sk.ring).await.unwrap();
    let running: usize = r.hlen(&sk.running).await.unwrap();
    assert_eq!((ring, running, scard(&url, &sk.tenants).await), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_limit_runs_again_as_soon_as_one_of_its_jobs_finishes() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    c.broker()
        .set_shard_limit(Q, Some("solo"), Some(1))
        .await
        .unwrap();
    c.push_bulk((0..4).map(|n| GaugeJob {
        tenant: "solo".into(),
        n,
        ms: 200,
    }))
    .await
    .unwrap();
    // An idle worker looks at its queues only every 30 s: the next job must
    // start because the finish woke it, not because it polled.
    let w = worker(&url, &ns)
        .concurrency(4)
        .queues(queues(Q))
        .poll_intervals(Duration::from_secs(30), Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(20), || async {
            scard(&url, &format!("{ns}:done")).await == 4
        })
        .await
    );
    let took = started.elapsed();
    run.stop().await;
    let max: Option<i64> = raw(&url)
        .await
        .hget(format!("{ns}:gauge-max"), "solo")
        .await
        .unwrap();
    assert_eq!(max, Some(1), "limit 1: one at a time");
    assert!(
        took < Duration::from_secs(10),
        "4 jobs of 200 ms one after another took {took:?}: the tenant waited for a poll"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_worker_processes_and_change_at_runtime() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let sk = shard_keys(&ns);
    c.broker().set_shard_limit(Q, None, Some(3)).await.unwrap();
    // A per-tenant override beats the default: 0 pauses `paused`.
    c.broker()
        .set_shard_limit(Q, Some("paused"), Some(0))
        .await
        .unwrap();
    let mut total = 0usize;
    let mut jobs = Vec::new();
    for i in 0..50u32 {
        let t = format!("t{i:02}");
        for n in 0..(4 + (i % 5) * 4) {
            jobs.push(GaugeJob {
                tenant: t.clone(),
                n,
                ms: 40,
            });
        }
    }
    for n in 0..80 {
        jobs.push(GaugeJob {
            tenant: "hot".into(),
            n,
            ms: 40,
        });
    }
    total += jobs.len();
    c.push_bulk(jobs).await.unwrap();
    c.push_bulk((0..10).map(|n| GaugeJob {
        tenant: "paused".into(),
        n,
        ms: 40,
    }))
    .await
    .unwrap();

    let sampler = Sampler::start(&url, &ns, Some("hot"));
    let args = [
        "-q",
        Q,
        "-c",
        "20",
        "--lease",
        "5s",
        "--reaper-interval",
        "1s",
    ];
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| WorkerProcess::start(&url, &ns, None, &args))
        .collect();

    // Lower `hot` from the default 3 to 1 while it runs (the CLI, as an operator would).
    let done_of = |t: &'static str| {
        let url = url.clone();
        let ns = ns.clone();
        async move {
            let all: Vec<String> = raw(&url)
                .await
                .smembers(format!("{ns}:done"))
                .await
                .unwrap();
            all.iter().filter(|l| split_record(l).0 == t).count()
        }
    };
    assert!(
        wait_until(Duration::from_secs(30), || {
            let n = done_of("hot");
            async move { n.await >= 9 }
        })
        .await,
        "hot runs"
    );
    let out = cli(&url, &ns, &["shard-limit", Q, "1", "--tenant", "hot"]);
    assert!(out.contains("set to 1"), "{out}");
    let lowered = Instant::now();
    // Jobs fetched before the change end within 40 ms (1 s of margin for a
    // loaded machine); from then on one at a time.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _: () = raw(&url)
        .await
        .hset(format!("{ns}:gauge-max"), "hot", 0)
        .await
        .unwrap();

    // Everyone but the paused tenant finishes; the paused one has not started.
    let expected = total;
    assert!(
        wait_until(Duration::from_secs(60), || async {
            scard(&url, &format!("{ns}:done")).await >= expected
        })
        .await,
        "every job of the unpaused tenants runs: {} of {expected} done",
        scard(&url, &format!("{ns}:done")).await
    );
    assert_eq!(done_of("paused").await, 0, "a paused tenant does not run");
    let paused_list = sk.tenant_list(Some("paused"));
    assert_eq!(llen(&url, &paused_list).await, 10);
    let in_ring: Option<f64> = raw(&url).await.zscore(&sk.ring, "paused").await.unwrap();
    assert_eq!(in_ring, None, "a paused tenant is out of the rotation");
    let table = cli(&url, &ns, &["shards", Q]);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("paused "))
        .unwrap_or_else(|| panic!("no row for paused:\n{table}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols, ["paused", "10", "0", "0", "-"], "{table}");
    assert!(table.contains("default limit 3"), "{table}");

    // Raising the limit resumes it.
    let out = cli(&url, &ns, &["shard-limit", Q, "2", "--tenant", "paused"]);
    assert!(out.contains("set to 2"), "{out}");
    assert!(
        wait_until(Duration::from_secs(20), || async {
            scard(&url, &format!("{ns}:done")).await >= expected + 10
        })
        .await,
        "the resumed tenant runs"
    );
    assert!(
        wait_until(Duration::from_secs(5), || async {
            raw(&url).await.hlen::<_, usize>(&sk.running).await.unwrap() == 0
        })
        .await,
        "every tenant's running count returns to 0"
    );
    let state = sampler.finish().await;
    for w in &mut workers {
        w.signal("TERM");
        assert!(w.wait_timeout(Duration::from_secs(10)).is_some());
    }

    assert!(state.samples > 50, "{} samples", state.samples);
    assert!(
        state.violations.is_empty(),
        "running counts disagree with the in-progress records: {:?}",
        &state.violations[..state.violations.len().min(20)]
    );
    let gauge_max: HashMap<String, i64> = raw(&url)
        .await
        .hgetall(format!("{ns}:gauge-max"))
        .await
        .unwrap();
    for (t, m) in &gauge_max {
        let limit = match t.as_str() {
            "hot" => 1,
            "paused" => 2,
            _ => 3,
        };
        assert!(*m <= limit, "tenant {t}: {m} ran at once, limit {limit}");
        let seen = state.max_running.get(t.as_str()).copied().unwrap_or(0);
        assert!(seen <= 3, "tenant {t}: running count {seen}");
    }
    let at_limit = gauge_max.values().filter(|m| **m == 3).count();
    assert!(
        at_limit >= 5,
        "tenants with a backlog use their whole limit: {gauge_max:?}"
    );
    assert_eq!(gauge_max["paused"], 2);
    // After the change, `hot` is fetched only when none of its jobs runs: its
    // running count never rises to or above 2.
    let mut prev = i64::MAX;
    for (at, n) in state.watched.iter().filter(|(at, _)| *at >= lowered) {
        assert!(
            n <= &prev.max(1),
            "hot's running count rose to {n} {:?} after its limit became 1",
            at.duration_since(lowered)
        );
        prev = *n;
    }
    let performed: usize = raw(&url)
        .await
        .get(format!("{ns}:performed"))
        .await
        .unwrap();
    assert_eq!(performed, expected + 10, "no job ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_jobs_return_to_their_shard_and_release_the_count_once() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let sk = shard_keys(&ns);
    c.broker()
        .set_shard_limit(Q, Some("crash"), Some(2))
        .await
        .unwrap();
    c.push_bulk((0..6).map(|n| GaugeJob {
        tenant: "crash".into(),
        n,
        ms: 1500,
    }))
    .await
    .unwrap();
    let mut others = Vec::new();
    for i in 0..10 {
        for n in 0..3 {
            others.push(GaugeJob {
                tenant: format!("o{i}"),
                n,
                ms: 100,
            });
        }
    }
    c.push_bulk(others).await.unwrap();
    let sampler = Sampler::start(&url, &ns, None);
    let args = [
        "-q",
        Q,
        "-c",
        "10",
        "--lease",
        "1500ms",
        "--heartbeat",
        "300ms",
        "--reaper-interval",
        "300ms",
    ];
    let mut w1 = WorkerProcess::start(&url, &ns, None, &args);
    let pid = w1.pid();
    let crash_tokens = |tokens: &[String]| {
        tokens
            .iter()
            .filter(|t| t.ends_with(&format!("|{Q}|crash")))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), || async {
            crash_tokens(&inflight_of_pid(&url, &ns, pid).await) == 2
        })
        .await,
        "the first worker holds two jobs of `crash`"
    );
    // Both have started (recorded their start) before the kill, so each shows twice.
    assert!(
        wait_until(Duration::from_secs(10), || async {
            records(&url, &ns)
                .await
                .iter()
                .filter(|l| split_record(l).0 == "crash")
                .count()
                == 2
        })
        .await,
        "both held `crash` jobs started"
    );
    w1.signal("KILL");
    w1.wait_timeout(Duration::from_secs(5)).expect("killed");
    let held = inflight_of_pid(&url, &ns, pid).await;
    assert_eq!(crash_tokens(&held), 2);
    let running: Option<i64> = raw(&url).await.hget(&sk.running, "crash").await.unwrap();
    assert_eq!(running, Some(2), "the dead worker's jobs still count");
    let mut w2 = WorkerProcess::start(&url, &ns, None, &args);
    assert!(
        wait_until(Duration::from_secs(40), || async {
            scard(&url, &format!("{ns}:done")).await == 36
        })
        .await,
        "every job completes"
    );
    assert!(
        wait_until(Duration::from_secs(5), || async {
            raw(&url).await.hlen::<_, usize>(&sk.running).await.unwrap() == 0
        })
        .await,
        "running counts return to 0"
    );
    let state = sampler.finish().await;
    w2.signal("TERM");
    assert!(w2.wait_timeout(Duration::from_secs(10)).is_some());
    assert!(
        state.violations.is_empty(),
        "running counts disagree with the in-progress records: {:?}",
        &state.violations[..state.violations.len().min(20)]
    );
    assert!(state.max_running["crash"] <= 2, "{:?}", state.max_running);
    let recovered: usize = raw(&url)
        .await
        .get(format!("{ns}:fairjob:stat:recovered"))
        .await
        .unwrap();
    assert_eq!(recovered, held.len(), "each held job recovered once");
    // The recovered jobs went back to the front of `crash`'s shard: after the
    // kill, `crash` starts them again before its jobs that were still waiting.
    let crash: Vec<u32> = records(&url, &ns)
        .await
        .iter()
        .map(|l| split_record(l))
        .filter(|(t, _)| t == "crash")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(crash.len(), 8, "6 jobs, 2 of them twice: {crash:?}");
    let mut first_two = crash[..2].to_vec();
    first_two.sort();
    let mut again = crash[2..4].to_vec();
    again.sort();
    assert_eq!(
        first_two, again,
        "the killed jobs run again first: {crash:?}"
    );
    // (Jobs started together may record in either order.)
    let mut rest = crash[4..].to_vec();
    rest.sort();
    assert_eq!(rest, [2, 3, 4, 5], "{crash:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_workers_late_finish_is_fenced_and_releases_nothing() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let sk = shard_keys(&ns);
    c.broker()
        .set_shard_limit(Q, Some("stall"), Some(1))
        .await
        .unwrap();
    c.push_bulk((0..3).map(|n| GaugeJob {
        tenant: "stall".into(),
        n,
        ms: 1000,
    }))
    .await
    .unwrap();
    let sampler = Sampler::start(&url, &ns, None);
    let args = [
        "-q",
        Q,
        "-c",
        "5",
        "--lease",
        "1500ms",
        "--heartbeat",
        "300ms",
        "--reaper-interval",
        "300ms",
    ];
    let w1 = WorkerProcess::start(&url, &ns, None, &args);
    assert!(
        wait_until(Duration::from_secs(20), || async {
            !inflight_of_pid(&url, &ns, w1.pid()).await.is_empty()
        })
        .await
    );
    w1.signal("STOP");
    let w2 = WorkerProcess::start(&url, &ns, None, &args);
    // w2 recovers the stalled job and runs it again.
    assert!(
        wait_until(Duration::from_secs(20), || async {
            records(&url, &ns)
                .await
                .iter()
                .filter(|l| *l == "stall 0")
                .count()
                == 2
        })
        .await,
        "the stalled job runs again elsewhere"
    );
    w1.signal("CONT");
    assert!(
        wait_until(Duration::from_secs(20), || async {
            scard(&url, &format!("{ns}:done")).await == 3
        })
        .await
    );
    assert!(
        wait_until(Duration::from_secs(5), || async {
            let fenced: Option<u64> = raw(&url)
                .await
                .get(format!("{ns}:fairjob:stat:fenced"))
                .await
                .unwrap();
            fenced >= Some(1) && raw(&url).await.hlen::<_, usize>(&sk.running).await.unwrap() == 0
        })
        .await,
        "the late finish is fenced and the count is back to 0"
    );
    let state = sampler.finish().await;
    drop((w1, w2));
    assert!(
        state.violations.is_empty(),
        "running counts disagree with the in-progress records: {:?}",
        &state.violations[..state.violations.len().min(20)]
    );
    assert!(state.max_running["stall"] <= 1, "{:?}", state.max_running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidekiq_producers_inbox_is_sorted_into_shards_and_served_round_robin() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let sk = shard_keys(&ns);
    let odd = "a:b {c}/é *";
    c.broker()
        .set_shard_limit(Q, Some(odd), Some(0))
        .await
        .unwrap();
    let mut r = raw(&url).await;
    let inbox = format!("{ns}:queue:{Q}");
    assert_eq!(sk.inbox, inbox);
    // Interleaved: direct pushes (straight to the shards) and Ruby-style LPUSHes.
    for n in 0..8u32 {
        for t in ["A", "B"] {
            ShardJob {
                tenant: t.into(),
                n,
                ms: 0,
            }
            .perform_async(&c)
            .await
            .unwrap();
        }
        let entries = [
            sidekiq_payload(
                "ShardJob",
                json!([{"tenant": "R", "n": n, "ms": 0}]),
                Some(json!("R")),
            ),
            // Ruby may write a tenant as a number.
            sidekiq_payload(
                "ShardJob",
                json!([{"tenant": "42", "n": n, "ms": 0}]),
                Some(json!(42)),
            ),
            // No tenant: the shared shard.
            sidekiq_payload("ShardJob", json!([{"tenant": "-", "n": n, "ms": 0}]), None),
        ];
        for e in entries {
            let _: () = r.lpush(&inbox, e).await.unwrap();
        }
    }
    for n in 0..2 {
        let e = sidekiq_payload(
            "ShardJob",
            json!([{"tenant": odd, "n": n, "ms": 0}]),
            Some(json!(odd)),
        );
        let _: () = r.lpush(&inbox, e).await.unwrap();
    }
    let w = worker(&url, &ns)
        .concurrency(1)
        .queues(queues(Q))
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(20), || async {
            llen(&url, &format!("{ns}:record")).await >= 40
        })
        .await
    );
    let order: Vec<(String, u32)> = records(&url, &ns)
        .await
        .iter()
        .map(|l| split_record(l))
        .collect();
    assert_eq!(order.len(), 40, "{order:?}");
    assert_round_robin_and_fifo(&order);
    for (i, round) in order.chunks(5).enumerate() {
        let tenants: HashSet<&str> = round.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(tenants.len(), 5, "round {i}: {round:?}");
    }
    // The inbox is empty; the paused tenant's entries sit in its own shard
    // (keyed by the encoded tenant), the numeric tenant had its own shard.
    assert_eq!(llen(&url, &inbox).await, 0);
    assert_eq!(llen(&url, &sk.tenant_list(Some(odd))).await, 2);
    let tenants: HashSet<String> = r.smembers(&sk.tenants).await.unwrap();
    assert!(tenants.contains(&encode(odd)), "{tenants:?}");
    // Resuming it, and a late Ruby push while the worker idles, both run.
    c.broker()
        .set_shard_limit(Q, Some(odd), None)
        .await
        .unwrap();
    let late = sidekiq_payload(
        "ShardJob",
        json!([{"tenant": "late", "n": 0, "ms": 0}]),
        Some(json!("late")),
    );
    let _: () = r.lpush(&inbox, late).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || async {
            llen(&url, &format!("{ns}:record")).await == 43
        })
        .await
    );
    run.stop().await;
    let tail: HashSet<String> = records(&url, &ns).await[40..].iter().cloned().collect();
    let want: HashSet<String> = [format!("{odd} 0"), format!("{odd} 1"), "late 0".to_owned()]
        .into_iter()
        .collect();
    assert_eq!(tail, want);
    assert_eq!(scard(&url, &sk.tenants).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_scheduled_jobs_return_to_their_tenants_shard() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let sk = shard_keys(&ns);
    let mut r = raw(&url).await;
    ShardFailJob {
        tenant: "acme co".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    let w = worker(&url, &ns)
        .queues(queues(Q))
        .poll_intervals(Duration::from_millis(100), Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            raw(&url)
                .await
                .zcard::<_, usize>(format!("{ns}:retry"))
                .await
                .unwrap()
                == 1
        })
        .await
    );
    run.stop().await;
    let retry: Vec<String> = r.zrange(format!("{ns}:retry"), 0, -1).await.unwrap();
    let job: Value = serde_json::from_str(&retry[0]).unwrap();
    assert_eq!(job["fair_tenant"], "acme co");
    assert_eq!(job["queue"], Q);
    assert_eq!(job["retry_count"], 0);
    let running: usize = r.hlen(&sk.running).await.unwrap();
    assert_eq!(running, 0, "a failure releases the count");

    let jid = ShardJob {
        tenant: "later/1".into(),
        n: 0,
        ms: 0,
    }
    .perform_in(&c, Duration::from_secs(30))
    .await
    .unwrap();

    // A worker of another queue promotes both, an hour early by its clock.
    let w = worker(&url, &ns)
        .queues(queues("default"))
        .clock_offset(3600)
        .build()
        .await
        .unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let mut r = raw(&url).await;
            let a: usize = r.zcard(format!("{ns}:retry")).await.unwrap();
            let b: usize = r.zcard(format!("{ns}:schedule")).await.unwrap();
            a + b == 0
        })
        .await,
        "promoted"
    );
    run.stop().await;
    assert_eq!(llen(&url, &sk.inbox).await, 0, "not through the inbox");
    let acme: Vec<String> = r
        .lrange(sk.tenant_list(Some("acme co")), 0, -1)
        .await
        .unwrap();
    assert_eq!(acme.len(), 1, "the retry is back in acme co's shard");
    let retried: Value = serde_json::from_str(&acme[0]).unwrap();
    assert_eq!(retried["class"], "ShardFailJob");
    assert_eq!(retried["retry_count"], 0);
    assert!(
        sk.tenant_list(Some("acme co"))
            .ends_with(":shard:acme%20co")
    );
    let later: Vec<String> = r
        .lrange(sk.tenant_list(Some("later/1")), 0, -1)
        .await
        .unwrap();
    assert_eq!(later.len(), 1, "the scheduled job is in later/1's shard");
    assert!(later[0].contains(&jid));
    let ring: Vec<String> = r.zrange(&sk.ring, 0, -1).await.unwrap();
    assert_eq!(ring.len(), 2);
    assert!(ring.contains(&"acme%20co".to_owned()) && ring.contains(&"later%2F1".to_owned()));

    // And they run from there: the retry fails for the last time (retry = 1).
    let w = worker(&url, &ns).queues(queues(Q)).build().await.unwrap();
    let run = fairjob_tests::spawn(w);
    assert!(
        wait_until(Duration::from_secs(10), || async {
            raw(&url)
                .await
                .zcard::<_, usize>(format!("{ns}:dead"))
                .await
                .unwrap()
                == 1
                && llen(&url, &format!("{ns}:record")).await == 3
        })
        .await
    );
    run.stop().await;
    let rec = records(&url, &ns).await;
    assert!(rec.contains(&"later/1 0".to_owned()), "{rec:?}");
    assert_eq!(
        rec.iter().filter(|l| l.starts_with("acme co fail")).count(),
        2,
        "{rec:?}"
    );
    let running: usize = r.hlen(&sk.running).await.unwrap();
    assert_eq!(running, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_command_shows_pending_running_limit_and_rotation() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    for (t, n) in [("alpha", 3u32), ("beta", 2), ("gamma", 1)] {
        c.push_bulk((0..n).map(|n| ShardJob {
            tenant: t.into(),
            n,
            ms: 0,
        }))
        .await
        .unwrap();
    }
    c.broker().set_shard_limit(Q, None, Some(5)).await.unwrap();
    c.broker()
        .set_shard_limit(Q, Some("beta"), Some(0))
        .await
        .unwrap();
    let _: () = raw(&url)
        .await
        .lpush(
            format!("{ns}:queue:{Q}"),
            sidekiq_payload("ShardJob", json!([{"tenant": "x", "n": 0}]), None),
        )
        .await
        .unwrap();
    let table = cli(&url, &ns, &["shards", Q]);
    let rows: BTreeMap<&str, Vec<&str>> = table
        .lines()
        .skip(2)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0], cols[1..].to_vec())
        })
        .collect();
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .contains("3 tenant(s), default limit 5, inbox 1"),
        "{table}"
    );
    assert_eq!(rows["alpha"], ["3", "0", "5", "#1"], "{table}");
    assert_eq!(rows["beta"], ["2", "0", "0", "-"], "{table}");
    assert_eq!(rows["gamma"], ["1", "0", "5", "#2"], "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_tenants_and_one_with_a_hundred_thousand_jobs_each_run_once() {
    const TENANTS: u64 = 10_000;
    const BIG: u64 = 100_000;
    let total = (TENANTS + BIG) as usize;
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    fairjob_tests::jobs::scale_reset(total);
    let t0 = Instant::now();
    c.push_bulk(
        (0..BIG / 2)
            .map(|id| ScaleJob(u32::MAX, TENANTS + id))
            .chain((0..TENANTS).map(|id| ScaleJob(id as u32, id)))
            .chain((BIG / 2..BIG).map(|id| ScaleJob(u32::MAX, TENANTS + id))),
    )
    .await
    .unwrap();
    let pushed = t0.elapsed();
    let sk = Keys::new(Some(&ns)).shard("scale");
    assert_eq!(scard(&url, &sk.tenants).await, TENANTS as usize + 1);
    let t1 = Instant::now();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let w = worker(&url, &ns)
            .concurrency(100)
            .lease(
                Duration::from_secs(30),
                Duration::from_secs(5),
                Duration::from_secs(15),
            )
            .queues(queues("scale"))
            .build()
            .await
            .unwrap();
        runs.push(fairjob_tests::spawn(w));
    }
    let mut last = (Instant::now(), 0);
    loop {
        let done = fairjob_tests::jobs::SCALE_DONE.load(Ordering::SeqCst);
        if done >= total {
            break;
        }
        if done != last.1 {
            last = (Instant::now(), done);
        }
        assert!(
            last.0.elapsed() < Duration::from_secs(20),
            "stuck at {done}/{total}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drained = t1.elapsed();
    for run in runs {
        run.stop().await;
    }
    eprintln!("scale (debug): pushed {total} in {pushed:?}, drained in {drained:?}");
    let wrong: Vec<(usize, u8)> = fairjob_tests::jobs::SCALE_SEEN
        .read()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.load(Ordering::SeqCst)))
        .filter(|(_, c)| *c != 1)
        .take(10)
        .collect();
    assert!(wrong.is_empty(), "jobs not run exactly once: {wrong:?}");
    assert_eq!(
        fairjob_tests::jobs::SCALE_DONE.load(Ordering::SeqCst),
        total
    );
    let mut r = raw(&url).await;
    let ring: usize = r.zcard(&sk.ring).await.unwrap();
    let running: usize = r.hlen(&sk.running).await.unwrap();
    assert_eq!((ring, running, scard(&url, &sk.tenants).await), (0, 0, 0));
}
