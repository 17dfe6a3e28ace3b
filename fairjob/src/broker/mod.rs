//! Redis, and only Redis: the driver, the one module that names the Redis
//! client. It changes state (one script per atomic change, its reply decoded
//! into an enum next to the call) and reads raw, bounded facts (`read`); it
//! does not explain them: the views operators see are built above the policy
//! modules, in [`crate::inspect`].
//!
//! Layer 2: it knows Sidekiq's wire format and nothing of job types or
//! middleware; callers hand it prepared strings. The rules its scripts
//! execute (dispatch order, limits, reroute, unique locks) are written in
//! [`crate::policy`]; each script's includes are their Lua twins, and the
//! testing mode's store (`memory/`) runs the Rust ones.
//!
//! # The contract
//!
//! Every operation of [`RedisBroker`], by concern (the files that hold them
//! in parentheses). "Script" names the `.lua` file under `scripts/` that
//! makes the change atomically; reads name their commands; "—" is a key name
//! or a fact the broker already holds, no command.
//!
//! `tests/tests/contract.rs` keeps this table true: every method a layer
//! above can call (`pub`, `pub(crate)`) is listed under the group of the file
//! that holds it, and every name listed (in backticks, outside parentheses,
//! in the first column) is such a method. The broker's own means (`query`,
//! `pipe`, `invoke`, the scans, the choice of an in-progress record) are
//! private to `broker/` and not listed: a layer that needs a new command
//! gets a new operation here, not a handle on `query`.
//!
//! | operation | changes or reads | script or commands | reply |
//! |---|---|---|---|
//! | **connection** (`mod.rs`, `conn/`) | | | |
//! | `connect` | opens the shared connection (node or cluster, TLS), checks it without writing (a server that is loading, busy or refusing writes is reached) | `HELLO`/`AUTH`, `INFO cluster` (`PING` if INFO is refused) | `RedisBroker` |
//! | `in_memory` (feature `testing`) | a broker of fairjob's testing mode, over a memory store (`memory.rs`): the operations marked "testing mode" below answer from the store, every other one fails with `Error::NotInTestingMode` | — | `RedisBroker` |
//! | `keys`, `options`, `redis_display`, `server` | key names; the options it was connected with; the server, without credentials; its host and port (the first seed's; none for a Unix socket or in testing mode: the spans' `server.*`) | — | `&Keys`, `&ConnectOptions`, `&str`, `Option<(&str, u16)>` |
//! | `connection`, `waiter`, `primaries`, `is_cluster` | the shared handle; a blocking waiter on wake-up lists; the cluster's primaries | `BLPOP`, `CLUSTER NODES` | `Conn`, `Waiter`, `Option<Vec<Node>>` |
//! | `time`, `ping` | Redis's clock; one round trip | `TIME`, `PING` | `f64`, `Duration` |
//! | `load_scripts` | loads every script as the broker calls them: function libraries (Redis 7+), else by hash (see `scripts.rs`) | `FUNCTION LOAD` or `SCRIPT LOAD` | `()` |
//! | `reconnect` | drops the shared connection to one server; the next command opens a new one (after `READONLY`) | — | `()` |
//! | `wake` | pushes a wake-up token (kept at one) | `LPUSH`+`LTRIM` | `()` |
//! | `wake_key`, `wake_keys` | the wake-up list idle workers of a queue block on (a sharded queue's own; on a cluster every queue's, in its slot); all of a worker's (on one server also a sharded queue's plain list, which released slot waiters wake) | — | key names |
//! | `delete_keys` (`cfg(test)`: the library's own tests) | deletes keys, to simulate lost writes | `DEL` | `()` |
//! | **enqueue** (`push.rs`; the multi-step pushes across cluster slots in `push_steps.rs`) | | | |
//! | `push` (unique jobs that refuse duplicates, all bound for one plain queue with nothing else to decide) | takes each job's lock, pushes the ones that got it with one `LPUSH`, registers the queue, wakes (testing mode: the memory store) | `unique_push.lua` (only `lib/unique.lua` prepended), 100 jobs a call | `Vec<Pushed>` |
//! | `push` | takes unique locks (refuses duplicates, replaces a waiting holder; on a cluster a job rerouted to another slot takes its lock first with `unique_take.lua`), registers reroute windows, picks the queue, pushes (plain list, sharded inbox), wakes; a claimed job whose claim is in another slot (sharded queue, cluster) is pushed first and its claim dropped after, and with `Src::once` (periodic jobs) or `PushSpec::once` (a relay's push, no claim) the push marks the job in the queue's slot (`Keys::pushed`) in its own step (one `ZADD NX`, which is also the check) and a marked one is not pushed again; the mark is removed after the claim (or by the relay, `forget_pushed`) | `push.lua` (`window.lua` on a cluster), `ZREM` (claim, then mark) | `Vec<Pushed>` |
//! | `schedule` | takes unique locks, adds payloads to `schedule` (a replacing push moves the holder's payload and due time; testing mode: the memory store); on a cluster a unique job's lock first, alone, then its entry | `schedule.lua` (on a cluster for unique jobs: `unique_take.lua`, then `schedule.lua`; a replace: `ZREM` + `schedule.lua` + `unique_take.lua` `waits`) | `Vec<Pushed>` |
//! | `zset_add`, `zset_remove` | one payload into / out of `retry` or `dead` | `schedule.lua`, `ZREM` | `()` |
//! | **unique jobs** (`unique.rs`; locks are taken by `push`/`schedule` and released by `finish`/`recover`) | | | |
//! | `unique_release` | releases a unique lock if a jid holds it (at start for `until = "start"`, after a cluster end, by hand; testing mode: the memory store) | `unique_release.lua` | `bool` |
//! | `unique_take_alone`, `unique_waits_as` | on a cluster, where the job is written in another slot (scheduled, rerouted): takes a lock alone (or names its holder and where it waits); records where a replaced holder waits | `unique_take.lua` (`take`, `waits`) | `Taken`, `bool` |
//! | `unique_key` | a held lock's key (for `unique_release`) | — | `String` |
//! | `remember_rejections` | the last 1,000 refused duplicates, for explain (testing mode: none kept) | `LPUSH`+`LTRIM` | `()` |
//! | **fetch** (`fetch.rs`) | | | |
//! | `plain_queue`, `shard_queue` | the keys a worker identity's fetches from a plain or sharded queue use, built once per queue | — | `PlainQueue`, `ShardQueue` |
//! | `fetch_plain`, `fetch_plain_alone`, `fetch_plain_after_wait` | moves jobs from plain queues into the worker's in-progress record | `fetch.lua` (behind `BLPOP`) | `Vec<(usize, Reserved)>` |
//! | `fetch_shard`, `fetch_shard_hinted`, `fetch_shard_acking` | acking: first acks the worker's ended jobs of the queue as `ack_many` does, in the same step (fenced per token, running counts released where the dispatch reads them); sorts a sharded queue's inbox, brings back tenants whose rate allows a start, dispatches by stride order (`policy::dispatch`; a tenant's burst while no other is in the order; a tenant whose rate is spent waits in `rwait`, its pass kept), records running counts; a dispatched tenant fair yield saw waiting leaves `waits` and its wait goes to `slotwaits`; hinted: also how long until the first waiting tenant is due (an idle worker's wait) (testing mode: the memory store, as for every operation below that names it) | `shard_fetch.lua` | `Vec<Reserved>`, `Option<Duration>`; `ShardFetched` (with the fenced acks) |
//! | `hold_taken` (feature `testing`) | records a job the testing fake took out of a plain queue (or out of a shard's order) as fetched by an identity, so its end goes through `finish` like a fetched one's | — (the memory store) | `()` |
//! | **end of a job** (`finish.rs`) | | | |
//! | `finish` | ack, retry, dead, requeue (front) or yield (back: queue's or tenant shard's tail) of one job, fenced by its token; an ack or a burial releases its unique lock and (one server) records a kept job's end in the same step; a batch member's end leaves its batch's sets (one server) (testing mode: the memory store, member ends included) | `finish.lua`, `shard_finish.lua`, `front.lua` (on a cluster, a plain queue's lock: `unique_release.lua` after) | `FinishReply` |
//! | `ack_many` | acks a batch of one sharded queue's jobs (testing mode: the memory store) | `shard_ack_many.lua` | `Vec<bool>` |
//! | `shard_ack_record`, `ends_in_script` | the in-progress record a sharded job's ack goes to when acks are batched (`None` for a plain queue's job, acked alone); whether a kept job's end is written by its exit's script (one server) or by the caller after it (`relay_completed`, on a cluster) | — | `Option<AckRecord>`, `bool` |
//! | `recover` | the reaper's `finish` of a dead worker's job, only while its lease is gone (a requeued job keeps its unique lock; a buried one releases it) | `finish.lua`, `front.lua` | `FinishReply` |
//! | `release_slot`, `deliver_released` | frees a slot; releases its waiters to their queues (`release_slot` in testing mode: the memory store) | `slot_release.lua`, `front.lua` | `()` |
//! | **iterable jobs** (`iterate.rs`) | | | |
//! | `iteration_claim` | starts a run: takes the fence `f` of `it-{jid}`, counts `ex`, refreshes the 30-day expiry (testing mode: the memory store, as for `iteration_save` and `iteration_cancel`) | `iterate_claim.lua` | `IterationState` |
//! | `iteration_save` | saves the cursor `c` and adds to `rt`, or removes the state of a completed job, only while this run holds the fence | `iterate_save.lua` | `Saved` |
//! | `iteration_cancel`, `iteration_read` | Sidekiq's `cancel!` (`HSETNX cancelled`); the state for views | `HSETNX`+`EXPIRE`, `HGETALL` | `bool`, fields |
//! | **slots** (`slots.rs`) | | | |
//! | `slot_acquire` | takes a slot of a fetched job or parks it in the lock-wait list (`policy::slots`; testing mode: the memory store) | `slot_acquire.lua`, `slot_take.lua` | `Acquired` |
//! | `set_slot_limit` | a key's runtime limit; releases waiters into new slots (testing mode: the memory store) | `slot_set.lua` | released `u64` |
//! | **rate limits** (`rates.rs`) | | | |
//! | `rate_acquire` | counts a fetched job's start (GCRA, `policy::gcra`, Redis's clock; testing mode: the memory store, as for `rates_due`, `rate_release`, `set_rate_limit`) or parks it in the limiter's FIFO list; schedules the key's release (cluster: register, park in the limiter's slot, leave the record, mirror the schedule) | `rate_acquire.lua` (cluster: `SADD`, `rate_acquire.lua`, `shard_finish.lua`/`HDEL`, `ZADD`/`ZREM`) | `RateAcquired` |
//! | `rates_due`, `rate_release` | the release schedule's earliest keys; releases the waiters the rule allows now to the front of their queues (cluster: staged in the limiter's slot, then delivered, schedule mirrored) | `TIME`+`ZRANGE`, `rate_release.lua` (cluster: + `front.lua`, `ZREM`, `ZADD`/`ZREM`) | `RateReleased` |
//! | `set_rate_limit` | a key's runtime limit, period, burst (0 pauses); schedules a release | `rate_set.lua` (cluster: + `SADD`, `ZSCORE`, `ZADD`/`ZREM`) | waiting `u64` |
//! | `reconcile_rates` | cluster: redelivers staged rate waiters whose deliverer died; repairs the shared schedule from each limiter's own | `SSCAN`, `reclaim.lua`, `front.lua`, `ZSCORE`, `ZADD`/`ZREM` | redelivered `u64` |
//! | **tenant shards** (`shards.rs`) | | | |
//! | `set_shard_policy`, `set_shard_limit` | a tenant's (or the default) weight, floor, cap, rate; re-checks runnability, a batch of tenants in sorted order (testing mode: the memory store) | `shard_policy.lua` | `()` |
//! | `set_shard_policy` (a tenant's `burst`) | a tenant's (or the default) burst: its running limit while no other tenant is in the dispatch order (dispatch and runnability use it; `lib/dispatch/limit.lua`'s `shard_limit`) | `shard_policy.lua` | `()` |
//! | `migrate_shard_ring` | moves a 0.1 round-robin ring to fair-share structures | `shard_policy.lua` | `u64` |
//! | **fair yield** (`yields.rs`) | | | |
//! | `yield_tick` | a worker's tick on a sharded queue: records its running iterable jobs in `runs`, drops its finished and dead workers' records (counting honoured requests), returns its jobs' requests (counting ignored ones); with the decision lock, keeps `waits`, drains `slotwaits`, re-admits a tenant that may burst again, and returns the decision snapshot | `shard_yield.lua` | `Tick` |
//! | `yield_ask` | writes share holds (`h:<tenant>` in the policy hash), marks running jobs asked to yield (not within the cool-down) with the reason, counts requests per tenant | `shard_yield_ask.lua` | jids |
//! | `set_yield_policy`, `yield_policy` | a queue's grace, minimum run, cool-down, on/off | `HSET`/`HDEL`, `HMGET` on `policy` | `()`, `StoredYield` |
//! | `yield_counts`, `yield_request` | requested / honoured / ignored per tenant; one running job's request (asked at, ignored, reason) for busy and explain | `HMGET`, `HGET` on `runs` | `Vec<YieldCounts>`, `Option<YieldRequest>` |
//! | **processes and leases** (`process.rs`) | | | |
//! | `register_worker`, `forget_worker`, `leave_processes` | fairjob's worker record; Sidekiq's `processes` | `SADD`/`SREM`/`DEL` | `()` |
//! | `renew_lease`, `try_reaper_lock`, `sampler_lease` | the process lease; the reaper's and the sampler's locks | `lease.lua`, `SET NX PX`, `sampler_lease.lua` | `bool` |
//! | `data_marker_missing` | writes the data marker every worker writes at start; whether it was missing (Redis lost its data) | `SET NX` | `bool` |
//! | `beat` | Sidekiq's process and work hashes, stats; returns a remote signal | pipeline (`HSET`, `EXPIRE`, `RPOP`) | `Option<String>` |
//! | `publish_classes` | the classes a worker runs (for views without job types) | `HSET` | `()` |
//! | `workers_alive`, `inflight_entries`, `inflight_tokens`, `inflight_payload`, `slot_records`, `in_progress`, `sampler` | the reaper's and reconciler's reads | `SMEMBERS`, `EXISTS`, `HGETALL`, `HGET`, `HLEN` | rows |
//! | **scheduler** (`promote.rs`) | | | |
//! | `promote` | claims due entries of `schedule`/`retry` under a lease | `promote.lua` | payloads |
//! | `promoting_record` | where `promote` keeps the claims of `schedule` or `retry` | — | key |
//! | `drop_claim`, `bury_claimed` | ends a claim; moves a bad entry to `dead` | `ZREM`, `schedule.lua` | `()` |
//! | `forget_pushed` | forgets once marks a relay's pushes left in their queues' slots (`pushed`), after the relay noted them | `ZREM` per queue, 500 a command | `()` |
//! | `stage_claims` | a relay's claims before its push (`push` with a `Src` in `staged` then pushes each once) | `ZADD NX` | `()` |
//! | **batches** (`batch.rs`; a member's end is written by `finish` on one server and in testing mode) | | | |
//! | `batch_stage` | stages members (pending, unsucceeded, payload in the staged set) of a batch being built; every key expires unless the commit comes (testing mode: the memory store, whose batches do not expire) | `batch_stage.lua` | `bool` |
//! | `batch_listed`, `batch_commit` | lists the batch (a listed one keeps its creation time) and marks it releasing; flips it open, stores its callbacks (an empty batch fires `complete`, `success`) (testing mode: `batch_commit` the memory store, which pushes a fired callback itself; `batch_listed` lists nothing, testing mode having no views or sweep to read it) | `ZADD NX` + `ZADD`, `batch_commit.lua` | `()`, `Committed` |
//! | `batch_add` | a member adds one to its open batch (refused once `complete` fired; testing mode: the memory store) | `batch_add.lua` | `Added` |
//! | `batch_staged_record`, `batch_staged`, `batches_releasing`, `batch_released`, `batch_unlist_releasing` | the staged set members are pushed from (`push` with a `Src`; testing mode: the memory store's `push` takes the member out of it); a page of staged members and payloads; batches a sweep should look at; forgets pushed payloads (testing mode: `batch_released` the memory store, `batch_unlist_releasing` nothing listed) | —, `HGET`+`ZRANGE`+`HMGET`, `ZRANGE BYSCORE`, `HDEL`+`ZCARD`+`ZREM`, `ZREM` | rows |
//! | `workflow_stage` | stages a workflow's steps: members, their facts in the workflow's hash, roots in the staged set, the others held with their payloads (testing mode: the memory store) | `workflow_stage.lua` | `bool` |
//! | `workflow_drain` | after an exit that left a workflow's dependents to tell (more than one call's budget of 25), tells them, a budget per call (testing mode: the memory store, whose exits leave none) | `workflow_work.lua` | events |
//! | `workflow_steps`, `workflow_failed_deps`, `workflow_record`, `workflow_result` | a workflow's steps and states (bounded `HSCAN` steps, one `HMGET`); the failed dependencies a step continued past; a step's recorded result, written and read (testing mode: the memory store) | `HSCAN`+`HMGET`, `HGET`, `HSET`, `HGET` | rows, `Option<String>` |
//! | `batch_in_script`, `batch_end` | whether a member's end is written by its exit's script (one server, and testing mode, whose `finish` writes it); the end as a step of its own (a cluster; testing mode: the memory store) | —, `batch_end.lua` | `bool`, events |
//! | `batch_due_record`, `batch_callback` | a cluster's fired callbacks wait in the batch's due set until the caller pushes them (`push` with a `Src` and `once`) | —, `HGET` (the push checks it is still due) | key, payload |
//! | `batch_status` | a batch's fields, set sizes, some failures (testing mode: the memory store) | `HGETALL`, `SCARD`, `HLEN`, `HSCAN`, `ZCARD` | `BatchRow` |
//! | `workflow_unindex` | drops a held step's index key (jid → bid) whose batch expired holding the step (explain, which read it) | `DEL` | `()` |
//! | **the batches' listing** (`batch_list.rs`) | | | |
//! | `batches_newest`, `batches_unlist`, `batches_prune` | the newest batches; drops expired ones from the list; drops expired ones among the oldest listed (the reaper pass) | `ZRANGE REV`; `ZREM`; `ZRANGE`+`EXISTS`+`ZREM` | rows, `()`, `usize` |
//! | **a relay's bookkeeping** (`relay.rs`; fairjob-postgres' pump) | | | |
//! | `relay_epoch`, `relay_epoch_read` | the relay's epoch token (written once; gone or changed = Redis lost data) | `SET NX`+`GET`, `GET` | `String` |
//! | `relay_completed` | kept jobs' ends (`done`/`dead` and the jid) written apart from their exit: a worker on a Redis Cluster after its `finish` (on one server `finish`/`ack_many` write a kept job's end in their script), a worker of an older version; the jids leave the live set | `MULTI` (`RPUSH`, `SREM`) | `()` |
//! | `relay_mark_live`, `relay_live_members` | kept jobs Redis has (added after the relay's push); which of some jids are there | `SADD`, `SMISMEMBER` | `()`, `Vec<bool>` |
//! | `relay_peek_completed`, `relay_trim_completed`, `relay_completed_len` | the pump drains completions into PostgreSQL: reads the head, writes PostgreSQL, then removes what it read if the head still holds it; the list's length for views | `LRANGE`, `relay_trim.lua`, `LLEN` | entries, removed count, `u64` |
//! | **self-healing** (`reconcile.rs`) | | | |
//! | `reconcile_shard`, `reconcile_slots` | recounts running jobs; drops slots no record holds | `shard_reconcile.lua`, `reclaim.lua`, `slot_forget.lua` | `Healed` |
//! | `worker_identities` | every registered worker's identity (the reaper's candidates) | `HKEYS` | `Vec<String>` |
//! | **operators' actions** (`actions.rs`) | | | |
//! | `act_on_entries` | retry now, delete, kill, add to queue on `retry`/`schedule`/`dead` entries | `ZREM` + `LPUSH`/`ZADD` per entry | `Acted` |
//! | `pause_queue`, `resume_queue`, `paused_queues`, `signal_process` | paused set (a resume wakes the queue's workers); Sidekiq's remote signals | `SADD`/`SREM`+`LPUSH`, `SMEMBERS`, `LPUSH` | `()`, names |
//! | **periodic schedules** (`cron.rs`) | | | |
//! | `cron_set` | stores a schedule (a changed one gets a new next fire time) | `cron_set.lua` | changed `bool` |
//! | `cron_reconcile` | replaces the code-declared schedules (stale removed, run-time kept) in bounded steps owned by the last worker to start: takes the owner key, applies 25 declared schedules per call, sweeps the code set one 50-name `SSCAN` page per call; a step of a superseded owner writes nothing | `SET` (owner), `cron_reconcile.lua` (`apply`, `sweep`), `UNLINK` | removed names, `None` when superseded |
//! | `cron_remove`, `cron_pause`, `cron_resume`, `cron_ran_now` | deletes; takes out of / puts back in `due`; records a run by hand | `MULTI` (`HDEL`, `ZREM`, `ZADD`, `HSET`) | `()` |
//! | `cron_claim` | compare-and-set of the next fire time; the fire time's job into the firing record (or a miss, an overlap skip) | `cron_claim.lua` | `CronClaim` |
//! | `cron_redrive` | re-leases claimed jobs whose poller died | `cron_redrive.lua` | payloads |
//! | `cron_release` | forgets a finished run as the schedule's live one (`overlap = "skip"`) | `cron_release.lua` | `bool` |
//! | **statistics** (`stats.rs`) | | | |
//! | `stats_writes` | wait histograms and processed/failed per minute, in the heartbeat's pipeline | `HINCRBY`, `ZADD`, `EXPIRE` | — |
//! | `count` | adds to a fairjob counter (`fenced`, `recovered`…) | `INCRBY` | `()` |
//! | **raw reads** (`read/`) | | | |
//! | `overview`, `totals`, `queue_names`, `sharded_queues`, `queue_heads`, `scheduled_head` | queue sizes and oldest entries, the queues workers declared sharded, set sizes, counters | `SMEMBERS`, `LLEN`, `LINDEX`, `ZCARD`, `GET` | rows |
//! | `maxmemory_policy`, `eviction_policy` | `maxmemory-policy` (on a cluster the first primary's that evicts, else `noeviction`); only a policy that evicts | `CONFIG GET` per primary | `Option<String>` |
//! | `server_facts` | whether the server takes writes: loading, role, last snapshot, memory | `INFO`, `CONFIG GET` | `ServerFacts` |
//! | `set_size`, `set_range`, `set_members_at`, `set_scan_step` | `retry`/`schedule`/`dead` | `ZCARD`, `ZRANGE`, `ZSCAN` | members with scores |
//! | `shard_view`, `shard_tenants`, `shard_heads`, `shard_running`, `shard_pending_step`, `shard_tenant_count`, `shard_rate_waiting` | a sharded queue's tenants and settings (rates, tenants waiting for theirs) | `SSCAN`, `LLEN`, `HGET`, `ZSCORE`, `ZRANK`, `ZCARD`, `TIME` | `ShardView`, rows |
//! | `limits`, `limit_detail`, `slot_waiters`, `limit_keys_step` | slot-limited keys, holders, waiters | `SSCAN`, `GET`, `ZCARD`, `LRANGE` | `LimitPage`, `LimitDetail` |
//! | `process_records` | Sidekiq's process records and work hashes, raw | `SSCAN`, `HMGET`, `HGETALL` | `ProcessRecord`s |
//! | `rate_limits`, `rate_limit_rows`, `rate_keys_step`, `rate_waiters` | rate limiters: declared and runtime rate, waiting, next release; a limiter's first waiters | `SSCAN`, `TIME`, `HGETALL`, `LLEN`, `ZSCORE`, `LRANGE` | `RatePage` |
//! | `waits`, `longest_waits`, `recent_tenants`, `throughput` | wait histograms, finished counts per minute | `HMGET`, `ZREVRANGE` | `WaitSummary`, `Throughput` |
//! | `window_counts`, `window_scores_at`, `window_keys_step` | reroute windows | `ZCOUNT`, `ZRANGE BYSCORE`, `SCAN` | counts, scores |
//! | `list_len`, `list_from_tail`, `tenant_lists_step`, `walk_total` | lists, for explain's bounded walk | `LLEN`, `LRANGE`, `SSCAN` | entries |
//! | `cron_due_at`, `cron_earliest`, `cron_entry`, `cron_entries`, `cron_state_row` | schedules, next fire times, state | `ZRANGE BYSCORE`, `HGET`, `HSCAN`, `HGETALL`+`ZSCORE` | rows, `CronStateRow` |
//! | `workflow_page`, `workflow_step`, `workflow_held_bid` | a page of a workflow's steps in name order (state, jid, first dependencies, those a held step waits for); one step by jid, with a held step's payload; a held step's bid from its index key (written and deleted by the workflow scripts) | `LLEN`+`LRANGE` (the list of steps), `HMGET` (fields), `HMGET` (waits); `HGET`; `GET` | `StepPage`, `Option<(StepRow, …)>`, `Option<String>` |
//! | `unique_locks`, `unique_rejection` | a page of live unique locks; a remembered refusal of a jid | `SCAN MATCH`, `HGET`+`PTTL`; `LRANGE` | `UniqueLockPage`, `Option<Rejection>` |
//! | `classes`, `key_len`, `key_ttl` | published classes; any key's size and TTL | `HSCAN`, `TYPE`+`*LEN`, `TTL` | rows |
//!
//! In fairjob's testing mode (`in_memory`, feature `testing`) the broker's
//! connection is a memory store (`memory.rs`). Each operation marked
//! "testing mode" above decides inside the broker between the store and
//! Redis, so no caller above asks which backend it has; every other
//! operation fails there with [`Error::NotInTestingMode`].

