//! The inspection commands (`jobs`, `stats`, `tenants`, `shards`, `limits`,
//! `explain`, `cron`, `batches`, `workflow`) and
//! the steering ones (`shard-limit`, `limits set`, `cron pause|resume|run-now`): each reads or writes through
//! fairjob::inspect and prints a table. Nothing here runs jobs or names a
//! Redis key.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use fairjob::config::WorkerConfig;
use fairjob::fair::DEFAULT_MAX_WINDOW;
use fairjob::inspect::encode_key as encode;
use fairjob::inspect::{BATCH_ROWS, MAX_READ_ROWS, Page};
use fairjob::inspect::{Inspector, Setting, ShardPolicy, YieldPolicy};
use fairjob::wire::{WireRule, reroute_window, rule_window};
use fairjob::{Registry, Retry};

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

/// Unix seconds as `2026-11-25T03:00:00Z`.
fn utc(secs: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A connection for the commands, from the worker's settings (its namespace and
/// reroute window format).
pub(crate) struct Inspect {
    inspector: Inspector,
}

impl Inspect {
    pub(crate) async fn connect(config: &WorkerConfig) -> Result<Inspect> {
        let c = &config.client;
        Ok(Inspect {
            inspector: Inspector::connect(c.redis_url(), c.connect_options()).await?,
        })
    }

    pub(crate) async fn stats(&self) -> Result<()> {
        let o = self.inspector.overview().await?;
        println!("queues:");
        for q in &o.queues {
            let size = format!("{}{}", q.size, if q.size_exact { "" } else { "+" });
            match q.tenants {
                Some(t) => println!(
                    "  {:<24} {size:>10} (sharded: {t} tenants, inbox {})",
                    q.name, q.list
                ),
                None => println!("  {:<24} {size:>10}", q.name),
            }
        }
        println!("scheduled: {}", o.scheduled);
        println!("retries:   {}", o.retries);
        println!("dead:      {}", o.dead);
        println!("processed: {}", o.processed);
        println!("failed:    {}", o.failed);
        println!(
            "recovered from dead workers: {}, stale completions fenced: {}",
            o.recovered, o.fenced
        );
        println!("workers:");
        for w in &o.workers {
            println!(
                "  {:<40} {} in progress: {}",
                w.identity,
                if w.alive { "alive" } else { "DEAD " },
                w.in_progress
            );
        }
        Ok(())
    }

    pub(crate) async fn tenants(
        &self,
        registry: &Registry,
        class: &str,
        extra: &[String],
    ) -> Result<()> {
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
        let max_window = reroute_window(&rules, DEFAULT_MAX_WINDOW.as_secs());
        // A scan of the keyspace in resumable steps (an admin command; the
        // dashboard runs it only on request).
        let mut cursor = 0;
        let mut rows = Vec::new();
        let mut now = 0;
        loop {
            let page = self
                .inspector
                .reroute_windows(class, base, &rules, max_window, cursor, 1000)
                .await?;
            now = page.now.max(now);
            rows.extend(page.rows);
            match page.next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        rows.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        println!(
            "class {class}: {} tenant(s) with a window (now = {now})",
            rows.len()
        );
        for row in rows {
            let counts: Vec<String> = rules
                .iter()
                .zip(&row.counts)
                .map(|(r, n)| format!("{}/{} in {}s", n, r.threshold, rule_window(r, max_window)))
                .collect();
            println!(
                "  {:<24} {}  → next job: {}",
                row.tenant,
                counts.join(", "),
                row.next_queue
            );
        }
        Ok(())
    }

    pub(crate) async fn shards(&self, queue: &str) -> Result<()> {
        let mut page = Page::first(MAX_READ_ROWS);
        let mut first = true;
        let num = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |x| format!("{x}"));
        let int = |v: Option<u32>| v.map_or_else(|| "-".to_owned(), |x| x.to_string());
        loop {
            let view = self.inspector.shard_view(queue, page).await?;
            if first {
                println!(
                    "sharded queue {queue}: {} tenant(s), {} runnable, inbox {}; defaults: weight {}, \
                     floor {}, cap {}; rate {}; virtual time {:.3}; {} waiting for their rate; \
                     default burst {}",
                    view.tenants,
                    view.runnable,
                    view.inbox,
                    view.default_weight
                        .map_or_else(|| "1".to_owned(), |w| w.to_string()),
                    view.default_floor.unwrap_or(0),
                    view.default_limit
                        .map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
                    view.default_rate
                        .map_or_else(|| "none".to_owned(), fairjob::rate::describe_tenant_rate),
                    view.virtual_time,
                    view.rate_waiting,
                    view.default_burst
                        .map_or_else(|| "none".to_owned(), |b| b.to_string()),
                );
                let next: Vec<&str> = view
                    .next_up
                    .iter()
                    .map(|t| t.as_deref().unwrap_or("(no tenant)"))
                    .collect();
                println!("  served next: {}", next.join(", "));
                println!(
                    "  {:<24} {:>8} {:>8} {:>7} {:>6} {:>6} {:>12} {:>9} {:>8} {:>10}",
                    "tenant",
                    "pending",
                    "running",
                    "weight",
                    "floor",
                    "cap",
                    "pass",
                    "rotation",
                    "share",
                    "rate"
                );
                first = false;
            }
            for row in &view.rows {
                let name = row.tenant.as_deref().unwrap_or("(no tenant)");
                let share = if view.dispatched > 0 {
                    format!(
                        "{:.1}%",
                        100.0 * row.dispatched as f64 / view.dispatched as f64
                    )
                } else {
                    "-".to_owned()
                };
                println!(
                    "  {name:<24} {:>8} {:>8} {:>7} {:>6} {:>6} {:>12} {:>9} {:>8} {:>10}",
                    row.pending,
                    row.running,
                    num(row.weight.or(view.default_weight).or(Some(1.0))),
                    int(row.floor.or(view.default_floor).or(Some(0))),
                    row.limit
                        .or(view.default_limit)
                        .map_or_else(|| "-".to_owned(), |l| l.to_string()),
                    row.pass
                        .map_or_else(|| "-".to_owned(), |p| format!("{p:.3}")),
                    row.rotation.map_or_else(
                        || "-".to_owned(),
                        |r| format!("#{r}{}", if row.under_floor { " f" } else { "" })
                    ),
                    share,
                    row.rate.or(view.default_rate).map_or_else(
                        || "-".to_owned(),
                        |r| format!(
                            "{}{}",
                            fairjob::rate::describe_tenant_rate(r),
                            if row.rate_wait_until.is_some() {
                                " w"
                            } else {
                                ""
                            }
                        )
                    ),
                );
            }
            for row in &view.rows {
                if row.burst.is_none() && row.yields_requested == 0 && row.yields_ignored == 0 {
                    continue;
                }
                println!(
                    "  {}: burst {}; fair yield asked {}, honoured {}, ignored {}",
                    row.tenant.as_deref().unwrap_or("(no tenant)"),
                    row.burst
                        .or(view.default_burst)
                        .map_or_else(|| "none".to_owned(), |b| b.to_string()),
                    row.yields_requested,
                    row.yields_honoured,
                    row.yields_ignored
                );
            }
            match view.next {
                Some(cursor) => page.cursor = cursor,
                None => {
                    println!(
                        "  share: of the {} jobs dispatched in the last {} minutes; f: under its floor; w: waiting for its rate",
                        view.dispatched,
                        fairjob::inspect::SHARE_MINUTES
                    );
                    return Ok(());
                }
            }
        }
    }

    pub(crate) async fn shard_policy(
        &self,
        queue: &str,
        tenant: Option<&str>,
        policy: ShardPolicy,
        yields: YieldPolicy,
    ) -> Result<()> {
        self.inspector.set_yield_policy(queue, yields).await?;
        self.inspector
            .set_shard_policy(queue, tenant, policy)
            .await?;
        let show = |s: &str, v: String| format!("{s} {v}");
        let mut changed = Vec::new();
        let secs = |s: Setting<std::time::Duration>| match s {
            Setting::Keep => Setting::Keep,
            Setting::Clear => Setting::Clear,
            Setting::Set(d) => Setting::Set(format!("{}ms", d.as_millis())),
        };
        let on = match yields.enabled {
            Setting::Keep => Setting::Keep,
            Setting::Clear => Setting::Set("on"),
            Setting::Set(b) => Setting::Set(if b { "on" } else { "off" }),
        };
        for (name, v) in [
            ("weight", describe(policy.weight)),
            ("floor", describe(policy.floor)),
            ("cap", describe(policy.cap)),
            (
                "rate",
                describe(match policy.rate {
                    Setting::Set(r) => Setting::Set(fairjob::rate::describe_tenant_rate(r)),
                    Setting::Clear => Setting::Clear,
                    Setting::Keep => Setting::Keep,
                }),
            ),
            ("burst", describe(policy.burst)),
            ("queue-wide yield grace", describe(secs(yields.grace))),
            ("queue-wide yield min run", describe(secs(yields.min_run))),
            (
                "queue-wide yield cool-down",
                describe(secs(yields.cooldown)),
            ),
            ("fair yield", describe(on)),
        ] {
            if let Some(v) = v {
                changed.push(show(name, v));
            }
        }
        println!(
            "{queue}: {} for {}",
            if changed.is_empty() {
                "nothing changed".to_owned()
            } else {
                changed.join(", ")
            },
            tenant
                .map(|t| format!("tenant {t}"))
                .unwrap_or_else(|| "every tenant without its own (the default)".into()),
        );
        Ok(())
    }

    pub(crate) async fn shard_limit(
        &self,
        queue: &str,
        tenant: Option<&str>,
        limit: Option<u32>,
    ) -> Result<()> {
        self.inspector.set_shard_limit(queue, tenant, limit).await?;
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

    pub(crate) async fn cron(&self) -> Result<()> {
        let rows = self.inspector.cron().await?;
        println!(
            "{:<24} {:<18} {:<16} {:<21} {:<21} {:<10} {:>6} {:>7} {:>6}",
            "name", "cron", "zone", "next", "last fire", "outcome", "fires", "skipped", "missed"
        );
        for r in &rows {
            let next = if r.paused {
                "paused".to_owned()
            } else {
                r.next.map_or_else(|| "never".to_owned(), utc)
            };
            println!(
                "{:<24} {:<18} {:<16} {:<21} {:<21} {:<10} {:>6} {:>7} {:>6}{}",
                r.name,
                r.expr,
                r.tz,
                next,
                r.last_fire.map_or_else(|| "-".to_owned(), utc),
                r.last_outcome.as_deref().unwrap_or("-"),
                r.fires,
                r.skipped,
                r.missed,
                r.problem
                    .as_ref()
                    .map(|p| format!("  ({p})"))
                    .unwrap_or_default()
            );
        }
        println!("{} schedule(s)", rows.len());
        Ok(())
    }

    /// `batches`: the newest batches, one line each.
    pub(crate) async fn batches(&self) -> Result<()> {
        let view = self.inspector.batches(BATCH_ROWS).await?;
        println!(
            "{:<26} {:<11} {:>8} {:>8} {:>8} {:<21} {:<21} {:<16} description",
            "bid", "state", "total", "pending", "failures", "created", "complete", "tenant"
        );
        for b in &view.rows {
            let s = &b.status;
            println!(
                "{:<26} {:<11} {:>8} {:>8} {:>8} {:<21} {:<21} {:<16} {}",
                s.bid,
                format!("{}{}", b.state.as_str(), if b.died { "+d" } else { "" }),
                s.total,
                s.pending,
                s.failures,
                utc(s.created_at as i64),
                s.complete_at
                    .map_or_else(|| "-".to_owned(), |t| utc(t as i64)),
                if s.tenant.is_empty() { "-" } else { &s.tenant },
                s.description
            );
        }
        println!(
            "{} batch(es) (the newest {} at most); +d: a member died (`death` fired)",
            view.rows.len(),
            view.limit
        );
        Ok(())
    }

    /// `batches BID`: one batch, its callbacks and failed members.
    pub(crate) async fn batch(&self, bid: &str) -> Result<()> {
        let Some(b) = self.inspector.batch(bid).await? else {
            bail!("no batch {bid:?} (unknown, or its data expired)");
        };
        let s = &b.status;
        let at = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| utc(t as i64));
        println!("batch {}", s.bid);
        println!("  description: {}", s.description);
        println!(
            "  tenant:      {}",
            if s.tenant.is_empty() { "-" } else { &s.tenant }
        );
        println!(
            "  state:       {}{}",
            b.state.as_str(),
            if b.died { " (a member died)" } else { "" }
        );
        println!(
            "  members:     {} total, {} pending, {} not succeeded, {} failed, {} staged",
            s.total, s.pending, s.unsucceeded, s.failures, s.staged
        );
        println!("  created:     {}", utc(s.created_at as i64));
        println!("  committed:   {}", at(b.opened_at));
        println!("  complete:    {}", at(s.complete_at));
        println!("  success:     {}", at(s.success_at));
        println!("  death:       {}", at(s.death_at));
        for c in &b.callbacks {
            println!("  on {:<9} -> queue {}", c.event, c.queue);
        }
        if !s.failed_jids.is_empty() {
            println!(
                "  failed members ({} of {}):",
                s.failed_jids.len(),
                s.failures
            );
            for (jid, failure) in &s.failed_jids {
                println!("    {jid:<26} {failure}");
            }
        }
        Ok(())
    }

    /// `workflow WID`: a workflow and a page of its steps.
    pub(crate) async fn workflow(&self, wid: &str, from: u64, limit: usize) -> Result<()> {
        let Some(w) = self.inspector.workflow(wid, from, limit).await? else {
            bail!("no workflow {wid:?} (unknown, not a workflow, or its data expired)");
        };
        let s = &w.batch.status;
        println!("workflow {}", s.bid);
        println!("  description: {}", s.description);
        println!(
            "  tenant:      {}",
            if s.tenant.is_empty() { "-" } else { &s.tenant }
        );
        println!(
            "  state:       {}{}",
            w.batch.state.as_str(),
            if w.batch.died { " (a step died)" } else { "" }
        );
        println!(
            "  steps:       {} total, {} held, {} not run yet, {} not succeeded, {} failed or cancelled",
            s.total, s.held, s.pending, s.unsucceeded, s.failures
        );
        let last = w.from.saturating_add(w.steps.len() as u64);
        println!(
            "{:<24} {:<10} {:<26} depends on / waiting for",
            "step", "state", "jid"
        );
        for step in &w.steps {
            let list = |shown: &[String], total: u64| {
                let more = total.saturating_sub(shown.len() as u64);
                match (shown.is_empty(), more) {
                    (true, 0) => "-".to_owned(),
                    (true, m) => format!("{m} more"),
                    (false, 0) => shown.join(", "),
                    (false, m) => format!("{} and {m} more", shown.join(", ")),
                }
            };
            let mut notes = format!(
                "after: {}",
                list(&step.dependencies, step.dependencies_total)
            );
            if step.state == fairjob::inspect::StepStatus::Held {
                notes.push_str(&format!(
                    "; waiting for: {}",
                    list(&step.waiting_for, step.waiting_total)
                ));
            }
            if let Some(on) = &step.running_on {
                notes.push_str(&format!("; on {on}"));
            }
            if !step.continued_past.is_empty() {
                notes.push_str(&format!(
                    "; continued past failed: {}",
                    step.continued_past.join(", ")
                ));
            }
            println!(
                "{:<24} {:<10} {:<26} {}",
                step.name,
                step.state.as_str(),
                step.jid,
                notes
            );
        }
        if w.steps.is_empty() {
            println!("steps: none from {} of {}", w.from, w.total);
        } else {
            println!("steps {}-{} of {}", w.from.saturating_add(1), last, w.total);
        }
        if let Some(next) = w.next {
            println!("more: --from {next}");
        }
        Ok(())
    }

    pub(crate) async fn cron_act(&self, name: &str, action: &str) -> Result<()> {
        match action {
            "pause" => self.inspector.pause_cron(name).await?,
            "resume" => self.inspector.resume_cron(name).await?,
            _ => {
                let jid = self.inspector.run_cron_now(name).await?;
                println!("{name}: enqueued {jid}");
                return Ok(());
            }
        }
        println!("{name}: {action}d");
        Ok(())
    }

    pub(crate) async fn limits(&self, registry: &Registry) -> Result<()> {
        println!(
            "{:<40} {:>10} {:>8} {:>9} {:>8}",
            "key", "limit", "running", "reserved", "waiting"
        );
        let mut page = Page::first(MAX_READ_ROWS);
        let mut count = 0;
        loop {
            let found = self.inspector.limits(page).await?;
            for l in &found.rows {
                let limit = match (l.limit, declared_default(registry, &l.key)) {
                    (Some(n), _) => n.to_string(),
                    (None, Some(d)) => format!("{d} (default)"),
                    (None, None) => "default".to_owned(),
                };
                println!(
                    "{:<40} {:>10} {:>8} {:>9} {:>8}",
                    l.key, limit, l.running, l.reserved, l.waiting
                );
                count += 1;
            }
            match found.next {
                Some(cursor) => page.cursor = cursor,
                None => break,
            }
        }
        println!("{count} key(s)");
        Ok(())
    }

    pub(crate) async fn set_limit(
        &self,
        registry: &Registry,
        key: &str,
        limit: Option<u32>,
    ) -> Result<()> {
        let default = declared_default(registry, key).unwrap_or(0);
        let released = self.inspector.set_slot_limit(key, limit, default).await?;
        println!(
            "{key}: limit {}; released {released} waiting job(s)",
            limit
                .map(|l| l.to_string())
                .unwrap_or_else(|| "back to the declared default".into())
        );
        Ok(())
    }
}

impl Inspect {
    pub(crate) async fn rate_limits(&self) -> Result<()> {
        println!(
            "{:<40} {:>14} {:>6} {:>8} {:>14}",
            "key", "rate", "burst", "waiting", "next release"
        );
        let limits = self.inspector.rate_limits();
        let mut page = Page::first(MAX_READ_ROWS);
        let mut count = 0;
        loop {
            let found = limits.list(page).await?;
            for l in &found.rows {
                let (rate, burst) = match l.rate {
                    Some(r) if r.is_paused() => ("paused".to_owned(), r.burst.to_string()),
                    Some(r) => (
                        format!(
                            "{}/{}{}",
                            r.limit,
                            humantime::format_duration(Duration::from_millis(r.per_ms)),
                            if l.overridden { "" } else { " (declared)" }
                        ),
                        r.burst.to_string(),
                    ),
                    None => ("?".to_owned(), "?".to_owned()),
                };
                let next = l
                    .next_release_in_secs
                    .map(|s| format!("in {s:.1} s"))
                    .unwrap_or_else(|| "-".to_owned());
                println!(
                    "{:<40} {:>14} {:>6} {:>8} {:>14}",
                    l.key, rate, burst, l.waiting, next
                );
                count += 1;
            }
            match found.next {
                Some(cursor) => page.cursor = cursor,
                None => break,
            }
        }
        println!("{count} key(s)");
        Ok(())
    }

    pub(crate) async fn set_rate(
        &self,
        key: &str,
        limit: u32,
        per: Duration,
        burst: Option<u32>,
    ) -> Result<()> {
        let limits = self.inspector.rate_limits();
        let waiting = limits.set(key, limit, per).await?;
        if let Some(b) = burst {
            limits.set_burst(key, b).await?;
        }
        println!(
            "{key}: {limit} per {}; {waiting} job(s) waiting",
            humantime::format_duration(per)
        );
        Ok(())
    }

    pub(crate) async fn pause_rate(&self, key: &str) -> Result<()> {
        let waiting = self.inspector.rate_limits().pause(key).await?;
        println!("{key}: paused; {waiting} job(s) waiting");
        Ok(())
    }

    pub(crate) async fn resume_rate(&self, key: &str) -> Result<()> {
        let waiting = self.inspector.rate_limits().reset(key).await?;
        println!("{key}: back to the declared rate; {waiting} job(s) waiting");
        Ok(())
    }

    /// `unique`: a page of live unique locks (a bounded scan).
    pub(crate) async fn unique_locks(&self, limit: usize) -> Result<()> {
        let found = self.inspector.unique_locks(Page::first(limit)).await?;
        println!("{:<24} {:<26} {:>10}  key", "queue", "holder", "ttl");
        for l in &found.rows {
            let ttl = l
                .ttl_ms
                .map(|ms| format!("{:.0}s", ms as f64 / 1000.0))
                .unwrap_or_else(|| "-".into());
            println!(
                "{:<24} {:<26} {:>10}  {}",
                l.queue.as_deref().unwrap_or("?"),
                l.jid,
                ttl,
                l.key
            );
        }
        let more = if found.next.is_some() {
            " (more not shown)"
        } else {
            ""
        };
        println!("{} lock(s){more}", found.rows.len());
        Ok(())
    }

    /// `unique unlock KEY`.
    pub(crate) async fn unlock(&self, key: &str) -> Result<()> {
        if self.inspector.unlock(key).await? {
            println!("{key}: unlocked");
        } else {
            println!("{key}: no such lock (expired or released)");
        }
        Ok(())
    }
}

fn describe<T: std::fmt::Display>(s: Setting<T>) -> Option<String> {
    match s {
        Setting::Keep => None,
        Setting::Clear => Some("removed".to_owned()),
        Setting::Set(v) => Some(format!("set to {v}")),
    }
}

/// The declared default of a full key (`Class:key` or `group:name:key`), if a
/// registered job declares it.
fn declared_default(registry: &Registry, key: &str) -> Option<u32> {
    fairjob::limit::declared_limit(
        registry
            .iter()
            .filter_map(|r| r.options.concurrency.as_ref().map(|c| (r.class, c))),
        key,
    )
}

impl Inspect {
    /// `explain <jid>`: the dashboard's explain, walking until found or done.
    pub(crate) async fn explain(
        &self,
        registry: &Registry,
        jid: &str,
        tenant: Option<&str>,
        json: bool,
    ) -> Result<()> {
        let mut classes = self.inspector.classes().await?;
        for c in registry.class_infos() {
            if !classes.iter().any(|k| k.class == c.class) {
                classes.push(c);
            }
        }
        let mut cursor: Option<String> = None;
        loop {
            let e = self
                .inspector
                .explain(
                    jid,
                    tenant,
                    cursor.as_deref(),
                    Some(fairjob::inspect::EXPLAIN_MAX_BUDGET),
                    &classes,
                )
                .await?;
            if e.next.is_some() && !e.found {
                eprintln!("… scanned {} entries so far", e.scanned);
                cursor = e.next;
                continue;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&e)?);
            } else {
                println!("job {jid}:");
                for r in &e.reasons {
                    println!("  - {}", reason_text(r));
                }
                if let Some(j) = &e.job {
                    println!(
                        "  ({} in {}, tenant {}; {} entries scanned)",
                        j.class,
                        j.queue,
                        j.tenant.as_deref().unwrap_or("-"),
                        e.scanned
                    );
                }
                if e.iteration.is_some() {
                    println!("  iterable: {}", iteration_text(e.iteration.as_ref()));
                }
            }
            return Ok(());
        }
    }
}

/// A reason's sentence (the dashboard's words, from fairjob-web).
#[cfg(feature = "web")]
fn reason_text(r: &fairjob::inspect::Reason) -> String {
    fairjob_web::reason_text(r)
}

/// Without the `web` feature the sentences (which live in fairjob-web) are
/// not linked: a reason is printed as its JSON object.
#[cfg(not(feature = "web"))]
fn reason_text(r: &fairjob::inspect::Reason) -> String {
    serde_json::to_string(r).unwrap_or_else(|_| format!("{r:?}"))
}

/// An iterable job's progress in one line.
#[cfg(feature = "web")]
fn iteration_text(view: Option<&fairjob::inspect::IterationView>) -> String {
    fairjob_web::fmt::iteration_text(view)
}

/// Without the `web` feature: the progress as its JSON object.
#[cfg(not(feature = "web"))]
fn iteration_text(view: Option<&fairjob::inspect::IterationView>) -> String {
    view.and_then(|v| serde_json::to_string(v).ok())
        .unwrap_or_default()
}
