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
/// Marks a parked job of a sharded queue, so that when a slot frees it goes to
/// the front of its tenant's list (read by the shard scripts).
pub const SLOT_RELEASED: &str = "fairjob_slot_released";
/// The periodic schedule that enqueued this job (its name).
pub const CRON: &str = "fairjob_cron";
/// The fire time (Unix seconds) of the schedule that enqueued this job.
pub const FIRE_TIME: &str = "fairjob_fire_time";
