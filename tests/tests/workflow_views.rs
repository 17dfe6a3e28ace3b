//! What operators see of a workflow: its steps a bounded page at a time
//! (state, jid, dependencies, what a held step waits for; a 10,000-step
//! workflow never read whole), running told from the workers' heartbeats,
//! failed and cancelled steps, the count of held steps the scripts keep, and
//! explain of a batch's member and of a held step (in no queue: found
//! through its index key, which goes with the step's release).

use std::time::Duration;

use fairjob::batch::OnDependencyFailure;
use fairjob::inspect::{Location, Reason, StepStatus, WorkflowView};
use fairjob::prelude::*;
use fairjob_tests::{Redis, eventually, queues, redis_command_calls, reset_redis_stats, spawn};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "ViewStep", queue = "views")]
struct ViewStep {
    /// Sleep, ms.
    ms: u64,
    /// Fail for good (discarded).
    die: bool,
}

impl Perform for ViewStep {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        if self.die {
            return Err(JobError::discard("step <b>failed</b>"));
        }
        Ok(())
    }
}

fn quick() -> ViewStep {
    ViewStep { ms: 0, die: false }
}

async fn view(c: &Client, wid: &str, from: u64, limit: usize) -> WorkflowView {
    c.inspector()
        .workflow(wid, from, limit)
        .await
        .unwrap()
        .expect("the workflow is there")
}

fn step<'a>(v: &'a WorkflowView, name: &str) -> &'a fairjob::inspect::StepView {
    v.steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is on the page: {v:?}"))
}

