//! Worker processes in Redis: fairjob's lease (`lease.lua`) and worker record,
//! Sidekiq's process records (`processes`, the identity hash, the work hash and
//! remote signals) written by the heartbeat, and what the reaper reads about
//! other workers (their leases, in-progress records and slot records).

use std::collections::HashMap;
use std::time::Duration;

use super::RedisBroker;
use super::scripts::{LEASE, SAMPLER_LEASE};
use crate::error::Result;
use crate::wire::ClassInfo;

/// One heartbeat, as Sidekiq's API and Web UI read it.
#[derive(Debug, Clone, Default)]
pub struct Beat {
    /// Jobs processed since the last beat (added to `stat:processed`).
    pub processed: u64,
    /// Jobs failed since the last beat.
    pub failed: u64,
    /// `YYYY-MM-DD`, for the dated counters.
    pub day: String,
    /// The process's `info` JSON.
    pub info: String,
    /// Running jobs: token → work JSON (`queue`, `payload`, `run_at`).
    pub work: Vec<(String, String)>,
    /// `beat` (epoch seconds).
    pub now: f64,
    /// Whether the process is quiet.
    pub quiet: bool,
    /// Resident set size, KB.
    pub rss_kb: u64,
    /// A PING's round trip, µs.
    pub rtt_us: u64,
    /// Wait statistics and per-queue throughput gathered since the last beat.
    pub stats: super::stats::StatsFlush,
}

impl RedisBroker {
    /// Renews `identity`'s lease; returns true when it had already expired.
    pub(crate) async fn renew_lease(&self, identity: &str, lease: Duration) -> Result<bool> {
        let mut inv = LEASE.call();
        inv.key(self.keys.lease(identity))
            .arg(lease.as_millis() as u64)
            .arg(identity);
        let lapsed: i64 = self.invoke(&inv).await?;
        Ok(lapsed == 1)
    }

