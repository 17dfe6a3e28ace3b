//! `worker run --otel` (the test worker built with fairjob-worker's `otel`
//! feature) exports its spans through `opentelemetry-otlp` to a local OTLP
//! receiver started here, which decodes every request with the OpenTelemetry
//! project's own protobuf definitions (`opentelemetry-proto`): over
//! `http/protobuf` (the default) and `http/json` (gzip when asked), over plain
//! HTTP and over TLS with a private CA made in the test. The spans follow the
//! messaging conventions (`error.type`, `server.*`, `messaging.client.id`)
//! and carry no stray `tracing` fields; a set-up the exporter cannot use
//! never stops the worker.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use fairjob::prelude::*;
use fairjob_tests::jobs::{FailJob, RecordJob};
use fairjob_tests::{Redis, eventually};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind};
use prost::Message as _;

/// One request the receiver took.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    content_type: String,
    gzip: bool,
    /// The `x-api-key` header, if sent.
    api_key: Option<String>,
    request: ExportTraceServiceRequest,
}

/// A local OTLP/HTTP receiver (plain, or TLS with its own CA): every request
/// decoded with the official definitions, answered 200.
struct Receiver {
    url: String,
    /// The path every request is for.
    path: &'static str,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A CA and a server certificate for `localhost`/`127.0.0.1` it signed.
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
    #[cfg_attr(not(feature = "otel-grpc"), allow(dead_code))]
    cert_pem: String,
    #[cfg_attr(not(feature = "otel-grpc"), allow(dead_code))]
    key_pem: String,
}

impl Pki {
    fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "fairjob test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        Pki {
            ca_pem: ca_cert.pem(),
            server: Arc::new(server),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// The CA written to `ca.pem` in a scratch directory (removed with the
    /// returned guard), for `OTEL_EXPORTER_OTLP_CERTIFICATE`.
    fn ca_file(&self, tag: &str) -> (fairjob_tests::TempDir, std::path::PathBuf) {
        let dir = fairjob_tests::temp_dir(tag);
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        (dir, ca)
    }
}

impl Receiver {
    /// Plain `http://`.
    fn start() -> Receiver {
        Receiver::serve(None)
    }

    /// `https://` with a certificate of `pki`'s CA.
    fn start_tls(pki: &Pki) -> Receiver {
        Receiver::serve(Some(pki.server.clone()))
    }

    fn serve(tls: Option<Arc<rustls::ServerConfig>>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let scheme = if tls.is_some() { "https" } else { "http" };
        // `localhost`: the name the certificate is for.
        let url = format!(
            "{scheme}://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let received = Arc::new(Mutex::new(Vec::new()));
        let seen = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let seen = seen.clone();
                let tls = tls.clone();
                std::thread::spawn(move || match tls {
                    None => serve_connection(stream, &seen),
                    Some(config) => {
                        let conn = rustls::ServerConnection::new(config).unwrap();
                        serve_connection(rustls::StreamOwned::new(conn, stream), &seen)
                    }
                });
            }
        });
        Receiver {
            url,
            path: "/v1/traces",
            received,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for r in self.received() {
            for rs in r.request.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|res| {
                        res.attributes
                            .iter()
                            .find(|kv| kv.key == "service.name")
                            .and_then(|kv| text(kv.value.as_ref()))
                    })
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for span in ss.spans {
                        out.push((service.clone(), span));
                    }
                }
            }
        }
        out
    }

    /// The `process` span of the job `jid` whose `fairjob.outcome` is `outcome`.
    fn process_span(&self, jid: &str, outcome: &str) -> Option<Span> {
        self.spans().into_iter().map(|(_, s)| s).find(|s| {
            s.kind == SpanKind::Consumer as i32
                && str_attr(s, "messaging.message.id").as_deref() == Some(jid)
                && str_attr(s, "fairjob.outcome").as_deref() == Some(outcome)
        })
    }
}

/// Serves HTTP/1.1 requests on one connection until it closes.
fn serve_connection(stream: impl Read + Write, seen: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let (mut length, mut content_type, mut gzip) = (None, String::new(), false);
        let mut api_key = None;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim().is_empty() {
                break;
            }
            let Some((k, v)) = header.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = Some(v.parse::<usize>().unwrap()),
                "content-type" => content_type = v.to_owned(),
                "content-encoding" => gzip = v.eq_ignore_ascii_case("gzip"),
                "x-api-key" => api_key = Some(v.to_owned()),
                _ => {}
            }
        }
        let mut body = vec![0; length.expect("a Content-Length")];
        reader.read_exact(&mut body).unwrap();
        if gzip {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut plain)
                .expect("gzip");
            body = plain;
        }
        let request = match content_type.as_str() {
            "application/x-protobuf" => {
                ExportTraceServiceRequest::decode(&body[..]).expect("an OTLP protobuf request")
            }
            "application/json" => serde_json::from_slice(&body).expect("an OTLP JSON request"),
            other => panic!("unexpected content type {other:?}"),
        };
        seen.lock().unwrap().push(Received {
            path,
            content_type: content_type.clone(),
            gzip,
            api_key,
            request,
        });
        // An empty ExportTraceServiceResponse: full success.
        let answer = if content_type == "application/json" {
            "{}"
        } else {
            ""
        };
        let stream = reader.get_mut();
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        let _ = stream.flush();
    }
}

