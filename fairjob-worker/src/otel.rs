//! `--otel`: the worker's spans (a job's `process` span, the `send` spans of
//! the jobs it enqueues) exported over OTLP by the OpenTelemetry project's
//! own exporter (`opentelemetry-otlp`) to the collector the standard
//! `OTEL_*` environment variables name, through a batch span processor (its
//! own thread: an export never holds up a job). Built only with this crate's
//! `otel` feature; without it `--otel` says how to enable it. A binary of the
//! user's own gets the same set-up with [`install`] (or [`layer`], to add to
//! a subscriber of its own).
//!
//! Read from the environment (the OpenTelemetry SDK configuration names),
//! each `OTEL_EXPORTER_OTLP_TRACES_*` before its `OTEL_EXPORTER_OTLP_*`:
//! `…_PROTOCOL` (`http/protobuf`, the default; `http/json`; `grpc` with the
//! `otel-grpc` feature), `…_ENDPOINT` (`http://` or `https://`; default
//! `http://localhost:4318`, or `:4317` for gRPC), `…_HEADERS`, `…_TIMEOUT`
//! (ms, default 10000), `…_COMPRESSION` (`gzip`; none unless set),
//! `…_CERTIFICATE` (a PEM file of the CA to trust besides the system's
//! roots), and through the SDK `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]` and `OTEL_BSP_*`.
//!
//! Tracing never stops job processing: a set-up the exporter cannot use (an
//! unknown protocol, a bad endpoint, an unreadable CA file) is a warning and
//! the worker runs on without export; an export that fails (the collector is
//! down) is retried by the exporter, then dropped with the SDK's warning.

/// What `--otel` says when the binary was built without the feature.
#[cfg(not(feature = "otel"))]
pub(crate) const NOT_BUILT: &str = "\
--otel: this worker was built without OpenTelemetry export. Enable the `otel` feature of \
fairjob-worker in the crate that builds your worker (`fairjob-worker = { version = \"0.1\", \
features = [\"otel\"] }`, or `cargo build --features fairjob-worker/otel`), then run it with \
--otel and the standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_SERVICE_NAME variables.";

#[cfg(feature = "otel")]
pub(crate) use imp::warn_not_exporting;
#[cfg(feature = "otel")]
pub use imp::{Error, Exporting, install, layer};

