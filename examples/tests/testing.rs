//! How an application tests its fairjob code (fairjob's `testing` feature,
//! on in this crate's dependency):
//!
//! - the axum handler, on a `Fake`: no Redis; the client, its reroute rules and
//!   the handler's `.set_tenant()` run as in production;
//! - a job's own unit test, with `testing::perform`;
//! - an integration test on a private `redis-server` (`RedisServer`), for
//!   what the fake does not do: a job's own Redis commands, a real worker.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use fairjob::prelude::*;
use fairjob::testing::{Fake, RedisServer, perform};
use fairjob::{Error, Registry, Worker};
use fairjob_examples::web::router;
use fairjob_examples::{ECHO_LIST, EchoJob, ReportJob, STARTED};
use serde_json::Value;
use tower::ServiceExt;

fn post(tenant: Option<&str>, number: u32) -> Request<Body> {
    let mut req = Request::post(format!("/reports/{number}"));
    if let Some(t) = tenant {
        req = req.header("x-tenant", t);
    }
    req.body(Body::empty()).unwrap()
}

async fn call(app: &axum::Router, req: Request<Body>) -> (StatusCode, Value) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn the_report_handler_enqueues_for_the_requests_tenant() {
    let fake = Fake::new();
    let app = router(fake.client());

    let (status, body) = call(&app, post(Some("acme"), 7)).await;
    assert_eq!(status, StatusCode::OK);
    let reports = fake.enqueued::<ReportJob>();
    assert_eq!(reports.len(), 1);
    assert_eq!(body["jid"], reports[0].jid.as_str());
    assert_eq!(reports[0].job.number, 7);
    assert_eq!(reports[0].tenant.as_deref(), Some("acme"));
    assert_eq!(reports[0].queue, "reports");

    // A greedy tenant: past 5 reports a minute, the rest go to a slower queue.
    for n in 8..13 {
        call(&app, post(Some("acme"), n)).await;
    }
    // Another tenant is not slowed down.
    call(&app, post(Some("globex"), 1)).await;
    let queues: Vec<(String, String)> = fake
        .enqueued::<ReportJob>()
        .into_iter()
        .map(|r| (r.tenant.unwrap(), r.queue))
        .collect();
    assert_eq!(queues[4], ("acme".into(), "reports".into()));
    assert_eq!(queues[5], ("acme".into(), "reports_throttled".into()));
    assert_eq!(queues[6], ("globex".into(), "reports".into()));

    // No tenant: refused, nothing enqueued.
    let (status, _) = call(&app, post(None, 1)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(fake.enqueued::<ReportJob>().len(), 7);

    // And the reports run, from the queues they were pushed to.
    assert_eq!(fake.drain().await.unwrap(), 7);
    let started = STARTED.lock().unwrap().clone();
    assert!(
        started
            .iter()
            .any(|s| s.account == "acme" && s.queue == "reports_throttled")
    );
}

#[tokio::test]
async fn a_report_job_runs_for_its_tenant() {
    perform(ReportJob {
        account: "unit-test-tenant".into(),
        number: 1,
    })
    .attempt(2)
    .await
    .unwrap();
    let started = STARTED.lock().unwrap().clone();
    assert!(
        started
            .iter()
            .any(|s| s.account == "unit-test-tenant" && s.queue == "reports")
    );
}

#[tokio::test]
async fn the_echo_job_needs_redis_so_the_fake_says_so() {
    let err = perform(EchoJob("hi".into())).await.unwrap_err();
    assert!(
        err.message()
            .contains("is not available in fairjob's testing mode"),
        "{err}"
    );
    let fake = Fake::new();
    assert!(matches!(
        fake.client().broker().ping().await,
        Err(Error::NotInTestingMode(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_job_runs_on_a_worker_against_a_real_redis() {
    let redis = RedisServer::start(&[]).expect("redis-server starts");
    let client = Client::connect(&redis.url()).await.unwrap();
    EchoJob("hello".into())
        .perform_async(&client)
        .await
        .unwrap();

    let mut registry = Registry::new();
    registry.register::<EchoJob>().unwrap();
    let worker = Worker::builder(redis.url())
        .registry(registry)
        .poll_interval(Duration::from_millis(50))
        .shutdown_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
    }));

    let mut conn = client.broker().connection();
    let deadline = Instant::now() + Duration::from_secs(10);
    let echoed = loop {
        let items: Vec<String> = redis::cmd("LRANGE")
            .arg(ECHO_LIST)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        if !items.is_empty() || Instant::now() > deadline {
            break items;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(echoed, ["hello"], "the worker ran the job within 10 s");
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}
