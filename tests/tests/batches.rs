//! Batches (`fairjob::batch`): members committed together, callbacks fired
//! exactly once per event, against a real Redis and a real worker; and the
//! Lua twin of `policy::batch` checked against the Rust rules on random
//! sequences of member ends (duplicates, retries, deaths, strangers).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use fairjob::batch::{BatchStatus, Event};
use fairjob::policy::batch::{self as rules, Membership, Outcome};
use fairjob::prelude::*;
use fairjob::wire::fields;
use fairjob_tests::{Redis, eventually, queues, spawn};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Per test (a tag), what ran: members that ended, callbacks by event with
/// the status their batch showed them.
#[derive(Default)]
struct Seen {
    members_done: usize,
    callbacks: Vec<(Event, String, BatchStatus, usize)>,
}

static SEEN: Mutex<BTreeMap<String, Seen>> = Mutex::new(BTreeMap::new());
static FAIL_ONCE: AtomicUsize = AtomicUsize::new(0);

fn seen<T>(tag: &str, f: impl FnOnce(&mut Seen) -> T) -> T {
    f(SEEN.lock().unwrap().entry(tag.to_owned()).or_default())
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BatchRow", queue = "rows")]
struct Row {
    tag: String,
    /// Die at once (no retries) when true and the test has not healed it.
    die: bool,
    /// Reopen the batch with this many more rows.
    more: usize,
}

impl Perform for Row {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        if self.die && FAIL_ONCE.load(Ordering::SeqCst) == 0 {
            return Err(JobError::discard("this row is bad"));
        }
        if self.more > 0 {
            let b = cx.batch().expect("a member knows its batch");
            for _ in 0..self.more {
                b.push(Row {
                    tag: self.tag.clone(),
                    die: false,
                    more: 0,
                })
                .await
                .map_err(|e| JobError::retry(e.to_string()))?;
            }
        }
        seen(&self.tag, |s| s.members_done += 1);
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BatchShardRow", queue = "shard_rows", shard_by_tenant)]
#[fair_tenant(tenant)]
struct ShardRow {
    tag: String,
    tenant: String,
}

impl Perform for ShardRow {
    async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
        seen(&self.tag, |s| s.members_done += 1);
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BatchCallback", queue = "callbacks")]
struct Callback {
    tag: String,
}

impl Perform for Callback {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let event = cx.batch_event().expect("a callback knows its event");
        let status = cx
            .batch_status()
            .await
            .map_err(|e| JobError::retry(e.to_string()))?
            .expect("a callback reads its batch");
        seen(&self.tag, |s| {
            let done = s.members_done;
            s.callbacks.push((event, cx.jid().to_owned(), status, done));
        });
        Ok(())
    }
}

/// A member that opens a child batch of its own batch, of `rows` rows.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(class = "BatchNester", queue = "rows")]
struct Nester {
    tag: String,
    rows: usize,
}

impl Perform for Nester {
    async fn perform(self, cx: &JobContext) -> Result<(), JobError> {
        let child = cx.batch().expect("a member").child();
        with_callbacks_on(child, &self.tag)
            .description(format!("grandchild {}", self.tag))
            .push_bulk((0..self.rows).map(|_| Row {
                tag: self.tag.clone(),
                die: false,
                more: 0,
            }))
            .commit(cx.client())
            .await
            .map_err(|e| JobError::retry(e.to_string()))?;
        seen(&self.tag, |s| s.members_done += 1);
        Ok(())
    }
}

fn callbacks(tag: &str) -> Vec<(Event, String, BatchStatus, usize)> {
    seen(tag, |s| s.callbacks.clone())
}

fn count(tag: &str, e: Event) -> usize {
    callbacks(tag).iter().filter(|c| c.0 == e).count()
}

fn with_callbacks(tag: &str) -> Batch {
    with_callbacks_on(Batch::new(), tag).description(format!("test {tag}"))
}

fn with_callbacks_on(batch: Batch, tag: &str) -> Batch {
    batch
        .on_complete(Callback { tag: tag.into() })
        .on_success(Callback { tag: tag.into() })
        .on_death(Callback { tag: tag.into() })
}

async fn worker(redis: &Redis) -> fairjob_tests::RunningWorker {
    spawn(
        redis
            .worker()
            .concurrency(10)
            .queues(queues(&["rows", "shard_rows", "callbacks"]))
            .build()
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_and_success_fire_once_after_every_member_on_plain_and_sharded_queues() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tag = "plain-and-sharded";
    let tenants = ["acme", "t:{x} y", "<script>é"];
    let bid = with_callbacks(tag)
        .push_bulk((0..120).map(|_| Row {
            tag: tag.into(),
            die: false,
            more: 0,
        }))
        .push_bulk((0..180).map(|i| ShardRow {
            tag: tag.into(),
            tenant: tenants[i % 3].into(),
        }))
        .commit(&c)
        .await
        .unwrap();
    // Committed before any worker runs: every member staged and pushed.
    let status = c.batch_status(&bid).await.unwrap().unwrap();
    assert_eq!((status.total, status.pending, status.staged), (300, 300, 0));
    assert!(status.committed && status.complete_at.is_none());
    assert_eq!(
        status.tenant, "acme",
        "callbacks run in the first member's tenant"
    );
    let _w = worker(&redis).await;
    eventually!(
        count(tag, Event::Success) == 1,
        "success fires after the members"
    );
    // Let any duplicate show up.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let cbs = callbacks(tag);
    assert_eq!(
        count(tag, Event::Complete),
        1,
        "{:?}",
        cbs.iter().map(|c| c.0).collect::<Vec<_>>()
    );
    assert_eq!(count(tag, Event::Success), 1);
    assert_eq!(count(tag, Event::Death), 0);
    for (event, jid, status, done) in &cbs {
        assert_eq!(*done, 300, "{event:?} ran after every member");
        assert_eq!(jid, &fairjob::batch::callback_jid(&bid, *event));
        assert_eq!((status.pending, status.failures), (0, 0));
        assert_eq!(status.description, format!("test {tag}"));
        assert!(status.complete_at.is_some());
    }
    let status = c.batch_status(&bid).await.unwrap().unwrap();
    assert!(status.success_at.unwrap() >= status.complete_at.unwrap());
    // After success the data lives `batch_retention` (1 day by default).
    let ttl: i64 = redis
        .query(redis::cmd("TTL").arg(redis.keys().batch(&bid)))
        .await;
    assert!((80_000..=86_400).contains(&ttl), "ttl {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_fires_death_once_complete_once_and_success_only_when_retried_by_hand() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tag = "death";
    let bid = with_callbacks(tag)
        .push_bulk((0..20).map(|i| Row {
            tag: tag.into(),
            die: i % 10 == 3,
            more: 0,
        }))
        .commit(&c)
        .await
        .unwrap();
    let _w = worker(&redis).await;
    eventually!(count(tag, Event::Complete) == 1, "complete fires");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        count(tag, Event::Death),
        1,
        "death fires once for two deaths"
    );
    assert_eq!(count(tag, Event::Success), 0);
    let status = c.batch_status(&bid).await.unwrap().unwrap();
    assert_eq!(
        (status.pending, status.unsucceeded, status.failures),
        (0, 2, 2)
    );
    assert!(
        status
            .failed_jids
            .iter()
            .all(|(_, e)| e.contains("this row is bad"))
    );
    // Kept as long as the dead set keeps its jobs.
    let ttl: i64 = redis
        .query(redis::cmd("TTL").arg(redis.keys().batch(&bid)))
        .await;
    assert!(ttl > 100 * 86_400, "ttl {ttl}");
    // Heal the rows and retry both dead members by hand: success, once.
    FAIL_ONCE.store(1, Ordering::SeqCst);
    let dead: Vec<String> = redis
        .query(redis::cmd("ZRANGE").arg(redis.keys().dead()).arg(0).arg(-1))
        .await;
    assert_eq!(dead.len(), 2);
    for p in dead {
        let _: i64 = redis
            .query(redis::cmd("ZREM").arg(redis.keys().dead()).arg(&p))
            .await;
        let _: i64 = redis
            .query(redis::cmd("LPUSH").arg(redis.keys().queue("rows")).arg(&p))
            .await;
    }
    eventually!(
        count(tag, Event::Success) == 1,
        "success fires after the retries by hand"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        (
            count(tag, Event::Complete),
            count(tag, Event::Death),
            count(tag, Event::Success)
        ),
        (1, 1, 1)
    );
    FAIL_ONCE.store(0, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_reopens_its_batch_delays_complete_until_its_additions_ran() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tag = "reopen";
    let bid = with_callbacks(tag)
        .push(Row {
            tag: tag.into(),
            die: false,
            more: 10,
        })
        .commit(&c)
        .await
        .unwrap();
    let _w = worker(&redis).await;
    eventually!(count(tag, Event::Success) == 1, "success fires");
    let cbs = callbacks(tag);
    assert_eq!(count(tag, Event::Complete), 1);
    for (_, _, status, done) in &cbs {
        assert_eq!(*done, 11, "after the 10 additions");
        assert_eq!(status.total, 11);
    }
    // The additions left the batch where it was listed: at its creation.
    let listed: f64 = redis
        .query(redis::cmd("ZSCORE").arg(redis.keys().batches()).arg(&bid))
        .await;
    let created = c.batch_status(&bid).await.unwrap().unwrap().created_at;
    assert!(
        (listed - created).abs() < 0.001,
        "listed at {listed}, created at {created}"
    );
    // The batch has finished: it takes no more.
    let err = c
        .batch(&bid)
        .push(Callback { tag: "x".into() })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, fairjob::Error::BatchFinished { bid: b } if *b == bid),
        "{err}"
    );
    let err = c
        .batch("no-such-bid")
        .push(Callback { tag: "x".into() })
        .await
        .unwrap_err();
    assert!(matches!(err, fairjob::Error::NoSuchBatch { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_batches_two_deep_fire_their_callbacks_before_their_parents_each_once() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tag = "nested";
    let parent = with_callbacks(tag)
        .description("parent")
        .push(Row {
            tag: tag.into(),
            die: false,
            more: 0,
        })
        .commit(&c)
        .await
        .unwrap();
    let child = with_callbacks(tag)
        .description("child")
        .child_of(&parent)
        .push(Nester {
            tag: tag.into(),
            rows: 5,
        })
        .commit(&c)
        .await
        .unwrap();
    let _w = worker(&redis).await;
    eventually!(
        callbacks(tag)
            .iter()
            .any(|c| c.0 == Event::Success && c.2.bid == parent),
        "the parent succeeds"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let cbs = callbacks(tag);
    let order: Vec<(Event, String)> = cbs.iter().map(|c| (c.0, c.2.description.clone())).collect();
    assert_eq!(cbs.len(), 6, "{order:?}");
    let at = |e: Event, desc: &str| {
        let hits: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(_, (ev, d))| *ev == e && d == desc)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(hits.len(), 1, "{e:?} of {desc} once: {order:?}");
        hits[0]
    };
    for e in [Event::Complete, Event::Success] {
        let (g, ch, p) = (at(e, "grandchild nested"), at(e, "child"), at(e, "parent"));
        assert!(
            g < ch && ch < p,
            "{e:?}: grandchild, child, parent: {order:?}"
        );
    }
    // 1 + 1 + 5 members ran before the parent's callbacks.
    let parent_cb = cbs.iter().find(|c| c.2.bid == parent).unwrap();
    assert_eq!(parent_cb.3, 7);
    let status = c.batch_status(&child).await.unwrap().unwrap();
    assert_eq!(status.total, 1, "a child batch is not a member job");
    // A finished parent takes no children.
    let err = with_callbacks(tag)
        .child_of(&parent)
        .commit(&c)
        .await
        .unwrap_err();
    assert!(matches!(err, fairjob::Error::BatchFinished { .. }), "{err}");
    let err = Batch::new().child_of("gone").commit(&c).await.unwrap_err();
    assert!(matches!(err, fairjob::Error::NoSuchBatch { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_batch_fires_at_commit_and_bad_batches_write_nothing() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let tag = "empty";
    let bid = with_callbacks(tag).commit(&c).await.unwrap();
    let status = c.batch_status(&bid).await.unwrap().unwrap();
    assert!(status.complete_at.is_some() && status.success_at.is_some());
    let _w = worker(&redis).await;
    eventually!(
        count(tag, Event::Complete) == 1 && count(tag, Event::Success) == 1,
        "an empty batch's callbacks run"
    );

    // A unique member: refused before anything is written.
    #[derive(Debug, Serialize, Deserialize, Job)]
    #[job(class = "BatchUnique", queue = "rows")]
    #[unique(for = "1h", by(n))]
    struct Unique {
        n: u32,
    }
    impl Perform for Unique {
        async fn perform(self, _cx: &JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }
    // What a commit writes: the batches' keys and listings, and queues (the
    // running worker's own keys, heartbeats and stats, change meanwhile).
    let written = || async {
        let mut keys = redis.scan_keys(&redis.key("fairjob:{b:*")).await;
        keys.extend(redis.scan_keys(&redis.key("fairjob:batches*")).await);
        keys.extend(redis.scan_keys(&redis.key("queue:*")).await);
        keys.sort();
        keys
    };
    let before = written().await;
    assert!(
        before.iter().any(|k| k.contains("{b:")),
        "the empty batch's keys are seen: {before:?}"
    );
    let err = Batch::new()
        .push(Row {
            tag: "never".into(),
            die: false,
            more: 0,
        })
        .push(Unique { n: 1 })
        .commit(&c)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, fairjob::Error::Batch(m) if m.contains("unique")),
        "{err}"
    );
    // A member too large: the same.
    let err = Batch::new()
        .push(Row {
            tag: "x".repeat(2 << 20),
            die: false,
            more: 0,
        })
        .commit(&c)
        .await
        .unwrap_err();
    assert!(
        matches!(err, fairjob::Error::PayloadTooLarge { .. }),
        "{err}"
    );
    let after = written().await;
    assert_eq!(before, after, "a refused commit writes nothing");
    assert_eq!(seen("never", |s| s.members_done), 0);
}

/// The batches' listing drops batches whose data expired: the views among
/// the newest, the reaper pass's `batches_prune` among the oldest, a bounded
/// number per pass; a live batch stays listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_batches_leave_the_listing_oldest_first_and_live_ones_stay() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let broker = c.broker();
    let mut bids = Vec::new();
    for i in 0..6 {
        bids.push(
            Batch::new()
                .description(format!("b{i}"))
                .commit(&c)
                .await
                .unwrap(),
        );
    }
    let listed = || async { redis.zcard(broker.keys().batches()).await };
    assert_eq!(listed().await, 6);
    // The data of the three oldest and of the newest expire.
    for bid in [&bids[0], &bids[1], &bids[2], &bids[5]] {
        let _: () = redis
            .query(redis::cmd("DEL").arg(broker.keys().batch(bid)))
            .await;
    }
    // Two oldest looked at: both gone.
    assert_eq!(broker.batches_prune(2).await.unwrap(), 2);
    assert_eq!(listed().await, 4);
    // The four left: b2 and b5 gone, b3 and b4 live.
    assert_eq!(broker.batches_prune(4).await.unwrap(), 2);
    assert_eq!(listed().await, 2);
    let left: Vec<String> = redis
        .query(
            redis::cmd("ZRANGE")
                .arg(broker.keys().batches())
                .arg(0)
                .arg(-1),
        )
        .await;
    assert_eq!(left, vec![bids[3].clone(), bids[4].clone()]);
    assert_eq!(
        broker.batches_prune(100).await.unwrap(),
        0,
        "live batches stay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_that_dies_before_the_flip_leaves_nothing_and_after_it_a_sweep_pushes_the_rest()
{
    let redis = Redis::start().await;
    let c = redis.client().await;
    let broker = c.broker();
    // Staged and never flipped: nothing runnable, and it all expires.
    let staged = vec![("j1".to_owned(), r#"{"class":"BatchRow","queue":"rows","args":[{"tag":"ghost","die":false,"more":0}],"jid":"j1","bid":"b-ghost"}"#.to_owned())];
    assert!(
        broker
            .batch_stage("b-ghost", "", "", &staged, 1.0)
            .await
            .unwrap()
    );
    let ttl: i64 = redis
        .query(redis::cmd("TTL").arg(redis.keys().batch("b-ghost")))
        .await;
    assert!(ttl > 0 && ttl <= 3600, "staged data expires: {ttl}");
    let queued: i64 = redis
        .query(redis::cmd("LLEN").arg(redis.keys().queue("rows")))
        .await;
    assert_eq!(queued, 0);
    // Flipped but not pushed (its committer died right after the flip):
    // the sweep pushes the members, each once.
    let tag = "swept";
    let members: Vec<(String, String)> = (0..30)
        .map(|i| {
            let jid = format!("sw{i:04}");
            let p = format!(
                r#"{{"class":"BatchRow","queue":"rows","args":[{{"tag":"{tag}","die":false,"more":0}}],"jid":"{jid}","bid":"b-swept","retry":true}}"#
            );
            (jid, p)
        })
        .collect();
    assert!(
        broker
            .batch_stage("b-swept", "swept", "", &members, 1.0)
            .await
            .unwrap()
    );
    broker.batch_listed("b-swept", 1.0).await.unwrap();
    let cbs = vec![];
    broker
        .batch_commit("b-swept", 60, &cbs, None, 0)
        .await
        .unwrap();
    assert_eq!(c.release_staged_batches(10).await.unwrap(), 30);
    assert_eq!(c.release_staged_batches(10).await.unwrap(), 0, "each once");
    let queued: i64 = redis
        .query(redis::cmd("LLEN").arg(redis.keys().queue("rows")))
        .await;
    assert_eq!(queued, 30);
    let _w = worker(&redis).await;
    eventually!(
        c.batch_status("b-swept")
            .await
            .unwrap()
            .unwrap()
            .success_at
            .is_some(),
        "the swept batch succeeds"
    );
    assert_eq!(seen(tag, |s| s.members_done), 30);
}

/// The Lua twin (`lib/batch.lua`, through `batch_stage`, `batch_commit`,
/// `batch_end`) and `policy::batch` agree on random sequences of member ends:
/// duplicates, retries, deaths, discards and strangers, the events each end
/// fires and the sets after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_twin_agrees() {
    let redis = Redis::start().await;
    let c = redis.client().await;
    let broker = c.broker();
    let mut rng = rand::rng();
    let mut fired_kinds: HashMap<Event, usize> = HashMap::new();
    for case in 0..60 {
        let bid = format!("twin-{case}");
        let n = rng.random_range(0..6);
        let jids: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let mut model = Membership::default();
        let members: Vec<(String, String)> =
            jids.iter().map(|j| (j.clone(), "{}".to_owned())).collect();
        for j in &jids {
            rules::add(&mut model, j).unwrap();
        }
        assert!(
            broker
                .batch_stage(&bid, "", "", &members, 1.0)
                .await
                .unwrap()
        );
        // Half the cases have a child batch (one member, so it stays open).
        let mut jids = jids;
        if rng.random_bool(0.5) {
            let child = format!("{bid}-child");
            let one = vec![("x".to_owned(), "{}".to_owned())];
            assert!(broker.batch_stage(&child, "", "", &one, 1.0).await.unwrap());
            let opened = broker
                .batch_commit(&child, 60, &[], Some(&bid), 0)
                .await
                .unwrap();
            assert_eq!(opened, fairjob::broker::Committed::Opened(vec![]));
            rules::adopt(&mut model, &rules::kid_id(&child)).unwrap();
            jids.push(rules::kid_id(&child));
        }
        let want = rules::open(&mut model, 0.0);
        let got = match broker.batch_commit(&bid, 60, &[], None, 0).await.unwrap() {
            fairjob::broker::Committed::Opened(e) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(got, want, "case {case}: the commit");
        for step in 0..rng.random_range(0..20) {
            let jid = if rng.random_bool(0.1) || jids.is_empty() {
                "stranger".to_owned()
            } else {
                jids[rng.random_range(0..jids.len())].clone()
            };
            let outcome = if jid.starts_with("b:") {
                [Outcome::ChildRan, Outcome::ChildSucceeded][rng.random_range(0..2)]
            } else {
                [
                    Outcome::Ok,
                    Outcome::Retry,
                    Outcome::Dead,
                    Outcome::Discarded,
                ][rng.random_range(0..4)]
            };
            let err = if outcome == Outcome::Ok {
                ""
            } else {
                "E: boom"
            };
            let want = rules::end(&mut model, &jid, outcome, 0.0, err);
            let got = broker.batch_end(&bid, &jid, outcome, err, 0).await.unwrap();
            assert_eq!(got, want, "case {case} step {step}: {jid} {outcome:?}");
            for e in &got {
                *fired_kinds.entry(*e).or_default() += 1;
            }
            let s = c.batch_status(&bid).await.unwrap().unwrap();
            assert_eq!(
                (s.pending, s.unsucceeded, s.failures, s.total),
                (
                    model.pending.len() as u64,
                    model.unsucceeded.len() as u64,
                    model.failed.len() as u64,
                    model.total
                ),
                "case {case} step {step}"
            );
            for e in Event::ALL {
                assert_eq!(
                    s.fired_at(e).is_some(),
                    model.has_fired(e),
                    "case {case} step {step} {e:?}"
                );
            }
        }
    }
    for e in Event::ALL {
        assert!(
            fired_kinds.get(&e).copied().unwrap_or(0) > 3,
            "the cases fired {e:?}: {fired_kinds:?}"
        );
    }
    let _ = fields::BID;
}
