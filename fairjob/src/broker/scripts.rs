//! The Lua scripts, each its own `.lua` file compiled in with `include_str!`.
//! On Redis 7 and later each script is also a function library of its own
//! (`fairjob_<SHA1>`, loaded with `FUNCTION LOAD` when Redis doesn't have
//! it) and is called with `FCALL`: its includes' functions are then made
//! once, when the library loads, instead of at every call (a sharded
//! fetch's 54 of them cost about 5% of its Redis work). Where Redis has no
//! functions (6.2), or refuses them (an ACL without `FUNCTION`), or
//! [`ConnectOptions::functions`](super::ConnectOptions::functions) is off,
//! scripts are called by their SHA1 (`EVALSHA`; loaded with `SCRIPT LOAD`).
//! The two run the same source: the library wraps the script's body in a
//! function and sets `KEYS` and `ARGV` for each call; an include that keeps
//! state for one call names the function that resets it on a `--! per-call`
//! line. A library stays in Redis (and in its RDB) until deleted: each
//! fairjob version that changes a script adds its own
//! (`FUNCTION DELETE fairjob_<SHA1>` removes an old one; a worker that
//! still calls it loads it again). A script declares the include files it uses in its
//! first lines (`--! use dispatch/reserve, unique`; an include declares its
//! own the same way), and carries exactly those ([`assemble`]): the Lua twin
//! of each rule of [`crate::policy`] is one include under `scripts/lib/`.
//! Each script is called from exactly one typed function of the broker,
//! which alone knows its argument order and decodes its reply.
//!
//! A [`Call`] is one invocation, built key by key and argument by argument. It
//! is a plain command, so several calls can share one pipeline
//! ([`RedisBroker::invoke_all`](super::RedisBroker::invoke_all)): Redis runs
//! them in the order sent, which a bulk push relies on to keep its jobs in
//! order, even when the scripts have to be loaded first.

use std::sync::LazyLock;

use redis::{Cmd, Script, ToRedisArgs};

/// A script: its source and its SHA1, and the same as a function library.
pub(crate) struct Lua {
    script: Script,
    /// Its function's (and library's) name, `fairjob_<SHA1>`.
    function: String,
    /// The function library's source.
    library: String,
}

impl Lua {
    /// A new call of this script.
    pub(crate) fn call(&self) -> Call<'_> {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// The SHA1 Redis knows the script by.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// Loads the script (`SCRIPT LOAD`, sent to every node of a cluster by
    /// the client's routing).
    pub(crate) async fn load<C: redis::aio::ConnectionLike>(
        &self,
        con: &mut C,
    ) -> redis::RedisResult<String> {
        self.script.load_async(con).await
    }

    /// Loads the script's function library (`FUNCTION LOAD REPLACE`, sent to
    /// every primary of a cluster by the client's routing).
    pub(crate) async fn load_function<C: redis::aio::ConnectionLike>(
        &self,
        con: &mut C,
    ) -> redis::RedisResult<()> {
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&self.library)
            .query_async::<redis::Value>(con)
            .await
            .map(drop)
    }

    fn new(body: &'static str) -> Lua {
        let source = assemble(body);
        let script = Script::new(&source);
        let function = format!("fairjob_{}", script.get_hash());
        let library = library(&function, &source[..source.len() - body.len()], body);
        Lua {
            script,
            function,
            library,
        }
    }
}

/// A function library of one script: `includes` (assembled) at its top,
/// made once when it loads, the body in a function that the registered one
/// calls after setting `KEYS` and `ARGV` and resetting the includes' per-call
/// state.
fn library(name: &str, includes: &str, body: &str) -> String {
    let mut resets = String::new();
    for line in includes.lines() {
        if let Some(f) = line.strip_prefix("--! per-call ") {
            resets.push_str(&format!("  {}()\n", f.trim()));
        }
    }
    format!(
        "#!lua name={name}\nlocal KEYS, ARGV\n{includes}\nlocal function fj_script()\n{body}\nend\n\
         redis.register_function('{name}', function(keys, args)\n  KEYS, ARGV = keys, args\n{resets}  \
         return fj_script()\nend)\n"
    )
}

/// How a broker calls its scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Calling {
    /// `FCALL` of the script's function library.
    Functions,
    /// `EVALSHA` of the script.
    Hash,
}

