//! Per-tenant rates on a tenant-sharded queue (issue 22, point 3): a tenant
//! whose rate is spent leaves the dispatch order with its pass kept, the
//! others are served meanwhile (work-conserving), and it comes back when its
//! rate allows, judged on Redis's clock. Set from the CLI (`shard-policy
//! --rate`) or the client (`shard_policy(..).rate(..)`), as a tenant's own
//! or as the queue's default; shown by `shards`, the read model and explain.
//!
//! Every test runs its own private redis-server.

use std::time::Duration;

use fairjob::broker::ShardRate;
use fairjob::inspect::Page;
use fairjob::rate::parse_tenant_rate;
use fairjob_tests::rate_jobs::{DispatchLog, TenantRateJob, max_in_window};
use fairjob_tests::{Redis, eventually, queues};

const Q: &str = "tenant_rates";

/// The start times of `tenant`'s jobs (Redis µs), in start order.
async fn starts(redis: &Redis, tenant: &str) -> Vec<u64> {
    redis
        .lrange(redis.key(&format!("started:t:{tenant}")))
        .await
        .iter()
        .map(|s| s.split_once(' ').unwrap().0.parse().unwrap())
        .collect()
}

fn rate(text: &str) -> ShardRate {
    parse_tenant_rate(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_rate_waits_while_the_others_take_the_workers() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    // From the CLI: tenant a at 5/s (burst 0: one start every 200 ms).
    let said = redis.cli(&["shard-policy", Q, "--tenant", "a", "--rate", "5/s"]);
    assert!(said.contains("rate set to 5/1s"), "{said}");
    c.push_bulk(TenantRateJob::batch("a", 30, 50))
        .await
        .unwrap();
    c.push_bulk(TenantRateJob::batch("b", 4000, 50))
        .await
        .unwrap();
    let dispatched = DispatchLog::start(&c, Q, "a");
    let w = redis.worker().concurrency(10).queues(queues(&[Q]));
    let running = fairjob_tests::spawn(w.build().await.unwrap());
    // While it runs, the read model says a waits for its rate, sometimes.
    let mut seen_waiting = false;
    for _ in 0..40 {
        let view = c.inspector().shard_tenants(Q, &[Some("a")]).await.unwrap();
        let row = &view.rows[0];
        assert_eq!(row.rate, Some(rate("5/s")));
        if row.rate_wait_until.is_some() {
            seen_waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(seen_waiting, "tenant a is seen waiting for its rate");
    eventually!(
        within Duration::from_secs(30),
        starts(&redis, "a").await.len() == 30,
        "every job of a starts"
    );
    running.stop().await;
    let a = starts(&redis, "a").await;
    let b = starts(&redis, "b").await;
    let (first, last) = (a[0], *a.last().unwrap());
    let span = Duration::from_micros(last - first);
    // Judged where the limit counts: a's dispatches on Redis's clock (the
    // jobs' own records add the jitter of each start after its dispatch).
    let d = dispatched.times();
    assert_eq!(d.len(), 30, "every dispatch of a is seen: {d:?}");
    let most = max_in_window(&d, 1_000_000);
    let d_span = Duration::from_micros(d[29] - d[0]);
    let b_meanwhile = b.iter().filter(|&&t| t >= first && t <= last).count();
    println!(
        "shard_rates: a at 5/s: 30 dispatches over {d_span:?} (ideal 5.8 s; the jobs' starts over \
         {span:?}), at most {most} in any 1 s window; b started {b_meanwhile} jobs meanwhile"
    );
    assert!(
        most <= 5,
        "at most 5 (+ burst 0) dispatches of a in any 1-second window, saw {most}"
    );
    // 29 intervals of 200 ms, and 5 per second at most: never under 5.8 s;
    // slower only by the window's lateness, once a second (the catch-up
    // credit absorbs each start's). Speed is not asserted: bounded loosely.
    assert!(
        d_span >= Duration::from_millis(5800) && d_span <= Duration::from_secs(12),
        "a runs at about 5/s: 30 dispatches took {d_span:?}"
    );
    // b took the rest of the workers: at concurrency 10 with 50 ms jobs,
    // far more than a's 30 starts.
    assert!(
        b_meanwhile > 10 * a.len(),
        "b takes the rest of the workers: only {b_meanwhile} starts of b meanwhile"
    );
    assert_eq!(redis.zcard(redis.key("retry")).await, 0, "no retry spent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_comes_back_when_the_default_rate_allows() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    // The queue's default: every tenant at 10/s.
    c.shard_policy(Q).rate(rate("10/s")).apply().await.unwrap();
    c.push_bulk(TenantRateJob::batch("solo", 20, 0))
        .await
        .unwrap();
    // A poll interval far above the rate's interval: only the fetch's hint
    // (when the waiting tenant is due) brings the idle worker back in time.
    let dispatched = DispatchLog::start(&c, Q, "solo");
    let w = redis
        .worker()
        .concurrency(4)
        .poll_interval(Duration::from_secs(3))
        .queues(queues(&[Q]));
    let running = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(
        within Duration::from_secs(20),
        starts(&redis, "solo").await.len() == 20,
        "every job starts"
    );
    // The log polls every 50 ms: the last dispatch may not be read yet.
    eventually!(
        within Duration::from_secs(2),
        dispatched.times().len() == 20,
        "the dispatch log reads every dispatch: {:?}",
        dispatched.times()
    );
    running.stop().await;
    // Judged at the dispatch, read from Redis (the jobs' records add jitter).
    let s = dispatched.times();
    assert_eq!(s.len(), 20, "every dispatch is seen: {s:?}");
    let span = Duration::from_micros(s.last().unwrap() - s[0]);
    let most = max_in_window(&s, 1_000_000);
    println!(
        "shard_rates: one tenant at the default 10/s: 20 dispatches over {span:?} (ideal 1.9 s)"
    );
    assert!(most <= 10, "at most 10 in any 1 s window, saw {most}");
    assert!(
        span >= Duration::from_millis(1850) && span < Duration::from_secs(9),
        "the idle worker returns when the rate allows, not at its 3 s poll: {span:?}"
    );
    let view = c.inspector().shard_view(Q, Page::first(100)).await.unwrap();
    assert_eq!(view.default_rate, Some(rate("10/s")));
    assert_eq!(view.rate_waiting, 0, "nobody waits at the end");
    // Removing the default (and refusing a rate of 0, which would be a pause).
    let zero = ShardRate {
        limit: 0,
        per_us: 1_000_000,
    };
    let refused = c.shard_policy(Q).rate(zero).apply().await.unwrap_err();
    assert!(refused.to_string().contains("cap of 0"), "{refused}");
    c.shard_policy(Q).no_rate().apply().await.unwrap();
    let view = c.inspector().shard_view(Q, Page::first(100)).await.unwrap();
    assert_eq!(view.default_rate, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_a_tenant_waits_for_its_rate() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    // One start per minute: after the first, a waits.
    c.shard_policy(Q)
        .tenant("slow")
        .rate(rate("1/1m"))
        .apply()
        .await
        .unwrap();
    let jids: Vec<String> = {
        let mut out = Vec::new();
        for job in TenantRateJob::batch("slow", 3, 0) {
            out.push(c.push(job).await.unwrap());
        }
        out
    };
    let w = redis.worker().concurrency(2).queues(queues(&[Q]));
    let running = fairjob_tests::spawn(w.build().await.unwrap());
    eventually!(
        within Duration::from_secs(10),
        starts(&redis, "slow").await.len() == 1,
        "the first job starts"
    );
    eventually!(
        within Duration::from_secs(5),
        c.inspector()
            .shard_view(Q, Page::first(10))
            .await
            .unwrap()
            .rate_waiting
            == 1,
        "the tenant waits for its rate"
    );
    let shown = redis.cli(&["shards", Q]);
    assert!(shown.contains("1/1m w"), "{shown}");
    let said = redis.cli(&["explain", &jids[1], "--tenant", "slow"]);
    assert!(
        said.contains("slow waits for its rate on `tenant_rates` (1/1m)"),
        "{said}"
    );
    running.stop().await;
    assert_eq!(
        starts(&redis, "slow").await.len(),
        1,
        "no second start within the minute"
    );
}
