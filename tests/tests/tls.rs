//! TLS for real (issue 16): redis-servers speaking TLS only (`tls-port`,
//! plain port off) with a CA made by the test (`fairjob::testing::TestCa`,
//! openssl), single node and a 3-primary cluster.
//!
//! A client given the CA (and, for mutual TLS, a client certificate) connects
//! and jobs run end to end, woken by the worker's blocking connections (a poll
//! interval of 30 s would show a wake-up that does not come). A client that
//! does not trust the certificate, one that connects by a name the
//! certificate does not list, one without a client certificate where the
//! server requires one, and unusable files all fail at connect, fast, with a
//! typed error that says what is wrong.

use std::time::{Duration, Instant};

use fairjob::testing::{RedisCluster, RedisServer, TestCa};
use fairjob::{Client, Error, Job, QueueSpec, Worker};
use fairjob_tests::jobs::RecordJob;
use fairjob_tests::{TestWorker, eventually, namespace, temp_dir};

async fn records(c: &Client) -> Vec<String> {
    let key = format!("{}record", c.broker().keys().prefix());
    fairjob_tests::query(c.broker(), redis::cmd("LRANGE").arg(key).arg(0).arg(-1))
        .await
        .unwrap()
}

/// An in-process worker of queue `tls` with the CA (and the client
/// certificate when `mutual`), polling only every 30 s: a job pushed while it
/// is idle runs at once only if its blocking connection (TLS too) woke it.
async fn worker(url: &str, ns: &str, ca: &TestCa, mutual: bool) -> fairjob_tests::RunningWorker {
    let mut b = Worker::builder(url)
        .namespace(ns)
        .queues(QueueSpec::parse(&["tls".to_owned()]).unwrap())
        .concurrency(2)
        .poll_interval(Duration::from_secs(30))
        .scheduled_poll_interval(Duration::from_millis(200))
        .tls_ca_file(ca.ca_file());
    if mutual {
        b = b.tls_client_cert(ca.client_cert_file(), ca.client_key_file());
    }
    fairjob_tests::spawn(b.build().await.expect("the worker connects over TLS"))
}

/// Pushes a job, waits for it, lets the worker go idle, pushes another that
/// must run well before the next poll (a wake-up), and a scheduled one.
async fn jobs_run(c: &Client, what: &str) {
    RecordJob("first".into())
        .queue("tls")
        .perform_async(c)
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(15),
        records(c).await.len() == 1,
        "{what}: the first job runs"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    RecordJob("woken".into())
        .queue("tls")
        .perform_async(c)
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(10),
        records(c).await.len() == 2,
        "{what}: the idle worker is woken by its blocking connection"
    );
    RecordJob("later".into())
        .queue("tls")
        .perform_in(c, Duration::from_millis(300))
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(10),
        records(c).await.len() == 3,
        "{what}: the scheduled job runs"
    );
    let got = records(c).await;
    for arg in ["first", "woken", "later"] {
        assert!(
            got.contains(&format!("tls - {arg} 1 false")),
            "{what}: {arg} ran once: {got:?}"
        );
    }
}