fn text(v: Option<&AnyValue>) -> Option<String> {
    match v?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn str_attr(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int_attr(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        _ => None,
    }
}

/// The `tracing` fields and layer extras that must not reach a span.
const NEVER: &[&str] = &[
    "outcome",
    "attempt",
    "tenant",
    "busy_ns",
    "idle_ns",
    "thread.id",
    "thread.name",
    "target",
    "level",
];

fn assert_clean(span: &Span) {
    for kv in &span.attributes {
        assert!(
            !NEVER.contains(&kv.key.as_str()) && !kv.key.starts_with("code."),
            "{} on {span:?}",
            kv.key
        );
    }
    let mut keys: Vec<&str> = span.attributes.iter().map(|kv| kv.key.as_str()).collect();
    keys.sort_unstable();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "a duplicate attribute on {span:?}");
}

/// The server and client attributes every messaging span carries.
fn assert_messaging(span: &Span, server: &fairjob::testing::RedisServer) {
    assert_eq!(
        str_attr(span, "server.address").as_deref(),
        Some("127.0.0.1"),
        "{span:?}"
    );
    assert_eq!(
        int_attr(span, "server.port"),
        Some(i64::from(server.port())),
        "{span:?}"
    );
    let client = str_attr(span, "messaging.client.id").expect("messaging.client.id");
    assert_eq!(
        client.split(':').count(),
        3,
        "host:pid:random, not {client}"
    );
}

/// Runs a RecordJob (tenant `acme`) and a FailJob through a worker process
/// exporting with `env` to `receiver`; checks what arrives and returns the
/// requests.
async fn export_through(receiver: &Receiver, env: &[(&str, &str)]) -> Vec<Received> {
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let client = redis.client().await;
    let tag = fairjob::payload::new_jid();
    let ok = RecordJob(tag.clone())
        .set_tenant("acme")
        .perform_async(&client)
        .await
        .expect("push");
    let failed = FailJob(tag).perform_async(&client).await.expect("push");
    let mut worker = redis
        .worker_process()
        .arg("--otel")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_SERVICE_NAME", "otel-export-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    for (k, v) in env {
        worker = worker.env(k, v);
    }
    let mut worker = worker.start();
    let span = eventually!(
        let found = receiver.process_span(&ok, "success"); found.is_some(),
        "the worker exports the job's process span to {}", receiver.url
    )
    .unwrap();
    let failure = eventually!(
        let found = receiver.process_span(&failed, "retry"); found.is_some(),
        "the worker exports the failed job's process span"
    )
    .unwrap();
    worker.stop();
    let (service, _) = receiver
        .spans()
        .into_iter()
        .find(|(_, s)| s.span_id == span.span_id)
        .unwrap();
    assert_eq!(service, "otel-export-test");
    assert_eq!(span.name, "process default");
    assert_eq!(span.kind, SpanKind::Consumer as i32);
    for (key, want) in [
        ("messaging.system", "sidekiq"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "default"),
        ("messaging.sidekiq.job_class", "RecordJob"),
        ("fairjob.tenant", "acme"),
        ("fairjob.outcome", "success"),
        ("fairjob.wait_reason", "queue"),
    ] {
        assert_eq!(
            str_attr(&span, key).as_deref(),
            Some(want),
            "{key}: {span:?}"
        );
    }
    assert_eq!(int_attr(&span, "fairjob.attempt"), Some(1), "{span:?}");
    assert!(int_attr(&span, "fairjob.wait_ms").is_some(), "{span:?}");
    assert!(attr(&span, "error.type").is_none(), "{span:?}");
    assert_messaging(&span, &server);
    assert_clean(&span);
    // A failed run: an error status and its `error.type`; no tenant at all.
    assert_eq!(
        str_attr(&failure, "error.type").as_deref(),
        Some("ArgumentError"),
        "{failure:?}"
    );
    let status = failure.status.as_ref().expect("a status");
    assert_eq!(status.code, 2, "error: {failure:?}");
    assert!(status.message.starts_with("boom "), "{failure:?}");
    assert!(attr(&failure, "fairjob.tenant").is_none(), "{failure:?}");
    assert_messaging(&failure, &server);
    assert_clean(&failure);
    let received = receiver.received();
    assert!(
        received.iter().all(|r| r.path == receiver.path),
        "{received:?}"
    );
    received
}