mod actions;
mod batch;
mod batch_list;
mod conn;
mod cron;
pub(crate) mod fetch;
mod finish;
mod iterate;
pub mod keys;
#[cfg(feature = "testing")]
mod memory;
mod process;
mod promote;
mod push;
mod push_steps;
mod rates;
pub mod read;
mod reconcile;
mod relay;
mod scripts;
mod shards;
pub mod slot;
mod slots;
pub mod stats;
mod token;
mod unique;
mod yields;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

pub use actions::{Acted, JobSet, MAX_BULK, ProcessSignal, SetAction};
pub use batch::{Added, BatchRow, Committed, STAGING_TTL_SECS, Staged, StagedStep};
pub use conn::{Conn, ConnectOptions, Node, Waiter, redacted};
pub use cron::{ClaimSpec, CronClaim};
pub(crate) use fetch::PlainQueue;
#[doc(hidden)]
pub use fetch::ShardQueue;
pub use fetch::{Reserved, ShardFetched};
pub use finish::{AckRecord, Holds, MemberEnd};
pub use finish::{Finish, FinishReply};
pub use iterate::{ITERATION_TTL, IterationState, SaveInfo, Saved};
pub use keys::{Keys, LimitKeys, RateKeys, ShardKeys};
#[cfg(feature = "testing")]
pub(crate) use memory::{Entry, MemoryStore, PushObserver, Waiting};
pub use process::Beat;
pub use promote::Due;
pub(crate) use push::{Candidate, PushSpec, RerouteSpec};
pub use push::{Pushed, When};
pub use rates::{RATE_RESERVATION_TTL, RELEASE_MAX, RateAcquired, RateReleased, RateRequest};
pub use read::{StepPage, StepRow};
pub use reconcile::Healed;
#[cfg(feature = "testing")]
pub use scripts::freeze_clock;
pub use scripts::{INCLUDES, SCRIPT_SOURCES, assemble, includes_of, script_hashes, uses};
pub use shards::{Setting, ShardPolicy, ShardRate};
pub use slots::{Acquired, RESERVATION_TTL, SlotRequest};
pub use token::{SlotHold, Src, Token};
pub use unique::UniqueHold;
pub(crate) use unique::UniqueLock;
pub use yields::{
    MyRun, RunRow, Snapshot, StoredYield, TenantRow, Tick, YieldCounts, YieldPolicy, YieldRequest,
};

