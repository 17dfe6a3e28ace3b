//! Certificates for TLS tests, made with `openssl`: a CA, a server
//! certificate it signed and a client certificate it signed, in a temporary
//! directory removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A throwaway CA with a server certificate (for `localhost` and `127.0.0.1`
/// unless told otherwise) and a client certificate (for mutual TLS), as PEM
/// files in a temporary directory that drop removes. Give it to
/// [`RedisServer::start_tls`](super::RedisServer::start_tls) or
/// [`RedisCluster::start_tls`](super::RedisCluster::start_tls), and its
/// [`ca_file`](Self::ca_file) (and
/// [`client_cert_file`](Self::client_cert_file) /
/// [`client_key_file`](Self::client_key_file)) to the client. Needs `openssl`
/// on the `PATH`.
#[derive(Debug)]
pub struct TestCa {
    dir: PathBuf,
}

impl TestCa {
    /// A CA whose server certificate is valid for `localhost` and `127.0.0.1`.
    pub fn new() -> std::io::Result<TestCa> {
        Self::with_server_names(&["DNS:localhost", "IP:127.0.0.1"])
    }

    /// A CA whose server certificate is valid for these subject alternative
    /// names only (`"DNS:localhost"`, `"IP:127.0.0.1"`).
    pub fn with_server_names(names: &[&str]) -> std::io::Result<TestCa> {
        let dir = std::env::temp_dir().join(format!(
            "fairjob-tls-{}-{}",
            std::process::id(),
            &crate::wire::new_jid()[..8]
        ));
        std::fs::create_dir_all(&dir)?;
        let ca = TestCa { dir };
        ca.make(names)?;
        Ok(ca)
    }

    fn make(&self, names: &[&str]) -> std::io::Result<()> {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        self.openssl(
            &[
                &["req", "-x509", "-new"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=fairjob test CA",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
        )?;
        let leaf = |name: &str, cn: &str, ext: String| -> std::io::Result<()> {
            let ext_file = format!("{name}.ext");
            std::fs::write(self.dir.join(&ext_file), ext)?;
            let (key, csr, crt) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
            );
            let subj = format!("/CN={cn}");
            self.openssl(
                &[
                    &["req", "-new"][..],
                    &ec,
                    &["-keyout", &key, "-out", &csr, "-subj", &subj],
                ]
                .concat(),
            )?;
            self.openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &crt,
                "-extfile",
                &ext_file,
            ])
        };
        let common = "basicConstraints=CA:FALSE\n\
                      keyUsage=critical,digitalSignature,keyEncipherment\n\
                      extendedKeyUsage=serverAuth,clientAuth\n";
        // The server's certificate is also its client certificate on the
        // cluster bus and for replication, hence clientAuth.
        leaf(
            "server",
            names
                .first()
                .and_then(|n| n.split_once(':'))
                .map_or("localhost", |(_, v)| v),
            format!("{common}subjectAltName={}\n", names.join(",")),
        )?;
        leaf("client", "fairjob test client", common.to_owned())
    }

    fn openssl(&self, args: &[&str]) -> std::io::Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot run openssl (is it installed?): {e}"),
                )
            })?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM): what a client is told to trust.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server's certificate (PEM).
    pub fn server_cert_file(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// The server's private key (PEM).
    pub fn server_key_file(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate (PEM), signed by the CA, for mutual TLS.
    pub fn client_cert_file(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    /// The client certificate's private key (PEM).
    pub fn client_key_file(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// `redis-server` arguments for these files (not the ports): the
    /// server's certificate and key, the CA it trusts clients by, and
    /// whether clients must present a certificate (`tls-auth-clients`).
    pub fn server_args(&self, auth_clients: bool) -> Vec<String> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--tls-cert-file".into(),
            path(self.server_cert_file()),
            "--tls-key-file".into(),
            path(self.server_key_file()),
            "--tls-ca-cert-file".into(),
            path(self.ca_file()),
            "--tls-auth-clients".into(),
            if auth_clients { "yes" } else { "no" }.into(),
        ]
    }

    /// `redis-cli` arguments to connect with these files (the client certificate included).
    pub fn cli_args(&self) -> Vec<String> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(self.ca_file()),
            "--cert".into(),
            path(self.client_cert_file()),
            "--key".into(),
            path(self.client_key_file()),
        ]
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
