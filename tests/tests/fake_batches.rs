//! Batches and workflows in fairjob's testing mode (`Fake`), with no Redis:
//! members, callbacks (each once), a member reopening its batch, child
//! batches, workflows releasing held steps with their upstream results,
//! every `on_dependency_failure` policy, a prepared batch committed twice,
//! an empty batch, and inline mode.
//! `batches.rs` and `workflows.rs` check the same guarantees against a real
//! Redis and a worker (and there compare the fake's store with Redis).

use std::sync::Mutex;
use std::time::Duration;

use fairjob::batch::{BatchStatus, Event, OnDependencyFailure};
use fairjob::prelude::*;
use fairjob::testing::{AfterFailure, Fake};
use fairjob::{Error, Workflow};
use serde::{Deserialize, Serialize};

/// One thing a test's jobs did: a line, and for a callback its event and
/// the status its batch showed it.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    callback: Option<(Event, BatchStatus)>,
}

/// What ran, by the test's tag (tests run in parallel in one process).
static SEEN: Mutex<Vec<(String, Seen)>> = Mutex::new(Vec::new());

fn saw(tag: &str, line: String, callback: Option<(Event, BatchStatus)>) {
    SEEN.lock()
        .unwrap()
        .push((tag.to_owned(), Seen { line, callback }));
}

fn seen(tag: &str) -> Vec<Seen> {
    SEEN.lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| t == tag)
        .map(|(_, s)| s.clone())
        .collect()
}

fn lines(tag: &str) -> Vec<String> {
    seen(tag).into_iter().map(|s| s.line).collect()
}

/// The callbacks that ran: (event, the batch's description, its status).
fn callbacks(tag: &str) -> Vec<(Event, String, BatchStatus)> {
    seen(tag)
        .into_iter()
        .filter_map(|s| s.callback)
        .map(|(e, st)| (e, st.description.clone(), st))
        .collect()
}

fn count(tag: &str, event: Event) -> usize {
    callbacks(tag).iter().filter(|c| c.0 == event).count()
}

/// A member: fails every run when `fail` (one retry, then dead), adds
/// `more` rows to its batch first.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FbRow", queue = "fb_rows", retry = 1)]
struct Row {
    tag: String,
    n: u32,
    fail: bool,
    more: u32,
}

fn row(tag: &str, n: u32) -> Row {
    Row {
        tag: tag.into(),
        n,
        fail: false,
        more: 0,
    }
}

impl Perform for Row {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let batch = cx.batch().expect("a member knows its batch");
        for i in 0..self.more {
            batch.push(row(&self.tag, 100 + i)).await?;
        }
        saw(&self.tag, format!("row {} #{}", self.n, cx.attempt()), None);
        if self.fail {
            return Err(JobError::retry(format!("row {} is bad", self.n)));
        }
        Ok(())
    }
}

/// A member on a tenant-sharded queue.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FbShardRow", queue = "fb_shard_rows", shard_by_tenant)]
#[fair_tenant(tenant)]
struct ShardRow {
    tag: String,
    tenant: String,
}

impl Perform for ShardRow {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        assert!(cx.batch().is_some());
        saw(&self.tag, format!("shard row {}", self.tenant), None);
        Ok(())
    }
}

/// Every callback of these tests: records its event and its batch's status.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FbCallback", queue = "fb_callbacks")]
struct Callback {
    tag: String,
}

impl Perform for Callback {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let event = cx.batch_event().expect("a callback knows its event");
        let status = cx
            .batch_status()
            .await?
            .expect("a callback reads its batch");
        saw(
            &self.tag,
            format!("{} {}", event.as_str(), status.description),
            Some((event, status)),
        );
        Ok(())
    }
}

fn with_callbacks(batch: Batch, tag: &str) -> Batch {
    batch
        .on_complete(Callback { tag: tag.into() })
        .on_success(Callback { tag: tag.into() })
        .on_death(Callback { tag: tag.into() })
}

/// A member that opens a child batch of its own batch (`depth` deep).
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FbNester", queue = "fb_rows")]
struct Nester {
    tag: String,
    depth: u32,
}

