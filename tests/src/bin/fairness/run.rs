//! One scenario in one mode, on its own private redis-server.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fairjob::payload::now_f64;
use fairjob::{Client, QueueSpec, Worker};
use fairjob_tests::RedisServer;

use crate::Args;
use crate::jobs::{self, Rec, SHARD_QUEUE};
use crate::scenario::{GREEDY, Mode, Scenario, Stream, TRICKLE};

/// Redis commands slower than 1 ms (SLOWLOG, `slowlog-log-slower-than 1000`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Slow {
    /// Script calls that push jobs (their arguments hold job payloads).
    pub(crate) push_scripts: u64,
    /// Other script calls (fetch, ack, …).
    pub(crate) worker_scripts: u64,
    /// Commands that are not scripts.
    pub(crate) other: u64,
    /// The slowest entry, µs.
    pub(crate) max_us: u64,
}

impl Slow {
    pub(crate) fn scripts(&self) -> u64 {
        self.push_scripts + self.worker_scripts
    }
}

/// What one run produced.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) mode: Mode,
    pub(crate) records: Vec<Rec>,
    pub(crate) expected: usize,
    /// Seconds the pre-run backlog pushes took (0 when none).
    pub(crate) prepush_secs: f64,
    /// Seconds the greedy child's `push_bulk` took, as it measured.
    pub(crate) greedy_push_secs: Option<f64>,
    pub(crate) slow: Slow,
    /// Tenant-sharded runs of a scenario with a floored tenant: (time, its
    /// `running` count in Redis: jobs dispatched and not yet acknowledged),
    /// sampled every 2 ms.
    pub(crate) floor_samples: Vec<(f64, u32)>,
}

/// Samples a tenant's `running` count of the sharded queue until `stop`.
async fn sample_running(
    url: String,
    tenant: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Vec<(f64, u32)>> {
    let key = fairjob::broker::keys::Keys::new(None)
        .shard(SHARD_QUEUE)
        .running;
    let mut con = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tick.tick().await;
        let n: Option<u32> = redis::cmd("HGET")
            .arg(&key)
            .arg(fairjob::broker::keys::encode(&tenant))
            .query_async(&mut con)
            .await?;
        out.push((now_f64(), n.unwrap_or(0)));
    }
    Ok(out)
}

/// Pushes the greedy tenant's backlog: the body of the child process.
pub(crate) async fn push_greedy(url: &str, kind: jobs::Kind, n: u64) -> Result<()> {
    let client = Client::builder(url.to_owned()).build().await?;
    let t = Instant::now();
    let pushed = jobs::push_bulk(&client, kind, 0, GREEDY, n).await?;
    anyhow::ensure!(pushed as u64 == n, "push_bulk pushed {pushed} of {n}");
    println!("{:.4}", t.elapsed().as_secs_f64());
    Ok(())
}

fn greedy_child(url: String, kind: jobs::Kind, n: u64) -> Result<f64> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let out = std::process::Command::new(exe)
        .args(["--push-greedy", &url, "--push-kind", kind.name()])
        .args(["--push-jobs", &n.to_string()])
        .output()
        .context("starting the greedy pusher")?;
    if !out.status.success() {
        bail!(
            "the greedy pusher failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

async fn slowlog(url: &str) -> Result<Slow> {
    let mut con = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut con)
        .await?;
    let mut slow = Slow::default();
    for e in entries {
        let redis::Value::Array(fields) = e else {
            continue;
        };
        let us = match fields.get(2) {
            Some(redis::Value::Int(us)) => *us as u64,
            _ => 0,
        };
        let args: Vec<String> = match fields.get(3) {
            Some(redis::Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    redis::Value::SimpleString(s) => s.clone(),
                    _ => String::new(),
                })
                .collect(),
            _ => continue,
        };
        let cmd = args
            .first()
            .map(|c| c.to_ascii_uppercase())
            .unwrap_or_default();
        slow.max_us = slow.max_us.max(us);
        if cmd.starts_with("EVAL") || cmd.starts_with("FCALL") {
            if args.iter().any(|a| a.starts_with('{')) {
                slow.push_scripts += 1;
            } else {
                slow.worker_scripts += 1;
            }
        } else {
            slow.other += 1;
        }
    }
    Ok(slow)
}

