//! The dashboard over HTTP against a real redis-server and a real worker
//! process serving it beside processing (`worker run --web`): every page and
//! its JSON twin, tenants with odd ids (`:`, `{`, spaces, non-ASCII, a
//! `<script>` tag) rendered as text, reroute state, a sharded queue with a
//! tenant at its running limit, slots with waiters, explain, the actions on
//! `retry`, `schedule` and `dead` (a dead job retried from the dashboard is
//! then performed by the worker), pause and resume, batches (a `<script>`
//! description, an odd tenant, a failure holding markup, an expired entry
//! unlisted), a workflow's steps paged (failed, cancelled, continued, held
//! with what it waits for) and explain of its held step and of a batch
//! member, and the security rules: token, login, CSRF, origin, read-only,
//! loopback.

use std::process::Command;
use std::time::Duration;

use fairjob::Job as _;
use fairjob::payload::{new_jid, now_f64};
use fairjob_tests::jobs::{RecordJob, ShardJob, TJob};
use fairjob_tests::slot_jobs::SlotJob;
use fairjob_tests::web::{Dashboard, Http, Resp, enc, input_value};
use fairjob_tests::{bin, client, namespace, raw, redis, wait_until};
use serde_json::{Value, json};

const ODD: &[&str] = &[
    "ac:me",
    "{brace}",
    "space tenant",
    "ünïcødé",
    "<script>alert(1)</script>",
];
const SCRIPT: &str = "<script>alert(1)</script>";
const SCRIPT_ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";

/// A Sidekiq payload of RecordJob(`arg`) as it sits in `retry` or `dead`.
fn record_entry(jid: &str, arg: &str, tenant: &str) -> String {
    let now = now_f64();
    json!({
        "class": "RecordJob", "args": [arg], "jid": jid, "queue": "default", "retry": 3,
        "created_at": now - 600.0, "enqueued_at": now - 600.0, "fair_tenant": tenant,
        "error_class": "RuntimeError", "error_message": "<b>boom</b> & more",
        "retry_count": 3, "failed_at": now - 60.0,
    })
    .to_string()
}

async fn zadd(url: &str, key: &str, score: f64, member: &str) {
    let mut r = raw(url).await;
    let _: i64 = redis::cmd("ZADD")
        .arg(key)
        .arg(score)
        .arg(member)
        .query_async(&mut r)
        .await
        .unwrap();
}

async fn recorded(url: &str, ns: &str) -> Vec<String> {
    let mut r = raw(url).await;
    redis::cmd("LRANGE")
        .arg(format!("{ns}:record"))
        .arg(0)
        .arg(-1)
        .query_async(&mut r)
        .await
        .unwrap()
}

async fn performed(url: &str, ns: &str, arg: &str) -> bool {
    let arg = arg.to_owned();
    wait_until(Duration::from_secs(15), || async {
        recorded(url, ns)
            .await
            .iter()
            .any(|l| l.split(' ').nth(2) == Some(arg.as_str()))
    })
    .await
}

fn assert_page(r: &Resp, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    assert!(
        r.header("content-security-policy")
            .is_some_and(|c| c.contains("script-src 'self'") && !c.contains("unsafe-inline")),
        "{what}: strict CSP"
    );
    assert!(
        !r.body.contains(SCRIPT),
        "{what} holds an unescaped <script> tenant"
    );
}

fn get(http: &mut Http, base: &str, path: &str) -> Resp {
    http.get(&format!("{base}{path}"), &[])
}

fn api(http: &mut Http, base: &str, path: &str) -> Value {
    let r = get(http, base, &format!("/api{path}"));
    assert_eq!(r.status, 200, "/api{path}: {}", r.body);
    assert!(r.header("content-type").is_some_and(|c| c.contains("json")));
    r.json()
}

/// A form POST the way the dashboard's own pages send it (session cookie,
/// CSRF token, same origin).
fn act(http: &mut Http, base: &str, path: &str, form: &[(&str, &str)]) -> Resp {
    let page = get(http, base, path.split('?').next().unwrap());
    let csrf = input_value(&page.body, "csrf").expect("the page carries a CSRF token");
    let mut f = form.to_vec();
    f.push(("csrf", &csrf));
    http.post(&format!("{base}{path}"), &[("origin", base)], &f)
}

fn explain(http: &mut Http, base: &str, jid: &str) -> Value {
    let e = api(http, base, &format!("/explain?jid={}", enc(jid)));
    assert_eq!(e["jid"], jid);
    e
}