impl Perform for Nester {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        saw(&self.tag, format!("nester {}", self.depth), None);
        if self.depth == 0 {
            return Ok(());
        }
        let child = cx.batch().expect("a member").child();
        with_callbacks(child, &self.tag)
            .description(format!("depth {}", self.depth - 1))
            .push(Nester {
                tag: self.tag.clone(),
                depth: self.depth - 1,
            })
            .commit(cx.client())
            .await?;
        Ok(())
    }
}

/// What a workflow step does.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Does {
    /// Records the numbers 1..=9.
    Extract,
    /// Sums its third of the extracted numbers and records it.
    Transform(usize),
    /// Sums the three transforms' results and records it.
    Merge,
    /// Reads the merged total.
    Notify,
    /// Dies at once.
    Die,
    /// Says which dependencies it continued past.
    Report,
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "FbStep", queue = "fb_steps", retry = 0)]
struct Step {
    tag: String,
    does: Does,
}

fn step(tag: &str, does: Does) -> Step {
    Step {
        tag: tag.into(),
        does,
    }
}

impl Perform for Step {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let name = cx.workflow_step().expect("a step knows its name");
        let line = match self.does {
            Does::Extract => {
                cx.record(&(1..=9).collect::<Vec<u32>>()).await?;
                name
            }
            Does::Transform(i) => {
                let all: Vec<u32> = cx.upstream("extract").await?.expect("extracted");
                let sum: u32 = all[i * 3..i * 3 + 3].iter().sum();
                cx.record(&sum).await?;
                format!("{name} = {sum}")
            }
            Does::Merge => {
                let mut total = 0;
                for t in ["t0", "t1", "t2"] {
                    total += cx.upstream::<u32>(t).await?.expect("transformed");
                }
                cx.record(&total).await?;
                format!("{name} = {total}")
            }
            Does::Notify => {
                let total: u32 = cx.upstream("merge").await?.expect("merged");
                format!("{name}: {total}")
            }
            Does::Die => {
                saw(&self.tag, name, None);
                return Err(JobError::discard("this step dies"));
            }
            Does::Report => format!("{name} past {:?}", cx.failed_dependencies().await?),
        };
        saw(&self.tag, line, None);
        Ok(())
    }
}

#[tokio::test]
async fn a_batch_fires_complete_and_success_once_and_its_callbacks_read_its_status() {
    let tag = "plain";
    let fake = Fake::new();
    let client = fake.client();
    let bid = with_callbacks(Batch::new(), tag)
        .description("three rows")
        .push_bulk((1..=3).map(|n| row(tag, n)))
        .push(ShardRow {
            tag: tag.into(),
            tenant: "acme".into(),
        })
        .commit(&client)
        .await
        .unwrap();
    // Committed: its members wait in their queues, each knowing its batch.
    let rows = fake.enqueued::<Row>();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter()
            .all(|r| r.payload.get_str("bid").as_deref() == Some(bid.as_str()))
    );
    assert_eq!(
        fake.enqueued::<ShardRow>()[0].tenant.as_deref(),
        Some("acme")
    );
    let before = client.batch_status(&bid).await.unwrap().unwrap();
    assert_eq!((before.total, before.pending, before.staged), (4, 4, 0));
    assert!(before.committed && before.complete_at.is_none());

    assert_eq!(fake.drain().await.unwrap(), 6, "4 members, 2 callbacks");
    let l = lines(tag);
    assert_eq!(l.len(), 6, "{l:?}");
    assert!(l[..4].iter().all(|x| x.contains("row")), "{l:?}");
    assert_eq!(l[4..], ["complete three rows", "success three rows"]);
    let cbs = callbacks(tag);
    let (_, _, at_complete) = &cbs[0];
    assert_eq!(
        (
            at_complete.total,
            at_complete.pending,
            at_complete.unsucceeded
        ),
        (4, 0, 0)
    );
    assert!(at_complete.complete_at.is_some() && at_complete.success_at.is_some());
    assert!(cbs.iter().all(|c| c.2.bid == bid && c.2.tenant == "acme"));
    // Nothing fires twice.
    assert_eq!(fake.drain().await.unwrap(), 0);
    assert_eq!(
        (count(tag, Event::Complete), count(tag, Event::Success)),
        (1, 1)
    );
    assert_eq!(count(tag, Event::Death), 0);
    let after = client.batch_status(&bid).await.unwrap().unwrap();
    assert!(after.success_at.unwrap() >= after.complete_at.unwrap());
    assert_eq!(after.failures, 0);
    // A finished batch takes no more; an unknown one is no batch.
    let err = client.batch(&bid).push(row(tag, 9)).await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFinished { bid: b } if *b == bid),
        "{err}"
    );
    let err = client.batch("nope").push(row(tag, 9)).await.unwrap_err();
    assert!(matches!(err, Error::NoSuchBatch { .. }), "{err}");
    assert!(client.batch_status("nope").await.unwrap().is_none());
}

