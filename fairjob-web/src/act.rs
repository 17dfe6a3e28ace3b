//! The actions: each POST, page or API, runs one of these on its checked
//! form and answers with what it did ([`Done`]), which the page shows as a
//! message and the API returns as JSON.

use fairjob::inspect::{JobSet, MAX_BULK, ProcessSignal, SetAction, Setting};
use fairjob::inspect::{SCAN_BUDGET, class_of_limit};
use serde::Serialize;

use crate::error::WebError;
use crate::load::job_filter;
use crate::params::Params;
use crate::state::WebState;

/// What an action did, for the page's message and the API's answer.
#[derive(Debug, Serialize)]
pub(crate) struct Done {
    pub ok: bool,
    pub message: String,
}

fn done(message: String) -> Done {
    Done { ok: true, message }
}

/// `POST /{set}`: an action on one entry (`one=<action>|<key>`), on the
/// selected ones (`action` with `key`s), or on all matching the filter
/// (`all=<action>`, at most 1,000 per call).
pub(crate) async fn on_jobs(
    state: &WebState,
    set: JobSet,
    form: &Params,
) -> Result<Done, WebError> {
    let inspector = state.inspector();
    let parse = |name: &str| {
        SetAction::parse(name)
            .ok_or_else(|| WebError::BadRequest(format!("unknown action {name:?}")))
    };
    let (action, entries, scope) = if let Some(one) = form.value("one") {
        let (name, key) = one
            .split_once('|')
            .ok_or_else(|| WebError::BadRequest("`one` is `<action>|<entry key>`".into()))?;
        let entries = inspector.find_entries(set, &[key.to_owned()]).await?;
        (parse(name)?, entries, "1 entry".to_owned())
    } else if let Some(name) = form.value("all") {
        let filter = job_filter(form);
        let (entries, scanned) = inspector
            .matching_entries(set, &filter, MAX_BULK, SCAN_BUDGET * 2)
            .await?;
        let scope = format!(
            "{} matching entries (of {scanned} looked at)",
            entries.len()
        );
        (parse(name)?, entries, scope)
    } else {
        let name = form
            .value("action")
            .ok_or_else(|| WebError::BadRequest("no action given".into()))?;
        let keys: Vec<String> = form.values("key").into_iter().map(str::to_owned).collect();
        if keys.len() > MAX_BULK {
            return Err(WebError::BadRequest(format!(
                "at most {MAX_BULK} entries per action"
            )));
        }
        let entries = inspector.find_entries(set, &keys).await?;
        let scope = format!("{} selected entries", keys.len());
        (parse(name)?, entries, scope)
    };
    let acted = inspector.act_on_entries(set, action, &entries).await?;
    tracing::info!(
        set = set.name(),
        action = action.as_str(),
        done = acted.done,
        gone = acted.gone,
        "dashboard action"
    );
    Ok(done(format!(
        "{}: {} done on {scope}{}",
        action.label(),
        acted.done,
        if acted.gone > 0 {
            format!(", {} already gone", acted.gone)
        } else {
            String::new()
        }
    )))
}

/// `POST /queues`: `action=pause|resume`, `queue`.
pub(crate) async fn on_queue(state: &WebState, form: &Params) -> Result<Done, WebError> {
    let queue = form
        .value("queue")
        .ok_or_else(|| WebError::BadRequest("no queue".into()))?;
    match form.value("action") {
        Some("pause") => {
            state.inspector().pause_queue(queue).await?;
            tracing::info!(job.queue = queue, "dashboard: queue paused");
            Ok(done(format!(
                "paused `{queue}`: workers stop fetching it within seconds"
            )))
        }
        Some("resume") => {
            state.inspector().resume_queue(queue).await?;
            tracing::info!(job.queue = queue, "dashboard: queue resumed");
            Ok(done(format!("resumed `{queue}`")))
        }
        other => Err(WebError::BadRequest(format!(
            "action must be pause or resume, not {other:?}"
        ))),
    }
}