fn reasons(e: &Value) -> String {
    e["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_against_a_real_worker() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    c.shard_policy("conversions")
        .tenant("ac:me")
        .cap(1)
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
            "30",
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
    let mut http = Http::new();

    // Work: odd tenants in a sharded queue (ac:me capped at 1), reroutes,
    // slot holders and waiters, and entries in retry, schedule and dead.
    let mut capped = Vec::new();
    for t in ODD {
        for n in 0..3 {
            let jid = ShardJob {
                tenant: (*t).into(),
                n,
                ms: 20_000,
            }
            .perform_async(&c)
            .await
            .unwrap();
            if *t == "ac:me" {
                capped.push(jid);
            }
        }
    }
    let mut rerouted = Vec::new();
    for t in ODD {
        TJob {
            tenant: (*t).into(),
        }
        .perform_async(&c)
        .await
        .unwrap();
        rerouted.push(
            TJob {
                tenant: (*t).into(),
            }
            .perform_async(&c)
            .await
            .unwrap(),
        );
    }
    for _ in 0..5 {
        SlotJob {
            key: "k1".into(),
            ms: 20_000,
        }
        .perform_async(&c)
        .await
        .unwrap();
    }
    let k = c.broker().keys().clone();
    let now = now_f64();
    let dead_jid = new_jid();
    zadd(
        &url,
        &k.dead(),
        now - 60.0,
        &record_entry(&dead_jid, "from-dead", SCRIPT),
    )
    .await;
    zadd(
        &url,
        &k.dead(),
        now - 50.0,
        &record_entry(&new_jid(), "to-delete", "gone tenant"),
    )
    .await;
    zadd(
        &url,
        &k.retry(),
        now + 3600.0,
        &record_entry(&new_jid(), "from-retry", "ac:me"),
    )
    .await;
    zadd(
        &url,
        &k.retry(),
        now + 3700.0,
        &record_entry(&new_jid(), "to-kill", "ac:me"),
    )
    .await;
    RecordJob("from-schedule".into())
        .perform_in(&c, Duration::from_secs(3600))
        .await
        .unwrap();

    // The worker runs them and flushes its wait statistics.
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let v = api(&mut Http::new(), &base, "/limits");
            v["page"]["rows"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["waiting"] == 2 && r["running"] == 3))
        })
        .await,
        "slot holders and waiters show"
    );
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let v = api(&mut Http::new(), &base, "/tenants");
            v["tenants"]
                .as_array()
                .is_some_and(|t| t.len() >= ODD.len())
        })
        .await,
        "the tenants' waits were flushed"
    );

    // Every page and its twin; nothing renders the <script> tenant as markup.
    for path in [
        "/",
        "/queues",
        "/tenants",
        "/tenants?q=ac",
        "/explain",
        "/shards/conversions",
        "/limits",
        "/limits?key=SlotJob%3Ak1",
        "/retries",
        "/scheduled",
        "/dead",
        "/busy",
        "/batches",
        "/dead?tenant=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        "/retries?class=RecordJob&error=RuntimeError",
    ] {
        let r = get(&mut http, &base, path);
        assert_page(&r, path);
        let twin = if path.starts_with("/?") || path == "/" {
            "/api/".to_owned()
        } else {
            format!("/api{path}")
        };
        if !path.starts_with("/explain") {
            let j = get(&mut http, &base, &twin);
            assert_eq!(j.status, 200, "{twin}: {}", j.body);
            j.json();
        }
    }
    let tenants = get(&mut http, &base, "/tenants").body;
    assert!(
        tenants.contains(SCRIPT_ESCAPED),
        "the <script> tenant shows as text"
    );
    for t in ODD {
        let r = get(&mut http, &base, &format!("/tenants/{}", enc(t)));
        assert_page(&r, t);
        let shown = t.replace('<', "&lt;").replace('>', "&gt;");
        assert!(r.body.contains(&shown), "{t} is on its page");
        let v = api(&mut http, &base, &format!("/tenants/{}", enc(t)));
        assert_eq!(v["tenant"], *t);
        let conv = v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == "conversions");
        assert!(conv.is_some(), "{t} has its sharded queue: {v}");
        // Reroute state of TJob: two enqueued in each window, threshold 1.
        let tj = v["reroute"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["class"] == "TJob")
            .expect("TJob's rules");
        assert_eq!(tj["rules"][0]["count"], 2, "{tj}");
        assert_eq!(tj["next_queue"], "whatever_supaslow", "{tj}");
        assert!(tj["back_in"].as_u64().is_some_and(|s| s > 3000), "{tj}");
    }
    let dead_page = get(&mut http, &base, "/dead").body;
    assert!(
        dead_page.contains("&lt;b&gt;boom&lt;/b&gt; &amp; more"),
        "error messages are escaped"
    );

    // Overview: the sharded queue's capped tenant is blocked at its limit.
    let o = api(&mut http, &base, "/");
    let conv = o["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "conversions")
        .unwrap()
        .clone();
    assert_eq!(conv["sharded"], true);
    assert!(
        conv["blocked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["reason"] == "tenant_limit" && b["jobs"] == 2),
        "{conv}"
    );
    let slots = o["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "slots")
        .unwrap()
        .clone();
    assert!(
        slots["blocked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["reason"] == "slot_limit" && b["jobs"] == 2),
        "{slots}"
    );
    let shards = api(&mut http, &base, "/shards/conversions");
    let acme = shards["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tenant"] == "ac:me")
        .unwrap()
        .clone();
    assert_eq!(
        (
            acme["limit"].as_u64(),
            acme["running"].as_u64(),
            acme["pending"].as_u64()
        ),
        (Some(1), Some(1), Some(2)),
        "{acme}"
    );

    // Explain: rerouted, at its tenant's limit, waiting for a slot, dead.
    let e = explain(&mut http, &base, &rerouted[4]);
    assert_eq!(e["location"]["where"], "queue", "{e}");
    assert_eq!(e["location"]["queue"], "whatever_supaslow");
    let text = reasons(&e);
    assert!(text.contains("rerouted from `whatever`"), "{text}");
    assert!(text.contains("back to `whatever` in"), "{text}");
    let e = explain(&mut http, &base, &capped[2]);
    assert_eq!(e["location"]["where"], "shard", "{e}");
    assert!(
        reasons(&e).contains("tenant at its running limit 1/1 in `conversions`"),
        "{e}"
    );
    let limits = api(&mut http, &base, "/limits");
    let waiter = limits["details"][0]["waiters"][0]["jid"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = explain(&mut http, &base, &waiter);
    assert_eq!(e["location"]["where"], "slot_wait", "{e}");
    assert!(reasons(&e).contains("1st waiter for `SlotJob:k1`"), "{e}");
    let e = explain(&mut http, &base, &dead_jid);
    assert!(reasons(&e).contains("dead since"), "{e}");
    let page = get(&mut http, &base, &format!("/explain?jid={dead_jid}"));
    assert_page(&page, "explain");
    assert!(page.body.contains("dead since") && page.body.contains(SCRIPT_ESCAPED));
    // The command line reads the same view.
    let out = Command::new(bin("test-worker"))
        .args([
            "-r",
            &url,
            "--namespace",
            &ns,
            "explain",
            &capped[2],
            "--json",
        ])
        .env("FAIRJOB_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli["jid"], capped[2].as_str());
    assert_eq!(cli["location"]["where"], "shard");

    // Live fragments, at most one per the server's minimum interval.
    let mut browser = Http::new();
    let first = get(&mut browser, &base, "/?fragment=live");
    assert_eq!(first.status, 200);
    assert!(!first.body.contains("<html"), "a fragment, not a page");
    assert_eq!(get(&mut browser, &base, "/?fragment=live").status, 429);

    // Actions. A dead job retried from the dashboard runs on the worker.
    let dead = api(&mut http, &base, "/dead");
    let key = |v: &Value, arg: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["args"].as_str().unwrap().contains(arg))
            .unwrap()["key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let from_dead = key(&dead, "from-dead");
    let r = act(
        &mut http,
        &base,
        "/dead",
        &[("one", &format!("retry_now|{from_dead}"))],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        performed(&url, &ns, "from-dead").await,
        "the dead job ran after Retry now"
    );
    let retries = api(&mut http, &base, "/retries");
    let r = act(
        &mut http,
        &base,
        "/retries",
        &[
            ("action", "retry_now"),
            ("key", &key(&retries, "from-retry")),
        ],
    );
    assert_eq!(r.status, 303);
    assert!(
        performed(&url, &ns, "from-retry").await,
        "the retry ran now"
    );
    let r = act(
        &mut http,
        &base,
        "/retries",
        &[("action", "kill"), ("key", &key(&retries, "to-kill"))],
    );
    assert_eq!(r.status, 303);
    let dead = api(&mut http, &base, "/dead");
    assert!(
        dead["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["args"].as_str().unwrap().contains("to-kill"))
    );
    let r = act(
        &mut http,
        &base,
        "/dead",
        &[("all", "delete"), ("tenant", "gone tenant")],
    );
    assert_eq!(r.status, 303);
    let dead = api(&mut http, &base, "/dead");
    assert!(
        !dead["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["args"].as_str().unwrap().contains("to-delete"))
    );
    let scheduled = api(&mut http, &base, "/scheduled");
    let r = act(
        &mut http,
        &base,
        "/scheduled",
        &[(
            "one",
            &format!("add_to_queue|{}", key(&scheduled, "from-schedule")),
        )],
    );
    assert_eq!(r.status, 303);
    assert!(
        performed(&url, &ns, "from-schedule").await,
        "the scheduled job ran now"
    );

    // Pause: the worker stops fetching the queue; resume: it runs.
    let r = act(
        &mut http,
        &base,
        "/queues",
        &[("action", "pause"), ("queue", "default")],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    RecordJob("while-paused".into())
        .perform_async(&c)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !recorded(&url, &ns)
            .await
            .iter()
            .any(|l| l.contains("while-paused")),
        "a paused queue is not fetched"
    );
    let o = api(&mut http, &base, "/");
    let d = o["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "default")
        .unwrap()
        .clone();
    assert_eq!(d["paused"], true);
    assert!(
        d["blocked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["reason"] == "paused" && b["jobs"] == 1),
        "{d}"
    );
    assert!(get(&mut http, &base, "/queues").body.contains("paused"));
    let r = act(
        &mut http,
        &base,
        "/queues",
        &[("action", "resume"), ("queue", "default")],
    );
    assert_eq!(r.status, 303);
    assert!(
        performed(&url, &ns, "while-paused").await,
        "a resumed queue runs"
    );

    // Steering: a tenant's cap, a slot limit.
    let r = act(
        &mut http,
        &base,
        "/shards/conversions",
        &[("tenant", "ac:me"), ("cap", "5"), ("weight", "2")],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let shards = api(&mut http, &base, "/shards/conversions");
    let acme = shards["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tenant"] == "ac:me")
        .unwrap()
        .clone();
    assert_eq!(
        (acme["limit"].as_u64(), acme["weight"].as_f64()),
        (Some(5), Some(2.0)),
        "{acme}"
    );
    let r = act(
        &mut http,
        &base,
        "/limits",
        &[("key", "SlotJob:k1"), ("limit", "5")],
    );
    assert_eq!(r.status, 303);
    assert!(
        r.header("location")
            .is_some_and(|l| l.contains("released%202")),
        "{:?}",
        r.header("location")
    );

    // Quiet the worker from the Busy page.
    let busy = api(&mut http, &base, "/busy");
    let identity = busy["rows"][0]["identity"].as_str().unwrap().to_owned();
    let r = act(
        &mut http,
        &base,
        "/busy",
        &[("identity", &identity), ("signal", "quiet")],
    );
    assert_eq!(r.status, 303);
    assert!(
        wait_until(Duration::from_secs(5), || async {
            api(&mut Http::new(), &base, "/busy")["rows"][0]["quiet"] == true
        })
        .await,
        "the worker went quiet"
    );
    drop(dash);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_token_login_csrf_origin_read_only_and_loopback() {
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let dead_jid = new_jid();
    zadd(
        &url,
        &c.broker().keys().dead(),
        now_f64(),
        &record_entry(&dead_jid, "x", "t"),
    )
    .await;

    // A token: every route wants it.
    let locked = Dashboard::start(
        &url,
        &ns,
        &["web", "--bind", "127.0.0.1:0"],
        &[("FAIRJOB_WEB_TOKEN", "s3cret")],
    );
    let base = locked.url.clone();
    let mut anon = Http::new();
    let r = get(&mut anon, &base, "/tenants");
    assert_eq!(r.status, 303, "pages send a browser to the login form");
    assert!(
        r.header("location")
            .is_some_and(|l| l.starts_with("/login?next="))
    );
    for path in ["/api/", "/api/dead", "/api/explain?jid=x"] {
        assert_eq!(get(&mut anon, &base, path).status, 401, "{path}");
    }
    assert_eq!(
        anon.get(
            &format!("{base}/api/"),
            &[("authorization", "Bearer wrong")]
        )
        .status,
        401
    );
    for path in ["/", "/api/", "/dead", "/api/busy"] {
        let r = anon.get(
            &format!("{base}{path}"),
            &[("authorization", "Bearer s3cret")],
        );
        assert_eq!(r.status, 200, "bearer on {path}");
    }
    // The login form sets a cookie that works on pages and API.
    let mut browser = Http::new();
    let form = get(&mut browser, &base, "/login?next=/dead");
    assert_eq!(form.status, 200);
    let csrf = input_value(&form.body, "csrf").unwrap();
    let bad = browser.post(
        &format!("{base}/login"),
        &[("origin", &base)],
        &[("csrf", &csrf), ("token", "nope")],
    );
    assert_eq!(bad.status, 401);
    let ok = browser.post(
        &format!("{base}/login"),
        &[("origin", &base)],
        &[("csrf", &csrf), ("token", "s3cret"), ("next", "/dead")],
    );
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert_eq!(ok.header("location"), Some("/dead"));
    assert!(
        ok.header("set-cookie")
            .is_some_and(|c| c.contains("HttpOnly") && c.contains("SameSite=Strict"))
    );
    assert_eq!(get(&mut browser, &base, "/dead").status, 200);
    assert_eq!(get(&mut browser, &base, "/api/dead").status, 200);
    // Read-only: actions are refused even with the token.
    let r = anon.post(
        &format!("{base}/api/dead"),
        &[("authorization", "Bearer s3cret")],
        &[("all", "delete")],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("actions are disabled"));
    drop(locked);

    // Actions on, no token (loopback): POSTs need the same origin and the CSRF token.
    let open = Dashboard::start(
        &url,
        &ns,
        &["web", "--bind", "127.0.0.1:0", "--web-actions"],
        &[],
    );
    let base = open.url.clone();
    let mut http = Http::new();
    let page = get(&mut http, &base, "/dead");
    let csrf = input_value(&page.body, "csrf").unwrap();
    let key = api(&mut http, &base, "/dead")["rows"][0]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let one = format!("delete|{key}");
    let no_token = http.post(
        &format!("{base}/dead"),
        &[("origin", &base)],
        &[("one", &one)],
    );
    assert_eq!(no_token.status, 403, "no CSRF token");
    let wrong = http.post(
        &format!("{base}/dead"),
        &[("origin", &base)],
        &[("one", &one), ("csrf", "forged")],
    );
    assert_eq!(wrong.status, 403, "wrong CSRF token");
    let other = http.post(
        &format!("{base}/dead"),
        &[("origin", "http://evil.example")],
        &[("one", &one), ("csrf", &csrf)],
    );
    assert_eq!(other.status, 403, "another origin");
    let cross = http.post(
        &format!("{base}/dead"),
        &[("sec-fetch-site", "cross-site")],
        &[("one", &one), ("csrf", &csrf)],
    );
    assert_eq!(cross.status, 403, "a cross-site fetch");
    let stranger = Http::new().post(
        &format!("{base}/dead"),
        &[("origin", &base)],
        &[("one", &one), ("csrf", &csrf)],
    );
    assert_eq!(stranger.status, 403, "another session's token");
    assert_eq!(
        api(&mut http, &base, "/dead")["total"],
        1,
        "nothing was deleted"
    );
    let ok = http.post(
        &format!("{base}/dead"),
        &[("origin", &base), ("sec-fetch-site", "same-origin")],
        &[("one", &one), ("csrf", &csrf)],
    );
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert_eq!(api(&mut http, &base, "/dead")["total"], 0);
    drop(open);

    // A non-loopback address without a token is refused before binding.
    for args in [
        &["web", "--bind", "0.0.0.0:0"][..],
        &["run", "--web", "0.0.0.0:0", "-q", "default"][..],
    ] {
        let out = Command::new(bin("test-worker"))
            .args(["-r", &url, "--namespace", &ns])
            .args(args)
            .env_remove("FAIRJOB_WEB_TOKEN")
            .env("FAIRJOB_LOG", "error")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("refusing to serve the dashboard on 0.0.0.0"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_listed_and_shown_with_their_text_escaped() {
    use fairjob::Batch;
    use fairjob_tests::jobs::{FailJob, OutcomeJob, SpawnJob};
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let dash = Dashboard::start(
        &url,
        &ns,
        &[
            "run",
            "-q",
            "outcomes",
            "-q",
            "default",
            "--poll-interval",
            "100ms",
            "--web",
            "127.0.0.1:0",
        ],
        &[],
    );
    let base = dash.url.clone();
    let mut http = Http::new();
    let description = format!("{SCRIPT} import: {{rows}} ünï");
    let tenant = "ac:me {x} ünï <b>";
    let outcome = |kind: &str| OutcomeJob {
        kind: kind.into(),
        tenant: "member".into(),
    };
    // Runs: three succeed, one dies (death), one fails into retry; every
    // member has run once, so `complete` fires, `success` does not.
    let done = Batch::new()
        .description(&description)
        .set_tenant(tenant)
        .on_complete(RecordJob("batch-complete".into()))
        .on_success(RecordJob("batch-success".into()))
        .on_death(RecordJob("batch-death".into()))
        .push_bulk((0..3).map(|_| outcome("ok")))
        .push(outcome("dead"))
        .push(FailJob("<i>x</i>".into()))
        .commit(&c)
        .await
        .unwrap();
    // Its members wait in a queue nobody works: open.
    let open = Batch::new()
        .description("nightly: {export} 東京")
        .on_complete(RecordJob("never".into()))
        .push_bulk((0..2).map(|n| SpawnJob(format!("s{n}"))))
        .commit(&c)
        .await
        .unwrap();
    // Listed, but its data expired: unlisted on the next read, not shown.
    zadd(&url, &c.broker().keys().batches(), now_f64(), "expired-bid").await;

    assert!(
        wait_until(Duration::from_secs(15), || async {
            recorded(&url, &ns)
                .await
                .iter()
                .any(|l| l.contains("batch-complete"))
        })
        .await,
        "the complete callback ran"
    );
    let list = api(&mut http, &base, "/batches");
    // The worker's gauge sampler reads the same listing and may have taken
    // the expired one out first; either way it is out of the listing now.
    assert!(list["unlisted"].as_u64().is_some_and(|n| n <= 1), "{list}");
    let listed: Option<f64> = redis::cmd("ZSCORE")
        .arg(c.broker().keys().batches())
        .arg("expired-bid")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    assert_eq!(
        listed, None,
        "a listed batch whose data expired is unlisted"
    );
    let rows = list["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "the expired one is not shown: {list}");
    assert_eq!(rows[0]["bid"], open.as_str(), "newest first");
    let row = |bid: &str| rows.iter().find(|r| r["bid"] == bid).unwrap().clone();
    let d = row(&done);
    assert_eq!(d["description"], description.as_str());
    assert_eq!(d["tenant"], tenant);
    assert_eq!(d["state"], "complete", "{d}");
    assert_eq!(d["died"], true);
    assert_eq!(
        (
            d["total"].as_u64(),
            d["pending"].as_u64(),
            d["failures"].as_u64()
        ),
        (Some(5), Some(0), Some(2)),
        "{d}"
    );
    assert!(d["complete_at"].as_f64().is_some() && d["success_at"].is_null());
    assert_eq!(
        d["callbacks"],
        json!([
            {"event": "death", "queue": "default"},
            {"event": "complete", "queue": "default"},
            {"event": "success", "queue": "default"},
        ])
    );
    assert_eq!(d["failed_jids"], json!([]), "a listing carries no failures");
    let o = row(&open);
    assert_eq!(
        (o["state"].as_str(), o["pending"].as_u64()),
        (Some("open"), Some(2))
    );
    let mut conn = raw(&url).await;
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(c.broker().keys().batches())
        .arg("expired-bid")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(score, None, "the expired batch left the listing");

    // The pages: text escaped, never markup.
    let page = get(&mut http, &base, "/batches");
    assert_page(&page, "/batches");
    assert!(
        page.body
            .contains(&format!("{SCRIPT_ESCAPED} import: {{rows}} ünï")),
        "the description shows as text"
    );
    assert!(
        page.body.contains("ac:me {x} ünï &lt;b&gt;"),
        "the tenant shows as text"
    );
    assert!(!page.body.contains("<b>"));
    assert!(page.body.contains("nightly: {export} 東京"));
    assert!(page.body.contains(&format!("/batches/{done}\"")));
    assert!(page.body.contains("complete → default"));
    assert!(
        page.body.contains(r#"href="/batches" class="active""#),
        "in the nav"
    );
    let detail = get(&mut http, &base, &format!("/batches/{}", enc(&done)));
    assert_page(&detail, "/batches/{bid}");
    assert!(detail.body.contains(&done));
    assert!(detail.body.contains("ac:me {x} ünï &lt;b&gt;"));
    assert!(
        detail.body.contains("hopeless"),
        "the dead member's failure"
    );
    assert!(
        detail.body.contains("boom &lt;i&gt;x&lt;/i&gt;") && !detail.body.contains("<i>x"),
        "a failure shows as text"
    );
    let v = api(&mut http, &base, &format!("/batches/{}", enc(&done)));
    let failed = v["failed_jids"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{v}");
    assert!(
        failed
            .iter()
            .any(|f| f[1] == "ArgumentError: boom <i>x</i>"),
        "{v}"
    );
    for path in ["/batches/no-such-bid", "/api/batches/no-such-bid"] {
        assert_eq!(get(&mut http, &base, path).status, 404, "{path}");
    }
    // Each callback ran once, in the batch's tenant; `success` did not.
    let lines = recorded(&url, &ns).await;
    let ran = |arg: &str| lines.iter().filter(|l| l.contains(arg)).count();
    assert_eq!(
        (
            ran("batch-complete"),
            ran("batch-death"),
            ran("batch-success")
        ),
        (1, 1, 0),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("default {tenant} batch-complete"))),
        "{lines:?}"
    );
    drop(dash);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflows_steps_and_explain_of_its_members_over_http() {
    use fairjob::batch::OnDependencyFailure;
    use fairjob::{Batch, Workflow};
    use fairjob_tests::jobs::OutcomeJob;
    let server = redis();
    let url = server.url();
    let ns = namespace();
    let c = client(&url, &ns).await;
    let dash = Dashboard::start(
        &url,
        &ns,
        &[
            "run",
            "-q",
            "outcomes",
            "--poll-interval",
            "100ms",
            "--web",
            "127.0.0.1:0",
        ],
        &[],
    );
    let base = dash.url.clone();
    let mut http = Http::new();
    let tenant = "ac:me {x} ünï <b>";
    let step = |kind: &str| OutcomeJob {
        kind: kind.into(),
        tenant: tenant.into(),
    };
    let description = format!("{SCRIPT} export: {{rows}} ünï");
    // `bad` dies: `<i>cancelled</i>` is cancelled, `merge` continues past
    // it; `waits` waits for `parked`, in a queue nobody works.
    let wid = Workflow::new()
        .description(&description)
        .set_tenant(tenant)
        .add("bad", step("dead"))
        .add_after("<i>cancelled</i>", step("ok"), ["bad"])
        .add("extract", step("ok"))
        .add_after("merge", step("ok"), ["extract", "bad"])
        .on_dependency_failure("merge", OnDependencyFailure::Continue)
        .add("parked", RecordJob("parked".into()).queue("nobody"))
        .add_after("waits", step("ok"), ["parked", "extract"])
        .commit(&c)
        .await
        .unwrap();
    let bid = Batch::new()
        .description(format!("{SCRIPT} plain"))
        .push(RecordJob("member".into()).queue("nobody"))
        .commit(&c)
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || async {
            c.batch_status(&wid).await.unwrap().unwrap().pending == 2
        })
        .await,
        "every step but `parked` and `waits` ends"
    );

    // The JSON twin: every step, its state, jid and dependencies.
    let v = api(&mut http, &base, &format!("/workflows/{}", enc(&wid)));
    assert_eq!(v["total"], 6, "{v}");
    assert_eq!(v["batch"]["description"], description.as_str());
    assert_eq!(v["batch"]["tenant"], tenant);
    assert_eq!(v["batch"]["held"], 1);
    let steps = v["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "<i>cancelled</i>",
            "bad",
            "extract",
            "merge",
            "parked",
            "waits"
        ],
        "name order"
    );
    let st = |name: &str| steps.iter().find(|s| s["name"] == name).unwrap().clone();
    assert_eq!(st("bad")["state"], "failed");
    assert_eq!(st("<i>cancelled</i>")["state"], "cancelled");
    assert_eq!(st("<i>cancelled</i>")["dependencies"], json!(["bad"]));
    assert_eq!(st("merge")["state"], "done");
    assert_eq!(st("merge")["continued_past"], json!(["bad"]));
    assert_eq!(st("parked")["state"], "queued");
    let waits = st("waits");
    assert_eq!(waits["state"], "held");
    assert_eq!(waits["dependencies"], json!(["parked", "extract"]));
    assert_eq!(
        (waits["waiting_for"].clone(), waits["waiting_total"].clone()),
        (json!(["parked"]), json!(1))
    );
    assert!(
        v["batch"]["failed_jids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f[1] == "cancelled: dependency `bad` failed"),
        "{v}"
    );
    // Paged.
    let p = api(
        &mut http,
        &base,
        &format!("/workflows/{}?from=2&limit=2", enc(&wid)),
    );
    let names: Vec<&str> = p["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["extract", "merge"]);
    assert_eq!((p["prev"].clone(), p["next"].clone()), (json!(0), json!(4)));
    let far = api(
        &mut http,
        &base,
        &format!("/workflows/{}?from={}", enc(&wid), u64::MAX),
    );
    assert_eq!(
        (far["steps"].clone(), far["next"].clone()),
        (json!([]), Value::Null)
    );
    let far = get(
        &mut http,
        &base,
        &format!("/workflows/{}?from={}", enc(&wid), u64::MAX),
    );
    assert_page(&far, "/workflows/{wid}?from=max");
    assert!(far.body.contains("Steps none shown of 6"));
    assert_eq!(
        get(
            &mut http,
            &base,
            &format!("/workflows/{}?from=x", enc(&wid))
        )
        .status,
        400
    );

    // The page: text escaped, never markup; its pager.
    let page = get(&mut http, &base, &format!("/workflows/{}", enc(&wid)));
    assert_page(&page, "/workflows/{wid}");
    for text in [
        format!("{SCRIPT_ESCAPED} export: {{rows}} ünï"),
        "ac:me {x} ünï &lt;b&gt;".to_owned(),
        "&lt;i&gt;cancelled&lt;/i&gt;".to_owned(),
        "waiting for parked".to_owned(),
        "continued past failed bad".to_owned(),
        format!("/explain?jid={}", waits["jid"].as_str().unwrap()),
        r#"href="/batches" class="active""#.to_owned(),
    ] {
        assert!(page.body.contains(&text), "{text} on the page");
    }
    assert!(!page.body.contains("<i>cancelled"), "a step's name is text");
    let paged = get(
        &mut http,
        &base,
        &format!("/workflows/{}?from=2&limit=2", enc(&wid)),
    );
    assert_page(&paged, "/workflows/{wid}?from=2");
    assert!(paged.body.contains("Steps 3–4 of 6"), "{}", paged.body);
    assert!(
        paged.body.contains("?from=4&amp;limit=2\">next steps")
            && paged.body.contains("?from=0&amp;limit=2\">previous steps"),
        "{}",
        paged.body
    );
    let live = get(
        &mut http,
        &base,
        &format!("/workflows/{}?fragment=live", enc(&wid)),
    );
    assert_eq!(live.status, 200);
    assert!(live.body.contains("waiting for parked") && !live.body.contains("<html"));
    // Reached from the batches' pages.
    let list = get(&mut http, &base, "/batches").body;
    assert!(list.contains(&format!("/workflows/{wid}\"")), "{list}");
    let batch = get(&mut http, &base, &format!("/batches/{}", enc(&wid))).body;
    assert!(batch.contains(&format!("/workflows/{wid}\"")), "{batch}");
    // Not found: an unknown id, a plain batch.
    for path in [
        "/workflows/no-such-wid".to_owned(),
        "/api/workflows/no-such-wid".to_owned(),
        format!("/workflows/{bid}"),
        format!("/api/workflows/{bid}"),
    ] {
        assert_eq!(get(&mut http, &base, &path).status, 404, "{path}");
    }

    // Explain of the held step: found at once, with what it waits for.
    let e = explain(&mut http, &base, waits["jid"].as_str().unwrap());
    assert_eq!(e["found"], true, "{e}");
    assert_eq!(e["location"]["where"], "held");
    assert_eq!(e["location"]["bid"], wid.as_str());
    let kinds: Vec<&str> = e["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["workflow", "batch"], "{e}");
    let text = reasons(&e);
    assert!(
        text.contains(
            "held as step `waits` in no queue: waiting for `parked` (1 of its 2 dependencies"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!("step `waits` of workflow {wid}"))
            && text.contains("2 of its 6 steps have not run yet"),
        "{text}"
    );
    let page = get(
        &mut http,
        &base,
        &format!("/explain?jid={}", enc(waits["jid"].as_str().unwrap())),
    );
    assert_page(&page, "/explain (held)");
    assert!(
        page.body
            .contains(&format!("/workflows/{wid}\">its workflow"))
    );
    assert!(
        page.body.contains(SCRIPT_ESCAPED),
        "the description, as text"
    );
    // Explain of a plain batch's member, in its queue.
    let member = {
        let mut r = raw(&url).await;
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(c.broker().keys().queue("nobody"))
            .arg(0)
            .arg(-1)
            .query_async(&mut r)
            .await
            .unwrap();
        entries
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .find(|p| p["bid"] == bid.as_str())
            .unwrap()["jid"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let e = explain(&mut http, &base, &member);
    let text = reasons(&e);
    assert!(
        text.contains(&format!("member of batch {bid} (\u{201c}{SCRIPT} plain\u{201d}): 1 of its 1 members have not run yet")),
        "{text}"
    );
    let page = get(&mut http, &base, &format!("/explain?jid={}", enc(&member)));
    assert_page(&page, "/explain (member)");
    assert!(page.body.contains(&format!("/batches/{bid}\">its batch")));
    drop(dash);
}