#[tokio::test]
async fn a_dead_member_fires_death_once_complete_once_and_success_never() {
    let tag = "dead";
    let fake = Fake::new();
    let client = fake.client();
    let bad = Row {
        fail: true,
        ..row(tag, 2)
    };
    let bid = with_callbacks(Batch::new(), tag)
        .description("one bad row")
        .push(row(tag, 1))
        .push(bad)
        .commit(&client)
        .await
        .unwrap();
    // Its first run fails into `retry`: every member has run once.
    let err = fake.drain().await.unwrap_err();
    assert!(matches!(&err, Error::JobFailed { message, .. } if message == "row 2 is bad"));
    assert_eq!(lines(tag), ["row 1 #1", "row 2 #1", "complete one bad row"]);
    let (_, _, status) = &callbacks(tag)[0];
    assert_eq!(
        (status.pending, status.unsucceeded, status.failures),
        (0, 1, 1)
    );
    assert_eq!(status.failed_jids[0].1, "JobError: row 2 is bad");
    assert!(matches!(
        fake.failures()[0].next,
        AfterFailure::Retry { .. }
    ));
    // Its retry (the last) dies: `death` once.
    fake.advance(Duration::from_secs(60));
    fake.drain().await.unwrap_err();
    assert_eq!(fake.failures()[1].next, AfterFailure::Dead);
    assert_eq!(lines(tag)[3..], ["row 2 #2", "death one bad row"]);
    fake.advance(Duration::from_secs(3600));
    assert_eq!(fake.drain().await.unwrap(), 0);
    assert_eq!(
        (
            count(tag, Event::Complete),
            count(tag, Event::Death),
            count(tag, Event::Success)
        ),
        (1, 1, 0)
    );
    let status = client.batch_status(&bid).await.unwrap().unwrap();
    assert!(status.death_at.is_some() && status.success_at.is_none());
    assert_eq!(status.unsucceeded, 1);
}

#[tokio::test]
async fn a_member_that_reopens_its_batch_delays_complete_until_its_additions_ran() {
    let tag = "reopen";
    let fake = Fake::new();
    let bid = with_callbacks(Batch::new(), tag)
        .description("reopened")
        .push(Row {
            more: 2,
            ..row(tag, 1)
        })
        .commit(&fake.client())
        .await
        .unwrap();
    assert_eq!(fake.drain().await.unwrap(), 5);
    assert_eq!(
        lines(tag),
        [
            "row 1 #1",
            "row 100 #1",
            "row 101 #1",
            "complete reopened",
            "success reopened"
        ]
    );
    for (_, _, status) in callbacks(tag) {
        assert_eq!((status.bid.as_str(), status.total), (bid.as_str(), 3));
    }
}

