//! [`WebConfig`]: what the dashboard may do and who may see it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Rewrites a job's arguments (JSON) for display: `(class, args) -> shown`.
pub(crate) type RedactFn = dyn Fn(&str, &str) -> String + Send + Sync;

/// A panel another crate adds to the overview (fairjob-postgres' outbox):
/// a title and label/value rows, loaded on each render of the overview.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Panel {
    /// Its heading.
    pub title: String,
    /// `(label, value)` rows, shown as text (escaped).
    pub rows: Vec<(String, String)>,
}

impl Panel {
    /// A panel with these rows.
    pub fn new(title: impl Into<String>, rows: Vec<(String, String)>) -> Panel {
        Panel {
            title: title.into(),
            rows,
        }
    }
}

/// Loads a [`Panel`]: `Err` is shown in the panel as the reason it is missing.
pub(crate) type PanelFn = dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Panel, String>> + Send>>
    + Send
    + Sync;

/// Looks a jid up outside Redis for the explain page (fairjob-postgres'
/// outbox): `Ok(Some(panel))` is shown under the Redis walk, `Ok(None)` shows
/// nothing, `Err` is shown as the reason the lookup failed.
pub(crate) type ExplainFn = dyn Fn(
        String,
    )
        -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<Panel>, String>> + Send>>
    + Send
    + Sync;

/// The dashboard's settings.
#[derive(Clone)]
#[non_exhaustive]
pub struct WebConfig {
    /// Whether the actions (retry, delete, kill, add to queue, pause,
    /// resume, quiet, stop, edit limits and shard policy) are enabled.
    /// Default false: read-only.
    pub actions: bool,
    /// A token every route requires (`Authorization: Bearer <token>`, or the
    /// login form's cookie). Default none.
    pub token: Option<String>,
    /// How often pages refresh their live parts (default 5 s).
    pub refresh: Duration,
    /// The shortest refresh interval the server allows a browser session
    /// (default 2 s); faster refreshes get 429.
    pub min_refresh: Duration,
    /// Origins besides the request's own `Host` that may POST (a reverse
    /// proxy's public origin, e.g. `https://ops.example.com`).
    pub allowed_origins: Vec<String>,
    pub(crate) redact: Option<Arc<RedactFn>>,
    /// The worker this dashboard is served beside, whose state `/readyz`
    /// reports too (fetching, or quiet on purpose).
    pub(crate) worker: Option<fairjob::WorkerHandle>,
    /// Panels other crates add to the overview.
    pub(crate) panels: Vec<Arc<PanelFn>>,
    /// Places besides Redis where explain looks a jid up.
    pub(crate) explain_sources: Vec<Arc<ExplainFn>>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            actions: false,
            token: None,
            refresh: Duration::from_secs(5),
            min_refresh: Duration::from_secs(2),
            allowed_origins: Vec::new(),
            redact: None,
            worker: None,
            panels: Vec::new(),
            explain_sources: Vec::new(),
        }
    }
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("actions", &self.actions)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("refresh", &self.refresh)
            .field("min_refresh", &self.min_refresh)
            .field("allowed_origins", &self.allowed_origins)
            .field("redact_args", &self.redact.is_some())
            .field("worker", &self.worker.is_some())
            .field("panels", &self.panels.len())
            .field("explain_sources", &self.explain_sources.len())
            .finish()
    }
}

impl WebConfig {
    /// Enables (or disables) the actions.
    #[must_use]
    pub fn actions(mut self, on: bool) -> Self {
        self.actions = on;
        self
    }

    /// Requires `token` on every route (an empty token means none).
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        let t = token.into();
        self.token = (!t.is_empty()).then_some(t);
        self
    }

    /// How often pages refresh their live parts (at least the minimum).
    #[must_use]
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// Allows POSTs from another origin (e.g. a reverse proxy's).
    #[must_use]
    pub fn allowed_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// Rewrites every job's arguments before they are shown (HTML and JSON):
    /// `f(class, args_json) -> shown`, e.g. to hide secrets.
    #[must_use]
    pub fn redact_args(mut self, f: impl Fn(&str, &str) -> String + Send + Sync + 'static) -> Self {
        self.redact = Some(Arc::new(f));
        self
    }

    /// Served beside a worker: `/readyz` also wants it fetching (or quiet on
    /// purpose), not starting or stopping.
    #[must_use]
    pub fn worker(mut self, handle: fairjob::WorkerHandle) -> Self {
        self.worker = Some(handle);
        self
    }

    /// Adds a panel to the overview, loaded by `load` on each render (e.g.
    /// fairjob-postgres' backlog, lag, pumps and republish events).
    #[must_use]
    pub fn panel<F, Fut>(mut self, load: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Panel, String>> + Send + 'static,
    {
        self.panels.push(Arc::new(move || Box::pin(load())));
        self
    }

    /// Adds a place besides Redis where explain (the page and `/api/explain`)
    /// looks a jid up, e.g. fairjob-postgres' outbox for a job committed but
    /// not in Redis yet: `look_up(jid)` runs on each explain request; its
    /// panel (escaped like every value) is shown under the Redis walk.
    #[must_use]
    pub fn explain_source<F, Fut>(mut self, look_up: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Option<Panel>, String>> + Send + 'static,
    {
        self.explain_sources
            .push(Arc::new(move |jid| Box::pin(look_up(jid))));
        self
    }

    /// The refresh interval in force, whole seconds.
    pub(crate) fn refresh_secs(&self) -> u64 {
        self.refresh.max(self.min_refresh).as_secs().max(1)
    }

    /// `args` as shown for `class`.
    pub(crate) fn show_args(&self, class: &str, args: &str) -> String {
        match &self.redact {
            Some(f) => f(class, args),
            None => args.to_owned(),
        }
    }
}
