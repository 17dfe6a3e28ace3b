//! Workflows (`fairjob::Workflow`): steps that wait for their dependencies
//! without holding a queue position or a worker, released by the end of their
//! last dependency; results passed between steps; what a failed dependency
//! does under each policy; bad declarations refused; and the Lua twin of
//! `policy::workflow` checked against the Rust rules on random graphs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use fairjob::batch::{Event, OnDependencyFailure, StepState};
use fairjob::policy::batch::{self as rules, Membership, Outcome};
use fairjob::policy::workflow::{self as wf, Graph};
use fairjob::prelude::*;
use fairjob_tests::{Redis, eventually, queues, spawn};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Per test (a tag): step runs in order (step name, what it saw), and callbacks.
static RUNS: Mutex<BTreeMap<String, Vec<(String, String)>>> = Mutex::new(BTreeMap::new());

fn ran(tag: &str, step: &str, saw: String) {
    RUNS.lock()
        .unwrap()
        .entry(tag.to_owned())
        .or_default()
        .push((step.to_owned(), saw));
}

fn runs(tag: &str) -> Vec<(String, String)> {
    RUNS.lock().unwrap().get(tag).cloned().unwrap_or_default()
}

fn count(tag: &str, step: &str) -> usize {
    runs(tag).iter().filter(|(s, _)| s == step).count()
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "WfStep", queue = "wf")]
struct StepJob {
    tag: String,
    /// Die at once.
    die: bool,
    /// Sleep, ms.
    ms: u64,
}

impl Perform for StepJob {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let step = cx.workflow_step().expect("a step knows its name");
        tokio::time::sleep(std::time::Duration::from_millis(self.ms)).await;
        if self.die {
            ran(&self.tag, &step, "died".into());
            return Err(JobError::discard("step failed"));
        }
        let oops = |e: fairjob::Error| JobError::retry(e.to_string());
        let saw = if step == "extract" {
            cx.record(&41u32).await.map_err(oops)?;
            String::new()
        } else if step.starts_with('t') {
            let up: u32 = cx.upstream("extract").await.map_err(oops)?.unwrap_or(0);
            cx.record(&(up + 1)).await.map_err(oops)?;
            up.to_string()
        } else if step == "big" {
            // Past max_result_bytes: a clear error, and nothing recorded.
            let err = cx.record(&"x".repeat(70_000)).await.unwrap_err();
            let kept: Option<String> = cx.upstream("big").await.map_err(oops)?;
            format!("{err} / kept: {}", kept.is_some())
        } else if step == "merge" {
            let failed = cx.failed_dependencies().await.map_err(oops)?;
            let t0: Option<u32> = cx.upstream("t000").await.map_err(oops)?;
            format!("t000={t0:?} failed={failed:?}")
        } else {
            String::new()
        };
        ran(&self.tag, &step, saw);
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "WfDone", queue = "wf")]
struct Done {
    tag: String,
}

impl Perform for Done {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let e = cx.batch_event().expect("a callback");
        ran(&self.tag, &format!("cb:{}", e.as_str()), String::new());
        Ok(())
    }
}

fn step(tag: &str) -> StepJob {
    StepJob {
        tag: tag.into(),
        die: false,
        ms: 0,
    }
}

/// extract → `n` transforms (t000…) → merge → notify, with callbacks;
/// transform `die` (if any) dies.
fn fan(tag: &str, n: usize, die: Option<usize>, policy: OnDependencyFailure) -> Workflow {
    let mut w = Workflow::new()
        .description(format!("wf {tag}"))
        .on_complete(Done { tag: tag.into() })
        .on_success(Done { tag: tag.into() })
        .add("extract", step(tag));
    let names: Vec<String> = (0..n).map(|i| format!("t{i:03}")).collect();
    for (i, name) in names.iter().enumerate() {
        let mut s = step(tag);
        s.ms = 20;
        s.die = die == Some(i);
        w = w.add_after(name, s, ["extract"]);
    }
    w.add_after("merge", step(tag), &names)
        .add_after("notify", step(tag), ["merge"])
        .on_dependency_failure("merge", policy)
}