#[tokio::test]
async fn child_batches_two_deep_fire_their_callbacks_before_their_parents_each_once() {
    let tag = "nested";
    let fake = Fake::new();
    let parent = with_callbacks(Batch::new(), tag)
        .description("depth 2")
        .push(Nester {
            tag: tag.into(),
            depth: 2,
        })
        .commit(&fake.client())
        .await
        .unwrap();
    assert_eq!(fake.drain().await.unwrap(), 3 + 6, "3 members, 6 callbacks");
    let order: Vec<String> = callbacks(tag)
        .into_iter()
        .map(|(e, d, _)| format!("{} {d}", e.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            "complete depth 0",
            "success depth 0",
            "complete depth 1",
            "success depth 1",
            "complete depth 2",
            "success depth 2",
        ]
    );
    let l = lines(tag);
    assert_eq!(l[..3], ["nester 2", "nester 1", "nester 0"]);
    let status = fake.client().batch_status(&parent).await.unwrap().unwrap();
    assert_eq!(status.total, 1, "a child batch is not a member job");
    // A finished parent takes no children.
    let err = Batch::new()
        .child_of(&parent)
        .push(row(tag, 1))
        .commit(&fake.client())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchFinished { .. }), "{err}");
    let err = Batch::new()
        .child_of("gone")
        .commit(&fake.client())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoSuchBatch { .. }), "{err}");
}

fn pipeline(tag: &str) -> Workflow {
    Workflow::new()
        .description("pipeline")
        .add("extract", step(tag, Does::Extract))
        .add_after("t0", step(tag, Does::Transform(0)), ["extract"])
        .add_after("t1", step(tag, Does::Transform(1)), ["extract"])
        .add_after("t2", step(tag, Does::Transform(2)), ["extract"])
        .add_after("merge", step(tag, Does::Merge), ["t0", "t1", "t2"])
        .add_after("notify", step(tag, Does::Notify), ["merge"])
        .on_success(Callback { tag: tag.into() })
}

#[tokio::test]
async fn a_workflow_runs_each_step_once_after_its_dependencies_with_their_results() {
    let tag = "pipeline";
    let fake = Fake::new();
    let wid = pipeline(tag).commit(&fake.client()).await.unwrap();
    // Only the root waits in a queue; the others are held outside any.
    let queued = fake.enqueued::<Step>();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        queued[0].payload.get_str("bid").as_deref(),
        Some(wid.as_str())
    );
    assert_eq!(fake.drain().await.unwrap(), 7);
    assert_eq!(
        lines(tag),
        [
            "extract",
            "t0 = 6",
            "t1 = 15",
            "t2 = 24",
            "merge = 45",
            "notify: 45",
            "success pipeline"
        ]
    );
    let status = fake.client().batch_status(&wid).await.unwrap().unwrap();
    assert_eq!((status.total, status.unsucceeded), (6, 0));
    assert_eq!(fake.drain().await.unwrap(), 0);
}

#[tokio::test]
async fn a_failed_dependency_cancels_continues_or_is_ignored_by_policy() {
    use OnDependencyFailure::{Cancel, Continue, Ignore};
    let tag = "policies";
    let fake = Fake::new();
    let wid = Workflow::new()
        .description("policies")
        .add("a", step(tag, Does::Die))
        .add("ok", step(tag, Does::Report))
        // Cancel (the default): never runs; its own dependents see it failed.
        .add_after("cancelled", step(tag, Does::Report), ["a"])
        .add_after("after_cancelled", step(tag, Does::Report), ["cancelled"])
        .on_dependency_failure("after_cancelled", Continue)
        .add_after("continued", step(tag, Does::Report), ["a"])
        .on_dependency_failure("continued", Continue)
        .add_after("ignored", step(tag, Does::Report), ["a", "ok"])
        .on_dependency_failure("ignored", Ignore)
        // A step that continues past anything but `a`.
        .add_after("edge", step(tag, Does::Report), ["a", "ok"])
        .on_dependency_failure("edge", Continue)
        .on_failure_of("edge", "a", Cancel)
        .on_complete(Callback { tag: tag.into() })
        .on_success(Callback { tag: tag.into() })
        .on_death(Callback { tag: tag.into() })
        .commit(&fake.client())
        .await
        .unwrap();
    let err = fake.drain().await.unwrap_err();
    assert!(matches!(&err, Error::JobFailed { message, .. } if message == "this step dies"));
    let all = lines(tag);
    assert_eq!(all.last().unwrap(), "complete policies", "{all:?}");
    let mut steps: Vec<String> = seen(tag)
        .into_iter()
        .filter(|s| s.callback.is_none())
        .map(|s| s.line)
        .collect();
    steps.sort();
    assert_eq!(
        steps,
        [
            "a",
            "after_cancelled past [\"cancelled\"]",
            "continued past [\"a\"]",
            "ignored past []",
            "ok past []",
        ]
    );
    let events: Vec<Event> = callbacks(tag).into_iter().map(|c| c.0).collect();
    assert_eq!(events, [Event::Death, Event::Complete]);
    let status = fake.client().batch_status(&wid).await.unwrap().unwrap();
    assert_eq!(
        (status.pending, status.failures),
        (0, 3),
        "a and two cancelled"
    );
    let cancelled: Vec<&str> = status
        .failed_jids
        .iter()
        .map(|(_, f)| f.as_str())
        .filter(|f| f.starts_with("cancelled"))
        .collect();
    assert_eq!(cancelled, ["cancelled: dependency `a` failed"; 2]);
    assert_eq!(fake.drain().await.unwrap(), 0);
    assert_eq!(count(tag, Event::Success), 0);
}