fn setting<T: std::str::FromStr>(form: &Params, key: &str) -> Result<Setting<T>, WebError> {
    Ok(match form.value(key) {
        None => Setting::Keep,
        Some("default" | "none") => Setting::Clear,
        Some(v) => Setting::Set(v.parse().map_err(|_| {
            WebError::BadRequest(format!(
                "{key} takes a number, `default` or `none`, not {v:?}"
            ))
        })?),
    })
}

/// `POST /shards/{queue}`: a tenant's (or the defaults') weight, floor, cap,
/// rate (`10/s`), burst, through the client's `shard_policy`.
pub(crate) async fn on_shards(
    state: &WebState,
    queue: &str,
    form: &Params,
) -> Result<Done, WebError> {
    let mut change = state.client.shard_policy(queue);
    let tenant = form.value("tenant");
    if let Some(t) = tenant {
        change = change.tenant(t);
    }
    let weight: Setting<f64> = setting(form, "weight")?;
    let floor: Setting<u32> = setting(form, "floor")?;
    let cap: Setting<u32> = setting(form, "cap")?;
    let rate = match form.value("rate") {
        None => Setting::Keep,
        Some("default" | "none") => Setting::Clear,
        Some(v) => Setting::Set(fairjob::rate::parse_tenant_rate(v).map_err(WebError::BadRequest)?),
    };
    let burst: Setting<u32> = setting(form, "burst")?;
    let clear = matches!(weight, Setting::Clear)
        && matches!(floor, Setting::Clear)
        && matches!(cap, Setting::Clear)
        && matches!(rate, Setting::Clear)
        && matches!(burst, Setting::Clear | Setting::Keep);
    if clear {
        change = change.reset();
    } else {
        if let Setting::Set(w) = weight {
            change = change.weight(w);
        }
        if let Setting::Set(f) = floor {
            change = change.floor(f);
        }
        match cap {
            Setting::Set(c) => change = change.cap(c),
            Setting::Clear => change = change.no_cap(),
            Setting::Keep => {}
        }
        match rate {
            Setting::Set(r) => change = change.rate(r),
            Setting::Clear => change = change.no_rate(),
            Setting::Keep => {}
        }
        match burst {
            Setting::Set(b) => change = change.burst(b),
            Setting::Clear => change = change.no_burst(),
            Setting::Keep => {}
        }
    }
    change.apply().await?;
    tracing::info!(
        job.queue = queue,
        tenant = tenant.unwrap_or("*"),
        "dashboard: shard policy changed"
    );
    Ok(done(format!(
        "`{queue}`: settings of {} changed",
        tenant.map_or_else(|| "the defaults".to_owned(), |t| format!("tenant {t}"))
    )))
}

/// `POST /limits`: `key`, `limit` (a number, 0 pauses; `default` goes back
/// to the declared limit).
pub(crate) async fn on_limit(state: &WebState, form: &Params) -> Result<Done, WebError> {
    let key = form
        .value("key")
        .ok_or_else(|| WebError::BadRequest("no key".into()))?;
    let limit = match form.value("limit") {
        None | Some("default") => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            WebError::BadRequest(format!("limit takes a number or `default`, not {v:?}"))
        })?),
    };
    let classes = state.classes().await?;
    let default = class_of_limit(&classes, key)
        .and_then(|c| c.concurrency)
        .unwrap_or(0);
    let released = state
        .inspector()
        .set_slot_limit(key, limit, default)
        .await?;
    tracing::info!(key, ?limit, released, "dashboard: slot limit changed");
    Ok(done(format!(
        "`{key}`: limit {}; released {released} waiting job(s)",
        limit.map_or_else(
            || "back to the declared default".to_owned(),
            |l| l.to_string()
        )
    )))
}