#[cfg(feature = "otel")]
mod imp {
    use std::sync::Arc;
    use std::time::Duration;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig as _, WithHttpConfig as _};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    use tracing_opentelemetry::OpenTelemetryLayer;

    /// Why the exporter could not be set up (the worker runs on without it).
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// A protocol other than `http/protobuf`, `http/json` or `grpc`.
        #[error(
            "{var}={value}: not an OTLP protocol (http/protobuf, the default; http/json; grpc)"
        )]
        Protocol {
            /// The variable that named it.
            var: &'static str,
            /// What it said.
            value: String,
        },
        /// `grpc` asked of a build without the `otel-grpc` feature.
        #[error(
            "{var}=grpc: this worker was built without gRPC export; enable the `otel-grpc` \
             feature of fairjob-worker, or use http/protobuf (port 4318 of a collector)"
        )]
        GrpcNotBuilt {
            /// The variable that named it.
            var: &'static str,
        },
        /// A variable's value the exporter cannot use.
        #[error("{var}={value}: {reason}")]
        Variable {
            /// The variable.
            var: &'static str,
            /// What it said.
            value: String,
            /// Why it cannot be used.
            reason: String,
        },
        /// The CA file `OTEL_EXPORTER_OTLP_CERTIFICATE` names.
        #[error("{var}={path}: {reason}")]
        Certificate {
            /// The variable that named it.
            var: &'static str,
            /// The file.
            path: String,
            /// Why it cannot be used.
            reason: String,
        },
        /// The TLS configuration.
        #[error("TLS for the OTLP exporter: {0}")]
        Tls(#[from] rustls::Error),
        /// The HTTP client.
        #[error("the OTLP exporter's HTTP client: {0}")]
        Client(String),
        /// The exporter refused its configuration (an endpoint that is no URL,
        /// compression other than gzip…).
        #[error("the OTLP exporter: {0}")]
        Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    }

    /// The installed tracer provider: dropping it (or [`Exporting::shutdown`])
    /// exports what is buffered and stops the exporter. Does nothing when no
    /// exporter could be set up.
    #[derive(Debug)]
    #[must_use = "dropping it stops the export"]
    pub struct Exporting {
        provider: Option<SdkTracerProvider>,
    }

    impl Exporting {
        /// Exports the buffered spans and stops the exporter.
        pub fn shutdown(mut self) {
            self.stop();
        }

        /// Whether an exporter is installed.
        pub fn is_exporting(&self) -> bool {
            self.provider.is_some()
        }

        fn stop(&mut self) {
            if let Some(provider) = self.provider.take()
                && let Err(e) = provider.shutdown()
            {
                tracing::warn!(error = %e, "OpenTelemetry: the last export failed");
            }
        }
    }

    impl Drop for Exporting {
        fn drop(&mut self) {
            self.stop();
        }
    }

    /// The exporter the standard `OTEL_*` variables describe, as a `tracing`
    /// layer to add to a subscriber of your own, and the provider to keep
    /// until exit. The layer records no source location, thread, target,
    /// level or busy/idle times: a span carries the attributes fairjob gives it.
    ///
    /// ```no_run
    /// use tracing_subscriber::layer::SubscriberExt as _;
    /// use tracing_subscriber::util::SubscriberInitExt as _;
    ///
    /// # fn main() -> Result<(), fairjob_worker::otel::Error> {
    /// let (otel, _exporting) = fairjob_worker::otel::layer()?;
    /// tracing_subscriber::registry()
    ///     .with(tracing_subscriber::fmt::layer())
    ///     .with(otel)
    ///     .init();
    /// // … run the worker; `_exporting` flushes the spans when dropped.
    /// # Ok(())
    /// # }
    /// ```
    pub fn layer<S>() -> Result<(OpenTelemetryLayer<S, Tracer>, Exporting), Error>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let exporter = exporter(&|k| std::env::var(k).ok())?;
        let mut resource = Resource::builder();
        let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| {
                a.split(',')
                    .any(|kv| kv.trim().starts_with("service.name="))
            });
        if !named {
            resource = resource.with_service_name("fairjob-worker");
        }
        // The batch processor exports on a thread of its own.
        let provider = SdkTracerProvider::builder()
            .with_resource(resource.build())
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("fairjob");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false);
        Ok((
            layer,
            Exporting {
                provider: Some(provider),
            },
        ))
    }

    /// One call for a binary of your own: installs a global `tracing`
    /// subscriber that logs to stdout (filtered by `RUST_LOG`, default
    /// `info`) and exports spans (`info` and above) as [`layer`] does. A set-up
    /// the exporter cannot use is logged as a warning and the program runs
    /// on without export.
    ///
    /// ```no_run
    /// let _exporting = fairjob_worker::otel::install();
    /// // … run the worker; the spans are flushed when `_exporting` drops.
    /// ```
    pub fn install() -> Exporting {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;

        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let fmt = tracing_subscriber::fmt::layer().with_filter(filter);
        let (otel, exporting, problem) = match layer() {
            Ok((layer, exporting)) => (
                Some(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
                exporting,
                None,
            ),
            Err(e) => (None, Exporting { provider: None }, Some(e)),
        };
        let installed = tracing_subscriber::registry()
            .with(fmt)
            .with(otel)
            .try_init();
        if let Err(e) = installed {
            tracing::warn!(error = %e, "OpenTelemetry: a tracing subscriber is already installed");
        }
        if let Some(e) = problem {
            warn_not_exporting(&e);
        }
        exporting
    }

    /// The warning for a set-up the exporter cannot use.
    pub(crate) fn warn_not_exporting(e: &Error) {
        tracing::warn!(error = %e, "OpenTelemetry: spans are not exported; jobs run on");
    }

    /// The first of `names` that is set and not empty, with its name.
    fn first(
        env: &dyn Fn(&str) -> Option<String>,
        names: &[&'static str],
    ) -> Option<(&'static str, String)> {
        names.iter().find_map(|n| {
            env(n)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .map(|v| (*n, v))
        })
    }

    /// What `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` asks for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Wire {
        Http(Protocol),
        Grpc,
    }

    fn wire(env: &dyn Fn(&str) -> Option<String>) -> Result<Wire, Error> {
        let Some((var, value)) = first(
            env,
            &[
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ],
        ) else {
            return Ok(Wire::Http(Protocol::HttpBinary));
        };
        match value.to_ascii_lowercase().as_str() {
            "http/protobuf" => Ok(Wire::Http(Protocol::HttpBinary)),
            "http/json" => Ok(Wire::Http(Protocol::HttpJson)),
            "grpc" if cfg!(feature = "otel-grpc") => Ok(Wire::Grpc),
            "grpc" => Err(Error::GrpcNotBuilt { var }),
            _ => Err(Error::Protocol { var, value }),
        }
    }

    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`, in ms (default 10 s).
    fn timeout(env: &dyn Fn(&str) -> Option<String>) -> Result<Duration, Error> {
        match first(
            env,
            &[
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ],
        ) {
            None => Ok(Duration::from_secs(10)),
            Some((var, value)) => {
                value
                    .parse()
                    .map(Duration::from_millis)
                    .map_err(|_| Error::Variable {
                        var,
                        reason: "not a number of milliseconds".to_owned(),
                        value,
                    })
            }
        }
    }

    /// The CA file `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE` names, read.
    fn ca_file(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<CaFile>, Error> {
        let Some((var, path)) = first(
            env,
            &[
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ],
        ) else {
            return Ok(None);
        };
        let pem = std::fs::read(&path).map_err(|e| Error::Certificate {
            var,
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Certificate {
                var,
                path: path.clone(),
                reason: format!("not PEM certificates: {e}"),
            })?;
        if certs.is_empty() {
            return Err(Error::Certificate {
                var,
                path,
                reason: "no PEM certificate in it".to_owned(),
            });
        }
        Ok(Some(CaFile {
            var,
            path,
            pem,
            certs,
        }))
    }

    /// A CA file, as PEM and as certificates.
    struct CaFile {
        var: &'static str,
        path: String,
        #[cfg_attr(not(feature = "otel-grpc"), allow(dead_code))]
        pem: Vec<u8>,
        certs: Vec<CertificateDer<'static>>,
    }

    /// The span exporter the variables describe.
    fn exporter(env: &dyn Fn(&str) -> Option<String>) -> Result<SpanExporter, Error> {
        let ca = ca_file(env)?;
        match wire(env)? {
            Wire::Http(protocol) => {
                let client = http_client(timeout(env)?, ca.as_ref())?;
                Ok(SpanExporter::builder()
                    .with_http()
                    .with_protocol(protocol)
                    .with_http_client(client)
                    .build()?)
            }
            #[cfg(feature = "otel-grpc")]
            Wire::Grpc => grpc::exporter(env, ca.as_ref()),
            #[cfg(not(feature = "otel-grpc"))]
            Wire::Grpc => unreachable!("grpc is refused without the feature"),
        }
    }

    /// rustls with the ring provider (the one fairjob uses for `rediss://`),
    /// the system's roots and the CA file's certificates.
    fn tls_config(ca: Option<&CaFile>) -> Result<rustls::ClientConfig, Error> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(ca) = ca {
            for cert in &ca.certs {
                roots.add(cert.clone()).map_err(|e| Error::Certificate {
                    var: ca.var,
                    path: ca.path.clone(),
                    reason: e.to_string(),
                })?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    /// The blocking HTTP client the batch processor's thread sends with.
    fn http_client(
        timeout: Duration,
        ca: Option<&CaFile>,
    ) -> Result<reqwest::blocking::Client, Error> {
        let tls = tls_config(ca)?;
        // A blocking client is built (and dropped) off any async runtime:
        // `install` may be called from inside one.
        std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .tls_backend_preconfigured(tls)
                .build()
        })
        .join()
        .map_err(|_| Error::Client("building it panicked".to_owned()))?
        .map_err(|e| Error::Client(e.to_string()))
    }

    #[cfg(feature = "otel-grpc")]
    mod grpc {
        use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
        use opentelemetry_otlp::{SpanExporter, WithTonicConfig as _};

        use super::{CaFile, Error, first};

        /// The gRPC exporter (tonic), its channel on a Tokio runtime of its
        /// own: the batch processor's thread is not one.
        pub(super) fn exporter(
            env: &dyn Fn(&str) -> Option<String>,
            ca: Option<&CaFile>,
        ) -> Result<SpanExporter, Error> {
            let https = first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                ],
            )
            .is_some_and(|(_, url)| url.to_ascii_lowercase().starts_with("https://"));
            let mut builder = SpanExporter::builder().with_tonic();
            if https {
                let mut tls = ClientTlsConfig::new().with_native_roots();
                if let Some(ca) = ca {
                    tls = tls.ca_certificate(Certificate::from_pem(&ca.pem));
                }
                builder = builder.with_tls_config(tls);
            }
            let _entered = runtime()?.enter();
            Ok(builder.build()?)
        }

        /// A current-thread runtime on a thread of its own, for as long as
        /// the process runs.
        fn runtime() -> Result<&'static tokio::runtime::Handle, Error> {
            static HANDLE: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
            if let Some(h) = HANDLE.get() {
                return Ok(h);
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::Client(format!("the gRPC runtime: {e}")))?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("otel-grpc".to_owned())
                .spawn(move || runtime.block_on(std::future::pending::<()>()))
                .map_err(|e| Error::Client(format!("the gRPC runtime's thread: {e}")))?;
            Ok(HANDLE.get_or_init(|| handle))
        }
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
        fn the_protocol_comes_from_the_standard_variables() {
            assert_eq!(wire(&env(&[])).unwrap(), Wire::Http(Protocol::HttpBinary));
            assert_eq!(
                wire(&env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")])).unwrap(),
                Wire::Http(Protocol::HttpJson)
            );
            assert_eq!(
                wire(&env(&[
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ]))
                .unwrap(),
                Wire::Http(Protocol::HttpBinary)
            );
            let e = wire(&env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")]))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("carrier-pigeon") && e.contains("http/protobuf"),
                "{e}"
            );
            let grpc = wire(&env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]));
            if cfg!(feature = "otel-grpc") {
                assert_eq!(grpc.unwrap(), Wire::Grpc);
            } else {
                let e = grpc.unwrap_err().to_string();
                assert!(e.contains("`otel-grpc` feature"), "{e}");
            }
        }

        #[test]
        fn timeouts_and_ca_files_are_checked() {
            assert_eq!(
                timeout(&env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")])).unwrap(),
                Duration::from_millis(2500)
            );
            assert_eq!(timeout(&env(&[])).unwrap(), Duration::from_secs(10));
            assert!(timeout(&env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2s")])).is_err());
            let e = ca_file(&env(&[(
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "/nonexistent/ca.pem",
            )]))
            .err()
            .expect("a missing CA file is an error")
            .to_string();
            assert!(e.contains("/nonexistent/ca.pem"), "{e}");
            assert!(ca_file(&env(&[])).unwrap().is_none());
        }
    }
}
