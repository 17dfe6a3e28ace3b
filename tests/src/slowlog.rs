//! Redis's SLOWLOG, read by the benchmarks: every command (a script counts as
//! one) that ran longer than a threshold, with fairjob's scripts named.

use std::collections::BTreeMap;
use std::fmt;

/// Commands slower than the threshold since [`SlowLog::start`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlowReport {
    /// The threshold, µs.
    pub threshold_us: u64,
    /// Entries over it.
    pub count: u64,
    /// The slowest, µs.
    pub max_us: u64,
    /// Per command or script: (count, slowest µs).
    pub by_name: BTreeMap<String, (u64, u64)>,
}

impl fmt::Display for SlowReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} over {} ms",
            self.count,
            self.threshold_us as f64 / 1000.0
        )?;
        if self.count > 0 {
            let names: Vec<String> = self
                .by_name
                .iter()
                .map(|(n, (c, m))| format!("{n} ×{c} (max {:.1} ms)", *m as f64 / 1000.0))
                .collect();
            write!(f, ": {}", names.join(", "))?;
        }
        Ok(())
    }
}

/// A Redis whose slow log is being watched.
pub struct SlowLog {
    conn: redis::aio::MultiplexedConnection,
    threshold_us: u64,
}

impl fmt::Debug for SlowLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlowLog")
            .field("threshold_us", &self.threshold_us)
            .finish()
    }
}

impl SlowLog {
    /// Logs every command slower than `threshold_us` from now on (the log
    /// keeps the last 1,024).
    pub async fn start(url: &str, threshold_us: u64) -> redis::RedisResult<SlowLog> {
        SlowLog::start_keeping(url, threshold_us, 1024).await
    }

    /// Logs every command from now on, keeping the last `max_len`, for
    /// [`SlowLog::times`].
    pub async fn start_all(url: &str, max_len: u64) -> redis::RedisResult<SlowLog> {
        SlowLog::start_keeping(url, 0, max_len).await
    }

    /// Logs every command slower than `threshold_us` from now on, keeping
    /// the last `max_len`.
    pub async fn start_keeping(
        url: &str,
        threshold_us: u64,
        max_len: u64,
    ) -> redis::RedisResult<SlowLog> {
        // No response timeout: reading a long log takes a while.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(threshold_us)
            .query_async(&mut conn)
            .await?;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-max-len")
            .arg(max_len)
            .query_async(&mut conn)
            .await?;
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut conn)
            .await?;
        Ok(SlowLog { conn, threshold_us })
    }

    /// Every logged call's time so far (µs), per fairjob script (`<name>.lua`)
    /// or command, in the order logged.
    pub async fn times(&mut self) -> redis::RedisResult<BTreeMap<String, Vec<u64>>> {
        let names: BTreeMap<String, &str> = fairjob::broker::script_hashes()
            .into_iter()
            .map(|(n, h)| (h, n))
            .collect();
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut self.conn)
            .await?;
        let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for e in entries.into_iter().rev() {
            let redis::Value::Array(fields) = e else {
                continue;
            };
            let us: u64 = redis::FromRedisValue::from_redis_value_ref(&fields[2]).unwrap_or(0);
            let args: Vec<String> =
                redis::FromRedisValue::from_redis_value_ref(&fields[3]).unwrap_or_default();
            let cmd = args.first().map(|a| a.to_uppercase()).unwrap_or_default();
            let name = script_name(&names, &cmd, args.get(1));
            out.entry(name).or_default().push(us);
        }
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut self.conn)
            .await?;
        Ok(out)
    }

    /// What was slow so far.
    pub async fn report(&mut self) -> redis::RedisResult<SlowReport> {
        let names: BTreeMap<String, &str> = fairjob::broker::script_hashes()
            .into_iter()
            .map(|(n, h)| (h, n))
            .collect();
        let count: u64 = redis::cmd("SLOWLOG")
            .arg("LEN")
            .query_async(&mut self.conn)
            .await?;
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(1024)
            .query_async(&mut self.conn)
            .await?;
        let mut report = SlowReport {
            threshold_us: self.threshold_us,
            count,
            ..SlowReport::default()
        };
        for e in entries {
            let redis::Value::Array(fields) = e else {
                continue;
            };
            let us: u64 = redis::FromRedisValue::from_redis_value_ref(&fields[2]).unwrap_or(0);
            let args: Vec<String> =
                redis::FromRedisValue::from_redis_value_ref(&fields[3]).unwrap_or_default();
            let cmd = args.first().map(|a| a.to_uppercase()).unwrap_or_default();
            let name = script_name(&names, &cmd, args.get(1));
            let slot = report.by_name.entry(name).or_default();
            slot.0 += 1;
            slot.1 = slot.1.max(us);
            report.max_us = report.max_us.max(us);
        }
        Ok(report)
    }
}

/// One line per name in `times`: calls, median, 99th percentile, slowest
/// (µs) and calls over `over_us`.
pub fn summarize(times: &BTreeMap<String, Vec<u64>>, names: &[&str], over_us: u64) -> String {
    let mut lines = Vec::new();
    for name in names {
        let Some(t) = times.get(*name) else {
            continue;
        };
        let mut t = t.clone();
        t.sort_unstable();
        let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
        lines.push(format!(
            "| `{name}` | {} | {} | {} | {} | {} |",
            t.len(),
            at(0.5),
            at(0.99),
            t[t.len() - 1],
            t.iter().filter(|&&u| u > over_us).count()
        ));
    }
    lines.join("\n")
}

/// A slow log entry's name: a script's file for a script call (`EVALSHA
/// <sha>` or `FCALL fairjob_<sha>`), else the command.
fn script_name(names: &BTreeMap<String, &str>, cmd: &str, first: Option<&String>) -> String {
    let sha = match (cmd, first) {
        ("EVALSHA", Some(sha)) => sha.as_str(),
        ("FCALL", Some(f)) => f.strip_prefix("fairjob_").unwrap_or(f),
        _ => return cmd.to_owned(),
    };
    names
        .get(sha)
        .map_or_else(|| format!("script {sha}"), |n| format!("{n}.lua"))
}