use crate::error::{Error, Result};

/// What a script call that ran nothing needs before it is sent again
/// ([`RedisBroker::again`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Again {
    /// Call it by hash (a function refused under OOM).
    ByHash,
    /// Load it for calls as this first.
    Load(scripts::Calling),
}

/// A connection to Redis (or, in cluster mode, to every primary) and its key names.
#[derive(Clone)]
pub struct RedisBroker {
    conn: Conn,
    /// Opens the blocking connections; `None` in testing mode.
    opener: Option<conn::Opener>,
    keys: Keys,
    display: String,
    /// The Redis server's host and port (the first seed's in a cluster;
    /// none for a Unix socket or in testing mode).
    server: Option<(String, u16)>,
    options: ConnectOptions,
    /// The first identity whose own in-progress record was asked for, and
    /// that record's key (a worker asks for its own at every ack).
    own_inflight: Arc<std::sync::OnceLock<(String, String)>>,
    /// Scripts are called as functions (`FCALL`), not by hash (`EVALSHA`):
    /// [`ConnectOptions::functions`] until Redis is found without them.
    functions: Arc<std::sync::atomic::AtomicBool>,
}

impl fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBroker")
            .field("redis", &self.display)
            .field("namespace", &self.options.namespace)
            .finish()
    }
}