/// Redis doesn't have the script or function (a restart, a failover to a
/// server that never had it, `SCRIPT FLUSH`, `FUNCTION FLUSH`).
pub(crate) fn is_missing(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || e.to_string().contains("Function not found")
}

/// Redis is out of memory (`maxmemory` under `noeviction`) and refused the
/// call before it ran.
pub(crate) fn is_oom(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM")
}

/// Redis can't or won't run functions: 6.2 doesn't know `FCALL` or
/// `FUNCTION`, an ACL may refuse them.
pub(crate) fn is_unsupported(e: &redis::RedisError) -> bool {
    let m = e.to_string().to_ascii_lowercase();
    m.contains("unknown command") || m.contains("noperm") || m.contains("no permissions")
}

/// One call of a script: its keys and arguments.
pub(crate) struct Call<'a> {
    lua: &'a Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call<'_> {
    /// Appends a key.
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Appends an argument.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// The script called.
    pub(crate) fn lua(&self) -> &Lua {
        self.lua
    }

    /// The command: `FCALL` of the script's function, or `EVALSHA`.
    pub(crate) fn command(&self, calling: Calling) -> Cmd {
        let mut cmd = match calling {
            Calling::Functions => {
                let mut c = redis::cmd("FCALL");
                c.arg(&self.lua.function);
                c
            }
            Calling::Hash => {
                let mut c = redis::cmd("EVALSHA");
                c.arg(self.lua.hash());
                c
            }
        };
        cmd.arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }
}

/// The include files under `scripts/lib/`, by the name a script's `--! use`
/// line gives them. Each is the Lua twin of one rule of [`crate::policy`]
/// (see its module doc's table), but `common` (helpers), `clock` (Redis's
/// clock), `cache` (the dispatch scripts' per-call cache), `yield` (fair
/// yield's record format) and `exit` (a parked job's exit from its record,
/// the Lua side of `worker/exit.rs`).
pub const INCLUDES: &[(&str, &str)] = &[
    ("common", include_str!("scripts/lib/common.lua")),
    ("clock", include_str!("scripts/lib/clock.lua")),
    ("cache", include_str!("scripts/lib/cache.lua")),
    ("gcra", include_str!("scripts/lib/gcra.lua")),
    ("reroute", include_str!("scripts/lib/reroute.lua")),
    ("slots", include_str!("scripts/lib/slots.lua")),
    ("unique", include_str!("scripts/lib/unique.lua")),
    ("yield", include_str!("scripts/lib/yield.lua")),
    ("exit", include_str!("scripts/lib/exit.lua")),
    ("batch", include_str!("scripts/lib/batch.lua")),
    (
        "dispatch/state",
        include_str!("scripts/lib/dispatch/state.lua"),
    ),
    (
        "dispatch/settings",
        include_str!("scripts/lib/dispatch/settings.lua"),
    ),
    (
        "dispatch/order",
        include_str!("scripts/lib/dispatch/order.lua"),
    ),
    (
        "dispatch/limit",
        include_str!("scripts/lib/dispatch/limit.lua"),
    ),
    (
        "dispatch/pace",
        include_str!("scripts/lib/dispatch/pace.lua"),
    ),
    (
        "dispatch/reserve",
        include_str!("scripts/lib/dispatch/reserve.lua"),
    ),
];

/// The includes a source declares: its `--! use a, b` lines, in order.
pub fn uses(source: &str) -> Vec<&str> {
    source
        .lines()
        .take_while(|l| l.starts_with("--"))
        .filter_map(|l| l.strip_prefix("--! use "))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect()
}

/// The includes `body` carries, each once, every one after those it uses:
/// its `--! use` includes and theirs, depth first.
pub fn includes_of(body: &str) -> Vec<&'static str> {
    fn visit(name: &str, seen: &mut Vec<&'static str>, path: &mut Vec<String>) {
        if seen.contains(&name) {
            return;
        }
        assert!(
            !path.iter().any(|p| p == name),
            "Lua includes use each other in a circle: {path:?} -> {name}"
        );
        let (key, src) = INCLUDES
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("`--! use {name}`: no include scripts/lib/{name}.lua"));
        path.push(name.to_owned());
        for dep in uses(src) {
            visit(dep, seen, path);
        }
        path.pop();
        seen.push(key);
    }
    let mut seen = Vec::new();
    for name in uses(body) {
        visit(name, &mut seen, &mut Vec::new());
    }
    seen
}