/// Connects with `builder`, expecting a refusal within 5 s.
async fn refused(builder: fairjob::ClientBuilder, what: &str) -> Error {
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), builder.build())
        .await
        .unwrap_or_else(|_| panic!("{what}: the connect hangs"))
        .err()
        .unwrap_or_else(|| panic!("{what}: the connect succeeded"));
    let took = started.elapsed();
    println!("tls ({what}): refused after {took:?}: {err}");
    assert!(
        took < Duration::from_secs(5),
        "{what}: took {took:?}: {err}"
    );
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_given_the_ca_runs_jobs_and_one_without_it_is_refused() {
    let ca = TestCa::new().expect("openssl makes the certificates");
    let server = RedisServer::start_tls(&ca, false, &[]).expect("a TLS redis-server starts");
    let url = server.url();
    assert!(url.starts_with("rediss://127.0.0.1:"), "{url}");
    let ns = namespace();

    let c = Client::builder(&url)
        .namespace(&ns)
        .tls_ca_file(ca.ca_file())
        .build()
        .await
        .expect("a client given the CA connects");
    let w = worker(&url, &ns, &ca, false).await;
    jobs_run(&c, "single node").await;
    w.stop().await;

    // (c) The system's roots only: the test CA is unknown.
    let err = refused(Client::builder(&url).namespace(&ns), "no CA").await;
    let text = err.to_string();
    assert!(matches!(err, Error::Tls(_)), "{err:?}");
    assert!(text.contains("not trusted"), "{text}");
    assert!(
        text.contains("tls_ca_file"),
        "it says how to give the CA: {text}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "{text}"
    );

    // Another CA than the one that signed the server's certificate.
    let other = TestCa::new().unwrap();
    let err = refused(
        Client::builder(&url).tls_ca_file(other.ca_file()),
        "another CA",
    )
    .await;
    assert!(matches!(err, Error::Tls(_)), "{err:?}");
    assert!(err.to_string().contains("not trusted"), "{err}");

    // A plain redis:// URL with TLS files is a mistake, said so.
    let plain = format!("redis://127.0.0.1:{}", server.port());
    let err = refused(
        Client::builder(&plain).tls_ca_file(ca.ca_file()),
        "plain URL",
    )
    .await;
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains("rediss://"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_certificate_does_not_list_is_refused() {
    // (d) A certificate for `localhost` only, reached as 127.0.0.1.
    let ca = TestCa::with_server_names(&["DNS:localhost"]).unwrap();
    let server = RedisServer::start_tls(&ca, false, &[]).unwrap();
    let err = refused(
        Client::builder(server.url()).tls_ca_file(ca.ca_file()),
        "wrong host name",
    )
    .await;
    assert!(matches!(err, Error::Tls(_)), "{err:?}");
    assert!(
        err.to_string().contains("not valid for the host name"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    // (b) tls-auth-clients yes.
    let ca = TestCa::new().unwrap();
    let server = RedisServer::start_tls(&ca, true, &[]).unwrap();
    let url = server.url();
    let ns = namespace();

    let err = refused(
        Client::builder(&url)
            .namespace(&ns)
            .tls_ca_file(ca.ca_file()),
        "no client certificate",
    )
    .await;
    assert!(matches!(err, Error::Tls(_)), "{err:?}");
    assert!(
        err.to_string().contains("client certificate"),
        "it suggests a client certificate: {err}"
    );

    // A certificate of another CA is not accepted either.
    let other = TestCa::new().unwrap();
    let err = refused(
        Client::builder(&url)
            .tls_ca_file(ca.ca_file())
            .tls_client_cert(other.client_cert_file(), other.client_key_file()),
        "untrusted client certificate",
    )
    .await;
    assert!(matches!(err, Error::Tls(_)), "{err:?}");

    let c = Client::builder(&url)
        .namespace(&ns)
        .tls_ca_file(ca.ca_file())
        .tls_client_cert(ca.client_cert_file(), ca.client_key_file())
        .build()
        .await
        .expect("a client with the certificate connects");
    let w = worker(&url, &ns, &ca, true).await;
    jobs_run(&c, "mutual TLS").await;
    w.stop().await;

    // The worker binary, given the files by its environment
    // (REDIS_TLS_CA, REDIS_TLS_CERT, REDIS_TLS_KEY).
    let dir = temp_dir("tls-worker");
    let log = dir.join("worker.log");
    let mut p = TestWorker::new(&url, &ns)
        .queues(["tls"])
        .env("REDIS_TLS_CA", ca.ca_file())
        .env("REDIS_TLS_CERT", ca.client_cert_file())
        .env("REDIS_TLS_KEY", ca.client_key_file())
        .log_to(&log)
        .start();
    RecordJob("process".into())
        .queue("tls")
        .perform_async(&c)
        .await
        .unwrap();
    eventually!(
        within Duration::from_secs(20),
        records(&c).await.contains(&"tls - process 1 false".to_owned()),
        "the worker process runs the job over mutual TLS; log:\n{}",
        p.log()
    );
    let status = p.stop();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");

    // Without the client certificate, the worker process exits non-zero at
    // once with the error.
    let log = dir.join("refused.log");
    let mut p = TestWorker::new(&url, &ns)
        .queues(["tls"])
        .flag("--tls-ca", ca.ca_file().to_string_lossy())
        .log_to(&log)
        .start();
    let status = p.wait_timeout(Duration::from_secs(5));
    let text = p.log();
    let status = status.unwrap_or_else(|| panic!("the worker still runs after 5 s: {text}"));
    assert!(!status.success(), "{text}");
    assert!(text.contains("client certificate"), "{text}");
}

#[tokio::test]
async fn unusable_tls_files_are_named_in_the_error() {
    let ca = TestCa::new().unwrap();
    // The files are read before anything connects: no server is needed.
    let url = "rediss://127.0.0.1:1";
    let missing = ca.dir().join("missing.pem");
    let err = refused(Client::builder(url).tls_ca_file(&missing), "missing CA").await;
    assert!(
        matches!(&err, Error::TlsFile { path, .. } if *path == missing),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing.pem"), "{err}");

    let not_pem = ca.dir().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let err = refused(Client::builder(url).tls_ca_file(&not_pem), "not PEM").await;
    assert!(
        matches!(&err, Error::TlsFile { path, .. } if *path == not_pem),
        "{err:?}"
    );
    assert!(err.to_string().contains("no PEM certificate"), "{err}");

    // A certificate given as the key.
    let err = refused(
        Client::builder(url)
            .tls_ca_file(ca.ca_file())
            .tls_client_cert(ca.client_cert_file(), ca.client_cert_file()),
        "a certificate as the key",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsFile { path, .. } if *path == ca.client_cert_file()),
        "{err:?}"
    );
    assert!(err.to_string().contains("private key"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_runs_jobs() {
    // (e) Three primaries, TLS on the client port, the bus and replication,
    // with mutual TLS: the client certificate must reach every node the
    // cluster client discovers, and the idle worker's per-slot connections.
    let ca = TestCa::new().unwrap();
    let cluster = RedisCluster::start_tls(3, 0, &ca, true, &[]).expect("a TLS cluster forms");
    let url = cluster.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let ns = namespace();
    let c = Client::builder(&url)
        .namespace(&ns)
        .tls_ca_file(ca.ca_file())
        .tls_client_cert(ca.client_cert_file(), ca.client_key_file())
        .build()
        .await
        .expect("a client given the CA and its certificate connects to the cluster");
    assert!(c.broker().is_cluster());
    let w = worker(&url, &ns, &ca, true).await;
    jobs_run(&c, "cluster").await;
    // More jobs at once.
    for n in 0..9 {
        RecordJob(format!("spread{n}"))
            .queue("tls")
            .perform_async(&c)
            .await
            .unwrap();
    }
    eventually!(
        within Duration::from_secs(15),
        records(&c).await.len() == 12,
        "every job runs on the TLS cluster"
    );
    w.stop().await;

    let err = refused(
        Client::builder(&url).namespace(&ns),
        "cluster without the CA",
    )
    .await;
    assert!(matches!(err, Error::Tls(_)), "{err:?}");
    assert!(err.to_string().contains("not trusted"), "{err}");
    let err = refused(
        Client::builder(&url)
            .namespace(&ns)
            .tls_ca_file(ca.ca_file()),
        "cluster without the client certificate",
    )
    .await;
    assert!(matches!(err, Error::Tls(_)), "{err:?}");
    assert!(err.to_string().contains("client certificate"), "{err}");
}

#[tokio::test]
async fn a_rediss_url_to_a_plain_server_says_so() {
    // A plain server waits for the end of a command that never comes: the
    // handshake times out, and the error says what to check.
    let server = RedisServer::start(&[]).unwrap();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let err = refused(
        Client::builder(&url).connect_timeout(Duration::from_secs(1)),
        "a plain server",
    )
    .await;
    assert!(matches!(err, Error::Connection(_)), "{err:?}");
    assert!(err.to_string().contains("TLS port"), "{err}");
}

#[tokio::test]
async fn a_redis_url_to_a_tls_server_says_so() {
    let ca = TestCa::new().unwrap();
    let server = RedisServer::start_tls(&ca, false, &[]).unwrap();
    let url = format!("redis://127.0.0.1:{}", server.port());
    let err = refused(
        Client::builder(&url).connect_timeout(Duration::from_secs(1)),
        "a TLS server",
    )
    .await;
    assert!(err.to_string().contains("rediss://"), "{err}");
}