impl RedisBroker {
    /// Connects, failing fast with a clear error on a bad URL, refused connection
    /// or wrong credentials; later connection losses are retried in the background.
    pub async fn connect(url: &str, options: ConnectOptions) -> Result<RedisBroker> {
        let connected = conn::connect(url, &options).await?;
        Ok(RedisBroker {
            conn: connected.conn,
            opener: Some(connected.opener),
            keys: Keys::for_options(&options),
            display: connected.display,
            server: connected.server,
            functions: Arc::new(options.functions.into()),
            options,
            own_inflight: Arc::default(),
        })
    }

    /// A broker of fairjob's testing mode: pushes and schedules go to `store`,
    /// every other command fails with [`Error::NotInTestingMode`].
    #[cfg(feature = "testing")]
    pub(crate) fn in_memory(store: Arc<MemoryStore>, options: ConnectOptions) -> RedisBroker {
        RedisBroker {
            conn: Conn::memory(store),
            opener: None,
            keys: Keys::for_options(&options),
            display: "memory (fairjob testing mode)".to_owned(),
            server: None,
            functions: Arc::new(options.functions.into()),
            options,
            own_inflight: Arc::default(),
        }
    }

    /// The in-memory store, in testing mode. Private to the broker: an
    /// operation that testing mode supports decides between the store and
    /// Redis itself, so no caller above asks which it is.
    #[cfg(feature = "testing")]
    fn memory(&self) -> Option<&Arc<MemoryStore>> {
        self.conn.memory_store()
    }