/// A script's source as Redis gets it: its includes ([`includes_of`]), then
/// the script itself. Only compile-time files take part (the clock include
/// may be the testing mode's frozen one, see `freeze_clock`).
pub fn assemble(body: &str) -> String {
    let mut out = String::new();
    for name in includes_of(body) {
        let src = match name {
            "clock" => clock_source(),
            _ => INCLUDES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| *s)
                .unwrap_or(""),
        };
        out.push_str(src);
        out.push('\n');
    }
    out.push_str(body);
    ASSEMBLED.store(true, std::sync::atomic::Ordering::SeqCst);
    out
}

static ASSEMBLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static FROZEN_CLOCK: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn clock_source() -> &'static str {
    FROZEN_CLOCK
        .get()
        .copied()
        .unwrap_or(include_str!("scripts/lib/clock.lua"))
}

/// Testing only: assembles every script of this process with `source` as
/// its clock include instead of Redis's TIME (a frozen clock a test moves:
/// see `fairjob::testing::ScriptClock`). Must be called before the first
/// script is built; a later call with the same source changes nothing.
///
/// # Panics
///
/// When a script was already built with another clock.
#[cfg(feature = "testing")]
pub fn freeze_clock(source: &'static str) {
    let set = *FROZEN_CLOCK.get_or_init(|| {
        assert!(
            !ASSEMBLED.load(std::sync::atomic::Ordering::SeqCst),
            "freeze_clock: scripts were already built with Redis's clock"
        );
        source
    });
    assert!(
        std::ptr::eq(set, source) || set == source,
        "freeze_clock: another clock is set"
    );
}

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Lua> =
            LazyLock::new(|| Lua::new(include_str!(concat!("scripts/", $file))));
    };
}

script!(PUSH, "push.lua");
script!(UNIQUE_PUSH, "unique_push.lua");
script!(FETCH, "fetch.lua");
script!(SHARD_FETCH, "shard_fetch.lua");
script!(FINISH, "finish.lua");
script!(SHARD_FINISH, "shard_finish.lua");
script!(SLOT_RELEASE, "slot_release.lua");
script!(SCHEDULE, "schedule.lua");
script!(PROMOTE, "promote.lua");
script!(LEASE, "lease.lua");
script!(SHARD_POLICY, "shard_policy.lua");
script!(SLOT_ACQUIRE, "slot_acquire.lua");
script!(SLOT_SET, "slot_set.lua");
script!(SHARD_RECONCILE, "shard_reconcile.lua");
script!(SLOT_FORGET, "slot_forget.lua");
script!(WINDOW, "window.lua");
script!(FRONT, "front.lua");
script!(SLOT_TAKE, "slot_take.lua");
script!(RECLAIM, "reclaim.lua");
script!(SAMPLER_LEASE, "sampler_lease.lua");
script!(SHARD_ACK_MANY, "shard_ack_many.lua");
script!(ITERATE_CLAIM, "iterate_claim.lua");
script!(ITERATE_SAVE, "iterate_save.lua");
script!(RATE_ACQUIRE, "rate_acquire.lua");
script!(RATE_RELEASE, "rate_release.lua");
script!(RATE_SET, "rate_set.lua");
script!(CRON_CLAIM, "cron_claim.lua");
script!(CRON_REDRIVE, "cron_redrive.lua");
script!(CRON_SET, "cron_set.lua");
script!(CRON_RECONCILE, "cron_reconcile.lua");
script!(CRON_RELEASE, "cron_release.lua");
script!(UNIQUE_RELEASE, "unique_release.lua");
script!(SHARD_YIELD, "shard_yield.lua");
script!(SHARD_YIELD_ASK, "shard_yield_ask.lua");
script!(RELAY_TRIM, "relay_trim.lua");
script!(UNIQUE_TAKE, "unique_take.lua");
script!(BATCH_STAGE, "batch_stage.lua");
script!(BATCH_COMMIT, "batch_commit.lua");
script!(BATCH_END, "batch_end.lua");
script!(BATCH_ADD, "batch_add.lua");
script!(WORKFLOW_STAGE, "workflow_stage.lua");
script!(WORKFLOW_WORK, "workflow_work.lua");

