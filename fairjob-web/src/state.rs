//! What every request shares: the client, the settings, the browser
//! sessions (CSRF token, login, last live refresh) and the classes this
//! binary links. Sessions live in this process's memory, bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use fairjob::Client;
use fairjob::inspect::ClassInfo;
use fairjob::inspect::Inspector;

use crate::config::WebConfig;
use crate::error::WebError;

/// Sessions kept at most; the oldest go first.
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// One browser session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The CSRF token its forms carry.
    pub csrf: String,
    /// Whether it logged in with the token.
    pub authed: bool,
    /// When it ends.
    pub expires: Instant,
    /// Last live refresh per page.
    pub last_live: HashMap<String, Instant>,
}

/// The dashboard's state, shared by every request (the worker has its own `Shared`).
pub(crate) struct WebState {
    pub client: Client,
    pub inspector: Inspector,
    pub config: WebConfig,
    pub sessions: Mutex<HashMap<String, Session>>,
    /// Classes registered in this binary (merged with those workers publish).
    pub local_classes: Vec<ClassInfo>,
}

impl WebState {
    /// The views and actions of `fairjob::inspect`, over the client's connection.
    pub(crate) fn inspector(&self) -> &Inspector {
        &self.inspector
    }

    /// The classes workers published, and those this binary links.
    pub(crate) async fn classes(&self) -> Result<Vec<ClassInfo>, WebError> {
        let mut all = self.inspector().classes().await?;
        for local in &self.local_classes {
            if !all.iter().any(|c| c.class == local.class) {
                all.push(local.clone());
            }
        }
        all.sort_by(|a, b| a.class.cmp(&b.class));
        Ok(all)
    }
}