/// The default protocol: `http/protobuf`, uncompressed, to plain `http://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_exports_over_http_protobuf_by_default() {
    let receiver = Receiver::start();
    let received = export_through(&receiver, &[]).await;
    assert!(
        received
            .iter()
            .all(|r| r.content_type == "application/x-protobuf" && !r.gzip && r.api_key.is_none()),
        "{received:?}"
    );
}

/// `http/json`, gzip-compressed because the variable says so, with the
/// headers the variable names (percent-decoded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_exports_over_http_json_gzipped_when_asked() {
    let receiver = Receiver::start();
    let received = export_through(
        &receiver,
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                "x-api-key=s3cret%20key",
            ),
        ],
    )
    .await;
    assert!(
        received.iter().all(|r| r.content_type == "application/json"
            && r.gzip
            && r.api_key.as_deref() == Some("s3cret key")),
        "{received:?}"
    );
}

/// `https://` to a receiver whose certificate a private CA signed, trusted
/// through `OTEL_EXPORTER_OTLP_CERTIFICATE`; without it, nothing arrives and
/// jobs still run, as they do with no collector at all, and the worker
/// still exits at TERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_exports_over_tls_to_a_private_ca() {
    let pki = Pki::new();
    let (dir, ca) = pki.ca_file("otel-tls");
    let receiver = Receiver::start_tls(&pki);
    assert!(receiver.url.starts_with("https://"));
    for protocol in ["http/protobuf", "http/json"] {
        let received = export_through(
            &receiver,
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.to_str().unwrap()),
            ],
        )
        .await;
        assert!(!received.is_empty());
    }

    // The same receiver, its CA not given: the handshake fails, the job runs.
    let untrusted = Receiver::start_tls(&pki);
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    let client = redis.client().await;
    let jid = RecordJob("untrusted".into())
        .perform_async(&client)
        .await
        .unwrap();
    let mut worker = redis
        .worker_process()
        .arg("--otel")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &untrusted.url)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .start();
    eventually!(
        redis
            .records()
            .await
            .iter()
            .any(|l| l.contains(" untrusted ")),
        "the job {jid} runs though its spans cannot be sent"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let stopped = std::time::Instant::now();
    let status = worker
        .stop()
        .expect("the worker exits though its last export fails");
    assert!(status.success(), "{status:?}");
    println!("stopped in {:?} with the export failing", stopped.elapsed());
    assert!(untrusted.received().is_empty(), "no request got through");

    // No collector at all: the jobs run, the worker exits at TERM.
    let down = format!("http://127.0.0.1:{}", fairjob_tests::free_port().unwrap());
    let jid = RecordJob("collector-down".into())
        .perform_async(&client)
        .await
        .unwrap();
    let mut worker = redis
        .worker_process()
        .arg("--otel")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &down)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .log_to(&dir.join("down.log"))
        .start();
    eventually!(
        redis
            .records()
            .await
            .iter()
            .any(|l| l.contains(" collector-down ")),
        "the job {jid} runs with no collector at {down}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let stopped = std::time::Instant::now();
    let status = worker.stop().expect("the worker exits with no collector");
    assert!(status.success(), "{status:?}");
    println!("stopped in {:?} with no collector", stopped.elapsed());
    // The SDK says so in the worker's log (its `internal-logs`).
    let log = worker.log();
    assert!(log.contains("BatchSpanProcessor.ExportError"), "{log}");
}

/// An unknown protocol or a malformed endpoint is a warning: jobs run on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_up_the_exporter_cannot_use_never_stops_the_worker() {
    let dir = fairjob_tests::temp_dir("otel-bad");
    for (i, (key, value, said)) in [
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "carrier-pigeon",
            "carrier-pigeon",
        ),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url", "not a url"),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "/nonexistent/ca.pem",
            "/nonexistent/ca.pem",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let server = fairjob_tests::redis();
        let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
        let client = redis.client().await;
        let arg = format!("bad-{i}");
        RecordJob(arg.clone()).perform_async(&client).await.unwrap();
        let log = dir.join(format!("worker-{i}.log"));
        let mut worker = redis
            .worker_process()
            .arg("--otel")
            .env(key, value)
            .log_to(&log)
            .start();
        eventually!(
            redis
                .records()
                .await
                .iter()
                .any(|l| l.contains(&format!(" {arg} "))),
            "the job runs with {key}={value}"
        );
        worker.stop();
        let log = worker.log();
        assert!(
            log.contains("spans are not exported") && log.contains(said),
            "{key}={value}: {log}"
        );
    }
}