    /// Writes the data marker ([`super::Keys::data_marker`]) when it is
    /// missing; true when it was: Redis lost its data since a worker last
    /// wrote it (or this is the first worker on this Redis).
    pub(crate) async fn data_marker_missing(&self) -> Result<bool> {
        let set: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(self.keys.data_marker())
                    .arg("1")
                    .arg("NX"),
            )
            .await?;
        Ok(set.is_some())
    }

    /// Takes or renews the metrics sampler's lease for `identity`; true when
    /// it holds the lease now (for `ttl`), false when another process does.
    pub(crate) async fn sampler_lease(&self, identity: &str, ttl: Duration) -> Result<bool> {
        let mut inv = SAMPLER_LEASE.call();
        inv.key(self.keys.metrics_sampler())
            .arg(identity)
            .arg(ttl.as_millis().max(100) as u64);
        let held: i64 = self.invoke(&inv).await?;
        Ok(held == 1)
    }

    /// The process holding the metrics sampler's lease, if any.
    pub async fn sampler(&self) -> Result<Option<String>> {
        self.query(redis::cmd("GET").arg(self.keys.metrics_sampler()))
            .await
    }

    /// Records a worker (fairjob's record, for the reaper) and announces its
    /// sharded queues.
    pub(crate) async fn register_worker(
        &self,
        identity: &str,
        info: &str,
        sharded: &[String],
    ) -> Result<()> {
        let keys = &self.keys;
        let mut pipe = redis::pipe();
        pipe.hset(keys.workers(), identity, info).ignore();
        if !sharded.is_empty() {
            // Pushes to a sharded queue stay in its cluster slot and so don't add it
            // to Sidekiq's `queues` set; its workers do, for the Web UI.
            pipe.sadd(keys.sharded_queues(), sharded).ignore();
            pipe.sadd(keys.queues(), sharded).ignore();
        }
        self.pipe::<()>(&pipe).await
    }

    /// Writes one heartbeat (stats, work hash, process hash); returns a remote
    /// signal (`<identity>-signals`, pushed by Sidekiq's API and Web UI), if one
    /// was waiting.
    pub(crate) async fn beat(&self, identity: &str, beat: &Beat) -> Result<Option<String>> {
        let keys = &self.keys;
        let mut pipe = redis::pipe();
        for (total, dated, n) in [
            (
                keys.stat_processed(None),
                keys.stat_processed(Some(&beat.day)),
                beat.processed,
            ),
            (
                keys.stat_failed(None),
                keys.stat_failed(Some(&beat.day)),
                beat.failed,
            ),
        ] {
            if n > 0 {
                pipe.incr(total, n).ignore();
                pipe.incr(&dated, n).ignore();
                pipe.expire(&dated, 157_680_000).ignore();
            }
        }
        for work_key in keys.process_work(identity) {
            pipe.del(&work_key).ignore();
            if !beat.work.is_empty() {
                pipe.hset_multiple(&work_key, &beat.work).ignore();
                pipe.expire(&work_key, 60).ignore();
            }
        }
        pipe.sadd(keys.processes(), identity).ignore();
        pipe.hset_multiple(
            keys.process(identity),
            &[
                ("info", beat.info.clone()),
                ("busy", beat.work.len().to_string()),
                ("beat", format!("{:.6}", beat.now)),
                ("quiet", beat.quiet.to_string()),
                ("rss", beat.rss_kb.to_string()),
                ("rtt_us", beat.rtt_us.to_string()),
            ],
        )
        .ignore();
        pipe.expire(keys.process(identity), 60).ignore();
        if !beat.stats.is_empty() {
            self.stats_writes(&mut pipe, &beat.stats);
        }
        pipe.rpop(keys.process_signals(identity), None);
        let (signal,): (Option<String>,) = self.pipe(&pipe).await?;
        Ok(signal)
    }

    /// On a clean exit: leaves Sidekiq's `processes` and drops the work hashes.
    pub(crate) async fn leave_processes(&self, identity: &str) -> Result<()> {
        let keys = &self.keys;
        let mut pipe = redis::pipe();
        pipe.srem(keys.processes(), identity).ignore();
        for k in keys.process_work(identity) {
            pipe.del(k).ignore();
        }
        self.pipe::<()>(&pipe).await
    }

    /// Forgets a worker that holds no job any more: fairjob's worker record,
    /// its slot record, its place among the sharded queues' fetchers and in
    /// Sidekiq's `processes` and, on its own clean
    /// exit (`own`), its lease (a reaper leaves the lease alone: the worker may
    /// just have come back).
    pub(crate) async fn forget_worker(&self, identity: &str, own: bool) -> Result<()> {
        let keys = &self.keys;
        let sharded = self.sharded_queues().await?;
        let mut pipe = redis::pipe();
        for q in &sharded {
            pipe.srem(keys.shard(q).fetchers, identity).ignore();
        }
        if own {
            pipe.del(keys.lease(identity)).ignore();
        }
        pipe.del(keys.slots(identity)).ignore();
        pipe.hdel(keys.workers(), identity).ignore();
        pipe.srem(keys.processes(), identity).ignore();
        self.pipe::<()>(&pipe).await
    }

    /// Takes the fleet-wide reaper lock for `ttl`; false when another worker holds it.
    pub(crate) async fn try_reaper_lock(&self, identity: &str, ttl: Duration) -> Result<bool> {
        let got: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(self.keys.reaper_lock())
                    .arg(identity)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis().max(100) as u64),
            )
            .await?;
        Ok(got.is_some())
    }

    /// Every registered worker identity, and whether its lease is alive (one
    /// round trip for the leases).
    pub(crate) async fn workers_alive(&self) -> Result<Vec<(String, bool)>> {
        let workers: Vec<String> = self
            .query(redis::cmd("HKEYS").arg(self.keys.workers()))
            .await?;
        if workers.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for identity in &workers {
            pipe.exists(self.keys.lease(identity));
        }
        let alive: Vec<bool> = self.pipe(&pipe).await?;
        Ok(workers.into_iter().zip(alive).collect())
    }

    /// Every in-progress record `identity` may hold: on one server its own
    /// (plain queues) and one in each tenant-sharded queue's cluster slot; in
    /// cluster mode one per queue (every queue in Sidekiq's `queues` set).
    async fn inflight_records(&self, identity: &str) -> Result<Vec<String>> {
        let mut queues = self.sharded_queues().await?;
        let mut out = Vec::new();
        if self.is_cluster() {
            let plain: Vec<String> = self
                .query(redis::cmd("SMEMBERS").arg(self.keys.queues()))
                .await?;
            queues.extend(plain);
            queues.sort();
            queues.dedup();
        } else {
            out.push(self.keys.inflight(identity));
        }
        out.extend(queues.iter().map(|q| self.keys.shard(q).inflight(identity)));
        Ok(out)
    }

    /// Every job `identity` holds in progress: `(token, payload)`.
    pub(crate) async fn inflight_entries(&self, identity: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut entries = Vec::new();
        for record in self.inflight_records(identity).await? {
            let found: Vec<(String, Vec<u8>)> =
                self.query(redis::cmd("HGETALL").arg(record)).await?;
            entries.extend(found);
        }
        Ok(entries)
    }

    /// The tokens of every job `identity` holds in progress.
    pub(crate) async fn inflight_tokens(&self, identity: &str) -> Result<Vec<String>> {
        let records = self.inflight_records(identity).await?;
        let mut pipe = redis::pipe();
        for r in &records {
            pipe.hkeys(r);
        }
        let found: Vec<Vec<String>> = self.pipe(&pipe).await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// The payload `identity`'s in-progress record holds under `token`.
    pub(crate) async fn inflight_payload(
        &self,
        identity: &str,
        token: &super::Token,
    ) -> Result<Option<Vec<u8>>> {
        self.query(
            redis::cmd("HGET")
                .arg(self.inflight_of(identity, token))
                .arg(&token.raw),
        )
        .await
    }

    /// The slots `identity`'s jobs hold: token → slot record value.
    pub(crate) async fn slot_records(&self, identity: &str) -> Result<HashMap<String, String>> {
        self.query(redis::cmd("HGETALL").arg(self.keys.slots(identity)))
            .await
    }

    /// How many jobs `identity` has in progress, over all its records.
    pub async fn in_progress(&self, identity: &str) -> Result<u64> {
        let mut pipe = redis::pipe();
        for k in self.inflight_records(identity).await? {
            pipe.hlen(k);
        }
        let lens: Vec<u64> = self.pipe(&pipe).await?;
        Ok(lens.iter().sum())
    }

    /// Records the classes a worker runs (a worker calls this when it starts).
    pub async fn publish_classes(&self, classes: &[ClassInfo]) -> Result<()> {
        if classes.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for c in classes {
            let json = serde_json::to_string(c).expect("class info encodes");
            pipe.hset(self.keys.classes(), &c.class, json).ignore();
        }
        self.pipe::<()>(&pipe).await
    }
}
