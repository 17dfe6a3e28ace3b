//! What pages and their JSON twins share: one call into `broker::admin` per
//! view (the page renders it, the API serializes it), the argument
//! redaction hook applied to every job shown, request parsing (query strings
//! and forms, repeated keys kept), display helpers and the server-rendered
//! SVG charts.

use std::fmt::Write as _;

use fairjob::broker::admin::{
    ClassInfo, Explanation, JobFilter, JobPage, LimitDetail, LimitPage, OverviewView, Page,
    ProcessPage, QueuesView, ShardView, TenantView,
};
use fairjob::broker::{JobSet, RedisBroker};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::Serialize;

use crate::PAGE_ROWS;
use crate::error::WebError;
use crate::state::WebState;

/// Bytes kept as they are in a URL component.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a path segment or query value (tenant ids, queue names, keys).
pub(crate) fn url_component(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// `k=v&k2=v2` pairs (form bodies and query strings), `+` as space, repeated keys kept.
pub(crate) fn parse_pairs(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |x: &str| {
                percent_decode_str(&x.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect()
}

/// The first value of `key`, trimmed, when not empty.
pub(crate) fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// Every value of `key`.
pub(crate) fn all<'a>(pairs: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    pairs
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// A number parameter (absent → `None`, not a number → an error).
pub(crate) fn num<T: std::str::FromStr>(
    pairs: &[(String, String)],
    key: &str,
) -> Result<Option<T>, WebError> {
    match get(pairs, key) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| WebError::BadRequest(format!("`{key}` must be a number, not {v:?}"))),
    }
}

impl WebState {
    pub(crate) fn broker(&self) -> &RedisBroker {
        self.client.broker()
    }

    /// The classes workers published, and those this binary links.
    pub(crate) async fn classes(&self) -> Result<Vec<ClassInfo>, WebError> {
        let mut all = self.broker().classes().await?;
        for c in &self.local_classes {
            if !all.iter().any(|a| a.class == c.class) {
                all.push(c.clone());
            }
        }
        all.sort_by(|a, b| a.class.cmp(&b.class));
        Ok(all)
    }

    fn redact_page(&self, page: &mut JobPage) {
        for e in &mut page.rows {
            e.args = self.config.show_args(&e.class, &e.args);
        }
    }
}

/// The overview.
pub(crate) async fn overview(s: &WebState) -> Result<OverviewView, WebError> {
    let classes = s.classes().await?;
    Ok(s.broker().dashboard_overview(&classes).await?)
}

/// The queues page.
pub(crate) async fn queues(s: &WebState) -> Result<QueuesView, WebError> {
    let classes = s.classes().await?;
    Ok(s.broker().queues_view(&classes).await?)
}

/// Recently active tenants, optionally those whose id contains `q`.
#[derive(Debug, Serialize)]
pub(crate) struct TenantsView {
    pub query: String,
    pub minutes: u64,
    pub tenants: Vec<fairjob::broker::admin::LongWait>,
}

pub(crate) async fn tenants(s: &WebState, q: &str) -> Result<TenantsView, WebError> {
    let (names, _, _) = s.broker().queue_names().await?;
    let minutes = fairjob::broker::admin::MAX_MINUTES;
    let tenants = s
        .broker()
        .recent_tenants(&names, minutes, q, PAGE_ROWS)
        .await?;
    Ok(TenantsView {
        query: q.to_owned(),
        minutes,
        tenants,
    })
}

/// One tenant (`sets`: with its entries in `retry` and `dead`, a bounded scan).
pub(crate) async fn tenant(s: &WebState, tenant: &str, sets: bool) -> Result<TenantView, WebError> {
    let classes = s.classes().await?;
    let mut v = s.broker().tenant_view(tenant, &classes, sets).await?;
    s.redact_page(&mut v.retries);
    s.redact_page(&mut v.dead);
    Ok(v)
}

/// Explain one job.
pub(crate) async fn explain(
    s: &WebState,
    jid: &str,
    tenant: Option<&str>,
    cursor: Option<&str>,
    budget: Option<u64>,
) -> Result<Explanation, WebError> {
    let classes = s.classes().await?;
    let mut e = s
        .broker()
        .explain(jid, tenant, cursor, budget, &classes)
        .await?;
    if let Some(job) = &mut e.job {
        job.args = s.config.show_args(&job.class, &job.args);
    }
    Ok(e)
}

/// A sharded queue, a page of its tenants.
pub(crate) async fn shards(s: &WebState, queue: &str, cursor: u64) -> Result<ShardView, WebError> {
    Ok(s.broker()
        .shard_view(
            queue,
            Page {
                cursor,
                count: PAGE_ROWS,
            },
        )
        .await?)
}

/// Slot limits: a page of keys, and the detail of the keys in use (or of one key).
#[derive(Debug, Serialize)]
pub(crate) struct LimitsView {
    pub page: LimitPage,
    pub details: Vec<LimitDetail>,
    /// Declared default limits by key, where a published class says.
    pub defaults: Vec<(String, u32)>,
}

pub(crate) async fn limits(
    s: &WebState,
    cursor: u64,
    key: Option<&str>,
) -> Result<LimitsView, WebError> {
    let b = s.broker();
    let page = b
        .limits(Page {
            cursor,
            count: PAGE_ROWS,
        })
        .await?;
    let mut details = Vec::new();
    match key {
        Some(k) => details.push(b.limit_detail(k, PAGE_ROWS).await?),
        None => {
            for row in page
                .rows
                .iter()
                .filter(|r| r.running > 0 || r.waiting > 0)
                .take(10)
            {
                details.push(b.limit_detail(&row.key, 5).await?);
            }
        }
    }
    let classes = s.classes().await?;
    let defaults = page
        .rows
        .iter()
        .filter_map(|r| {
            fairjob::broker::admin::class_of_limit(&classes, &r.key)
                .and_then(|c| c.concurrency)
                .map(|d| (r.key.clone(), d))
        })
        .collect();
    Ok(LimitsView {
        page,
        details,
        defaults,
    })
}

/// A set of jobs: a page, or a filtered scan step.
pub(crate) async fn jobs(
    s: &WebState,
    set: JobSet,
    filter: &JobFilter,
    cursor: u64,
) -> Result<JobPage, WebError> {
    let mut page = s
        .broker()
        .jobs_page(set, filter, cursor, 50, fairjob::broker::admin::SCAN_BUDGET)
        .await?;
    s.redact_page(&mut page);
    Ok(page)
}

/// The worker processes and their running jobs.
pub(crate) async fn busy(s: &WebState, cursor: u64) -> Result<ProcessPage, WebError> {
    let mut page = s
        .broker()
        .processes(Page {
            cursor,
            count: PAGE_ROWS,
        })
        .await?;
    for p in &mut page.rows {
        for j in &mut p.jobs {
            j.args = s.config.show_args(&j.class, &j.args);
        }
    }
    Ok(page)
}

// ---- server-rendered SVG (numbers and fixed strings only; no data text) ----

/// A bar chart of `values` (oldest first), `w`×`h` pixels.
pub(crate) fn bars_svg(values: &[u64], w: u32, h: u32) -> String {
    let max = values.iter().copied().max().unwrap_or(0).max(1) as f64;
    let n = values.len().max(1) as f64;
    let bw = w as f64 / n;
    let mut out = format!(
        r#"<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="jobs per minute"><rect class="bg" x="0" y="0" width="{w}" height="{h}"/>"#
    );
    for (i, v) in values.iter().enumerate() {
        let bh = (*v as f64 / max) * (h as f64 - 2.0);
        let _ = write!(
            out,
            r#"<rect class="bar" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/>"#,
            i as f64 * bw + 0.5,
            h as f64 - bh,
            (bw - 1.0).max(0.5),
            bh
        );
    }
    out.push_str("</svg>");
    out
}

/// A stacked bar: runnable (green) then blocked (amber), `w` wide.
pub(crate) fn split_svg(runnable: u64, blocked: u64, w: u32) -> String {
    let total = (runnable + blocked).max(1) as f64;
    let rw = runnable as f64 / total * w as f64;
    let bw = blocked as f64 / total * w as f64;
    format!(
        r#"<svg class="split" viewBox="0 0 {w} 10" width="{w}" height="10" role="img" aria-label="runnable and blocked"><rect class="bg" x="0" y="0" width="{w}" height="10"/><rect class="ok" x="0" y="0" width="{rw:.1}" height="10"/><rect class="warn" x="{rw:.1}" y="0" width="{bw:.1}" height="10"/></svg>"#
    )
}

/// Planned share (outline) next to measured share (filled), both 0..=1.
pub(crate) fn share_svg(planned: f64, measured: f64, w: u32) -> String {
    let p = planned.clamp(0.0, 1.0) * w as f64;
    let m = measured.clamp(0.0, 1.0) * w as f64;
    format!(
        r#"<svg class="share" viewBox="0 0 {w} 16" width="{w}" height="16" role="img" aria-label="planned and measured share"><rect class="bg" x="0" y="0" width="{w}" height="16"/><rect class="planned" x="0" y="1" width="{p:.1}" height="6"/><rect class="measured" x="0" y="9" width="{m:.1}" height="6"/></svg>"#
    )
}

/// A wait histogram (bucket counts) as bars.
pub(crate) fn histogram_svg(buckets: &[u64], w: u32, h: u32) -> String {
    let last = buckets.iter().rposition(|b| *b > 0).map_or(0, |i| i + 1);
    let first = buckets.iter().position(|b| *b > 0).unwrap_or(0);
    if last == 0 {
        return String::new();
    }
    bars_svg(&buckets[first..last], w, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_keep_repeats_and_decode() {
        let p = parse_pairs("key=1%7Ca&key=2%7Cb&tenant=a+b%3Cc&empty=");
        assert_eq!(all(&p, "key"), vec!["1|a", "2|b"]);
        assert_eq!(get(&p, "tenant"), Some("a b<c"));
        assert_eq!(get(&p, "empty"), None);
    }

    #[test]
    fn components_are_encoded_whole() {
        assert_eq!(url_component("a/b {c}:é"), "a%2Fb%20%7Bc%7D%3A%C3%A9");
    }

    #[test]
    fn charts_hold_numbers_only() {
        let s = bars_svg(&[1, 5, 0, 3], 100, 20);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert_eq!(s.matches("class=\"bar\"").count(), 4);
        assert!(split_svg(3, 1, 80).contains("width=\"60.0\""));
    }
}

// ---- actions (each POST, page or API, runs one of these) ----

/// What an action did, for the page's message and the API's answer.
#[derive(Debug, Serialize)]
pub(crate) struct Done {
    pub ok: bool,
    pub message: String,
}

fn done(message: String) -> Done {
    Done { ok: true, message }
}

/// The filter of a jobs listing, from query or form pairs.
pub(crate) fn job_filter(pairs: &[(String, String)]) -> JobFilter {
    let f = |k: &str| get(pairs, k).map(str::to_owned);
    JobFilter {
        class: f("class"),
        tenant: f("tenant"),
        queue: f("queue"),
        error: f("error"),
    }
}

/// `POST /{set}`: an action on one entry (`one=<action>|<key>`), on the
/// selected ones (`action` with `key`s), or on all matching the filter
/// (`all=<action>`, at most 1,000 per call).
pub(crate) async fn act_jobs(
    s: &WebState,
    set: JobSet,
    pairs: &[(String, String)],
) -> Result<Done, WebError> {
    use fairjob::broker::{MAX_BULK, SetAction};
    let b = s.broker();
    let parse = |a: &str| {
        SetAction::parse(a).ok_or_else(|| WebError::BadRequest(format!("unknown action {a:?}")))
    };
    let (action, entries, scope) = if let Some(one) = get(pairs, "one") {
        let (a, key) = one
            .split_once('|')
            .ok_or_else(|| WebError::BadRequest("`one` is `<action>|<entry key>`".into()))?;
        let entries = b.find_entries(set, &[key.to_owned()]).await?;
        (parse(a)?, entries, "1 entry".to_owned())
    } else if let Some(a) = get(pairs, "all") {
        let filter = job_filter(pairs);
        let (entries, scanned) = b
            .matching_entries(
                set,
                &filter,
                MAX_BULK,
                fairjob::broker::admin::SCAN_BUDGET * 2,
            )
            .await?;
        let scope = format!(
            "{} matching entries (of {scanned} looked at)",
            entries.len()
        );
        (parse(a)?, entries, scope)
    } else {
        let a =
            get(pairs, "action").ok_or_else(|| WebError::BadRequest("no action given".into()))?;
        let keys: Vec<String> = all(pairs, "key").into_iter().map(str::to_owned).collect();
        if keys.len() > MAX_BULK {
            return Err(WebError::BadRequest(format!(
                "at most {MAX_BULK} entries per action"
            )));
        }
        let entries = b.find_entries(set, &keys).await?;
        let scope = format!("{} selected entries", keys.len());
        (parse(a)?, entries, scope)
    };
    let acted = b.act_on_entries(set, action, &entries).await?;
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
pub(crate) async fn act_queue(s: &WebState, pairs: &[(String, String)]) -> Result<Done, WebError> {
    let queue = get(pairs, "queue").ok_or_else(|| WebError::BadRequest("no queue".into()))?;
    match get(pairs, "action") {
        Some("pause") => {
            s.broker().pause_queue(queue).await?;
            tracing::info!(job.queue = queue, "dashboard: queue paused");
            Ok(done(format!(
                "paused `{queue}`: workers stop fetching it within seconds"
            )))
        }
        Some("resume") => {
            s.broker().resume_queue(queue).await?;
            tracing::info!(job.queue = queue, "dashboard: queue resumed");
            Ok(done(format!("resumed `{queue}`")))
        }
        other => Err(WebError::BadRequest(format!(
            "action must be pause or resume, not {other:?}"
        ))),
    }
}

fn setting<T: std::str::FromStr>(
    pairs: &[(String, String)],
    key: &str,
) -> Result<fairjob::broker::Setting<T>, WebError> {
    use fairjob::broker::Setting;
    Ok(match get(pairs, key) {
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
/// through the client's `shard_policy`.
pub(crate) async fn act_shards(
    s: &WebState,
    queue: &str,
    pairs: &[(String, String)],
) -> Result<Done, WebError> {
    use fairjob::broker::Setting;
    let mut change = s.client.shard_policy(queue);
    let tenant = get(pairs, "tenant");
    if let Some(t) = tenant {
        change = change.tenant(t);
    }
    let weight: Setting<f64> = setting(pairs, "weight")?;
    let floor: Setting<u32> = setting(pairs, "floor")?;
    let cap: Setting<u32> = setting(pairs, "cap")?;
    let clear = matches!(weight, Setting::Clear)
        && matches!(floor, Setting::Clear)
        && matches!(cap, Setting::Clear);
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
pub(crate) async fn act_limit(s: &WebState, pairs: &[(String, String)]) -> Result<Done, WebError> {
    let key = get(pairs, "key").ok_or_else(|| WebError::BadRequest("no key".into()))?;
    let limit = match get(pairs, "limit") {
        None | Some("default") => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            WebError::BadRequest(format!("limit takes a number or `default`, not {v:?}"))
        })?),
    };
    let classes = s.classes().await?;
    let default = fairjob::broker::admin::class_of_limit(&classes, key)
        .and_then(|c| c.concurrency)
        .unwrap_or(0);
    let released = fairjob::limit::set_limit(s.broker(), key, limit, default).await?;
    tracing::info!(key, ?limit, released, "dashboard: slot limit changed");
    Ok(done(format!(
        "`{key}`: limit {}; released {released} waiting job(s)",
        limit.map_or_else(
            || "back to the declared default".to_owned(),
            |l| l.to_string()
        )
    )))
}

/// `POST /busy`: `identity`, `signal=quiet|stop`.
pub(crate) async fn act_busy(s: &WebState, pairs: &[(String, String)]) -> Result<Done, WebError> {
    use fairjob::broker::ProcessSignal;
    let identity =
        get(pairs, "identity").ok_or_else(|| WebError::BadRequest("no identity".into()))?;
    let signal = match get(pairs, "signal") {
        Some("quiet") => ProcessSignal::Quiet,
        Some("stop") => ProcessSignal::Stop,
        other => {
            return Err(WebError::BadRequest(format!(
                "signal must be quiet or stop, not {other:?}"
            )));
        }
    };
    s.broker().signal_process(identity, signal).await?;
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

/// The templates' HTML escaper: `&` `<` `>` `"` `'` as `&amp;` `&lt;`
/// `&gt;` `&quot;` `&#x27;` (named entities, so escaped text reads plainly in
/// the page source).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HtmlEscaper;

impl askama::filters::Escaper for HtmlEscaper {
    fn write_escaped_str<W: std::fmt::Write>(&self, mut dest: W, s: &str) -> std::fmt::Result {
        let mut last = 0;
        for (i, b) in s.bytes().enumerate() {
            let rep = match b {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                b'\'' => "&#x27;",
                _ => continue,
            };
            dest.write_str(&s[last..i])?;
            dest.write_str(rep)?;
            last = i + 1;
        }
        dest.write_str(&s[last..])
    }
}

#[cfg(test)]
mod escape_tests {
    use askama::filters::Escaper;

    #[test]
    fn the_escaper_escapes_markup_and_quotes() {
        let mut out = String::new();
        super::HtmlEscaper
            .write_escaped_str(&mut out, "<script>alert('x') & \"y\"</script>é")
            .unwrap();
        assert_eq!(
            out,
            "&lt;script&gt;alert(&#x27;x&#x27;) &amp; &quot;y&quot;&lt;/script&gt;é"
        );
    }
}