/// Each script's name and SHA1 as Redis knows it (what `SLOWLOG`, `MONITOR`
/// and `SCRIPT EXISTS` show for an `EVALSHA`), to tell which fairjob script a
/// slow call was.
pub fn script_hashes() -> Vec<(&'static str, String)> {
    ALL.iter()
        .map(|(name, s)| (*name, s.hash().to_owned()))
        .collect()
}

/// Every script.
pub(crate) fn all() -> impl Iterator<Item = &'static Lua> {
    ALL.iter().map(|(_, s)| &***s)
}

static ALL: [(&str, &LazyLock<Lua>); 42] = [
    ("push", &PUSH),
    ("fetch", &FETCH),
    ("shard_fetch", &SHARD_FETCH),
    ("finish", &FINISH),
    ("shard_finish", &SHARD_FINISH),
    ("slot_release", &SLOT_RELEASE),
    ("schedule", &SCHEDULE),
    ("promote", &PROMOTE),
    ("lease", &LEASE),
    ("shard_policy", &SHARD_POLICY),
    ("slot_acquire", &SLOT_ACQUIRE),
    ("slot_set", &SLOT_SET),
    ("shard_reconcile", &SHARD_RECONCILE),
    ("slot_forget", &SLOT_FORGET),
    ("window", &WINDOW),
    ("front", &FRONT),
    ("slot_take", &SLOT_TAKE),
    ("reclaim", &RECLAIM),
    ("sampler_lease", &SAMPLER_LEASE),
    ("shard_ack_many", &SHARD_ACK_MANY),
    ("iterate_claim", &ITERATE_CLAIM),
    ("iterate_save", &ITERATE_SAVE),
    ("rate_acquire", &RATE_ACQUIRE),
    ("rate_release", &RATE_RELEASE),
    ("rate_set", &RATE_SET),
    ("cron_claim", &CRON_CLAIM),
    ("cron_redrive", &CRON_REDRIVE),
    ("cron_set", &CRON_SET),
    ("cron_reconcile", &CRON_RECONCILE),
    ("cron_release", &CRON_RELEASE),
    ("unique_release", &UNIQUE_RELEASE),
    ("shard_yield", &SHARD_YIELD),
    ("shard_yield_ask", &SHARD_YIELD_ASK),
    ("relay_trim", &RELAY_TRIM),
    ("unique_take", &UNIQUE_TAKE),
    ("unique_push", &UNIQUE_PUSH),
    ("batch_stage", &BATCH_STAGE),
    ("batch_commit", &BATCH_COMMIT),
    ("batch_end", &BATCH_END),
    ("batch_add", &BATCH_ADD),
    ("workflow_stage", &WORKFLOW_STAGE),
    ("workflow_work", &WORKFLOW_WORK),
];

