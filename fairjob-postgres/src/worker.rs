//! `WorkerBuilder::postgres(pool)`: the pump beside a library worker.

use fairjob::WorkerBuilder;
use sqlx::PgPool;

use crate::pump::Pump;

/// The pump as a service of a worker ([`WorkerBuilder::service`]).
pub trait WorkerBuilderExt: Sized {
    /// Runs a [`Pump`] with its defaults beside the worker, pushing through
    /// the worker's client (its middleware and reroute rules apply).
    fn postgres(self, pool: PgPool) -> Self {
        self.postgres_with(pool, |p| p)
    }

    /// As [`postgres`](Self::postgres), with the pump configured by
    /// `configure` (`|p| p.keep_queues(["billing"]).listen(true)`).
    fn postgres_with(
        self,
        pool: PgPool,
        configure: impl FnOnce(Pump) -> Pump + Send + 'static,
    ) -> Self;
}

impl WorkerBuilderExt for WorkerBuilder {
    fn postgres_with(
        self,
        pool: PgPool,
        configure: impl FnOnce(Pump) -> Pump + Send + 'static,
    ) -> Self {
        self.service(move |client, stop| async move {
            let pump = configure(Pump::new(pool, client));
            if let Err(e) = pump.run(stop).await {
                tracing::error!(error = %e, "the PostgreSQL pump stopped");
            }
        })
    }
}

/// A pump configured from the worker TOML's `[postgres]` table (the URL aside).
pub fn configured(pump: Pump, config: &fairjob::PostgresConfig) -> Pump {
    pump.batch(config.batch)
        .poll_interval(config.poll_interval)
        .max_idle_interval(config.max_idle_interval)
        .check_interval(config.check_interval)
        .retention(config.retention)
        .lost_grace(config.lost_grace)
        .keep_queues(config.keep_queues.iter().cloned())
        .listen(config.listen)
}
