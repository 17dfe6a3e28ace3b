//! The dashboard in a real browser: headless Chromium (Debian's `chromium`,
//! driven over the DevTools protocol on a pipe) loads every page against a
//! real worker, each screenshot is decoded and must not be blank, no script
//! of a tenant (or a batch's or a workflow's description) named
//! `<script>alert(1)</script>` runs (no dialog opens), a workflow's page
//! shows its running, failed, cancelled and held steps, and clicking "Retry
//! now" on a dead entry makes the worker perform the job.
//!
//! Set `FAIRJOB_SCREENSHOTS=<dir>` to keep the screenshots (the README's come
//! from here).

use std::time::Duration;

use fairjob::Job as _;
use fairjob::payload::{new_jid, now_f64};
use fairjob_tests::jobs::{DropJob, FailJob, RecordJob, ShardJob, TJob};
use fairjob_tests::slot_jobs::SlotJob;
use fairjob_tests::web::{Browser, Dashboard, Http, enc, png_colours};
use fairjob_tests::{client, namespace, raw, redis, temp_dir, wait_until};
use serde_json::json;

const SCRIPT: &str = "<script>alert(1)</script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_every_page_and_retries_a_dead_job() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    c.shard_policy("conversions")
        .tenant("acme")
        .cap(2)
        .apply()
        .await
        .unwrap();
    let dash = Dashboard::start(
        &url,
        &ns,
        &[
            "run",
            "-q",
            "default",
            "-q",
            "conversions",
            "-q",
            "slots",
            "--shard",
            "conversions",
            "-c",
            "20",
            "--heartbeat",
            "300ms",
            "--lease",
            "1500ms",
            "--poll-interval",
            "100ms",
            "--scheduled-poll-interval",
            "200ms",
            "--web",
            "127.0.0.1:0",
            "--web-actions",
        ],
        &[],
    );
    let base = dash.url.clone();
    for (t, n) in [
        ("acme", 8),
        ("globex", 3),
        ("initech", 2),
        (SCRIPT, 2),
        ("ünïcødé", 1),
    ] {
        for i in 0..n {
            ShardJob {
                tenant: t.into(),
                n: i,
                ms: 20_000,
            }
            .perform_async(&c)
            .await
            .unwrap();
        }
        TJob { tenant: t.into() }.perform_async(&c).await.unwrap();
    }
    let mut rerouted = String::new();
    for _ in 0..3 {
        rerouted = TJob {
            tenant: "acme".into(),
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    for _ in 0..5 {
        SlotJob {
            key: "acme".into(),
            ms: 20_000,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    let dead_jid = new_jid();
    let now = now_f64();
    let entry = json!({
        "class": "RecordJob", "args": ["clicked-in-browser"], "jid": dead_jid, "queue": "default",
        "retry": 3, "created_at": now - 900.0, "enqueued_at": now - 900.0, "fair_tenant": SCRIPT,
        "error_class": "Net::ReadTimeout", "error_message": "timed out <after> 30s",
        "retry_count": 3, "failed_at": now - 120.0,
    });
    let mut r = raw(&url).await;
    let _: i64 = redis::cmd("ZADD")
        .arg(c.broker().keys().dead())
        .arg(now - 120.0)
        .arg(entry.to_string())
        .query_async(&mut r)
        .await
        .unwrap();
    // A batch: its members run (one fails into retry), `complete` fires.
    let bid = fairjob::Batch::new()
        .description(format!("{SCRIPT} nightly import: {{rows}} ünï"))
        .set_tenant(SCRIPT)
        .on_complete(RecordJob("batch-complete".into()))
        .on_success(RecordJob("batch-success".into()))
        .push_bulk((0..3).map(|n| RecordJob(format!("batch-row-{n}"))))
        .push(FailJob("<i>row 4</i>".into()))
        .commit(&c)
        .await
        .unwrap();
    // A workflow: `load` runs (10 min), `then` waits for it; `bad` fails
    // for good and `skipped` is cancelled.
    let wid = fairjob::Workflow::new()
        .description(format!("{SCRIPT} nightly export"))
        .set_tenant(SCRIPT)
        .add(
            "load",
            ShardJob {
                tenant: "ünïcødé".into(),
                n: 99,
                // Running for the whole test, however slow the machine.
                ms: 600_000,
            },
        )
        .add_after("then", RecordJob("then".into()), ["load"])
        // Failed and not kept (`retry = false`): the dead set stays as it is.
        .add("bad", DropJob.queue("default"))
        .add_after("skipped", RecordJob("skipped".into()), ["bad"])
        .commit(&c)
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || async {
            let v = Http::new()
                .get(&format!("{base}/api/workflows/{}", enc(&wid)), &[])
                .json();
            let states: Vec<&str> = v["steps"]
                .as_array()
                .map(|s| s.iter().filter_map(|s| s["state"].as_str()).collect())
                .unwrap_or_default();
            states == ["failed", "running", "cancelled", "held"]
        })
        .await,
        "the workflow's steps run, fail and wait"
    );
    let then_jid = Http::new()
        .get(&format!("{base}/api/workflows/{}", enc(&wid)), &[])
        .json()["steps"][3]["jid"]
        .as_str()
        .unwrap()
        .to_owned();
    // Let the worker start the jobs and flush its wait statistics.
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let v = Http::new().get(&format!("{base}/api/tenants"), &[]).json();
            v["tenants"].as_array().is_some_and(|t| t.len() >= 5)
        })
        .await
    );

    let keep = std::env::var_os("FAIRJOB_SCREENSHOTS").map(std::path::PathBuf::from);
    let shots = temp_dir("screens");
    let mut browser = Browser::start(1280, 900);
    let pages = [
        ("overview", "/".to_owned()),
        ("queues", "/queues".to_owned()),
        ("tenants", "/tenants".to_owned()),
        ("tenant", format!("/tenants/{}", enc("acme"))),
        ("tenant-script", format!("/tenants/{}", enc(SCRIPT))),
        ("explain", format!("/explain?jid={rerouted}")),
        ("shards", "/shards/conversions".to_owned()),
        ("limits", "/limits".to_owned()),
        ("retries", "/retries".to_owned()),
        ("scheduled", "/scheduled".to_owned()),
        ("dead", "/dead".to_owned()),
        ("busy", "/busy".to_owned()),
        ("batches", "/batches".to_owned()),
        ("batch", format!("/batches/{}", enc(&bid))),
        ("workflow", format!("/workflows/{}", enc(&wid))),
        ("explain-held", format!("/explain?jid={then_jid}")),
    ];
    for (name, path) in &pages {
        browser.goto(&format!("{base}{path}"));
        let title = browser.eval("document.title");
        assert!(
            title.as_str().is_some_and(|t| t.ends_with("· fairjob")),
            "{name}: {title}"
        );
        let png = browser.screenshot();
        let colours = png_colours(&png);
        assert!(
            colours > 20,
            "{name}: the screenshot is blank ({colours} colours)"
        );
        std::fs::write(shots.join(format!("{name}.png")), &png).unwrap();
        if let Some(dir) = &keep {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        }
    }
    // The <script> tenant is text on its page, and nothing of it ran.
    browser.goto(&format!("{base}/tenants/{}", enc(SCRIPT)));
    let heading = browser.eval("document.querySelector('h1').textContent");
    assert!(
        heading.as_str().is_some_and(|h| h.contains(SCRIPT)),
        "{heading}"
    );
    assert!(
        !browser
            .events
            .iter()
            .any(|(m, _)| m == "Page.javascriptDialogOpening"),
        "a tenant's script ran"
    );
    // The batch's <script> description is text on its pages.
    browser.goto(&format!("{base}/batches"));
    let cell = browser.eval("document.querySelector('tbody td a').textContent");
    assert!(
        cell.as_str().is_some_and(|t| t.starts_with(SCRIPT)),
        "{cell}"
    );
    // The workflow's <script> description is text; its steps show their states.
    browser.goto(&format!("{base}/workflows/{}", enc(&wid)));
    let cell = browser.eval("document.querySelector('tbody td').textContent");
    assert!(
        cell.as_str().is_some_and(|t| t.starts_with(SCRIPT)),
        "{cell}"
    );
    let states = browser.eval(
        "Array.from(document.querySelectorAll('table.steps .badge')).map(b => b.textContent).join(' ')",
    );
    assert_eq!(states.as_str(), Some("failed running cancelled held"));
    // The held step's explain says what it waits for.
    browser.goto(&format!("{base}/explain?jid={then_jid}"));
    let reasons = browser.eval("document.querySelector('.reasons').textContent");
    assert!(
        reasons
            .as_str()
            .is_some_and(|r| r.contains("held as step `then` in no queue: waiting for `load`")),
        "{reasons}"
    );
    // The explain page says why the rerouted job waits.
    browser.goto(&format!("{base}/explain?jid={rerouted}"));
    let reasons = browser.eval("document.querySelector('.reasons').textContent");
    assert!(
        reasons
            .as_str()
            .is_some_and(|r| r.contains("rerouted from `whatever`")),
        "{reasons}"
    );

    // Click "Retry now" on the dead entry; the worker performs the job.
    browser.goto(&format!("{base}/dead"));
    browser.click("button[name=one][value^='retry_now|']");
    let message = browser.eval("document.querySelector('main .warning') && document.querySelector('main .warning').textContent");
    let body = browser.eval("document.location.href + ' ' + document.body.innerText.slice(0, 300)");
    assert!(
        message
            .as_str()
            .is_some_and(|m| m.contains("Retry now: 1 done")),
        "{message} {body}"
    );
    assert!(
        wait_until(Duration::from_secs(15), || async {
            let mut r = raw(&url).await;
            let lines: Vec<String> = redis::cmd("LRANGE")
                .arg(format!("{ns}:record"))
                .arg(0)
                .arg(-1)
                .query_async(&mut r)
                .await
                .unwrap();
            lines.iter().any(|l| l.contains("clicked-in-browser"))
        })
        .await,
        "the dead job retried in the browser was performed"
    );
    drop(browser);
    drop(dash);
}
