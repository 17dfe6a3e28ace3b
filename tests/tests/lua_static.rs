//! Lua hygiene, checked statically (reliability.md §3 T28): every script is a
//! `.lua` file compiled in with `include_str!` (no script text is built at run
//! time, no raw EVAL/SCRIPT/FUNCTION commands), and every key a script touches
//! comes from `KEYS` — or, for tenant shards, is `<prefix> .. <tenant>` where the
//! prefix comes from `ARGV` (by design). Data read from Redis or passed in ARGV
//! never names a key otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use fairjob_tests::source::{files_with_ext, strip_rust_comments, workspace_root};

/// The text between the `(` at `open` and its matching `)` (strings in `"`).
fn paren_body(s: &str, open: usize) -> &str {
    &s[open + 1..close_of(s, open, b"\"")]
}

fn rust_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for crate_dir in [
        "fairjob/src",
        "fairjob-worker/src",
        "fairjob-macros/src",
        "examples/src",
    ] {
        files.extend(files_with_ext(&workspace_root().join(crate_dir), "rs"));
    }
    files.sort();
    files
}

#[test]
fn scripts_are_compile_time_files_loaded_with_include_str() {
    let scripts_dir = workspace_root().join("fairjob/src/broker/scripts");
    let lua = files_with_ext(&scripts_dir, "lua");
    assert!(
        !lua.is_empty(),
        "no scripts found in {}",
        scripts_dir.display()
    );
    let on_disk: BTreeMap<String, String> = lua
        .iter()
        .map(|p| {
            (
                p.strip_prefix(&scripts_dir)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/"),
                std::fs::read_to_string(p).unwrap(),
            )
        })
        .collect();

    // The sources compiled into the library are exactly the files, byte for byte.
    let compiled: BTreeMap<String, String> = fairjob::broker::SCRIPT_SOURCES
        .iter()
        .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
        .collect();
    assert_eq!(
        compiled.keys().collect::<Vec<_>>(),
        on_disk.keys().collect::<Vec<_>>(),
        "SCRIPT_SOURCES must list every .lua file under scripts/"
    );
    for (name, src) in &on_disk {
        assert_eq!(
            &compiled[name], src,
            "{name} differs from the compiled copy"
        );
    }

    let mut problems = Vec::new();
    let broker =
        std::fs::read_to_string(workspace_root().join("fairjob/src/broker/scripts.rs")).unwrap();
    for name in on_disk.keys() {
        let referenced = broker.contains(&format!("include_str!(\"scripts/{name}\")"))
            || broker.contains(&format!(", \"{name}\");"));
        if !referenced {
            problems.push(format!(
                "{name} is not loaded with include_str! in broker/scripts.rs"
            ));
        }
    }

    let sources = rust_sources();
    // The check below must have something to check: every crate's sources.
    for must in [
        "fairjob/src/lib.rs",
        "fairjob/src/broker/scripts.rs",
        "fairjob-worker/src/cli.rs",
        "fairjob-macros/src/expand.rs",
        "examples/src/lib.rs",
    ] {
        assert!(
            sources.iter().any(|p| p.ends_with(must)),
            "{must} not among the Rust sources checked: {} files found",
            sources.len()
        );
    }
    for path in sources {
        let rel = path
            .strip_prefix(workspace_root())
            .unwrap()
            .display()
            .to_string();
        let src = strip_rust_comments(&std::fs::read_to_string(&path).unwrap());
        // Every script is built by `Lua::new` from include_str!/concat! of
        // files and separators; `Lua::new` alone calls Script::new, with
        // that source assembled with its compile-time includes
        // (`broker::assemble`), and makes the function library from the
        // same text.
        let lua_new = rel.ends_with("broker/scripts.rs")
            && src.matches("Script::new(").count() == 1
            && src.contains("fn new(body: &'static str) -> Lua")
            && src.contains("Script::new(&source)")
            && src.contains("let source = assemble(body);");
        for (at, _) in src
            .match_indices("Script::new(")
            .filter(|_| !lua_new)
            .chain(src.match_indices("Lua::new("))
        {
            let open = at + src[at..].find('(').unwrap();
            let arg = paren_body(&src, open);
            let mut rest = arg.replacen("&assemble(", "(", 1);
            while let Some(i) = rest.find("include_str!(") {
                let body_len = paren_body(&rest, i + "include_str!".len()).len();
                rest.replace_range(i..i + "include_str!(".len() + body_len + 1, "");
            }
            let rest = rest.replace("concat!(", "").replace("\"\\n\"", "");
            if rest
                .chars()
                .any(|c| !(c.is_whitespace() || matches!(c, ',' | ')' | '(')))
            {
                problems.push(format!(
                    "{rel}: Script::new with something besides include_str!: {arg:?}"
                ));
            }
        }
        for needle in [
            "redis.call",
            "redis.pcall",
            "KEYS[",
            "ARGV[",
            "\"EVAL\"",
            "\"EVALSHA\"",
            "\"EVAL_RO\"",
            "\"EVALSHA_RO\"",
            "\"SCRIPT\"",
            "\"FUNCTION\"",
            "\"FCALL\"",
            "loadstring",
        ] {
            // The connection's command classifier (cluster routing) names
            // scripting commands as byte strings (`b"EVALSHA"`) to route
            // them; it never sends a script of its own.
            let classifier_only = rel.ends_with("broker/conn/cluster.rs")
                && src
                    .match_indices(needle)
                    .all(|(i, _)| i > 0 && src.as_bytes()[i - 1] == b'b');
            if src.contains(needle) && !rel.ends_with("broker/scripts.rs") && !classifier_only {
                problems.push(format!(
                    "{rel}: contains `{needle}` (Lua or raw scripting in Rust)"
                ));
            }
        }
        if rel.ends_with("broker/scripts.rs") {
            // The only Lua-ish text allowed there is in its own unit test
            // module; it calls scripts by hash (EVALSHA) and loads the
            // compiled-in sources (SCRIPT LOAD), never evaluates a string.
            let body = src.split("#[cfg(test)]").next().unwrap();
            for needle in ["redis.call", "KEYS[", "ARGV[", "\"EVAL\"", "\"EVAL_RO\""] {
                if body.contains(needle) {
                    problems.push(format!("{rel}: contains `{needle}` outside include_str!"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------------------
// Key provenance in the Lua sources.

/// One `.lua` file with comments removed (line structure kept).
struct LuaFile {
    name: String,
    text: String,
}

fn strip_lua_comments(src: &str) -> String {
    let mut out = String::new();
    for line in src.lines() {
        let mut in_str: Option<char> = None;
        let mut cut = line.len();
        let mut prev = ' ';
        for (i, c) in line.char_indices() {
            match in_str {
                Some(q) => {
                    if c == q && prev != '\\' {
                        in_str = None;
                    }
                }
                None => {
                    if c == '\'' || c == '"' {
                        in_str = Some(c);
                    } else if c == '-' && prev == '-' {
                        cut = i - 1;
                        break;
                    }
                }
            }
            prev = c;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Splits at top-level commas (outside parentheses, braces, brackets and strings).
fn split_top(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut in_str: Option<char> = None;
    let mut start = 0;
    let mut prev = ' ';
    for (i, c) in s.char_indices() {
        match in_str {
            Some(q) => {
                if c == q && prev != '\\' {
                    in_str = None;
                }
            }
            None => match c {
                '\'' | '"' => in_str = Some(c),
                '(' | '{' | '[' => depth += 1,
                ')' | '}' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    out.push((start, &s[start..i]));
                    start = i + 1;
                }
                _ => {}
            },
        }
        prev = c;
    }
    out.push((start, &s[start..]));
    out
}

/// The matching close of the bracket at `open` (`(`/`{`), skipping Lua strings.
fn matching(s: &str, open: usize) -> usize {
    close_of(s, open, b"'\"")
}

/// The index of the bracket closing the one at `open` (`(`/`{`), skipping
/// strings opened by one of `quotes`; the end of `s` when it never closes.
fn close_of(s: &str, open: usize, quotes: &[u8]) -> usize {
    let b = s.as_bytes();
    let (o, c) = (b[open], if b[open] == b'(' { b')' } else { b'}' });
    let mut depth = 0;
    let mut in_str: Option<u8> = None;
    let mut i = open;
    while i < b.len() {
        let ch = b[i];
        if let Some(q) = in_str {
            if ch == b'\\' {
                i += 2;
                continue;
            }
            if ch == q {
                in_str = None;
            }
        } else if quotes.contains(&ch) {
            in_str = Some(ch);
        } else if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
        i += 1;
    }
    b.len()
}

#[derive(Debug, Clone)]
struct Site {
    file: String,
    line: usize,
    text: String,
}

#[derive(Default)]
struct Facts {
    /// Field name → (value expression, where) for every `name = expr` in a
    /// table constructor or `a.b.name = expr`.
    fields: BTreeMap<String, Vec<(String, Site)>>,
    /// Variable name → assignments.
    vars: BTreeMap<String, Vec<(String, Site)>>,
    /// Function name → parameter names.
    params: BTreeMap<String, Vec<String>>,
    /// Function name → the argument lists of its call sites.
    calls: BTreeMap<String, Vec<(Vec<String>, Site)>>,
    /// `redis.call` sites: command, key expression (if the command takes one), where.
    redis_calls: Vec<(String, Option<String>, Site)>,
}

const NO_KEY: &[&str] = &["TIME"];
const ONE_KEY: &[&str] = &[
    "GET",
    "LPOS",
    "LSET",
    "SET",
    "DEL",
    "UNLINK",
    "EXISTS",
    "EXPIRE",
    "PEXPIRE",
    "TTL",
    "PTTL",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "HGET",
    "HSET",
    "HDEL",
    "HGETALL",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HLEN",
    "HKEYS",
    "HVALS",
    "HEXISTS",
    "HSETNX",
    "HMGET",
    "SSCAN",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LLEN",
    "LRANGE",
    "LTRIM",
    "LREM",
    "LINDEX",
    "ZADD",
    "ZREM",
    "ZCARD",
    "ZCOUNT",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREMRANGEBYSCORE",
    "ZREMRANGEBYRANK",
    "ZSCORE",
    "ZPOPMIN",
    "ZINCRBY",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SCARD",
];

fn collect(files: &[LuaFile]) -> (Facts, Vec<String>) {
    let mut f = Facts::default();
    let mut problems = Vec::new();
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    for lf in files {
        let t = &lf.text;
        let site = |at: usize, text: &str| Site {
            file: lf.name.clone(),
            line: line_of(t, at),
            text: text.trim().to_owned(),
        };
        // Table constructors: `{ name = expr, ... }`.
        let mut blanked = t.clone().into_bytes();
        let mut i = 0;
        while let Some(off) = t[i..].find('{') {
            let open = i + off;
            let close = matching(t, open);
            let inner = &t[open + 1..close.min(t.len())];
            for (s, part) in split_top(inner) {
                if let Some((name, value)) = part.split_once('=')
                    && ident(name.trim())
                    && !value.starts_with('=')
                {
                    f.fields
                        .entry(name.trim().to_owned())
                        .or_default()
                        .push((value.trim().to_owned(), site(open + 1 + s, part)));
                }
            }
            for b in blanked.iter_mut().take(close.min(t.len())).skip(open + 1) {
                if *b != b'\n' {
                    *b = b' ';
                }
            }
            i = open + 1;
        }
        let blanked = String::from_utf8(blanked).unwrap();
        // Statement assignments: `[local] a, b.c = x, y`.
        let mut offset = 0;
        for line in blanked.lines() {
            let statements = line
                .replace(" then ", ";")
                .replace(" do ", ";")
                .replace(" else ", ";");
            for l in statements.split(';') {
                let l = l.trim();
                let l = l.strip_prefix("local ").unwrap_or(l);
                // Skip control lines and comparisons.
                let eq = l.char_indices().find(|&(i, c)| {
                    c == '='
                        && !l[i + 1..].starts_with('=')
                        && !l[..i].ends_with(['=', '~', '<', '>'])
                });
                if let Some((i, _)) = eq {
                    let (lhs, rhs) = (&l[..i], &l[i + 1..]);
                    let names: Vec<&str> = lhs.split(',').map(str::trim).collect();
                    if names.iter().all(|n| ident(n)) && !lhs.contains("if ") {
                        let values: Vec<&str> =
                            split_top(rhs).into_iter().map(|(_, v)| v).collect();
                        for (k, n) in names.iter().enumerate() {
                            let v = values.get(k).map_or("nil", |v| v.trim()).to_owned();
                            let s = Site {
                                file: lf.name.clone(),
                                line: line_of(t, offset),
                                text: line.trim().to_owned(),
                            };
                            match n.rsplit_once('.') {
                                Some((_, field)) => {
                                    f.fields.entry(field.to_owned()).or_default().push((v, s))
                                }
                                None => f.vars.entry((*n).to_owned()).or_default().push((v, s)),
                            }
                        }
                    }
                }
            }
            offset += line.len() + 1;
        }
        // Functions and their parameters.
        let mut i = 0;
        while let Some(off) = t[i..].find("function ") {
            let at = i + off + "function ".len();
            let rest = &t[at..];
            if let Some(p) = rest.find('(') {
                let name = rest[..p].trim().to_owned();
                if ident(&name) {
                    let close = matching(t, at + p);
                    let params = t[at + p + 1..close]
                        .split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect();
                    f.params.insert(name, params);
                }
            }
            i = at;
        }
        // redis.call sites.
        for pat in ["redis.call(", "redis.pcall("] {
            for (at, _) in t.match_indices(pat) {
                let open = at + pat.len() - 1;
                let close = matching(t, open);
                let args: Vec<String> = split_top(&t[open + 1..close])
                    .into_iter()
                    .map(|(_, a)| a.trim().to_owned())
                    .collect();
                let s = site(at, &t[at..=close.min(t.len() - 1)]);
                let cmd = args[0].trim_matches(['\'', '"']).to_uppercase();
                if !(args[0].starts_with(['\'', '"'])) {
                    problems.push(format!(
                        "{}:{}: command name is not a literal: {}",
                        s.file, s.line, s.text
                    ));
                    continue;
                }
                if NO_KEY.contains(&cmd.as_str()) {
                    f.redis_calls.push((cmd, None, s));
                } else if ONE_KEY.contains(&cmd.as_str()) {
                    let multi =
                        matches!(cmd.as_str(), "DEL" | "UNLINK" | "EXISTS") && args.len() > 2;
                    if multi {
                        problems.push(format!(
                            "{}:{}: {cmd} with several keys is not analysed: {}",
                            s.file, s.line, s.text
                        ));
                    }
                    f.redis_calls.push((cmd, args.get(1).cloned(), s));
                } else {
                    problems.push(format!(
                        "{}:{}: command {cmd} is not known to this check (extend ONE_KEY/NO_KEY \
                         after checking its key positions): {}",
                        s.file, s.line, s.text
                    ));
                }
            }
        }
    }
    // Call sites of the scripts' own functions.
    let names: Vec<String> = f.params.keys().cloned().collect();
    for lf in files {
        let t = &lf.text;
        for name in &names {
            let pat = format!("{name}(");
            for (at, _) in t.match_indices(&pat) {
                let before = t[..at].chars().last().unwrap_or(' ');
                if before.is_ascii_alphanumeric() || before == '_' || t[..at].ends_with("function ")
                {
                    continue;
                }
                let open = at + name.len();
                let close = matching(t, open);
                let args = split_top(&t[open + 1..close])
                    .into_iter()
                    .map(|(_, a)| a.trim().to_owned())
                    .collect();
                f.calls.entry(name.clone()).or_default().push((
                    args,
                    Site {
                        file: lf.name.clone(),
                        line: line_of(t, at),
                        text: t[at..=close.min(t.len() - 1)].to_owned(),
                    },
                ));
            }
        }
    }
    (f, problems)
}

/// Whether a shard prefix expression is `ARGV[…]` (or a declared key,
/// `KEYS[…]`, used whole with an empty suffix: `unique_take.lua`), or a
/// function parameter that every call site fills with one.
fn prefix_from_argv(f: &Facts, v: &str, depth: u32) -> bool {
    let v = v.trim();
    if (v.starts_with("ARGV[") || v.starts_with("KEYS[")) && v.ends_with(']') {
        return true;
    }
    if depth > 6 || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return false;
    }
    let mut found = false;
    for (func, params) in &f.params {
        if let Some(idx) = params.iter().position(|p| p == v) {
            for (args, _) in f.calls.get(func).into_iter().flatten() {
                found = true;
                let arg = args.get(idx).map_or("nil", String::as_str);
                if !prefix_from_argv(f, arg, depth + 1) {
                    return false;
                }
            }
        }
    }
    found
}

/// Why `expr`, used as a key, is not derived from KEYS (None = it is).
fn key_problems(f: &Facts, expr: &str, depth: u32, out: &mut BTreeSet<String>) {
    let e = expr.trim();
    if depth > 6 {
        out.insert(format!("cannot follow `{e}`"));
        return;
    }
    if e.starts_with("KEYS[") && e.ends_with(']') && e.matches('[').count() == 1 {
        return;
    }
    // `<…>.prefix .. <tenant>`: a shard list; the prefix must come from ARGV.
    if let Some((prefix, tail)) = e.split_once("..") {
        let prefix = prefix.trim();
        let tail = tail.trim();
        let field = prefix.rsplit('.').next().unwrap();
        if field == "prefix" && tail.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            for (v, s) in f.fields.get("prefix").into_iter().flatten() {
                if !prefix_from_argv(f, v, 0) {
                    out.insert(format!(
                        "{}:{}: a shard prefix comes from `{v}`, not ARGV: {}",
                        s.file, s.line, s.text
                    ));
                }
            }
            return;
        }
        out.insert(format!("a key is built by concatenation: `{e}`"));
        return;
    }
    if e == "nil" {
        return;
    }
    if !e
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        out.insert(format!(
            "a key comes from the expression `{e}` (not KEYS, not an ARGV shard prefix)"
        ));
        return;
    }
    match e.rsplit_once('.') {
        Some((_, field)) => {
            let assigned = f.fields.get(field).cloned().unwrap_or_default();
            if assigned.is_empty() {
                out.insert(format!(
                    "no assignment found for the key field `{field}` (`{e}`)"
                ));
            }
            for (v, s) in assigned {
                let mut inner = BTreeSet::new();
                key_problems(f, &v, depth + 1, &mut inner);
                if !inner.is_empty() {
                    out.insert(format!(
                        "{}:{}: key field `{field}` is set from `{v}`: {}",
                        s.file, s.line, s.text
                    ));
                }
            }
        }
        None => {
            let mut found = false;
            for (v, s) in f.vars.get(e).into_iter().flatten() {
                found = true;
                let mut inner = BTreeSet::new();
                key_problems(f, v, depth + 1, &mut inner);
                if !inner.is_empty() {
                    out.insert(format!(
                        "{}:{}: key variable `{e}` is set from `{v}`: {}",
                        s.file, s.line, s.text
                    ));
                }
            }
            for (func, params) in &f.params {
                if let Some(idx) = params.iter().position(|p| p == e) {
                    found = true;
                    for (args, s) in f.calls.get(func).into_iter().flatten() {
                        let arg = args.get(idx).map_or("nil", String::as_str);
                        let mut inner = BTreeSet::new();
                        key_problems(f, arg, depth + 1, &mut inner);
                        if !inner.is_empty() {
                            out.insert(format!(
                                "{}:{}: `{func}` gets its key parameter `{e}` from `{arg}`: {}",
                                s.file, s.line, s.text
                            ));
                        }
                    }
                }
            }
            if !found {
                out.insert(format!("no assignment found for the key variable `{e}`"));
            }
        }
    }
}

/// The batch scripts, outside this rule by design: a batch's keys are its
/// hash key (`KEYS[1]`; in an exit script on one server, the batch's hash
/// passed in ARGV) with a literal suffix, all in the batch's hash tag, and the
/// queue keys its callbacks and a workflow's held steps go to were built by
/// `broker/keys.rs` at the commit and stored in the batch's hash, as is the
/// prefix of the held steps' index keys (`ix`: `<prefix><encoded jid>` →
/// bid, written at staging and deleted at a step's release or cancel; only
/// workflows have them, and they run on one server). On a Redis
/// Cluster, where those are in other slots, the scripts push nothing there
/// (see `lib/batch.lua`: `split`). The exit scripts that call into them
/// (`finish.lua`, `shard_finish.lua`) stay checked.
const BATCH_SCRIPTS: &[&str] = &[
    "lib/batch.lua",
    "batch_stage.lua",
    "batch_commit.lua",
    "batch_end.lua",
    "batch_add.lua",
    "workflow_stage.lua",
    "workflow_work.lua",
];

#[test]
fn scripts_touch_keys_only_through_keys_and_argv_prefixes() {
    let (files, sources) = {
        let mut v = Vec::new();
        let mut raw = Vec::new();
        for (name, src) in fairjob::broker::SCRIPT_SOURCES {
            if BATCH_SCRIPTS.contains(name) {
                // Only they build a batch's keys: none of their functions
                // touches a key elsewhere.
                assert!(
                    name.starts_with("lib/batch")
                        || src.lines().all(|l| !l.contains("redis.call")
                            || l.contains("p,")
                            || l.contains("w,")
                            || l.contains("p ..")),
                    "{name}: a batch script touches a key that is not its batch's"
                );
                continue;
            }
            v.push(LuaFile {
                name: (*name).to_owned(),
                text: strip_lua_comments(src),
            });
            raw.push(((*name).to_owned(), (*src).to_owned()));
        }
        (v, raw)
    };
    assert!(sources.len() >= 5);
    let (facts, mut problems) = collect(&files);
    assert!(
        facts.redis_calls.len() >= 20,
        "the parser found too few redis.call sites: {}",
        facts.redis_calls.len()
    );
    // Root cause → the redis.call sites it affects.
    let mut findings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (cmd, key, s) in &facts.redis_calls {
        let Some(key) = key else { continue };
        let mut out = BTreeSet::new();
        key_problems(&facts, key, 0, &mut out);
        for p in out {
            findings
                .entry(p)
                .or_default()
                .push(format!("{}:{} {cmd} `{key}`", s.file, s.line));
        }
    }
    for (cause, uses) in findings {
        problems.push(format!(
            "{cause}\n    affects {} key use(s), e.g. {}",
            uses.len(),
            uses[..uses.len().min(3)].join("; ")
        ));
    }
    assert!(
        problems.is_empty(),
        "keys not derived from KEYS (or an ARGV shard prefix):\n{}",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Includes: each script carries exactly the includes it declares.

/// The top-level names a Lua source defines (`local function f`, `local X =`).
fn defined_names(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in strip_lua_comments(src).lines() {
        let rest = if let Some(r) = line.strip_prefix("local function ") {
            r
        } else if let Some(r) = line.strip_prefix("local ") {
            r
        } else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

/// The identifiers a Lua source uses (comments, strings and field names
/// after a `.` left out).
fn used_names(src: &str) -> BTreeSet<String> {
    let code = strip_lua_comments(src);
    let mut out = BTreeSet::new();
    let mut word = String::new();
    let mut before = ' ';
    let mut in_str: Option<char> = None;
    let mut prev = ' ';
    for c in code.chars().chain(std::iter::once(' ')) {
        if let Some(q) = in_str {
            if c == q && prev != '\\' {
                in_str = None;
            }
            prev = c;
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            if word.is_empty() {
                before = prev;
            }
            word.push(c);
            prev = c;
            continue;
        }
        if !word.is_empty() && !word.starts_with(|d: char| d.is_ascii_digit()) && before != '.' {
            out.insert(word.clone());
        }
        word.clear();
        if c == '\'' || c == '"' {
            in_str = Some(c);
        }
        prev = c;
    }
    out
}

/// The problems of one source against the includes it carries: a name of an
/// include it does not carry, or a declared include nothing of which it uses
/// (directly or through another declared include).
fn include_problems(
    name: &str,
    body: &str,
    includes: &[(&str, &str)],
    carried: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    let used = used_names(body);
    let own = defined_names(body);
    let defines = |inc: &str| {
        includes
            .iter()
            .find(|(n, _)| *n == inc)
            .map(|(_, s)| defined_names(s))
            .unwrap_or_default()
    };
    for (inc, _) in includes {
        if carried.contains(inc) {
            continue;
        }
        for n in defines(inc).intersection(&used) {
            if !own.contains(n) {
                problems.push(format!(
                    "{name} uses `{n}` of include `{inc}`, which it does not declare (`--! use`)"
                ));
            }
        }
    }
    for inc in fairjob::broker::uses(body) {
        // What the declared include brings: itself and what it uses.
        let brought = fairjob::broker::includes_of(&format!("--! use {inc}\n"));
        let any = brought.iter().any(|b| !defines(b).is_disjoint(&used));
        if !any {
            problems.push(format!(
                "{name} declares `--! use {inc}` but uses nothing of it"
            ));
        }
    }
    problems
}

#[test]
fn every_script_carries_exactly_the_includes_it_declares() {
    let includes = fairjob::broker::INCLUDES;
    assert!(includes.len() >= 6, "{} include files", includes.len());
    // The checker first proves itself on planted sources: a script using a
    // function of an include it does not declare, and one declaring an
    // include it does not use.
    let planted_missing = "--! use common\nfj_wake(KEYS[1])\nreturn shard_reserve(nil, 1)\n";
    let carried = fairjob::broker::includes_of(planted_missing);
    let found = include_problems("planted_missing.lua", planted_missing, includes, &carried);
    assert!(
        found
            .iter()
            .any(|p| p.contains("`shard_reserve`") && p.contains("dispatch/reserve")),
        "the checker missed an undeclared include: {found:?}"
    );
    let planted_unused = "--! use common, unique\nfj_wake(KEYS[1])\n";
    let carried = fairjob::broker::includes_of(planted_unused);
    let found = include_problems("planted_unused.lua", planted_unused, includes, &carried);
    assert!(
        found.iter().any(|p| p.contains("`--! use unique`")),
        "the checker missed an unused include: {found:?}"
    );

    let mut problems = Vec::new();
    for (name, src) in fairjob::broker::SCRIPT_SOURCES {
        let carried = if let Some(inc) = name
            .strip_prefix("lib/")
            .and_then(|n| n.strip_suffix(".lua"))
        {
            // An include carries what it declares, and may use itself.
            let mut c = fairjob::broker::includes_of(src);
            c.extend(includes.iter().map(|(n, _)| *n).filter(|n| *n == inc));
            c
        } else {
            fairjob::broker::includes_of(src)
        };
        problems.extend(include_problems(name, src, includes, &carried));
        // The assembled script is the includes, each once, then the script.
        if !name.starts_with("lib/") {
            let assembled = fairjob::broker::assemble(src);
            let expected: usize = carried
                .iter()
                .map(|c| includes.iter().find(|(n, _)| n == c).unwrap().1.len() + 1)
                .sum::<usize>()
                + src.len();
            if assembled.len() != expected || !assembled.ends_with(src) {
                problems.push(format!("{name}: assembled with more than its includes"));
            }
        }
    }
    // `lease.lua` needs nothing: it is sent as it is.
    let lease = fairjob::broker::SCRIPT_SOURCES
        .iter()
        .find(|(n, _)| *n == "lease.lua")
        .unwrap()
        .1;
    assert_eq!(fairjob::broker::assemble(lease), lease);
    assert!(problems.is_empty(), "{problems:#?}");
}