async fn worker(redis: &Redis) -> fairjob_tests::RunningWorker {
    spawn(
        redis
            .worker()
            .concurrency(10)
            .queues(queues(&["wf"]))
            .build()
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_and_fan_in_runs_each_step_once_in_order_holding_nothing_while_it_waits() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tag = "fan";
    let wid = fan(tag, 100, None, OnDependencyFailure::Cancel)
        .commit(&c)
        .await
        .unwrap();
    // Only the root is in the queue; the 102 others are held outside it.
    assert_eq!(redis.llen(redis.keys().queue("wf")).await, 1);
    let steps = c.broker().workflow_steps(&wid, 1000).await.unwrap();
    assert_eq!(steps.len(), 103);
    let held = steps
        .iter()
        .filter(|s| s.1 == StepState::Held.as_str())
        .count();
    assert_eq!(held, 102);
    let _w = worker(&redis).await;
    eventually!(count(tag, "cb:success") == 1, "the workflow succeeds");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = runs(tag);
    let pos = |s: &str| r.iter().position(|(n, _)| n == s).unwrap();
    for s in ["extract", "merge", "notify", "cb:complete", "cb:success"] {
        assert_eq!(count(tag, s), 1, "{s} once");
    }
    for i in 0..100 {
        let t = format!("t{i:03}");
        assert_eq!(count(tag, &t), 1, "{t} once");
        assert!(pos("extract") < pos(&t) && pos(&t) < pos("merge"));
        assert_eq!(r[pos(&t)].1, "41", "each transform read extract's result");
    }
    assert!(pos("merge") < pos("notify") && pos("notify") < pos("cb:complete"));
    assert_eq!(r[pos("merge")].1, "t000=Some(42) failed=[]");
    let status = c.batch_status(&wid).await.unwrap().unwrap();
    assert_eq!((status.total, status.pending, status.failures), (103, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dependency_cancels_continues_or_is_ignored_by_policy() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let _w = worker(&redis).await;
    for (tag, policy) in [
        ("cancel", OnDependencyFailure::Cancel),
        ("continue", OnDependencyFailure::Continue),
        ("ignore", OnDependencyFailure::Ignore),
    ] {
        let wid = fan(tag, 5, Some(3), policy).commit(&c).await.unwrap();
        eventually!(
            count(tag, "cb:complete") == 1,
            "{tag}: the workflow completes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(count(tag, "cb:success"), 0, "{tag}: a step failed");
        assert_eq!(count(tag, "t003"), 1, "{tag}: the bad step ran once");
        let status = c.batch_status(&wid).await.unwrap().unwrap();
        let steps: BTreeMap<String, String> = c
            .broker()
            .workflow_steps(&wid, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|(n, s, _)| (n, s))
            .collect();
        assert_eq!(steps["t003"], "failed");
        match policy {
            OnDependencyFailure::Cancel => {
                assert_eq!((count(tag, "merge"), count(tag, "notify")), (0, 0));
                assert_eq!(
                    (steps["merge"].as_str(), steps["notify"].as_str()),
                    ("cancelled", "cancelled")
                );
                assert_eq!(status.failures, 3, "t003, merge and notify");
                assert!(
                    status
                        .failed_jids
                        .iter()
                        .any(|(_, e)| e == "cancelled: dependency `t003` failed"),
                    "{:?}",
                    status.failed_jids
                );
            }
            OnDependencyFailure::Continue => {
                let r = runs(tag);
                let merge = r.iter().find(|(n, _)| n == "merge").expect("merge ran");
                assert_eq!(merge.1, "t000=Some(42) failed=[\"t003\"]");
                assert_eq!(count(tag, "notify"), 1);
            }
            OnDependencyFailure::Ignore => {
                let r = runs(tag);
                let merge = r.iter().find(|(n, _)| n == "merge").expect("merge ran");
                assert_eq!(merge.1, "t000=Some(42) failed=[]");
            }
        }
        assert_eq!(status.pending, 0, "{tag}: nothing left waiting");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_declarations_and_results_are_clear_errors_and_write_nothing() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let before: u64 = redis.query(&redis::cmd("DBSIZE")).await;
    let cases = [
        (
            Workflow::new()
                .add_after("a", step("x"), ["c"])
                .add_after("b", step("x"), ["a"])
                .add_after("c", step("x"), ["b"]),
            "cycle",
        ),
        (
            Workflow::new().add_after("a", step("x"), ["nope"]),
            "`nope`",
        ),
        (
            Workflow::new().add("a", step("x")).add("a", step("x")),
            "two steps are named `a`",
        ),
        (
            Workflow::new()
                .add("a", step("x"))
                .on_dependency_failure("zz", OnDependencyFailure::Continue),
            "`zz`",
        ),
    ];
    for (w, want) in cases {
        let err = w.commit(&c).await.unwrap_err();
        assert!(
            matches!(&err, fairjob::Error::Workflow(m) if m.contains(want)),
            "{err} should name {want}"
        );
    }
    let after: u64 = redis.query(&redis::cmd("DBSIZE")).await;
    assert_eq!(before, after, "a refused workflow writes nothing");

    let _w = worker(&redis).await;
    Workflow::new()
        .add("big", step("big"))
        .commit(&c)
        .await
        .unwrap();
    eventually!(count("big", "big") == 1, "the step ran");
    let saw = &runs("big")[0].1;
    assert!(
        saw.contains("above max_result_bytes (65536)") && saw.ends_with("kept: false"),
        "{saw}"
    );
}

/// A dependency that dies, is retried by hand and dies again is listed once
/// among the failed dependencies its dependent continued past, in Redis as
/// in the rules (and the testing mode's memory store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_that_dies_twice_is_listed_once() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let fake = fairjob::testing::Fake::new();
    let mem = fake.client();
    let step = |name: &str, deps: &[&str]| fairjob::broker::StagedStep {
        jid: format!("j-{name}"),
        name: name.into(),
        payload: if deps.is_empty() {
            "{}".into()
        } else {
            "{\"t\":\n}".into()
        },
        held: !deps.is_empty(),
        policy: OnDependencyFailure::Continue.as_str().into(),
        queue: "wf-twice".into(),
        sharded: false,
        deps: deps.iter().map(|d| d.to_string()).collect(),
        edges: Vec::new(),
    };
    // `b` waits for `a` and `x`: it stays held while `a` dies twice.
    let steps = [step("a", &[]), step("b", &["a", "x"]), step("x", &[])];
    for b in [c.broker(), mem.broker()] {
        assert!(
            b.workflow_stage("twice", "", "", &steps, 1.0)
                .await
                .unwrap()
        );
        b.batch_commit("twice", 60, &[], None, 0).await.unwrap();
        for outcome in [Outcome::Dead, Outcome::Retry, Outcome::Dead] {
            b.batch_end("twice", "j-a", outcome, "E", 0).await.unwrap();
        }
        assert_eq!(b.workflow_failed_deps("twice", "b").await.unwrap(), ["a"]);
    }
}

/// The Lua twin and `policy::workflow` (inside `policy::batch`'s membership)
/// agree on random graphs and random step ends: states, pending sets,
/// failures, events, and the steps each end releases into their queue, in
/// order. The testing mode's memory store (a `Fake`'s broker) answers the
/// same calls as Redis does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_twin_agrees() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let broker = c.broker();
    let fake = fairjob::testing::Fake::new();
    let mem = fake.client();
    let queue = redis.keys().queue("wf-twin");
    let mut rng = rand::rng();
    let (mut released, mut cancelled) = (0, 0);
    let policies = [
        OnDependencyFailure::Cancel,
        OnDependencyFailure::Continue,
        OnDependencyFailure::Ignore,
    ];
    // At least 40 random cases, more until they released and cancelled
    // enough steps (40 alone fell short about one run in twenty).
    for case in 0.. {
        if case >= 400 || (case >= 40 && released > 5 && cancelled > 5) {
            break;
        }
        let wid = format!("wf-twin-{case}");
        let n = rng.random_range(1..9);
        // A random DAG: each step depends on some earlier ones.
        let mut decl = Vec::new();
        for i in 0..n {
            let name = format!("s:{i} é");
            let deps: Vec<String> = (0..i)
                .filter(|_| rng.random_bool(0.4))
                .map(|j| format!("s:{j} é"))
                .collect();
            let policy = policies[rng.random_range(0..3)];
            let mut edges = BTreeMap::new();
            if let Some(d) = deps.first().filter(|_| rng.random_bool(0.3)) {
                edges.insert(d.clone(), policies[rng.random_range(0..3)]);
            }
            decl.push((name, format!("j{i}"), deps, policy, edges));
        }
        let graph = Graph::new(&decl);
        let mut model = Membership::default();
        for (_, jid, _, _, _) in &decl {
            rules::add(&mut model, jid).unwrap();
        }
        model.workflow = Some(graph.clone());
        let steps: Vec<fairjob::broker::StagedStep> = decl
            .iter()
            .map(
                |(name, jid, deps, policy, edges)| fairjob::broker::StagedStep {
                    jid: jid.clone(),
                    name: name.clone(),
                    payload: if deps.is_empty() {
                        "{}".into()
                    } else {
                        format!("{{\"jid\":\"{jid}\",\"t\":\n}}")
                    },
                    held: !deps.is_empty(),
                    policy: policy.as_str().into(),
                    queue: "wf-twin".into(),
                    sharded: false,
                    deps: deps.clone(),
                    edges: edges
                        .iter()
                        .map(|(d, p)| (d.clone(), p.as_str().into()))
                        .collect(),
                },
            )
            .collect();
        let mut steps = steps;
        steps.sort_by(|a, b| a.name.cmp(&b.name));
        let want = rules::open(&mut model, 0.0);
        // Sometimes staged twice, as a commit repeated after a crash does.
        let stagings = rng.random_range(1..3);
        for b in [broker, mem.broker()] {
            for _ in 0..stagings {
                assert!(b.workflow_stage(&wid, "", "", &steps, 1.0).await.unwrap());
            }
            let got = match b.batch_commit(&wid, 60, &[], None, 0).await.unwrap() {
                fairjob::broker::Committed::Opened(e) => e,
                other => panic!("{other:?}"),
            };
            assert_eq!(got, want);
        }
        for stepno in 0..rng.random_range(0..16) {
            let i = rng.random_range(0..n);
            let jid = format!("j{i}");
            let outcome = [
                Outcome::Ok,
                Outcome::Retry,
                Outcome::Dead,
                Outcome::Discarded,
            ][rng.random_range(0..4)];
            let err = if outcome == Outcome::Ok { "" } else { "E" };
            let before = model.workflow.as_ref().unwrap().steps.clone();
            let ended = rules::end_member(&mut model, &jid, outcome, 0.0, err);
            let want = ended.events;
            let got = broker.batch_end(&wid, &jid, outcome, err, 0).await.unwrap();
            assert_eq!(got, want, "case {case} step {stepno}");
            let in_memory = mem.broker().batch_end(&wid, &jid, outcome, err, 0);
            assert_eq!(in_memory.await.unwrap(), want, "case {case} step {stepno}");
            // The released steps' payloads, in the order they were pushed.
            let pushed: Vec<String> = redis
                .query(redis::cmd("LRANGE").arg(&queue).arg(0).arg(-1))
                .await;
            let _: i64 = redis.query(redis::cmd("DEL").arg(&queue)).await;
            let pushed: Vec<String> = pushed
                .iter()
                .rev()
                .map(|p| {
                    let v: serde_json::Value = serde_json::from_str(p).unwrap();
                    v["jid"].as_str().unwrap().to_owned()
                })
                .collect();
            let released_now: Vec<String> = ended
                .steps
                .released
                .iter()
                .map(|name| decl.iter().find(|d| d.0 == *name).unwrap().1.clone())
                .collect();
            assert_eq!(pushed, released_now, "case {case} step {stepno}: released");
            let g = model.workflow.as_ref().unwrap();
            for (name, s) in &g.steps {
                if before[name].state == StepState::Held && s.state == StepState::Queued {
                    released += 1;
                }
                if before[name].state != StepState::Cancelled && s.state == StepState::Cancelled {
                    cancelled += 1;
                }
            }
            let mut steps = broker.workflow_steps(&wid, 100).await.unwrap();
            let mut in_memory = mem.broker().workflow_steps(&wid, 100).await.unwrap();
            for (_, _, failed) in steps.iter_mut().chain(in_memory.iter_mut()) {
                failed.sort();
            }
            assert_eq!(in_memory, steps, "case {case} step {stepno}: memory");
            let states: BTreeMap<String, String> =
                steps.into_iter().map(|(n, s, _)| (n, s)).collect();
            let model_states: BTreeMap<String, String> = g
                .steps
                .iter()
                .map(|(n, s)| (n.clone(), s.state.as_str().to_owned()))
                .collect();
            assert_eq!(
                states, model_states,
                "case {case} step {stepno}: {jid} {outcome:?}"
            );
            let s = c.batch_status(&wid).await.unwrap().unwrap();
            let m = mem.batch_status(&wid).await.unwrap().unwrap();
            assert_eq!(
                (m.pending, m.unsucceeded, m.failures),
                (s.pending, s.unsucceeded, s.failures),
                "case {case} step {stepno}: memory"
            );
            assert_eq!(
                (s.pending, s.unsucceeded, s.failures),
                (
                    model.pending.len() as u64,
                    model.unsucceeded.len() as u64,
                    model.failed.len() as u64
                ),
                "case {case} step {stepno}"
            );
            for e in Event::ALL {
                assert_eq!(
                    s.fired_at(e).is_some(),
                    model.has_fired(e),
                    "case {case} {e:?}"
                );
            }
        }
        let _ = wf::validate(&[]);
    }
    assert!(
        released > 5 && cancelled > 5,
        "released {released}, cancelled {cancelled}"
    );
}