/// `propagation = "link"`: the job's span starts a trace of its own, linked
/// to the context its payload carries, with that context's `tracestate` and
/// flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_carries_the_trace_state_and_flags() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";
    let receiver = Receiver::start();
    let dir = fairjob_tests::temp_dir("otel-link");
    let config = dir.join("worker.toml");
    std::fs::write(&config, "propagation = \"link\"\n").unwrap();
    let server = fairjob_tests::redis();
    let redis = Redis::connect(&server.url(), &fairjob_tests::namespace()).await;
    // As a Ruby producer writes it: the context at the payload's top level.
    let jid = fairjob::payload::new_jid();
    let now = fairjob::payload::now_f64();
    redis
        .lpush_raw(
            "default",
            format!(
                r#"{{"retry":true,"queue":"default","class":"RecordJob","args":["linked"],"jid":"{jid}","created_at":{now},"enqueued_at":{now},"traceparent":"00-{TRACE}-{SPAN}-01","tracestate":"vendor=abc,other=1"}}"#
            ),
        )
        .await;
    let mut worker = redis
        .worker_process()
        .flag("-C", config.to_str().unwrap())
        .arg("--otel")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .start();
    let span = eventually!(
        let found = receiver.process_span(&jid, "success"); found.is_some(),
        "the linked job's process span arrives"
    )
    .unwrap();
    worker.stop();
    assert!(
        span.parent_span_id.is_empty(),
        "a trace of its own: {span:?}"
    );
    assert_ne!(hex(&span.trace_id), TRACE);
    let [link] = &span.links[..] else {
        panic!("one link: {span:?}")
    };
    assert_eq!(hex(&link.trace_id), TRACE);
    assert_eq!(hex(&link.span_id), SPAN);
    assert_eq!(link.trace_state, "vendor=abc,other=1", "{link:?}");
    // Sampled (0x01), and the remote bit set with its known flag (0x100 | 0x200).
    assert_eq!(link.flags, 0x301, "{link:?}");
    assert_clean(&span);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// gRPC (the `otel-grpc` feature): tonic's server with the OpenTelemetry
/// project's own `TraceService`, plain and over TLS with the private CA.
#[cfg(feature = "otel-grpc")]
mod grpc {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use tonic::transport::{Identity, Server, ServerTlsConfig};

    use super::*;

    const PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

    struct Sink(Arc<Mutex<Vec<Received>>>);

    #[tonic::async_trait]
    impl TraceService for Sink {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().unwrap().push(Received {
                path: PATH.to_owned(),
                content_type: "application/grpc".to_owned(),
                gzip: false,
                api_key: request
                    .metadata()
                    .get("x-api-key")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                request: request.into_inner(),
            });
            Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            }))
        }
    }

    impl Receiver {
        /// A gRPC receiver, with TLS when `pki` is given.
        async fn start_grpc(pki: Option<&Pki>) -> Receiver {
            let port = fairjob_tests::free_port().expect("a free port");
            let received = Arc::new(Mutex::new(Vec::new()));
            let mut server = Server::builder();
            if let Some(pki) = pki {
                server = server
                    .tls_config(
                        ServerTlsConfig::new()
                            .identity(Identity::from_pem(&pki.cert_pem, &pki.key_pem)),
                    )
                    .unwrap();
            }
            let router = server.add_service(TraceServiceServer::new(Sink(received.clone())));
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            tokio::spawn(router.serve(addr));
            eventually!(
                tokio::net::TcpStream::connect(addr).await.is_ok(),
                "the gRPC receiver listens on {addr}"
            );
            let scheme = if pki.is_some() { "https" } else { "http" };
            Receiver {
                url: format!("{scheme}://localhost:{port}"),
                path: PATH,
                received,
            }
        }
    }

    /// `grpc` to a plain `http://` endpoint, the headers as request metadata.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_worker_exports_over_grpc() {
        let receiver = Receiver::start_grpc(None).await;
        let received = export_through(
            &receiver,
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret%20key"),
            ],
        )
        .await;
        assert!(
            received
                .iter()
                .all(|r| r.api_key.as_deref() == Some("s3cret key")),
            "{received:?}"
        );
    }

    /// `grpc` over TLS, the private CA trusted through the variable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_worker_exports_over_grpc_with_tls_to_a_private_ca() {
        let pki = Pki::new();
        let (_dir, ca) = pki.ca_file("otel-grpc-tls");
        let receiver = Receiver::start_grpc(Some(&pki)).await;
        let received = export_through(
            &receiver,
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.to_str().unwrap()),
            ],
        )
        .await;
        assert!(!received.is_empty());
    }
}