    /// The Redis server's host and port (the first seed's in a cluster;
    /// none for a Unix socket or in testing mode).
    pub fn server(&self) -> Option<(&str, u16)> {
        self.server.as_ref().map(|(h, p)| (h.as_str(), *p))
    }

    /// Key names.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The server, without credentials.
    pub fn redis_display(&self) -> &str {
        &self.display
    }

    /// The options this broker was connected with.
    pub fn options(&self) -> &ConnectOptions {
        &self.options
    }

    /// A handle to the shared connection, for an application's own commands
    /// (as Ruby code uses `Sidekiq.redis`). fairjob's own keys change only
    /// through the broker's functions.
    pub fn connection(&self) -> Conn {
        self.conn.clone()
    }

    /// Drops the shared connection and opens a new one at the next command
    /// (after a `READONLY` reply: a failover may have moved the primary
    /// behind the same name). On a cluster its client follows the slot map.
    pub(crate) fn reconnect(&self) {
        self.conn.reconnect();
    }

    /// A waiter that blocks on `keys` (wake-up lists) for up to `block` per
    /// wait, on a connection of its own (on a cluster, one per hash slot).
    pub fn waiter(&self, block: Duration, keys: Vec<String>) -> Waiter {
        Waiter::new(self.opener.clone(), self.options.clone(), block, keys)
    }

