//! The dashboard served by the worker: `worker web --bind ADDR` (the
//! dashboard alone) and `worker run --web ADDR` (beside processing). A
//! non-loopback address without a token is refused before anything is bound.
//! Built with this crate's `web` feature (fairjob-web, on by default);
//! without it `worker web` and `--web` fail before anything starts, saying
//! how to enable it.

use std::net::SocketAddr;

use anyhow::Result;
use fairjob::config::WorkerConfig;

/// What `worker web` and `--web` say when the binary was built without the
/// feature.
#[cfg(not(feature = "web"))]
pub(crate) const NOT_BUILT: &str = "\
this worker was built without the dashboard (fairjob-web): `worker web` and `run --web ADDR` need \
it. Enable the `web` feature of fairjob-worker in the crate that builds your worker (it is on by \
default: `fairjob-worker = { version = \"0.1\", default-features = false, features = [\"web\"] }`, \
or `cargo build --features fairjob-worker/web`).";

/// The dashboard's flags.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "web"), allow(dead_code))]
pub(crate) struct Options {
    pub(crate) actions: bool,
    pub(crate) token: Option<String>,
}

/// A dashboard running beside the worker.
pub(crate) struct Running {
    #[cfg(feature = "web")]
    stop: tokio::sync::oneshot::Sender<()>,
    #[cfg(feature = "web")]
    task: tokio::task::JoinHandle<()>,
}

#[cfg(feature = "web")]
fn web_config(opts: &Options) -> fairjob_web::WebConfig {
    let mut c = fairjob_web::WebConfig::default().actions(opts.actions);
    if let Some(t) = &opts.token {
        c = c.token(t.clone());
    }
    c
}

#[cfg(feature = "web")]
async fn bind(
    config: &WorkerConfig,
    opts: &Options,
    addr: SocketAddr,
) -> Result<(
    fairjob::Client,
    fairjob_web::WebConfig,
    tokio::net::TcpListener,
)> {
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut web = web_config(opts);
    #[cfg(feature = "postgres")]
    if let Some(url) = &config.postgres.url {
        web = crate::postgres::web_hooks(web, url)?;
    }
    #[cfg(not(feature = "postgres"))]
    if config.postgres.url.is_some() {
        tracing::warn!(
            "the dashboard shows no PostgreSQL panel: this worker was built without the `postgres` feature"
        );
    }
    fairjob_web::check_bind(addr, &web)?;
    let client = fairjob::ClientBuilder::from_config(config.client.clone())
        .build()
        .await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line for the port (`--bind 127.0.0.1:0`).
    println!(
        "fairjob dashboard on http://{local}/ ({}{})",
        if web.actions {
            "actions enabled"
        } else {
            "read-only"
        },
        if web.token.is_some() {
            ", token required"
        } else {
            ""
        }
    );
    tracing::info!(%local, actions = web.actions, token = web.token.is_some(), "dashboard listening");
    Ok((client, web, listener))
}

/// `worker web`: serves until SIGINT/SIGTERM.
pub(crate) async fn serve_only(
    config: &WorkerConfig,
    opts: &Options,
    addr: SocketAddr,
) -> Result<()> {
    #[cfg(feature = "web")]
    {
        let (client, web, listener) = bind(config, opts, addr).await?;
        fairjob_web::serve(client, web, listener, shutdown_signal()).await?;
        Ok(())
    }
    #[cfg(not(feature = "web"))]
    {
        let _ = (config, opts, addr);
        anyhow::bail!("{NOT_BUILT}")
    }
}

/// `worker run --web ADDR`: the dashboard in the background; its `/readyz`
/// reports `worker`'s state too.
pub(crate) async fn spawn(
    config: &WorkerConfig,
    opts: &Options,
    addr: SocketAddr,
    worker: &fairjob::WorkerHandle,
) -> Result<Running> {
    #[cfg(feature = "web")]
    {
        let (client, web, listener) = bind(config, opts, addr).await?;
        let web = web.worker(worker.clone());
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
            };
            if let Err(e) = fairjob_web::serve(client, web, listener, shutdown).await {
                tracing::error!(error = %e, "the dashboard stopped");
            }
        });
        Ok(Running { stop, task })
    }
    #[cfg(not(feature = "web"))]
    {
        let _ = (config, opts, addr, worker);
        anyhow::bail!("{NOT_BUILT}")
    }
}

impl Running {
    /// Stops the dashboard (after the worker stopped).
    pub(crate) async fn stop(self) {
        #[cfg(feature = "web")]
        {
            let _ = self.stop.send(());
            let _ = self.task.await;
        }
    }
}

#[cfg(feature = "web")]
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
