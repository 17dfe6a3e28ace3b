//! `--otel`: the worker's spans (a job's `process` span, the `send` spans of
//! the jobs it enqueues) exported over OTLP/HTTP (JSON encoding) to the
//! collector the standard `OTEL_*` environment variables name. Built only
//! with this crate's `otel` feature; without it `--otel` says how to enable
//! it. A binary of the user's own installs its own exporter instead.
//!
//! Read from the environment (the OpenTelemetry SDK configuration names):
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, `/v1/traces` appended; default
//! `http://localhost:4318`), `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`
//! (`key=value,…`, percent-decoded), `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`
//! (ms, default 10000), `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` (`http/json`;
//! others are refused), and through the SDK `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]` and `OTEL_BSP_*`.
//! The exporter speaks plain `http://` with a small blocking client on the
//! batch processor's own thread (no TLS: send to a local collector).

/// What `--otel` says when the binary was built without the feature.
#[cfg(not(feature = "otel"))]
pub(crate) const NOT_BUILT: &str = "\
--otel: this worker was built without OpenTelemetry export. Enable the `otel` feature of \
fairjob-worker in the crate that builds your worker (`fairjob-worker = { version = \"0.1\", \
features = [\"otel\"] }`, or `cargo build --features fairjob-worker/otel`), then run it with \
--otel and the standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_SERVICE_NAME variables.";

#[cfg(feature = "otel")]
pub(crate) use imp::{Exporting, install};

#[cfg(feature = "otel")]
mod imp {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    use std::time::{Duration, UNIX_EPOCH};

    use anyhow::{Context, Result, bail};
    use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
    use opentelemetry::{Array, KeyValue, Value};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use serde_json::{Value as Json, json};

    /// The installed provider: shut it down at exit to send what is buffered.
    #[derive(Debug)]
    pub(crate) struct Exporting {
        provider: SdkTracerProvider,
    }

    impl Exporting {
        /// Flushes the buffered spans and stops the exporter.
        pub(crate) fn shutdown(self) {
            if let Err(e) = self.provider.shutdown() {
                eprintln!("warning: OpenTelemetry shutdown: {e}");
            }
        }
    }