/// Calls of `name` in Redis's command counts.
fn calls(stats: &[(String, u64)], name: &str) -> u64 {
    stats
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, c)| *c)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10000_step_workflow_is_read_a_page_at_a_time() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let n = 10_000;
    let mut w = Workflow::new()
        .description("fan-out")
        .add("root", quick().queue("views-root"));
    for i in 0..n {
        w = w.add_after(format!("s{i:05}"), quick().queue("views-idle"), ["root"]);
    }
    let wid = w.commit(&c).await.unwrap();
    let status = c.batch_status(&wid).await.unwrap().unwrap();
    assert!(status.workflow);
    assert_eq!((status.total, status.held), (n + 1, n));

    // A page: a few bounded reads, whichever page it is.
    for (from, first) in [(0, "root"), (5_000, "s04999"), (9_950, "s09949")] {
        reset_redis_stats(redis.url()).await;
        let v = view(&c, &wid, from, 100).await;
        let stats = redis_command_calls(redis.url()).await;
        assert_eq!(v.total, n + 1);
        assert_eq!(v.steps.len(), if from == 9_950 { 51 } else { 100 });
        assert_eq!(v.steps[0].name, first, "name order");
        let whole: u64 = ["hgetall", "hkeys", "hvals", "smembers", "zrange"]
            .iter()
            .map(|c| calls(&stats, c))
            .sum();
        assert!(
            calls(&stats, "hmget") <= 2
                && calls(&stats, "lrange") <= 1
                && whole <= 1
                && calls(&stats, "hscan") <= 1,
            "a page is a few bounded reads (the batch's hash and a page of its failures, \
             the page's range of the steps, their fields, what they wait for): {stats:?}"
        );
        assert_eq!(v.next, (from + 100 < n + 1).then_some(from + 100));
        assert_eq!(v.prev, (from > 0).then(|| from - 100));
    }
    let v = view(&c, &wid, 0, 3).await;
    let root = step(&v, "root");
    assert_eq!(root.state, StepStatus::Queued);
    assert!(root.dependencies.is_empty() && root.waiting_for.is_empty());
    let s0 = step(&v, "s00000");
    assert_eq!(s0.state, StepStatus::Held);
    assert_eq!(
        (
            s0.dependencies.as_slice(),
            s0.waiting_for.as_slice(),
            s0.waiting_total
        ),
        (&["root".to_owned()][..], &["root".to_owned()][..], 1)
    );
    // Its index key says where it is; explain needs no walk.
    let held_jid = s0.jid.clone();
    let key = redis.keys().workflow_held(&held_jid);
    assert_eq!(redis.get::<Option<String>>(&key).await, Some(wid.clone()));
    let e = c
        .inspector()
        .explain(&held_jid, None, None, None, &[])
        .await
        .unwrap();
    assert!(e.found && e.scanned == 0, "{e:?}");

    // The root's end releases them all (in script calls of 25): nothing is
    // held, every index key is gone.
    let _w = spawn(
        redis
            .worker()
            .queues(queues(&["views-root"]))
            .build()
            .await
            .unwrap(),
    );
    eventually!(
        within Duration::from_secs(60),
        redis.llen(redis.keys().queue("views-idle")).await == n as usize,
        "the root's end releases the 10,000 steps"
    );
    let status = c.batch_status(&wid).await.unwrap().unwrap();
    assert_eq!((status.held, status.pending), (0, n));
    let prefix = redis.keys().workflow_held_prefix();
    assert!(
        redis.scan_keys(&format!("{prefix}*")).await.is_empty(),
        "a released step's index key goes with its release"
    );
    let v = view(&c, &wid, 0, 3).await;
    assert_eq!(step(&v, "root").state, StepStatus::Done);
    let s0 = step(&v, "s00000");
    assert_eq!(s0.state, StepStatus::Queued);
    assert!(s0.waiting_for.is_empty() && s0.waiting_total == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_a_members_batch_and_what_a_held_step_waits_for() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let inspector = c.inspector();
    // A plain batch whose members wait in a queue nobody works.
    let bid = Batch::new()
        .description("nightly <b>import</b>")
        .push(quick().queue("views-idle"))
        .push(quick().queue("views-idle"))
        .commit(&c)
        .await
        .unwrap();
    let member = redis.payloads(&redis.keys().queue("views-idle")).await[0]["jid"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = inspector
        .explain(&member, None, None, None, &[])
        .await
        .unwrap();
    assert!(matches!(e.location, Some(Location::Queue { .. })), "{e:?}");
    assert!(
        e.reasons.contains(&Reason::BatchMember {
            bid: bid.clone(),
            description: "nightly <b>import</b>".into(),
            pending: 2,
            total: 2,
            workflow: false,
            step: None,
        }),
        "{:?}",
        e.reasons
    );

    // A workflow: `b` waits for `a`; `c` for `a` and `b`.
    let wid = Workflow::new()
        .description("three steps")
        .add("a", quick().queue("views-idle2"))
        .add_after("b", quick(), ["a"])
        .add_after("c", quick(), ["a", "b"])
        .commit(&c)
        .await
        .unwrap();
    let v = view(&c, &wid, 0, 10).await;
    let jid = |name: &str| step(&v, name).jid.clone();
    let e = inspector
        .explain(&jid("c"), None, None, None, &[])
        .await
        .unwrap();
    assert!(e.found, "a held step is found: {e:?}");
    assert_eq!(e.scanned, 0, "through its index, no walk");
    assert_eq!(
        e.location,
        Some(Location::Held {
            bid: wid.clone(),
            step: "c".into()
        })
    );
    assert_eq!(
        e.reasons,
        vec![
            Reason::WorkflowHeld {
                bid: wid.clone(),
                step: "c".into(),
                waiting_for: vec!["a".into(), "b".into()],
                waiting: 2,
                dependencies: 2,
            },
            Reason::BatchMember {
                bid: wid.clone(),
                description: "three steps".into(),
                pending: 3,
                total: 3,
                workflow: true,
                step: Some("c".into()),
            },
        ]
    );
    let job = e.job.expect("its payload, read from the workflow");
    assert_eq!(
        (job.class.as_str(), job.queue.as_str()),
        ("ViewStep", "views")
    );
    // The root is in its queue: its place, and its workflow.
    let e = inspector
        .explain(&jid("a"), None, None, None, &[])
        .await
        .unwrap();
    assert!(
        matches!(&e.location, Some(Location::Queue { queue, .. }) if queue == "views-idle2"),
        "{e:?}"
    );
    assert!(
        e.reasons.iter().any(|r| matches!(r,
            Reason::BatchMember { step: Some(s), workflow: true, pending: 3, .. } if s == "a")),
        "{:?}",
        e.reasons
    );

    // A fan-in of 150: a page shows its first 20 dependencies, explain names
    // 20 of those it waits for, and both say how many there are.
    let roots: Vec<String> = (0..150).map(|i| format!("r{i:03}")).collect();
    let mut w = Workflow::new();
    for r in &roots {
        w = w.add(r, quick().queue("views-idle3"));
    }
    let fan_wid = w
        .add_after("fan", quick(), &roots)
        .commit(&c)
        .await
        .unwrap();
    let v = view(&c, &fan_wid, 0, 2).await;
    let fan = step(&v, "fan");
    assert_eq!((fan.dependencies.len(), fan.dependencies_total), (20, 150));
    assert_eq!((fan.waiting_for.len(), fan.waiting_total), (20, 150));
    assert_eq!(fan.waiting_for[19], "r019");
    let e = inspector
        .explain(&fan.jid, None, None, None, &[])
        .await
        .unwrap();
    match &e.reasons[0] {
        Reason::WorkflowHeld {
            waiting_for,
            waiting,
            dependencies,
            ..
        } => assert_eq!((waiting_for.len(), *waiting, *dependencies), (20, 150, 150)),
        other => panic!("{other:?}"),
    }

    // An index key whose batch expired (holding its step) is ignored and
    // dropped.
    let stale = redis.keys().workflow_held("no-such-step");
    let _: () = redis
        .query(redis::cmd("SET").arg(&stale).arg("gone-bid"))
        .await;
    let e = inspector
        .explain("no-such-step", None, None, None, &[])
        .await
        .unwrap();
    assert!(!e.found);
    assert_eq!(redis.get::<Option<String>>(&stale).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_cancelled_continued_and_running_steps_show_as_such() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let _w = spawn(
        redis
            .worker()
            .queues(queues(&["views"]))
            .build()
            .await
            .unwrap(),
    );
    let wid = Workflow::new()
        .add("bad", ViewStep { ms: 0, die: true })
        .add_after("cancelled", quick(), ["bad"])
        .add_after("kept", quick(), ["bad"])
        .on_dependency_failure("kept", OnDependencyFailure::Continue)
        .add(
            "slow",
            ViewStep {
                ms: 4_000,
                die: false,
            },
        )
        .add_after("then", quick(), ["slow"])
        .commit(&c)
        .await
        .unwrap();
    let v = eventually!(
        let v = view(&c, &wid, 0, 100).await;
        step(&v, "slow").state == StepStatus::Running && step(&v, "kept").state == StepStatus::Done,
        "`slow` runs while `bad` failed"
    );
    assert!(step(&v, "slow").running_on.is_some());
    assert_eq!(step(&v, "bad").state, StepStatus::Failed);
    assert_eq!(step(&v, "cancelled").state, StepStatus::Cancelled);
    assert_eq!(step(&v, "kept").continued_past, ["bad"]);
    let then = step(&v, "then");
    assert_eq!(then.state, StepStatus::Held);
    assert_eq!(then.waiting_for, ["slow"]);
    assert_eq!(v.batch.status.held, 1, "`then` only");
    assert!(
        v.batch
            .status
            .failed_jids
            .iter()
            .any(|(_, f)| f == "cancelled: dependency `bad` failed"),
        "{:?}",
        v.batch.status.failed_jids
    );
    eventually!(
        let v = view(&c, &wid, 0, 100).await;
        step(&v, "then").state == StepStatus::Done,
        "`then` runs after `slow`"
    );
    let v = view(&c, &wid, 0, 100).await;
    assert_eq!(v.batch.status.held, 0);
    // A plain batch is not a workflow.
    let bid = Batch::new()
        .push(quick().queue("views-idle"))
        .commit(&c)
        .await
        .unwrap();
    assert!(c.inspector().workflow(&bid, 0, 10).await.unwrap().is_none());
    assert!(
        c.inspector()
            .workflow("nope", 0, 10)
            .await
            .unwrap()
            .is_none()
    );
}
