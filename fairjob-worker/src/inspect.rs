//! Read-only (and limit-setting) commands: `jobs`, `stats`, `tenants`, `shards`,
//! `shard-limit`. Nothing here runs jobs.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use fairjob::broker::keys::{decode, encode};
use fairjob::broker::{ConnectOptions, RedisBroker};
use fairjob::fair::{DEFAULT_MAX_WINDOW, WireRule};
use fairjob::{Registry, Retry};

async fn connect(url: &str, namespace: Option<&str>) -> Result<RedisBroker> {
    let options = ConnectOptions {
        namespace: namespace.map(str::to_owned),
        ..ConnectOptions::default()
    };
    Ok(RedisBroker::connect(url, options).await?)
}

pub(crate) fn jobs(registry: &Registry) {
    println!(
        "{:<28} {:<16} {:<8} {:<8} options",
        "class", "queue", "retry", "sharded"
    );
    for r in registry.iter() {
        let o = &r.options;
        let retry = match o.retry {
            Retry::Default => "25".to_owned(),
            Retry::Times(n) => n.to_string(),
            Retry::Never => "false".to_owned(),
        };
        let mut extra = Vec::new();
        for t in o.throttles {
            extra.push(format!(
                "throttle({} > {} per {}{})",
                t.queue,
                t.threshold,
                humantime::format_duration(t.per),
                t.weight
                    .map(|w| format!(", weight {w}"))
                    .unwrap_or_default()
            ));
        }
        if let Some(c) = o.concurrency {
            extra.push(format!(
                "concurrency(limit {}{})",
                c.limit,
                c.group.map(|g| format!(", group {g}")).unwrap_or_default()
            ));
        }
        println!(
            "{:<28} {:<16} {:<8} {:<8} {}  [{}]",
            r.class,
            o.queue,
            retry,
            o.shard_by_tenant,
            extra.join(" "),
            r.type_name
        );
    }
    println!("{} job type(s)", registry.len());
}

pub(crate) async fn stats(url: &str, namespace: Option<&str>) -> Result<()> {
    let b = connect(url, namespace).await?;
    let k = b.keys();
    let queues: BTreeSet<String> = b.query(redis::cmd("SMEMBERS").arg(k.queues())).await?;
    let sharded: BTreeSet<String> = b
        .query(redis::cmd("SMEMBERS").arg(k.sharded_queues()))
        .await?;
    println!("queues:");
    for q in queues.union(&sharded) {
        let inbox: u64 = b.query(redis::cmd("LLEN").arg(k.queue(q))).await?;
        if sharded.contains(q) {
            let sk = k.shard(q);
            let tenants: Vec<String> = b.query(redis::cmd("SMEMBERS").arg(&sk.tenants)).await?;
            let mut pending = 0u64;
            for chunk in tenants.chunks(1000) {
                let mut pipe = redis::pipe();
                for t in chunk {
                    pipe.llen(format!("{}{}", sk.shard_prefix, t));
                }
                let lens: Vec<u64> = b.pipe(&pipe).await?;
                pending += lens.iter().sum::<u64>();
            }
            println!(
                "  {q:<24} {:>10} (sharded: {} tenants, inbox {inbox})",
                pending + inbox,
                tenants.len()
            );
        } else {
            println!("  {q:<24} {inbox:>10}");
        }
    }
    let count = |key: String| {
        let b = b.clone();
        async move { b.query::<u64>(redis::cmd("ZCARD").arg(key)).await }
    };
    println!("scheduled: {}", count(k.schedule()).await?);
    println!("retries:   {}", count(k.retry()).await?);
    println!("dead:      {}", count(k.dead()).await?);
    let get = |key: String| {
        let b = b.clone();
        async move {
            b.query::<Option<u64>>(redis::cmd("GET").arg(key))
                .await
                .map(|v| v.unwrap_or(0))
        }
    };
    println!("processed: {}", get(k.stat_processed(None)).await?);
    println!("failed:    {}", get(k.stat_failed(None)).await?);
    println!(
        "recovered from dead workers: {}, stale completions fenced: {}",
        get(k.stat("recovered")).await?,
        get(k.stat("fenced")).await?
    );
    let workers: Vec<String> = b.query(redis::cmd("HKEYS").arg(k.workers())).await?;
    println!("workers:");
    for w in workers {
        let alive: bool = b.query(redis::cmd("EXISTS").arg(k.lease(&w))).await?;
        let inflight = b.in_progress(&w).await?;
        println!(
            "  {w:<40} {} in progress: {inflight}",
            if alive { "alive" } else { "DEAD " }
        );
    }
    Ok(())
}

