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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairjob::broker::keys::encode;
use fairjob::{Client, Job};
use fairjob_tests::jobs::{GaugeJob, ScaleJob, ShardFailJob, ShardJob};
use fairjob_tests::{Redis, RunningWorker, TestWorker, eventually, queues};
use redis::AsyncCommands;
use serde_json::{Value, json};

const Q: &str = "conversions";

/// A worker process of `Q` at concurrency `c`.
fn worker(redis: &Redis, c: usize) -> TestWorker {
    redis.worker_process().queues([Q]).concurrency(c)
}

/// Gives `tenant` a running limit of `limit` and a backlog of `n` GaugeJobs
/// of `ms` each.
async fn limited_backlog(c: &Client, tenant: &str, limit: u32, n: u32, ms: u64) {
    c.broker()
        .set_shard_limit(Q, Some(tenant), Some(limit))
        .await
        .unwrap();
    c.push_bulk(GaugeJob::batch(tenant, n, ms)).await.unwrap();
}

/// One in-process worker of `Q` at concurrency 1: its starts are its fetches, in order.
async fn one_at_a_time(redis: &Redis) -> RunningWorker {
    let w = redis.worker().concurrency(1).queues(queues(&[Q]));
    fairjob_tests::spawn(w.build().await.unwrap())
}

/// Jobs done (the SET `done` of `GaugeJob`s: `<tenant> <n>`).
async fn done(redis: &Redis) -> usize {
    redis.scard(redis.key("done")).await
}

