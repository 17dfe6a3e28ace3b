//! TLS: a `rediss://` URL speaks TLS (rustls, ring). The CA file and client
//! certificate of [`ConnectOptions`] are read once at connect ([`Tls`]) and
//! given to every client made afterwards: the single node's, the cluster's
//! (which uses them for the nodes it discovers) and the
//! [`Waiter`](super::Waiter)s'. A failed handshake is [`Error::Tls`] with
//! what it means (untrusted certificate, wrong host name, a client
//! certificate missing or refused).

#[cfg(feature = "tls")]
use std::path::PathBuf;

use redis::cluster::ClusterClientBuilder;

use super::ConnectOptions;
use crate::error::{Error, Result};

/// The TLS files of [`ConnectOptions`], read and checked once at connect,
/// for every connection opened afterwards (the single node's, the cluster's,
/// the [`Waiter`](super::Waiter)s').
#[derive(Clone, Default)]
pub(crate) struct Tls {
    #[cfg(feature = "tls")]
    certs: Option<redis::TlsCertificates>,
}

impl Tls {
    /// Reads the files; an unreadable file or one without the expected PEM
    /// is an [`Error::TlsFile`] naming it.
    pub(super) fn load(options: &ConnectOptions) -> Result<Tls> {
        let client = match (&options.tls_cert_file, &options.tls_key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::Config(
                    "a TLS client certificate needs its key: give both \
                     tls_cert_file and tls_key_file (--tls-cert and --tls-key)"
                        .into(),
                ));
            }
        };
        if options.tls_ca_file.is_none() && client.is_none() {
            return Ok(Tls::default());
        }
        #[cfg(feature = "tls")]
        {
            use rustls::pki_types::pem::PemObject;
            use rustls::pki_types::{CertificateDer, PrivateKeyDer};

            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|e| Error::TlsFile {
                    path: path.clone(),
                    problem: format!("cannot read it: {e}"),
                })
            };
            let bad = |path: &PathBuf, problem: String| Error::TlsFile {
                path: path.clone(),
                problem,
            };
            let certificates = |path: &PathBuf, pem: &[u8]| {
                let certs = CertificateDer::pem_slice_iter(pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| bad(path, format!("invalid PEM certificate: {e}")))?;
                if certs.is_empty() {
                    return Err(bad(
                        path,
                        "no PEM certificate in it (-----BEGIN CERTIFICATE-----)".into(),
                    ));
                }
                Ok(certs)
            };
            let root_cert = match &options.tls_ca_file {
                Some(path) => {
                    let pem = read(path)?;
                    let mut store = rustls::RootCertStore::empty();
                    for cert in certificates(path, &pem)? {
                        store
                            .add(cert)
                            .map_err(|e| bad(path, format!("not a usable CA certificate: {e}")))?;
                    }
                    Some(pem)
                }
                None => None,
            };
            let client_tls = match client {
                Some((cert, key)) => {
                    let client_cert = read(cert)?;
                    certificates(cert, &client_cert)?;
                    let client_key = read(key)?;
                    PrivateKeyDer::from_pem_slice(&client_key)
                        .map_err(|e| bad(key, format!("no usable PEM private key in it: {e}")))?;
                    Some(redis::ClientTlsConfig {
                        client_cert,
                        client_key,
                    })
                }
                None => None,
            };
            Ok(Tls {
                certs: Some(redis::TlsCertificates {
                    client_tls,
                    root_cert,
                }),
            })
        }
        #[cfg(not(feature = "tls"))]
        Err(Error::Config(
            "TLS files are given but fairjob was built without its `tls` feature".into(),
        ))
    }

    /// True when a CA or a client certificate was given.
    pub(super) fn is_set(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.certs.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// A client for one server, with these files.
    pub(super) fn client(&self, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.certs {
            return redis::Client::build_with_tls(info, certs.clone());
        }
        redis::Client::open(info)
    }

    /// A cluster client builder with these files.
    pub(super) fn cluster(&self, builder: ClusterClientBuilder) -> ClusterClientBuilder {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.certs {
            return builder.certs(certs.clone());
        }
        builder
    }
}

/// The rustls error inside `e`: the Redis client keeps an I/O error in an
/// `Arc`, and an I/O error's `source` skips the error it wraps, so both are
/// opened by hand.
#[cfg(feature = "tls")]
fn find_rustls_error(e: &(dyn std::error::Error + 'static), depth: usize) -> Option<rustls::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    if depth > 8 {
        return None;
    }
    if let Some(t) = e.downcast_ref::<rustls::Error>() {
        return Some(t.clone());
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        && let Some(t) = find_rustls_error(inner, depth + 1)
    {
        return Some(t);
    }
    if let Some(shared) = e.downcast_ref::<Shared>()
        && let Some(t) = find_rustls_error(&**shared, depth + 1)
    {
        return Some(t);
    }
    find_rustls_error(e.source()?, depth + 1)
}

/// What a failed TLS handshake means, in words a user can act on; `None`
/// when `e` is not a TLS failure.
#[cfg(feature = "tls")]
pub(super) fn tls_failure(e: &redis::RedisError, display: &str) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C};

    let text = e.to_string();
    let t = match find_rustls_error(e, 0) {
        Some(t) => t,
        // A handshake error that lost its type on the way: its words remain.
        None if text.contains("invalid peer certificate")
            || text.contains("received fatal alert") =>
        {
            return Some(format!("the TLS handshake with {display} failed: {text}"));
        }
        None => return None,
    };
    let ca_hint = "give the CA that signed it (tls_ca_file, --tls-ca, REDIS_TLS_CA)";
    let client_hint = "does the server require a client certificate (tls_cert_file and \
                       tls_key_file, --tls-cert and --tls-key), and does it trust this one?";
    Some(match &t {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            format!("the certificate of {display} is not trusted ({t}); {ca_hint}")
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => {
            format!(
                "the certificate of {display} is not valid for the host name in the URL ({t}); \
                 connect with a name the certificate lists"
            )
        }
        rustls::Error::InvalidCertificate(_) => {
            format!("the certificate of {display} was rejected: {t}")
        }
        rustls::Error::AlertReceived(
            A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::HandshakeFailure
            | A::AccessDenied
            | A::UnsupportedCertificate
            | A::CertificateUnknown,
        ) => format!("{display} refused the TLS connection ({t}): {client_hint}"),
        rustls::Error::InvalidMessage(_) => {
            format!("{display} does not speak TLS ({t}): is it the server's tls-port?")
        }
        _ => format!("the TLS handshake with {display} failed: {t}"),
    })
}

#[cfg(feature = "tls")]
pub(super) fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