pub(crate) async fn tenants(
    url: &str,
    namespace: Option<&str>,
    registry: &Registry,
    class: &str,
    extra: &[String],
) -> Result<()> {
    let b = connect(url, namespace).await?;
    let mut rules: Vec<WireRule> = registry
        .get(class)
        .map(|r| r.options.throttles.iter().map(WireRule::from).collect())
        .unwrap_or_default();
    for spec in extra {
        let mut parts = spec.rsplitn(3, ':');
        let per = parts.next().context("rule QUEUE:THRESHOLD:PER")?;
        let threshold = parts.next().context("rule QUEUE:THRESHOLD:PER")?;
        let queue = parts.next().context("rule QUEUE:THRESHOLD:PER")?;
        rules.push(WireRule {
            queue: queue.to_owned(),
            threshold: threshold.parse().context("threshold is a number")?,
            per: Some(fairjob::config::parse_duration(per)?.as_secs()),
        });
    }
    if rules.is_empty() {
        bail!(
            "no rules known for `{class}`: run this from a worker that registers it, or pass --rule QUEUE:THRESHOLD:PER"
        );
    }
    let base = registry
        .get(class)
        .map(|r| r.options.queue)
        .unwrap_or("(declared queue)");
    let max_window = rules
        .iter()
        .filter_map(|r| r.per)
        .max()
        .unwrap_or(0)
        .max(DEFAULT_MAX_WINDOW.as_secs());
    let pattern = b.keys().fair_window(&glob_escape(class), "*", base);
    let prefix = b.keys().fair_window(class, "", base);
    let now = b.time().await?.floor() as i64;
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = b
            .query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await?;
        found.extend(keys);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    found.sort();
    println!(
        "class {class}: {} tenant(s) with a window (now = {now})",
        found.len()
    );
    for key in found {
        let tenant = key.strip_prefix(&prefix).unwrap_or(&key);
        let mut counts = Vec::new();
        let mut next_queue = base.to_owned();
        for r in &rules {
            let per = r.per.unwrap_or(max_window) as i64;
            let n: u64 = b
                .query(redis::cmd("ZCOUNT").arg(&key).arg(now - per).arg("+inf"))
                .await?;
            // The next job is counted before the rules are checked.
            if r.threshold < n + 1 {
                next_queue = r.queue.clone();
            }
            counts.push(format!("{}/{} in {}s", n, r.threshold, per));
        }
        println!(
            "  {tenant:<24} {}  → next job: {next_queue}",
            counts.join(", ")
        );
    }
    Ok(())
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(crate) async fn shards(url: &str, namespace: Option<&str>, queue: &str) -> Result<()> {
    let b = connect(url, namespace).await?;
    let sk = b.keys().shard(queue);
    let tenants: BTreeSet<String> = b.query(redis::cmd("SMEMBERS").arg(&sk.tenants)).await?;
    let default: Option<String> = b.query(redis::cmd("HGET").arg(&sk.limits).arg("*")).await?;
    let inbox: u64 = b.query(redis::cmd("LLEN").arg(&sk.inbox)).await?;
    println!(
        "sharded queue {queue}: {} tenant(s), default limit {}, inbox {inbox}",
        tenants.len(),
        default.as_deref().unwrap_or("unlimited")
    );
    println!(
        "  {:<24} {:>8} {:>8} {:>10} {:>9}",
        "tenant", "pending", "running", "limit", "rotation"
    );
    let tenants: Vec<String> = tenants.into_iter().collect();
    for chunk in tenants.chunks(500) {
        // One round trip per 500 tenants.
        let mut pipe = redis::pipe();
        for t in chunk {
            pipe.llen(format!("{}{}", sk.shard_prefix, t))
                .hget(&sk.running, t)
                .hget(&sk.limits, t)
                .zrank(&sk.ring, t);
        }
        type Row = (u64, Option<u64>, Option<String>, Option<u64>);
        let rows: Vec<Row> = b.pipe(&pipe).await?;
        for (t, (pending, running, limit, rank)) in chunk.iter().zip(rows) {
            let name = if t.is_empty() {
                "(no tenant)".to_owned()
            } else {
                decode(t).unwrap_or_else(|| t.clone())
            };
            println!(
                "  {name:<24} {pending:>8} {:>8} {:>10} {:>9}",
                running.unwrap_or(0),
                limit.or(default.clone()).unwrap_or_else(|| "-".into()),
                rank.map(|r| format!("#{}", r + 1))
                    .unwrap_or_else(|| "-".into())
            );
        }
    }
    Ok(())
}

pub(crate) async fn shard_limit(
    url: &str,
    namespace: Option<&str>,
    queue: &str,
    tenant: Option<&str>,
    limit: Option<u32>,
) -> Result<()> {
    let b = connect(url, namespace).await?;
    b.set_shard_limit(queue, tenant, limit).await?;
    println!(
        "{queue}: running limit of {} set to {}",
        tenant
            .map(|t| format!("tenant {t} ({})", encode(t)))
            .unwrap_or_else(|| "every tenant (default)".into()),
        limit
            .map(|l| l.to_string())
            .unwrap_or_else(|| "none".into())
    );
    Ok(())
}

/// The declared default of a full key (`Class:key` or `group:name:key`), if a
/// registered job declares it.
fn declared_default(registry: &Registry, key: &str) -> Option<u32> {
    registry.iter().find_map(|r| {
        let c = r.options.concurrency?;
        let prefix = match c.group {
            Some(g) => format!("group:{g}:"),
            None => format!("{}:", r.class),
        };
        key.starts_with(&prefix).then_some(c.limit)
    })
}

pub(crate) async fn limits(url: &str, namespace: Option<&str>, registry: &Registry) -> Result<()> {
    let b = connect(url, namespace).await?;
    let all = fairjob::limit::list(&b).await?;
    println!(
        "{:<40} {:>10} {:>8} {:>9} {:>8}",
        "key", "limit", "running", "reserved", "waiting"
    );
    for l in &all {
        let limit = match (l.limit, declared_default(registry, &l.key)) {
            (Some(n), _) => n.to_string(),
            (None, Some(d)) => format!("{d} (default)"),
            (None, None) => "default".to_owned(),
        };
        println!(
            "{:<40} {:>10} {:>8} {:>9} {:>8}",
            l.key, limit, l.running, l.reserved, l.waiting
        );
    }
    println!("{} key(s)", all.len());
    Ok(())
}

pub(crate) async fn set_limit(
    url: &str,
    namespace: Option<&str>,
    registry: &Registry,
    key: &str,
    limit: Option<u32>,
) -> Result<()> {
    let b = connect(url, namespace).await?;
    let default = declared_default(registry, key).unwrap_or(0);
    let released = fairjob::limit::set_limit(&b, key, limit, default).await?;
    println!(
        "{key}: limit {}; released {released} waiting job(s)",
        limit
            .map(|l| l.to_string())
            .unwrap_or_else(|| "back to the declared default".into())
    );
    Ok(())
}