/// `POST /limits/rate`: `key`, `rate` (`50/s`, `100/1m`; `0` or `pause`
/// pauses; `default` goes back to the declared rate), optional `burst`.
pub(crate) async fn on_rate(state: &WebState, form: &Params) -> Result<Done, WebError> {
    let key = form
        .value("key")
        .ok_or_else(|| WebError::BadRequest("no key".into()))?;
    let limits = state.inspector().rate_limits();
    let text = form.value("rate").unwrap_or("").trim();
    let (waiting, said) = match text {
        "" => (0, None),
        "default" => (
            limits.reset(key).await?,
            Some("back to the declared rate".to_owned()),
        ),
        "0" | "pause" => (limits.pause(key).await?, Some("paused".to_owned())),
        other => {
            let (limit, per) = fairjob::rate::parse_rate(other).map_err(WebError::BadRequest)?;
            (limits.set(key, limit, per).await?, Some(other.to_owned()))
        }
    };
    let burst = match form.value("burst").map(str::trim).filter(|b| !b.is_empty()) {
        None => None,
        Some(b) => Some(
            b.parse::<u32>()
                .map_err(|_| WebError::BadRequest(format!("burst takes a number, not {b:?}")))?,
        ),
    };
    if let Some(b) = burst {
        limits.set_burst(key, b).await?;
    }
    tracing::info!(key, rate = text, ?burst, "dashboard: rate limit changed");
    Ok(done(format!(
        "`{key}`: {}{}; {waiting} job(s) waiting",
        said.unwrap_or_else(|| "rate unchanged".to_owned()),
        burst.map_or_else(String::new, |b| format!(", burst {b}"))
    )))
}

/// `POST /cron`: `name`, `action=pause|resume|run_now`.
pub(crate) async fn on_cron(state: &WebState, form: &Params) -> Result<Done, WebError> {
    let name = form
        .value("name")
        .ok_or_else(|| WebError::BadRequest("no schedule name".into()))?;
    let inspector = state.inspector();
    let message = match form.value("action") {
        Some("pause") => {
            inspector.pause_cron(name).await?;
            format!("`{name}` paused")
        }
        Some("resume") => {
            inspector.resume_cron(name).await?;
            format!("`{name}` resumed from its next fire time")
        }
        Some("run_now") => {
            let jid = inspector.run_cron_now(name).await?;
            format!("`{name}`: job {jid} enqueued")
        }
        other => {
            return Err(WebError::BadRequest(format!(
                "action must be pause, resume or run_now, not {other:?}"
            )));
        }
    };
    tracing::info!(cron = name, "dashboard: {message}");
    Ok(done(message))
}

/// `POST /unique`: `key`, a lock to remove by hand.
pub(crate) async fn on_unique(state: &WebState, form: &Params) -> Result<Done, WebError> {
    let key = form
        .value("key")
        .ok_or_else(|| WebError::BadRequest("no key".into()))?;
    let removed = state.inspector().unlock(key).await?;
    tracing::info!(key, removed, "dashboard: unique lock removed");
    Ok(done(if removed {
        format!("`{key}`: unlocked")
    } else {
        format!("`{key}`: no such lock (expired or released)")
    }))
}

/// `POST /busy`: `identity`, `signal=quiet|stop`.
pub(crate) async fn on_process(state: &WebState, form: &Params) -> Result<Done, WebError> {
    let identity = form
        .value("identity")
        .ok_or_else(|| WebError::BadRequest("no identity".into()))?;
    let signal = match form.value("signal") {
        Some("quiet") => ProcessSignal::Quiet,
        Some("stop") => ProcessSignal::Stop,
        other => {
            return Err(WebError::BadRequest(format!(
                "signal must be quiet or stop, not {other:?}"
            )));
        }
    };
    state.inspector().signal_process(identity, signal).await?;
    tracing::info!(
        identity,
        signal = signal.as_str(),
        "dashboard: process signalled"
    );
    Ok(done(format!(
        "sent {} to {identity}: it acts on its next heartbeat",
        signal.as_str()
    )))
}