#[tokio::test]
async fn a_prepared_batch_committed_twice_runs_each_member_once() {
    let tag = "prepared";
    let fake = Fake::new();
    let prepared = with_callbacks(Batch::new(), tag)
        .description("prepared")
        .push_bulk((1..=2).map(|n| row(tag, n)))
        .prepare()
        .unwrap();
    let again = fairjob::batch::PreparedBatch::from_json(&prepared.to_json()).unwrap();
    let bid = prepared.commit(&fake.client()).await.unwrap();
    // A commit repeated after a crash, with the same bid: nothing twice.
    assert_eq!(again.commit(&fake.client()).await.unwrap(), bid);
    assert_eq!(fake.enqueued::<Row>().len(), 2);
    assert_eq!(fake.drain().await.unwrap(), 4);
    assert_eq!(
        lines(tag),
        [
            "row 1 #1",
            "row 2 #1",
            "complete prepared",
            "success prepared"
        ]
    );
    let status = fake.client().batch_status(&bid).await.unwrap().unwrap();
    assert_eq!((status.total, status.staged), (2, 0));
}

#[tokio::test]
async fn an_empty_batch_fires_at_its_commit() {
    let tag = "empty";
    let fake = Fake::new();
    let bid = with_callbacks(Batch::new(), tag)
        .description("nothing")
        .commit(&fake.client())
        .await
        .unwrap();
    let status = fake.client().batch_status(&bid).await.unwrap().unwrap();
    assert!(status.complete_at.is_some() && status.success_at.is_some());
    assert_eq!(status.total, 0);
    assert_eq!(fake.enqueued::<Callback>().len(), 2);
    assert_eq!(fake.drain().await.unwrap(), 2);
    assert_eq!(lines(tag), ["complete nothing", "success nothing"]);
}

#[tokio::test]
async fn inline_mode_runs_a_batch_and_a_workflow_within_their_commit() {
    let tag = "inline";
    let fake = Fake::inline();
    with_callbacks(Batch::new(), tag)
        .description("inline")
        .push_bulk((1..=2).map(|n| row(tag, n)))
        .commit(&fake.client())
        .await
        .unwrap();
    assert_eq!(
        lines(tag),
        ["row 1 #1", "row 2 #1", "complete inline", "success inline"]
    );
    let wtag = "inline-wf";
    pipeline(wtag).commit(&fake.client()).await.unwrap();
    assert_eq!(lines(wtag).last().unwrap(), "success pipeline");
    assert_eq!(lines(wtag)[4], "merge = 45");
    // A member's failure is not retried: the batch completes with it.
    let ftag = "inline-fail";
    let bid = with_callbacks(Batch::new(), ftag)
        .description("failing")
        .push(Row {
            fail: true,
            ..row(ftag, 1)
        })
        .commit(&fake.client())
        .await
        .unwrap();
    assert_eq!(lines(ftag), ["row 1 #1", "complete failing"]);
    assert_eq!(fake.failures().last().unwrap().next, AfterFailure::Returned);
    let status = fake.client().batch_status(&bid).await.unwrap().unwrap();
    assert_eq!((status.failures, status.unsucceeded), (1, 1));
    assert_eq!(fake.drain().await.unwrap(), 0);
}
