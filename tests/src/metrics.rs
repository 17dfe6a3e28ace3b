//! Test support for the metrics listener (`worker run --metrics`): a worker
//! process serving it (the port read from the line it logs), and a scrape
//! parsed from Prometheus' text format.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::web::Http;
use crate::{TestWorker, WorkerProcess, temp_dir};

/// A worker process with `--metrics 127.0.0.1:0`, and its listener's URL.
#[derive(Debug)]
pub struct MetricsWorker {
    /// The process.
    pub process: WorkerProcess,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    _dir: crate::TempDir,
}

impl MetricsWorker {
    /// Starts `worker` with `--metrics 127.0.0.1:0` (and its log in a temp
    /// file) and waits for the line naming the listener's address.
    pub fn start(worker: &TestWorker) -> MetricsWorker {
        let dir = temp_dir("metrics");
        let log: PathBuf = dir.join("worker.log");
        let process = worker
            .clone()
            .flag("--metrics", "127.0.0.1:0")
            .log_to(&log)
            .start();
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = loop {
            let text = process.log();
            if let Some(url) = text.lines().find_map(|l| {
                l.strip_prefix("fairjob metrics on ")
                    .map(|u| u.trim().trim_end_matches("/metrics").to_owned())
            }) {
                break url;
            }
            assert!(
                Instant::now() < deadline,
                "the worker never printed its metrics address: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        MetricsWorker {
            process,
            url,
            _dir: dir,
        }
    }

    /// `GET /metrics`, parsed.
    pub fn scrape(&self) -> Scrape {
        let r = Http::new().get(&format!("{}/metrics", self.url), &[]);
        assert_eq!(r.status, 200, "/metrics: {}", r.body);
        Scrape::parse(&r.body)
    }

    /// The status of `GET <path>` (`/healthz`, `/readyz`).
    pub fn status(&self, path: &str) -> u16 {
        Http::new().get(&format!("{}{path}", self.url), &[]).status
    }

    /// What the worker has logged so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name (`fairjob_jobs_total`, `fairjob_job_wait_seconds_count`…).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Every sample line, in order.
    pub samples: Vec<Sample>,
    /// The text as served.
    pub text: String,
}

impl Scrape {
    /// Parses Prometheus' text format (comments skipped).
    pub fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("name value");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or(f64::NAN),
            };
            let (name, labels) = match series.find('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some(i) => (
                    series[..i].to_owned(),
                    parse_labels(&series[i + 1..series.len() - 1]),
                ),
            };
            samples.push(Sample {
                name,
                labels,
                value,
            });
        }
        Scrape {
            samples,
            text: text.to_owned(),
        }
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn find<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The sum of the samples [`Scrape::find`] finds (0 when none).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels).map(|s| s.value).sum()
    }

    /// Whether any sample of the series family `name` is present (`name`,
    /// or `name_bucket`/`_sum`/`_count` of a histogram).
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| {
            s.name == name
                || s.name
                    .strip_prefix(name)
                    .is_some_and(|r| matches!(r, "_bucket" | "_sum" | "_count"))
        })
    }

    /// Per series family and queue: the distinct values of label `label`
    /// (`tenant`, `key`), histograms' `_bucket`/`_sum`/`_count` together.
    pub fn label_values(&self, label: &str) -> BTreeMap<(String, String), Vec<String>> {
        let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for s in &self.samples {
            let Some(v) = s.labels.get(label) else {
                continue;
            };
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suf| s.name.strip_suffix(suf))
                .unwrap_or(&s.name)
                .to_owned();
            let queue = s.labels.get("queue").cloned().unwrap_or_default();
            let values = out.entry((family, queue)).or_default();
            if !values.contains(v) {
                values.push(v.clone());
            }
        }
        out
    }

    /// The lines of the text that mention `needle` (for a report excerpt).
    pub fn lines_with(&self, needle: &str) -> Vec<&str> {
        self.text.lines().filter(|l| l.contains(needle)).collect()
    }
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim_start_matches(',').trim().to_owned();
        let after = &rest[eq + 1..];
        let body = after.strip_prefix('"').expect("quoted label value");
        let mut value = String::new();
        let mut chars = body.char_indices();
        let mut end = body.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(match n {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key, value);
        rest = &body[(end + 1).min(body.len())..];
    }
    out
}