/// Waits until the worker announces itself in `processes`.
async fn wait_ready(url: &str) -> Result<()> {
    let mut con = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let ready_by = Instant::now() + Duration::from_secs(10);
    while redis::cmd("SCARD")
        .arg("processes")
        .query_async::<i64>(&mut con)
        .await?
        == 0
    {
        if Instant::now() > ready_by {
            bail!("the worker did not start");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

pub(crate) async fn run(s: &Scenario, mode: Mode, a: &Args) -> Result<Run> {
    jobs::take_records();
    let server = RedisServer::start(&[
        "--slowlog-log-slower-than",
        "1000",
        "--slowlog-max-len",
        "100000",
    ])
    .context("starting a private redis-server")?;
    let url = server.url();
    let kind = mode.kind();
    let client = Client::builder(url.clone()).build().await?;
    if mode == Mode::ShardWeighted {
        for t in &s.tenants {
            if t.weight != 1.0 || t.floor != 0 {
                client
                    .shard_policy(SHARD_QUEUE)
                    .tenant(t.name.clone())
                    .weight(t.weight)
                    .floor(t.floor)
                    .apply()
                    .await?;
            }
        }
    }

    // Backlogs, tenant after tenant (class after class), before the worker starts.
    let t0 = now_f64();
    let mut expected = 0u64;
    for t in s.tenants.iter().skip(usize::from(s.greedy_child)) {
        let per = t.backlog / t.classes as u64;
        for class in 0..t.classes {
            let n = if class + 1 == t.classes {
                t.backlog - per * (t.classes as u64 - 1)
            } else {
                per
            };
            let pushed = jobs::push_bulk(&client, kind, class, &t.name, n).await?;
            anyhow::ensure!(pushed as u64 == n, "push_bulk pushed {pushed} of {n}");
            expected += n;
        }
    }
    let prepush_secs = if expected > 0 { now_f64() - t0 } else { 0.0 };

    let worker = Worker::builder(url.clone())
        .registry(jobs::registry(kind)?)
        .queues(QueueSpec::parse(&kind.queues())?)
        .concurrency(a.concurrency)
        // FAIRJOB_BENCH_FOLD_ACKS=off: acks go in calls of their own (the
        // default folds them into the next fetch).
        .fold_acks(std::env::var("FAIRJOB_BENCH_FOLD_ACKS").as_deref() != Ok("off"))
        .build()
        .await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker_task = tokio::spawn(worker.run_until(async move {
        let _ = stop_rx.await;
    }));

    let stop_sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = s
        .tenants
        .iter()
        .find(|t| t.floor > 0)
        .filter(|_| kind == jobs::Kind::Shard)
        .map(|t| {
            tokio::spawn(sample_running(
                url.clone(),
                t.name.clone(),
                stop_sampling.clone(),
            ))
        });
    let mut greedy_task = None;
    let mut stream_task = None;
    if s.greedy_child || s.stream.is_some() {
        wait_ready(&url).await?;
    }
    if s.greedy_child && mode != Mode::Idle {
        let (url, n) = (url.clone(), s.tenants[0].backlog);
        expected += n;
        greedy_task = Some(tokio::task::spawn_blocking(move || {
            greedy_child(url, kind, n)
        }));
    }
    match s.stream.clone() {
        Some(Stream::Small {
            tenants,
            jobs: per,
            spread,
        }) => {
            let total = tenants * per;
            expected += total;
            let client = client.clone();
            let start = tokio::time::Instant::now();
            stream_task = Some(tokio::spawn(async move {
                for k in 0..total {
                    let offset = spread * (k as f64 + 0.5) / total as f64;
                    tokio::time::sleep_until(start + Duration::from_secs_f64(offset)).await;
                    let tenant = format!("s{:02}", k % tenants + 1);
                    jobs::push_one(&client, kind, &tenant).await?;
                }
                Ok::<u64, anyhow::Error>(0)
            }));
        }
        Some(Stream::Trickle { every, until }) => {
            let client = client.clone();
            let stop_at = (s.backlog_total() as f64 * until) as usize;
            stream_task = Some(tokio::spawn(async move {
                let mut sent = 0u64;
                let mut tick = tokio::time::interval(Duration::from_secs_f64(every));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while jobs::records_len() < stop_at {
                    tick.tick().await;
                    jobs::push_one(&client, kind, TRICKLE).await?;
                    sent += 1;
                }
                Ok::<u64, anyhow::Error>(sent)
            }));
        }
        None => {}
    }
    let greedy_push_secs = match greedy_task {
        Some(t) => Some(t.await??),
        None => None,
    };
    if let Some(t) = stream_task {
        expected += t.await??;
    }

    let expected = expected as usize;
    let deadline = Instant::now() + Duration::from_secs(a.timeout_secs);
    let (mut last_len, mut last_progress) = (0, Instant::now());
    loop {
        let len = jobs::records_len();
        if len >= expected {
            break;
        }
        if len != last_len {
            (last_len, last_progress) = (len, Instant::now());
        }
        if Instant::now() > deadline || last_progress.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "[fairness] {} / {}: only {len} of {expected} jobs ran; giving up on the rest",
                s.key,
                mode.label()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop_sampling.store(true, std::sync::atomic::Ordering::Relaxed);
    let floor_samples = match sampler {
        Some(t) => t.await??,
        None => Vec::new(),
    };
    let _ = stop_tx.send(());
    worker_task.await??;
    let slow = slowlog(&url).await?;
    drop(server);
    Ok(Run {
        mode,
        records: jobs::take_records(),
        expected,
        prepush_secs,
        greedy_push_secs,
        slow,
        floor_samples,
    })
}