/// All script sources (the include files under `lib/` among them), for the
/// static checks that none is built from runtime data, by path under `scripts/`.
pub const SCRIPT_SOURCES: &[(&str, &str)] = &[
    ("lib/common.lua", include_str!("scripts/lib/common.lua")),
    ("lib/clock.lua", include_str!("scripts/lib/clock.lua")),
    ("lib/cache.lua", include_str!("scripts/lib/cache.lua")),
    ("lib/gcra.lua", include_str!("scripts/lib/gcra.lua")),
    ("lib/reroute.lua", include_str!("scripts/lib/reroute.lua")),
    ("lib/slots.lua", include_str!("scripts/lib/slots.lua")),
    ("lib/unique.lua", include_str!("scripts/lib/unique.lua")),
    ("lib/yield.lua", include_str!("scripts/lib/yield.lua")),
    ("lib/exit.lua", include_str!("scripts/lib/exit.lua")),
    ("lib/batch.lua", include_str!("scripts/lib/batch.lua")),
    (
        "lib/dispatch/state.lua",
        include_str!("scripts/lib/dispatch/state.lua"),
    ),
    (
        "lib/dispatch/settings.lua",
        include_str!("scripts/lib/dispatch/settings.lua"),
    ),
    (
        "lib/dispatch/order.lua",
        include_str!("scripts/lib/dispatch/order.lua"),
    ),
    (
        "lib/dispatch/limit.lua",
        include_str!("scripts/lib/dispatch/limit.lua"),
    ),
    (
        "lib/dispatch/pace.lua",
        include_str!("scripts/lib/dispatch/pace.lua"),
    ),
    (
        "lib/dispatch/reserve.lua",
        include_str!("scripts/lib/dispatch/reserve.lua"),
    ),
    (
        "iterate_claim.lua",
        include_str!("scripts/iterate_claim.lua"),
    ),
    ("iterate_save.lua", include_str!("scripts/iterate_save.lua")),
    ("shard_yield.lua", include_str!("scripts/shard_yield.lua")),
    (
        "shard_yield_ask.lua",
        include_str!("scripts/shard_yield_ask.lua"),
    ),
    ("push.lua", include_str!("scripts/push.lua")),
    ("fetch.lua", include_str!("scripts/fetch.lua")),
    ("shard_fetch.lua", include_str!("scripts/shard_fetch.lua")),
    ("finish.lua", include_str!("scripts/finish.lua")),
    ("shard_finish.lua", include_str!("scripts/shard_finish.lua")),
    ("slot_release.lua", include_str!("scripts/slot_release.lua")),
    ("schedule.lua", include_str!("scripts/schedule.lua")),
    ("promote.lua", include_str!("scripts/promote.lua")),
    ("lease.lua", include_str!("scripts/lease.lua")),
    ("shard_policy.lua", include_str!("scripts/shard_policy.lua")),
    ("slot_acquire.lua", include_str!("scripts/slot_acquire.lua")),
    ("slot_set.lua", include_str!("scripts/slot_set.lua")),
    (
        "shard_reconcile.lua",
        include_str!("scripts/shard_reconcile.lua"),
    ),
    ("slot_forget.lua", include_str!("scripts/slot_forget.lua")),
    ("window.lua", include_str!("scripts/window.lua")),
    ("front.lua", include_str!("scripts/front.lua")),
    ("slot_take.lua", include_str!("scripts/slot_take.lua")),
    ("reclaim.lua", include_str!("scripts/reclaim.lua")),
    (
        "sampler_lease.lua",
        include_str!("scripts/sampler_lease.lua"),
    ),
    (
        "shard_ack_many.lua",
        include_str!("scripts/shard_ack_many.lua"),
    ),
    ("rate_acquire.lua", include_str!("scripts/rate_acquire.lua")),
    ("rate_release.lua", include_str!("scripts/rate_release.lua")),
    ("rate_set.lua", include_str!("scripts/rate_set.lua")),
    ("cron_claim.lua", include_str!("scripts/cron_claim.lua")),
    ("cron_redrive.lua", include_str!("scripts/cron_redrive.lua")),
    ("cron_set.lua", include_str!("scripts/cron_set.lua")),
    (
        "cron_reconcile.lua",
        include_str!("scripts/cron_reconcile.lua"),
    ),
    ("cron_release.lua", include_str!("scripts/cron_release.lua")),
    (
        "unique_release.lua",
        include_str!("scripts/unique_release.lua"),
    ),
    ("relay_trim.lua", include_str!("scripts/relay_trim.lua")),
    ("unique_take.lua", include_str!("scripts/unique_take.lua")),
    ("unique_push.lua", include_str!("scripts/unique_push.lua")),
    ("batch_stage.lua", include_str!("scripts/batch_stage.lua")),
    ("batch_commit.lua", include_str!("scripts/batch_commit.lua")),
    ("batch_end.lua", include_str!("scripts/batch_end.lua")),
    ("batch_add.lua", include_str!("scripts/batch_add.lua")),
    (
        "workflow_stage.lua",
        include_str!("scripts/workflow_stage.lua"),
    ),
    (
        "workflow_work.lua",
        include_str!("scripts/workflow_work.lua"),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_static_files_with_data_only_in_argv() {
        for (name, src) in SCRIPT_SOURCES {
            assert!(
                !src.contains("loadstring") && !src.contains("load("),
                "{name} evaluates code"
            );
            assert!(!src.contains("{{"), "{name} looks like a format! template");
        }
    }
}
