//! The pump's metrics (the `metrics` crate; exported by whatever recorder
//! the process installs, e.g. `fairjob-worker --metrics`).

/// Gauge: rows waiting to reach Redis (sampled by each pump's heartbeat).
pub const BACKLOG: &str = "fairjob_postgres_backlog";
/// Gauge: age in seconds of the oldest row waiting to reach Redis (the pump's lag).
pub const LAG_SECONDS: &str = "fairjob_postgres_lag_seconds";
/// Gauge: pumps seen alive in the last 30 s.
pub const PUMPS_ALIVE: &str = "fairjob_postgres_pumps_alive";
/// Counter: jobs this process's pumps pushed into Redis.
pub const PUSHED_TOTAL: &str = "fairjob_postgres_pushed_total";
/// Counter: batches and workflows (committed in a transaction) this
/// process's pumps committed into Redis.
pub const BATCHES_TOTAL: &str = "fairjob_postgres_batches_total";
/// Counter: rows kept as failed (a job that cannot be pushed, a batch that
/// cannot be committed).
pub const FAILED_TOTAL: &str = "fairjob_postgres_failed_total";
/// Counter: kept jobs' ends written back to PostgreSQL (label `state`: done, dead).
pub const COMPLETIONS_TOTAL: &str = "fairjob_postgres_completions_total";
/// Counter: times this process found that Redis lost data.
pub const REPUBLISH_EVENTS_TOTAL: &str = "fairjob_postgres_republish_events_total";
/// Counter: kept jobs made pending again after Redis lost data.
pub const REPUBLISHED_TOTAL: &str = "fairjob_postgres_republished_total";