/// The records (`<tenant> <n>`), split.
async fn order(redis: &Redis) -> Vec<(String, u32)> {
    redis
        .records()
        .await
        .iter()
        .map(|l| split_record(l))
        .collect()
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

impl SamplerState {
    fn assert_no_violations(&self) {
        assert!(
            self.violations.is_empty(),
            "running counts disagree with the in-progress records: {:?}",
            &self.violations[..self.violations.len().min(20)]
        );
    }
}

impl Sampler {
    fn start(redis: &Redis, watch: Option<&str>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(SamplerState::default()));
        let mut r = redis.conn();
        let sk = redis.keys().shard(Q);
        let watch = watch.map(encode);
        let (s, st) = (stop.clone(), state.clone());
        let task = tokio::spawn(async move {
            let script = redis::Script::new(INVARIANT);
            let running = sk.running;
            let pattern = format!("{}*", sk.inflight_prefix);
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

    /// Waits for every tenant's running count to return to 0 (the jobs are
    /// done), then stops sampling.
    async fn settle(self, redis: &Redis) -> SamplerState {
        let running = redis.keys().shard(Q).running;
        eventually!(
            within Duration::from_secs(5),
            let counts = redis.hlen(&running).await; counts == 0,
            "every tenant's running count returns to 0"
        );
        self.finish().await
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

/// In-progress tokens of the worker process with `pid`.
async fn inflight_of_pid(redis: &Redis, pid: u32) -> Vec<String> {
    let pattern = format!("{}*%3A{pid}%3A*", redis.keys().shard(Q).inflight_prefix);
    let mut out = Vec::new();
    for k in redis.scan_keys(&pattern).await {
        let fields: Vec<String> = redis.conn().hkeys(&k).await.unwrap();
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
    let redis = Redis::start().await;
    let c = redis.client().await;
    assert!(c.is_sharded(Q), "ShardJob declares `conversions` sharded");
    c.push_bulk(ShardJob::batch("A", 10_000)).await.unwrap();
    let run = one_at_a_time(&redis).await;
    eventually!(
        within Duration::from_secs(20),
        let started = redis.recorded().await; started >= 300,
        "A's backlog is being worked through when the small tenants arrive"
    );
    let small: Vec<String> = ('B'..='K').map(|t| t.to_string()).collect();
    let mut enqueued_at = BTreeMap::new();
    for t in &small {
        c.push_bulk(ShardJob::batch(t, 10)).await.unwrap();
        // Starts recorded by now include every job fetched before the push but
        // one (the job in flight at concurrency 1).
        enqueued_at.insert(t.clone(), redis.recorded().await);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    eventually!(
        within Duration::from_secs(120),
        let started = redis.recorded().await; started >= 10_100,
        "all 10,100 jobs run"
    );
    run.stop().await;

    let order = order(&redis).await;
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
    assert_shards_empty(&redis, Q).await;
}

/// Nothing of the sharded queue `q` is left: no tenant in the rotation, none
/// running, none listed.
async fn assert_shards_empty(redis: &Redis, q: &str) {
    let sk = redis.keys().shard(q);
    let left = (
        redis.zcard(&sk.ring).await,
        redis.hlen(&sk.running).await,
        redis.scard(&sk.tenants).await,
    );
    assert_eq!(left, (0, 0, 0), "ring, running, tenants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_limit_runs_again_as_soon_as_one_of_its_jobs_finishes() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    limited_backlog(&c, "solo", 1, 4, 200).await;
    // An idle worker looks at its queues only every 30 s: the next job must
    // start because the finish woke it, not because it polled.
    let w = redis
        .worker()
        .concurrency(4)
        .queues(queues(&[Q]))
        .poll_interval(Duration::from_secs(30))
        .scheduled_poll_interval(Duration::from_secs(5));
    let started = Instant::now();
    let run = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(
        within Duration::from_secs(20),
        let done = done(&redis).await; done == 4,
        "every job of `solo` runs"
    );
    let took = started.elapsed();
    run.stop().await;
    let max: Option<i64> = redis
        .conn()
        .hget(redis.key("gauge-max"), "solo")
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
    let redis = Redis::start().await;
    let c = redis.client().await;
    let sk = redis.keys().shard(Q);
    c.broker().set_shard_limit(Q, None, Some(3)).await.unwrap();
    // A per-tenant override beats the default: 0 pauses `paused`.
    c.broker()
        .set_shard_limit(Q, Some("paused"), Some(0))
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for i in 0..50u32 {
        jobs.extend(GaugeJob::batch(&format!("t{i:02}"), 4 + (i % 5) * 4, 40));
    }
    jobs.extend(GaugeJob::batch("hot", 80, 40));
    let expected = jobs.len();
    c.push_bulk(jobs).await.unwrap();
    c.push_bulk(GaugeJob::batch("paused", 10, 40))
        .await
        .unwrap();

    let sampler = Sampler::start(&redis, Some("hot"));
    let worker = worker(&redis, 20)
        .flag("--lease", "5s")
        .flag("--reaper-interval", "1s");
    let mut workers = [worker.start(), worker.start(), worker.start()];

    // Lower `hot` from the default 3 to 1 while it runs (the CLI, as an operator would).
    let done_of = |t: &'static str| {
        let redis = redis.clone();
        async move {
            let all: Vec<String> = redis.conn().smembers(redis.key("done")).await.unwrap();
            all.iter().filter(|l| split_record(l).0 == t).count()
        }
    };
    eventually!(
        within Duration::from_secs(30),
        let hot = done_of("hot").await; hot >= 9,
        "hot runs"
    );
    let out = redis.cli(&["shard-limit", Q, "1", "--tenant", "hot"]);
    assert!(out.contains("set to 1"), "{out}");
    let lowered = Instant::now();
    // Jobs fetched before the change end within 40 ms (1 s of margin for a
    // loaded machine); from then on one at a time.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _: () = redis
        .conn()
        .hset(redis.key("gauge-max"), "hot", 0)
        .await
        .unwrap();

    // Everyone but the paused tenant finishes; the paused one has not started.
    eventually!(
        within Duration::from_secs(60),
        let done = done(&redis).await; done >= expected,
        "every job of the unpaused tenants runs ({expected})"
    );
    assert_eq!(done_of("paused").await, 0, "a paused tenant does not run");
    assert_eq!(redis.llen(sk.tenant_list(Some("paused"))).await, 10);
    let in_order: Option<String> = redis.conn().hget(&sk.rmember, "paused").await.unwrap();
    assert_eq!(in_order, None, "a paused tenant is out of the rotation");
    let table = redis.cli(&["shards", Q]);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("paused "))
        .unwrap_or_else(|| panic!("no row for paused:\n{table}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // pending, running, weight, floor, cap, pass, rotation
    assert_eq!(cols[..5], ["paused", "10", "0", "1", "0"], "{table}");
    assert_eq!(cols[5], "0", "cap 0: paused\n{table}");
    assert_eq!(cols[7], "-", "out of the rotation\n{table}");
    assert!(table.contains("cap 3;"), "{table}");

    // Raising the limit resumes it.
    let out = redis.cli(&["shard-limit", Q, "2", "--tenant", "paused"]);
    assert!(out.contains("set to 2"), "{out}");
    eventually!(
        within Duration::from_secs(20),
        let done = done(&redis).await; done >= expected + 10,
        "the resumed tenant runs"
    );
    let state = sampler.settle(&redis).await;
    for w in &mut workers {
        assert!(w.stop().is_some());
    }

    assert!(state.samples > 50, "{} samples", state.samples);
    state.assert_no_violations();
    let gauge_max: HashMap<String, i64> =
        redis.conn().hgetall(redis.key("gauge-max")).await.unwrap();
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
    let performed: usize = redis.get(redis.key("performed")).await;
    assert_eq!(performed, expected + 10, "no job ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_jobs_return_to_their_shard_and_release_the_count_once() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let sk = redis.keys().shard(Q);
    limited_backlog(&c, "crash", 2, 6, 1500).await;
    let others = (0..10).flat_map(|i| GaugeJob::batch(&format!("o{i}"), 3, 100));
    c.push_bulk(others).await.unwrap();
    let sampler = Sampler::start(&redis, None);
    let mut w1 = worker(&redis, 10).start();
    let pid = w1.pid();
    let crash_tokens = |tokens: &[String]| {
        tokens
            .iter()
            .filter(|t| t.ends_with(&format!("|{Q}|crash")))
            .count()
    };
    eventually!(
        within Duration::from_secs(20),
        let held = crash_tokens(&inflight_of_pid(&redis, pid).await); held == 2,
        "the first worker holds two jobs of `crash`"
    );
    // Both have started (recorded their start) before the kill, so each shows twice.
    let crash_started = || async {
        order(&redis)
            .await
            .iter()
            .filter(|(t, _)| t == "crash")
            .count()
    };
    eventually!(
        let started = crash_started().await; started == 2,
        "both held `crash` jobs start"
    );
    w1.signal("KILL");
    w1.wait_timeout(Duration::from_secs(5)).expect("killed");
    let held = inflight_of_pid(&redis, pid).await;
    assert_eq!(crash_tokens(&held), 2);
    let running: Option<i64> = redis.conn().hget(&sk.running, "crash").await.unwrap();
    assert_eq!(running, Some(2), "the dead worker's jobs still count");
    let mut w2 = worker(&redis, 10).start();
    eventually!(
        within Duration::from_secs(40),
        let done = done(&redis).await; done == 36,
        "every job completes"
    );
    let state = sampler.settle(&redis).await;
    assert!(w2.stop().is_some());
    state.assert_no_violations();
    assert!(state.max_running["crash"] <= 2, "{:?}", state.max_running);
    assert_eq!(
        redis.stat("recovered").await,
        held.len() as i64,
        "each held job recovered once"
    );
    // The recovered jobs went back to the front of `crash`'s shard: after the
    // kill, `crash` starts them again before its jobs that were still waiting.
    let crash: Vec<u32> = order(&redis)
        .await
        .into_iter()
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
    let redis = Redis::start().await;
    let c = redis.client().await;
    let sk = redis.keys().shard(Q);
    limited_backlog(&c, "stall", 1, 3, 1000).await;
    let sampler = Sampler::start(&redis, None);
    let w1 = worker(&redis, 5).start();
    // Holds it and has started it (a job fetched but not yet started when
    // the worker freezes would run once only, on the second worker).
    eventually!(
        within Duration::from_secs(20),
        let held = inflight_of_pid(&redis, w1.pid()).await;
        !held.is_empty() && redis.records().await.iter().any(|l| l == "stall 0"),
        "the first worker holds a job and has started it"
    );
    w1.signal("STOP");
    let w2 = worker(&redis, 5).start();
    // w2 recovers the stalled job and runs it again.
    eventually!(
        within Duration::from_secs(20),
        let records = redis.records().await;
        records.iter().filter(|l| *l == "stall 0").count() == 2,
        "the stalled job runs again elsewhere"
    );
    w1.signal("CONT");
    eventually!(
        within Duration::from_secs(20),
        let done = done(&redis).await; done == 3,
        "every job completes"
    );
    eventually!(
        within Duration::from_secs(5),
        let fenced_running = (redis.stat("fenced").await, redis.hlen(&sk.running).await);
        fenced_running.0 >= 1 && fenced_running.1 == 0,
        "the late finish is fenced and the count is back to 0"
    );
    let state = sampler.finish().await;
    drop((w1, w2));
    state.assert_no_violations();
    assert!(state.max_running["stall"] <= 1, "{:?}", state.max_running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidekiq_producers_inbox_is_sorted_into_shards_and_served_round_robin() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let sk = redis.keys().shard(Q);
    let odd = "a:b {c}/é *";
    c.broker()
        .set_shard_limit(Q, Some(odd), Some(0))
        .await
        .unwrap();
    assert_eq!(sk.inbox, redis.key(&format!("queue:{Q}")));
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
            redis.lpush_raw(Q, e).await;
        }
    }
    for n in 0..2 {
        let e = sidekiq_payload(
            "ShardJob",
            json!([{"tenant": odd, "n": n, "ms": 0}]),
            Some(json!(odd)),
        );
        redis.lpush_raw(Q, e).await;
    }
    let run = one_at_a_time(&redis).await;
    eventually!(
        within Duration::from_secs(20),
        let started = redis.recorded().await; started >= 40,
        "every job of the unpaused tenants runs"
    );
    let order = order(&redis).await;
    assert_eq!(order.len(), 40, "{order:?}");
    assert_round_robin_and_fifo(&order);
    for (i, round) in order.chunks(5).enumerate() {
        let tenants: HashSet<&str> = round.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(tenants.len(), 5, "round {i}: {round:?}");
    }
    // The inbox is empty; the paused tenant's entries sit in its own shard
    // (keyed by the encoded tenant), the numeric tenant had its own shard.
    assert_eq!(redis.llen(&sk.inbox).await, 0);
    assert_eq!(redis.llen(sk.tenant_list(Some(odd))).await, 2);
    let tenants: HashSet<String> = redis.conn().smembers(&sk.tenants).await.unwrap();
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
    redis.lpush_raw(Q, late).await;
    eventually!(
        let started = redis.recorded().await; started == 43,
        "the resumed tenant and the late push run"
    );
    run.stop().await;
    let tail: HashSet<String> = redis.records().await[40..].iter().cloned().collect();
    let want: HashSet<String> = [format!("{odd} 0"), format!("{odd} 1"), "late 0".to_owned()]
        .into_iter()
        .collect();
    assert_eq!(tail, want);
    assert_eq!(redis.scard(&sk.tenants).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_scheduled_jobs_return_to_their_tenants_shard() {
    let redis = Redis::start().await;
    let keys = redis.keys();
    let c = redis.client().await;
    let sk = keys.shard(Q);
    ShardFailJob {
        tenant: "acme co".into(),
    }
    .perform_async(&c)
    .await
    .unwrap();
    let w = redis
        .worker()
        .queues(queues(&[Q]))
        .poll_interval(Duration::from_millis(100))
        .scheduled_poll_interval(Duration::from_secs(3600));
    let run = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(redis.zcard(keys.retry()).await == 1, "the job fails");
    run.stop().await;
    let retry = redis.payloads(&keys.retry()).await;
    let job = &retry[0];
    assert_eq!(job["fair_tenant"], "acme co");
    assert_eq!(job["queue"], Q);
    assert_eq!(job["retry_count"], 0);
    assert_eq!(
        redis.hlen(&sk.running).await,
        0,
        "a failure releases the count"
    );

    let jid = ShardJob {
        tenant: "later/1".into(),
        n: 0,
        ms: 0,
    }
    .perform_in(&c, Duration::from_secs(30))
    .await
    .unwrap();

    // A worker of another queue promotes both, an hour early by its clock.
    let w = redis
        .worker()
        .queues(queues(&["default"]))
        .clock_offset(3600);
    let run = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(
        let waiting = redis.zcard(keys.retry()).await + redis.zcard(keys.schedule()).await;
        waiting == 0,
        "promoted"
    );
    run.stop().await;
    assert_eq!(redis.llen(&sk.inbox).await, 0, "not through the inbox");
    let acme = redis.payloads(&sk.tenant_list(Some("acme co"))).await;
    assert_eq!(acme.len(), 1, "the retry is back in acme co's shard");
    assert_eq!(acme[0]["class"], "ShardFailJob");
    assert_eq!(acme[0]["retry_count"], 0);
    assert!(
        sk.tenant_list(Some("acme co"))
            .ends_with(":shard:acme%20co")
    );
    let later = redis.lrange(sk.tenant_list(Some("later/1"))).await;
    assert_eq!(later.len(), 1, "the scheduled job is in later/1's shard");
    assert!(later[0].contains(&jid));
    // Both are in the dispatch order.
    let mut ready: Vec<String> = redis.conn().hkeys(&sk.rmember).await.unwrap();
    ready.retain(|t| t != fairjob::policy::dispatch::state::RMEMBER_MARK);
    assert_eq!(ready.len(), 2);
    assert!(ready.contains(&"acme%20co".to_owned()) && ready.contains(&"later%2F1".to_owned()));

    // And they run from there: the retry fails for the last time (retry = 1).
    let run = fairjob_tests::spawn(redis.worker().queues(queues(&[Q])).build().await.unwrap());
    eventually!(
        redis.zcard(keys.dead()).await == 1 && redis.records().await.len() == 3,
        "the retry dies and the scheduled job runs"
    );
    run.stop().await;
    let rec = redis.records().await;
    assert!(rec.contains(&"later/1 0".to_owned()), "{rec:?}");
    assert_eq!(
        rec.iter().filter(|l| l.starts_with("acme co fail")).count(),
        2,
        "{rec:?}"
    );
    assert_eq!(redis.hlen(&sk.running).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_command_shows_pending_running_limit_and_rotation() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    for (t, n) in [("alpha", 3u32), ("beta", 2), ("gamma", 1)] {
        c.push_bulk(ShardJob::batch(t, n)).await.unwrap();
    }
    c.broker().set_shard_limit(Q, None, Some(5)).await.unwrap();
    c.broker()
        .set_shard_limit(Q, Some("beta"), Some(0))
        .await
        .unwrap();
    redis
        .lpush_raw(
            Q,
            sidekiq_payload("ShardJob", json!([{"tenant": "x", "n": 0}]), None),
        )
        .await;
    let table = redis.cli(&["shards", Q]);
    let rows: BTreeMap<&str, Vec<&str>> = table
        .lines()
        .skip(3)
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
            .contains("3 tenant(s), 2 runnable, inbox 1; defaults: weight 1, floor 0, cap 5"),
        "{table}"
    );
    assert!(table.contains("served next: alpha, gamma"), "{table}");
    // pending, running, weight, floor, cap, pass, rotation, share, rate
    assert_eq!(
        rows["alpha"],
        ["3", "0", "1", "0", "5", "0.000", "#1", "-", "-"],
        "{table}"
    );
    assert_eq!(
        rows["beta"],
        ["2", "0", "1", "0", "0", "-", "-", "-", "-"],
        "{table}"
    );
    assert_eq!(
        rows["gamma"],
        ["1", "0", "1", "0", "5", "0.000", "#2", "-", "-"],
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_tenants_and_one_with_a_hundred_thousand_jobs_each_run_once() {
    const TENANTS: u64 = 10_000;
    const BIG: u64 = 100_000;
    let total = (TENANTS + BIG) as usize;
    let redis = Redis::start().await;
    let c = redis.client().await;
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
    let sk = redis.keys().shard("scale");
    assert_eq!(redis.scard(&sk.tenants).await, TENANTS as usize + 1);
    let t1 = Instant::now();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let w = redis
            .worker()
            .concurrency(100)
            .lease(Duration::from_secs(30))
            .heartbeat(Duration::from_secs(5))
            .reaper_interval(Duration::from_secs(15))
            .queues(queues(&["scale"]));
        runs.push(fairjob_tests::spawn(w.build().await.unwrap()));
    }
    let stuck = fairjob_tests::jobs::scale_wait(total, Duration::from_secs(20)).await;
    let drained = t1.elapsed();
    for run in runs {
        run.stop().await;
    }
    eprintln!("scale (debug): pushed {total} in {pushed:?}, drained in {drained:?}");
    assert_eq!(stuck, Ok(()));
    let wrong = fairjob_tests::jobs::scale_not_once();
    assert!(wrong.is_empty(), "jobs not run exactly once: {wrong:?}");
    assert_eq!(
        fairjob_tests::jobs::SCALE_DONE.load(Ordering::SeqCst),
        total
    );
    assert_shards_empty(&redis, "scale").await;
}