    /// Builds the exporter from the environment; returns the `tracing` layer
    /// to install and the provider to shut down at exit.
    pub(crate) fn install<S>() -> Result<(
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
        Exporting,
    )>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let exporter = OtlpHttp::from_env(&|k| std::env::var(k).ok())?;
        let mut resource = Resource::builder();
        let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| {
                a.split(',')
                    .any(|kv| kv.trim().starts_with("service.name="))
            });
        if !named {
            resource = resource.with_service_name("fairjob-worker");
        }
        let provider = SdkTracerProvider::builder()
            .with_resource(resource.build())
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("fairjob");
        let layer = tracing_opentelemetry::layer().with_tracer(tracer);
        Ok((layer, Exporting { provider }))
    }

    /// An OTLP/HTTP JSON span exporter over plain HTTP/1.1.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct OtlpHttp {
        /// `host:port` to connect to.
        authority: String,
        /// The request path (`/v1/traces`).
        path: String,
        headers: Vec<(String, String)>,
        timeout: Duration,
        resource: Vec<(String, Value)>,
    }

    /// The first of `names` that is set and not empty.
    fn first(env: &dyn Fn(&str) -> Option<String>, names: &[&str]) -> Option<String> {
        names
            .iter()
            .find_map(|n| env(n).filter(|v| !v.trim().is_empty()))
    }

    impl OtlpHttp {
        /// The exporter the `OTEL_EXPORTER_OTLP_*` variables describe.
        pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<OtlpHttp> {
            if let Some(p) = first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                    "OTEL_EXPORTER_OTLP_PROTOCOL",
                ],
            ) && p.trim() != "http/json"
            {
                bail!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={p}: the bundled exporter speaks OTLP over HTTP \
                     with JSON only; set it to http/json (every OpenTelemetry Collector accepts it \
                     on port 4318), or install your own exporter in your own binary"
                );
            }
            let url = match first(env, &["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]) {
                Some(full) => full,
                None => {
                    let base = first(env, &["OTEL_EXPORTER_OTLP_ENDPOINT"])
                        .unwrap_or_else(|| "http://localhost:4318".to_owned());
                    format!("{}/v1/traces", base.trim_end_matches('/'))
                }
            };
            let (authority, path) = split_url(url.trim())?;
            let headers = match first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                    "OTEL_EXPORTER_OTLP_HEADERS",
                ],
            ) {
                Some(h) => parse_headers(&h)?,
                None => Vec::new(),
            };
            let timeout = match first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                    "OTEL_EXPORTER_OTLP_TIMEOUT",
                ],
            ) {
                Some(ms) => Duration::from_millis(
                    ms.trim()
                        .parse()
                        .with_context(|| format!("OTEL_EXPORTER_OTLP_TIMEOUT={ms}: not ms"))?,
                ),
                None => Duration::from_secs(10),
            };
            Ok(OtlpHttp {
                authority,
                path,
                headers,
                timeout,
                resource: Vec::new(),
            })
        }

        /// One POST of `body`; Ok on a 2xx answer.
        fn post(&self, body: &[u8]) -> std::result::Result<(), String> {
            let addr = self
                .authority
                .to_socket_addrs()
                .map_err(|e| format!("{}: {e}", self.authority))?
                .next()
                .ok_or_else(|| format!("{}: no address", self.authority))?;
            let mut stream = TcpStream::connect_timeout(&addr, self.timeout)
                .map_err(|e| format!("connect {addr}: {e}"))?;
            stream.set_read_timeout(Some(self.timeout)).ok();
            stream.set_write_timeout(Some(self.timeout)).ok();
            let mut head = format!(
                "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n",
                self.path,
                self.authority,
                body.len()
            );
            for (k, v) in &self.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            stream
                .write_all(head.as_bytes())
                .and_then(|()| stream.write_all(body))
                .map_err(|e| format!("send to {addr}: {e}"))?;
            let mut answer = Vec::new();
            let _ = stream.take(64 * 1024).read_to_end(&mut answer);
            let answer = String::from_utf8_lossy(&answer);
            let status = answer
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<u16>().ok());
            match status {
                Some(s) if (200..300).contains(&s) => Ok(()),
                _ => Err(format!(
                    "{addr}{}: {}",
                    self.path,
                    answer.lines().next().unwrap_or("no answer")
                )),
            }
        }

        /// The OTLP JSON request for `batch`.
        pub(crate) fn encode(&self, batch: &[SpanData]) -> Json {
            let resource: Vec<Json> = self.resource.iter().map(|(k, v)| kv(k, v)).collect();
            // Spans grouped by their instrumentation scope, in order.
            let mut scopes: Vec<(Json, Vec<Json>)> = Vec::new();
            for span in batch {
                let scope = json!({
                    "name": span.instrumentation_scope.name(),
                    "version": span.instrumentation_scope.version().unwrap_or(""),
                });
                let encoded = encode_span(span);
                match scopes.iter_mut().find(|(s, _)| *s == scope) {
                    Some((_, spans)) => spans.push(encoded),
                    None => scopes.push((scope, vec![encoded])),
                }
            }
            json!({
                "resourceSpans": [{
                    "resource": {"attributes": resource},
                    "scopeSpans": scopes
                        .into_iter()
                        .map(|(scope, spans)| json!({"scope": scope, "spans": spans}))
                        .collect::<Vec<_>>(),
                }]
            })
        }
    }

    impl SpanExporter for OtlpHttp {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            // The batch processor calls this on its own thread: blocking is fine.
            let body = self.encode(&batch).to_string();
            self.post(body.as_bytes())
                .map_err(|e| OTelSdkError::InternalFailure(format!("OTLP export: {e}")))
        }

        fn set_resource(&mut self, resource: &Resource) {
            self.resource = resource
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                .collect();
        }
    }

    /// `http://host[:port][/path]` → (`host:port`, `/path`).
    fn split_url(url: &str) -> Result<(String, String)> {
        let Some(rest) = url.strip_prefix("http://") else {
            bail!(
                "OTLP endpoint {url}: the bundled exporter speaks plain http:// only (send to a \
                 local OpenTelemetry Collector, which can forward over TLS)"
            );
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            bail!("OTLP endpoint {url}: no host");
        }
        let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !authority.ends_with(']')
        }) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok((authority, path.to_owned()))
    }

    /// `k1=v1,k2=v2` with percent-encoded values.
    fn parse_headers(s: &str) -> Result<Vec<(String, String)>> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|pair| {
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("OTEL_EXPORTER_OTLP_HEADERS: `{pair}` has no `=`"))?;
                let v = percent_encoding::percent_decode_str(v.trim())
                    .decode_utf8()
                    .context("OTEL_EXPORTER_OTLP_HEADERS: not UTF-8")?;
                if k.trim().is_empty() || k.contains(['\r', '\n']) || v.contains(['\r', '\n']) {
                    bail!("OTEL_EXPORTER_OTLP_HEADERS: bad header `{pair}`");
                }
                Ok((k.trim().to_owned(), v.into_owned()))
            })
            .collect()
    }

    fn nanos(t: std::time::SystemTime) -> String {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            .to_string()
    }

    fn any(v: &Value) -> Json {
        match v {
            Value::Bool(b) => json!({"boolValue": b}),
            Value::I64(i) => json!({"intValue": i.to_string()}),
            Value::F64(f) => json!({"doubleValue": f}),
            Value::String(s) => json!({"stringValue": s.as_str()}),
            Value::Array(a) => {
                let values: Vec<Json> = match a {
                    Array::Bool(v) => v.iter().map(|b| json!({"boolValue": b})).collect(),
                    Array::I64(v) => v
                        .iter()
                        .map(|i| json!({"intValue": i.to_string()}))
                        .collect(),
                    Array::F64(v) => v.iter().map(|f| json!({"doubleValue": f})).collect(),
                    Array::String(v) => v
                        .iter()
                        .map(|s| json!({"stringValue": s.as_str()}))
                        .collect(),
                    _ => Vec::new(),
                };
                json!({"arrayValue": {"values": values}})
            }
            other => json!({"stringValue": other.to_string()}),
        }
    }

    fn kv(key: &str, value: &Value) -> Json {
        json!({"key": key, "value": any(value)})
    }

    fn attributes(kvs: &[KeyValue]) -> Vec<Json> {
        kvs.iter().map(|a| kv(a.key.as_str(), &a.value)).collect()
    }

    fn encode_span(s: &SpanData) -> Json {
        let kind = match s.span_kind {
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        };
        let status = match &s.status {
            Status::Unset => json!({}),
            Status::Ok => json!({"code": 1}),
            Status::Error { description } => json!({"code": 2, "message": description}),
        };
        let mut span = json!({
            "traceId": s.span_context.trace_id().to_string(),
            "spanId": s.span_context.span_id().to_string(),
            "name": s.name,
            "kind": kind,
            "startTimeUnixNano": nanos(s.start_time),
            "endTimeUnixNano": nanos(s.end_time),
            "attributes": attributes(&s.attributes),
            "status": status,
            "flags": u32::from(s.span_context.trace_flags().to_u8()),
        });
        if s.parent_span_id != opentelemetry::trace::SpanId::INVALID {
            span["parentSpanId"] = json!(s.parent_span_id.to_string());
        }
        let state = s.span_context.trace_state().header();
        if !state.is_empty() {
            span["traceState"] = json!(state);
        }
        if !s.events.is_empty() {
            span["events"] = s
                .events
                .iter()
                .map(|e| {
                    json!({
                        "timeUnixNano": nanos(e.timestamp),
                        "name": e.name,
                        "attributes": attributes(&e.attributes),
                    })
                })
                .collect();
        }
        if !s.links.is_empty() {
            span["links"] = s
                .links
                .iter()
                .map(|l| {
                    json!({
                        "traceId": l.span_context.trace_id().to_string(),
                        "spanId": l.span_context.span_id().to_string(),
                        "attributes": attributes(&l.attributes),
                    })
                })
                .collect();
        }
        span
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
            move |k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        }

        #[test]
        fn the_endpoint_and_headers_come_from_the_standard_variables() {
            let e = OtlpHttp::from_env(&env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b,x-team=jobs"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ]))
            .unwrap();
            assert_eq!(e.authority, "collector:4318");
            assert_eq!(e.path, "/v1/traces");
            assert_eq!(
                e.headers,
                [
                    ("api-key".to_owned(), "a b".to_owned()),
                    ("x-team".to_owned(), "jobs".to_owned())
                ]
            );
            assert_eq!(e.timeout, Duration::from_millis(2500));
            let e = OtlpHttp::from_env(&env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:1"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/t"),
            ]))
            .unwrap();
            assert_eq!(
                (e.authority.as_str(), e.path.as_str()),
                ("127.0.0.1:9", "/t")
            );
            let e = OtlpHttp::from_env(&env(&[])).unwrap();
            assert_eq!(e.authority, "localhost:4318");
            let e =
                OtlpHttp::from_env(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c")])).unwrap();
            assert_eq!(e.authority, "c:80");
        }

        #[test]
        fn what_the_exporter_cannot_speak_is_refused_with_the_reason() {
            let grpc = OtlpHttp::from_env(&env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]))
                .unwrap_err()
                .to_string();
            assert!(grpc.contains("http/json"), "{grpc}");
            let tls = OtlpHttp::from_env(&env(&[(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://collector:4318",
            )]))
            .unwrap_err()
            .to_string();
            assert!(tls.contains("plain http://"), "{tls}");
            assert!(
                OtlpHttp::from_env(&env(&[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")])).is_err()
            );
        }
    }
}
