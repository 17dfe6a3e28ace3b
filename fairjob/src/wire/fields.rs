//! The payload field names fairjob reads or writes beyond Sidekiq's own.

/// The tenant (the `sidekiq-fair_tenant` gem's field).
pub const FAIR_TENANT: &str = "fair_tenant";
/// Reroute rules carried with the job, as the gem does: `[{queue, threshold, per}]`.
pub const FAIR_TENANT_QUEUES: &str = "fair_tenant_queues";
/// The queue a rerouted job was declared for; retries are judged against it.
pub const ORIGINAL_QUEUE: &str = "fairjob_original_queue";
/// Set when the queue was chosen explicitly at enqueue: never rerouted, never counted.
pub const QUEUE_PINNED: &str = "fairjob_queue_pinned";
/// How many times a worker died (or lost its lease) while running this job.
pub const INTERRUPTED_COUNT: &str = "interrupted_count";
/// When a job was last put back on its queue by a yield (epoch seconds): the
/// start of its current wait. `enqueued_at` keeps the first enqueue, so a
/// yielded job's next wait does not include its earlier runs.
pub const REQUEUED_AT: &str = "fairjob_requeued_at";
/// Marks a parked job of a sharded queue, so that when a slot frees it goes to
/// the front of its tenant's list (read by the shard scripts).
pub const SLOT_RELEASED: &str = "fairjob_slot_released";
/// Why a waiting job was parked (`"slot"` or `"rate_limit"`), written with
/// it when a limiter parks it; the perform span's wait reason reads it.
pub const PARKED: &str = "fairjob_parked";
/// When that job was parked (float epoch seconds).
pub const PARKED_AT: &str = "fairjob_parked_at";
/// The periodic schedule that enqueued this job (its name).
pub const CRON: &str = "fairjob_cron";
/// The fire time (Unix seconds) of the schedule that enqueued this job.
pub const FIRE_TIME: &str = "fairjob_fire_time";
/// A unique job's key: the SHA-1 (hex) of its class and key arguments
/// ([`crate::wire::unique_digest`]), never the arguments themselves.
pub const UNIQUE_DIGEST: &str = "unique_digest";
/// The queue whose cluster slot holds a unique job's lock (its queue when first pushed).
pub const UNIQUE_QUEUE: &str = "unique_queue";
/// A unique lock's longest life, in seconds.
pub const UNIQUE_FOR: &str = "unique_for";
/// When a unique lock is released: `"success"` (default) or `"start"`.
pub const UNIQUE_UNTIL: &str = "unique_until";
/// What a conflicting push does: `"reject"` (default) or `"replace"`.
pub const UNIQUE_ON_CONFLICT: &str = "unique_on_conflict";
/// Set (`true`) on a job whose row stays in PostgreSQL until it ends
/// (fairjob-postgres' "Postgres stays the truth" mode): a worker that acks or
/// buries it records its jid in the relay's completion list.
pub const PG_TRUTH: &str = "fairjob_pg_truth";
/// The batch a job is a member of (Sidekiq Pro's field name; a bid fairjob
/// does not know changes nothing).
pub const BID: &str = "bid";
/// On a batch's callback job: the batch's id.
pub const BATCH_CALLBACK: &str = "fairjob_batch_callback";
/// On a batch's callback job: the event (`complete`, `success`, `death`).
pub const BATCH_EVENT: &str = "fairjob_batch_event";
/// On a child batch's `complete` or `success` callback job: the parent
/// batch's id (the callback's end tells the parent the child ran or succeeded).
pub const BATCH_PARENT: &str = "fairjob_batch_parent";
/// On a workflow's step: its name.
pub const WORKFLOW_STEP: &str = "fairjob_step";
