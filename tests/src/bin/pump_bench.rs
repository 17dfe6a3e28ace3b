//! The pump's throughput: N jobs committed to `fairjob.outbox` in one
//! transaction, drained into Redis by 1, 2 and 4 pumps, against the same jobs
//! pushed directly with `push_bulk`; on private PostgreSQL and Redis servers.
//!
//! `cargo run --release -p fairjob-tests --bin pump_bench -- [--jobs 20000] [--tenants 10] [--batch 500]`

use std::time::Instant;

use fairjob::Job;
use fairjob_examples::EchoJob;
use fairjob_postgres::testing::PostgresServer;
use fairjob_postgres::{Pump, migrate, perform_bulk_tx};
use fairjob_tests::{Redis, flag};

fn jobs(n: usize, tenants: usize) -> impl Iterator<Item = fairjob::Enqueue<EchoJob>> {
    (0..n).map(move |i| EchoJob(i.to_string()).set_tenant(format!("t{}", i % tenants)))
}

#[tokio::main]
async fn main() {
    let n: usize = flag("--jobs", 20_000);
    let tenants: usize = flag("--tenants", 10);
    let batch: usize = flag("--batch", 500);
    let pg = PostgresServer::start().expect("a private PostgreSQL");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(&pg.url())
        .await
        .unwrap();
    migrate(&pool).await.unwrap();
    let redis = Redis::start().await;
    println!("{n} jobs, {tenants} tenants, batches of {batch}");

    let client = redis.client().await;
    let t = Instant::now();
    client.push_bulk(jobs(n, tenants)).await.unwrap();
    let direct = n as f64 / t.elapsed().as_secs_f64();
    println!("direct push_bulk: {direct:.0} jobs/s");

    for pumps in [1usize, 2, 4] {
        let _: () = redis.query(&redis::cmd("FLUSHALL")).await;
        let mut tx = pool.begin().await.unwrap();
        perform_bulk_tx(&mut *tx, jobs(n, tenants)).await.unwrap();
        tx.commit().await.unwrap();
        let t = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..pumps {
            let pump = Pump::new(pool.clone(), redis.client().await).batch(batch);
            handles.push(tokio::spawn(async move {
                while pump.pump_once().await.unwrap().claimed > 0 {}
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let rate = n as f64 / t.elapsed().as_secs_f64();
        let in_redis = redis.llen(redis.keys().queue(EchoJob::OPTIONS.queue)).await;
        assert_eq!(in_redis, n);
        println!("{pumps} pump(s): {rate:.0} jobs/s into Redis");
    }
}