    /// True when connected to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// The in-progress record holding `token` of `identity`: for a job of a
    /// tenant-sharded queue, and for every job in cluster mode, the worker's
    /// record of the job's queue (in the queue's slot); otherwise the worker's
    /// own record.
    fn inflight_of(&self, identity: &str, token: &Token) -> String {
        if token.is_sharded() || self.is_cluster() {
            self.keys.shard(&token.queue).inflight(identity)
        } else {
            self.keys.inflight(identity)
        }
    }

    /// `keys.inflight(identity)`, built once for the first identity asked
    /// (only a worker's plain acks ask, each for its own record; encoding it
    /// costs more than the rest of an ack's preparation).
    fn own_inflight(&self, identity: &str) -> std::borrow::Cow<'_, str> {
        let (id, key) = self
            .own_inflight
            .get_or_init(|| (identity.to_owned(), self.keys.inflight(identity)));
        if id == identity {
            std::borrow::Cow::Borrowed(key)
        } else {
            std::borrow::Cow::Owned(self.keys.inflight(identity))
        }
    }

    /// The wake-up list idle workers of `queue` block on: a sharded queue's
    /// own, and in cluster mode every queue's tagged one (in its slot).
    pub fn wake_key(&self, queue: &str, sharded: bool) -> String {
        if sharded || self.is_cluster() {
            self.keys.shard(queue).wake
        } else {
            self.keys.wake(queue)
        }
    }

    /// The wake-up lists a worker of `queues` (name, sharded) blocks on: each
    /// queue's ([`Self::wake_key`]), and on one server also the plain list of
    /// a sharded queue, which released slot waiters wake.
    pub fn wake_keys(&self, queues: &[(String, bool)]) -> Vec<String> {
        let mut out: Vec<String> = queues
            .iter()
            .map(|(q, sharded)| self.wake_key(q, *sharded))
            .collect();
        if !self.is_cluster() {
            out.extend(
                queues
                    .iter()
                    .filter(|(_, sharded)| *sharded)
                    .map(|(q, _)| self.keys.wake(q)),
            );
        }
        out
    }

    /// One `SSCAN` step of the set `key`: the next cursor (0 at the end) and
    /// up to about `count` members.
    async fn sscan(&self, key: &str, cursor: u64, count: usize) -> Result<(u64, Vec<String>)> {
        self.query(
            redis::cmd("SSCAN")
                .arg(key)
                .arg(cursor)
                .arg("COUNT")
                .arg(count),
        )
        .await
    }

    /// Deletes `keys` (the library's own tests, to simulate lost writes).
    #[cfg(test)]
    pub(crate) async fn delete_keys(&self, keys: &[&str]) -> Result<()> {
        let _: i64 = self.query(redis::cmd("DEL").arg(keys)).await?;
        Ok(())
    }

    /// Runs one command on the shared connection.
    async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut c = self.conn.clone();
        cmd.query_async(&mut c).await.map_err(Error::from_redis)
    }

    /// Runs one command that names no key on the node of `key`'s slot (a
    /// `SCAN` of one slot's keys; on one server, the server).
    async fn query_on_slot_of<T: FromRedisValue>(&self, cmd: &redis::Cmd, key: &str) -> Result<T> {
        let v = self
            .conn
            .on_slot_of(cmd, key)
            .await
            .map_err(Error::from_redis)?;
        T::from_redis_value(v).map_err(|e| Error::from_redis(e.into()))
    }

    /// The primaries of the cluster, sorted (`None` on one server).
    pub async fn primaries(&self) -> Result<Option<Vec<Node>>> {
        self.conn.primaries().await.map_err(Error::from_redis)
    }

    /// One step of a `SCAN … MATCH pattern COUNT count` over the whole
    /// keyspace; returns the next cursor (0 when done) and the keys found. On
    /// a cluster the scan walks the primaries one after another, the node's
    /// index in the cursor's top 16 bits (a reshard between steps may skip
    /// or repeat keys, as a `SCAN` may anyway).
    async fn scan_step(
        &self,
        pattern: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<String>)> {
        const NODE_SHIFT: u32 = 48;
        let nodes = self.primaries().await?;
        let (index, node_cursor) = (
            (cursor >> NODE_SHIFT) as usize,
            cursor & ((1 << NODE_SHIFT) - 1),
        );
        let node = match &nodes {
            Some(ns) => match ns.get(index) {
                Some(n) => Some(n),
                None => return Ok((0, Vec::new())),
            },
            None => None,
        };
        let (next, found): (u64, Vec<String>) = self
            .query_on_node(
                redis::cmd("SCAN")
                    .arg(node_cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(count),
                node,
            )
            .await?;
        let next = match (next, &nodes) {
            (0, Some(ns)) if index + 1 < ns.len() => ((index + 1) as u64) << NODE_SHIFT,
            (0, _) => 0,
            (n, _) => ((index as u64) << NODE_SHIFT) | (n & ((1 << NODE_SHIFT) - 1)),
        };
        Ok((next, found))
    }

    /// Runs one command on `node` (the one server when `None`).
    async fn query_on_node<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        node: Option<&Node>,
    ) -> Result<T> {
        let v = self
            .conn
            .on_node(cmd, node)
            .await
            .map_err(Error::from_redis)?;
        T::from_redis_value(v).map_err(|e| Error::from_redis(e.into()))
    }

    /// Runs a pipeline on the shared connection.
    async fn pipe<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let mut c = self.conn.clone();
        pipe.query_async(&mut c).await.map_err(Error::from_redis)
    }

    /// How scripts are called now.
    fn calling(&self) -> scripts::Calling {
        if self.functions.load(std::sync::atomic::Ordering::Relaxed) {
            scripts::Calling::Functions
        } else {
            scripts::Calling::Hash
        }
    }

    /// A script call's command, as scripts are called now.
    fn script_command(&self, call: &scripts::Call<'_>) -> redis::Cmd {
        call.command(self.calling())
    }

    /// The call failed without running because Redis lacks its script or
    /// function, or has no functions at all: it is loaded (or scripts are
    /// called by hash from now on) and sent again.
    fn not_run(&self, calling: scripts::Calling, e: &redis::RedisError) -> bool {
        scripts::is_missing(e)
            || (calling == scripts::Calling::Functions && scripts::is_unsupported(e))
    }

    /// How a call that failed with `e` as `calling` is sent again, if it
    /// ran nothing: by hash after an out-of-memory refusal of a function
    /// (Redis refuses a function that may write as a whole under OOM, while
    /// a script called by hash runs as before and is refused only at its
    /// first write that would grow memory, if it made none yet: fetches and
    /// acks drain the queues, pushes are refused), or, once its script or
    /// function is loaded ([`Again::Load`]), as now. `None`: the error is the
    /// call's.
    fn again(&self, calling: scripts::Calling, e: &redis::RedisError) -> Option<Again> {
        if calling == scripts::Calling::Functions && scripts::is_oom(e) {
            Some(Again::ByHash)
        } else if self.not_run(calling, e) {
            Some(Again::Load(calling))
        } else {
            None
        }
    }

    /// After [`Self::again`]: loads what it asks for, and says how to call next.
    async fn ready_again(&self, lua: &scripts::Lua, again: Again) -> Result<scripts::Calling> {
        match again {
            Again::ByHash => Ok(scripts::Calling::Hash),
            Again::Load(calling) => self.load(lua, calling).await,
        }
    }

    /// Runs a script (loading it first if Redis doesn't have it).
    async fn invoke<T: FromRedisValue>(&self, call: &scripts::Call<'_>) -> Result<T> {
        let mut c = self.conn.clone();
        let mut calling = self.calling();
        // At most: a function refused under OOM, its script missing, then run.
        for attempt in 0..3 {
            match call.command(calling).query_async(&mut c).await {
                Err(e) if attempt < 2 => match self.again(calling, &e) {
                    Some(again) => calling = self.ready_again(call.lua(), again).await?,
                    None => return Err(Error::from_redis(e)),
                },
                other => return other.map_err(Error::from_redis),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Runs several script calls in one pipeline, in order (in cluster mode,
    /// in order per hash slot). Scripts Redis doesn't have are loaded and the
    /// calls they failed are sent again, still in order (as are functions
    /// refused under OOM, by hash).
    async fn invoke_all<T: FromRedisValue>(&self, calls: &[scripts::Call<'_>]) -> Result<Vec<T>> {
        let mut out: Vec<Option<Result<T>>> = (0..calls.len()).map(|_| None).collect();
        let mut todo: Vec<(usize, scripts::Calling)> =
            (0..calls.len()).map(|i| (i, self.calling())).collect();
        for attempt in 0..3 {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &(i, calling) in &todo {
                pipe.add_command(calls[i].command(calling));
            }
            let replies: Vec<redis::RedisResult<Value>> = self.pipe(&pipe).await?;
            let mut again: Vec<(usize, Again)> = Vec::new();
            let mut failed = None;
            for (&(i, calling), reply) in todo.iter().zip(replies) {
                match reply {
                    Ok(v) => {
                        out[i] =
                            Some(T::from_redis_value(v).map_err(|e| Error::from_redis(e.into())))
                    }
                    Err(e) => match self.again(calling, &e) {
                        Some(a) if attempt < 2 => again.push((i, a)),
                        _ => {
                            failed.get_or_insert(e);
                        }
                    },
                }
            }
            if let Some(e) = failed {
                // Calls that ran wrote; the caller must not repeat them all.
                let written = out.iter().filter(|v| v.is_some()).count();
                return Err(push::partly(Error::from_redis(e), written));
            }
            if again.is_empty() {
                break;
            }
            // Each script loaded once, however many of its calls failed.
            let mut done: Vec<(&str, Again, scripts::Calling)> = Vec::new();
            let mut next = Vec::with_capacity(again.len());
            for (i, a) in again {
                let lua = calls[i].lua();
                let calling = match done.iter().find(|(h, d, _)| *h == lua.hash() && *d == a) {
                    Some(&(_, _, c)) => c,
                    None => {
                        let c = self.ready_again(lua, a).await?;
                        done.push((lua.hash(), a, c));
                        c
                    }
                };
                next.push((i, calling));
            }
            todo = next;
        }
        out.into_iter()
            .map(|v| v.expect("every call answered"))
            .collect()
    }

    /// Loads a script into Redis (every node of a cluster) for calls as
    /// `calling`, and says how it can be called now: its function library;
    /// where Redis has no functions or refuses them, the script (and scripts
    /// are called by hash from then on); under OOM (`FUNCTION LOAD` may
    /// grow memory, `SCRIPT LOAD` is allowed) the script, for this call.
    async fn load(
        &self,
        lua: &scripts::Lua,
        calling: scripts::Calling,
    ) -> Result<scripts::Calling> {
        let mut c = self.conn.clone();
        if calling == scripts::Calling::Functions {
            match lua.load_function(&mut c).await {
                Ok(()) => return Ok(scripts::Calling::Functions),
                Err(e) if scripts::is_unsupported(&e) => {
                    tracing::info!(
                        error = %e,
                        "this Redis runs no functions: scripts are called by hash (EVALSHA)"
                    );
                    self.functions
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) if scripts::is_oom(&e) => {}
                Err(e) => return Err(Error::from_redis(e)),
            }
        }
        lua.load(&mut c).await.map_err(Error::from_redis)?;
        Ok(scripts::Calling::Hash)
    }

    /// Loads every script (see `load`), so that no call finds one
    /// missing; a worker does it as it starts.
    pub async fn load_scripts(&self) -> Result<()> {
        for lua in scripts::all() {
            self.load(lua, self.calling()).await?;
        }
        Ok(())
    }

    /// Redis's clock, in float seconds.
    pub async fn time(&self) -> Result<f64> {
        let (s, us): (u64, u64) = self.query(&redis::cmd("TIME")).await?;
        Ok(s as f64 + us as f64 / 1e6)
    }

    /// One PING's round trip (what Sidekiq reports as `rtt_us`).
    pub async fn ping(&self) -> Result<Duration> {
        let started = Instant::now();
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(started.elapsed())
    }

    /// Pushes a wake-up token onto `list` (kept at one entry), so a worker idle
    /// on it fetches now rather than at its next poll.
    pub(crate) async fn wake(&self, list: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.lpush(list, "1").ignore().ltrim(list, 0, 0).ignore();
        self.pipe::<()>(&pipe).await
    }
}
