//! One-way layers, checked statically: each module of `fairjob` imports only
//! from the layers below it (`error` → `wire` → `broker` → `fair`, `limit`,
//! `queues`, `config` → `inspect`, `client` → `job` → `worker` → `testing`,
//! `prelude`),
//! modules of one layer import one another without a cycle, the crates above
//! the library (`fairjob-worker`, `fairjob-web`) keep their own files in
//! order, and only `fairjob/src/broker/` (and the error type, which wraps the
//! Redis client's error) names the Redis client. The broker is a driver:
//! no presentation (date or duration formatting, page sizes of a UI) under
//! `broker/`, no file there over [`MAX_BROKER_FILE_LINES`] lines (Rust or
//! Lua; no Lua file over [`MAX_LUA_FILE_LINES`]), and no
//! `impl RedisBroker` outside it (views are built in `inspect/`); the UI
//! crates name nothing under `fairjob::broker`, only `fairjob::inspect`.
//!
//! Every `crate::…` and `super::…` path counts, in `use` lines and inline,
//! unit-test modules included. The checker is tested on a planted upward
//! import before it is trusted on the real sources. Run with `--nocapture` to
//! see the module graph it reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fairjob_tests::source::{files_with_ext, strip_rust_comments, workspace_root};

/// The library's top-level modules and their layers.
const LIBRARY: &[(&str, u8)] = &[
    ("error", 0),
    ("wire", 1),
    ("broker", 2),
    ("fair", 3),
    ("limit", 3),
    ("policy", 1),
    ("rate", 3),
    ("queues", 3),
    ("config", 3),
    ("metrics", 3),
    ("otel", 3),
    ("inspect", 4),
    ("client", 4),
    ("job", 5),
    ("batch", 5),
    ("worker", 6),
    ("testing", 7),
    ("prelude", 7),
];

/// The crates built on the library, with their own modules' layers.
const ABOVE: &[(&str, &[(&str, u8)])] = &[
    (
        "fairjob-worker/src",
        &[
            ("inspect", 0),
            ("metrics", 0),
            ("web", 0),
            ("postgres", 0),
            ("otel", 0),
            ("cli", 1),
        ],
    ),
    (
        "fairjob-postgres/src",
        &[
            ("error", 0),
            ("metrics", 0),
            ("schema", 1),
            ("enqueue", 1),
            ("batch", 1),
            ("status", 1),
            ("pump", 2),
            ("worker", 3),
            ("testing", 2),
        ],
    ),
    (
        "fairjob-web/src",
        &[
            ("error", 0),
            ("config", 0),
            ("state", 0),
            ("fmt", 0),
            ("reasons", 1),
            ("params", 0),
            ("charts", 0),
            ("escape", 0),
            ("security", 1),
            ("load", 1),
            ("act", 1),
            ("assets", 1),
            ("request", 2),
            ("pages", 3),
            ("api", 3),
            ("routes", 4),
        ],
    ),
];

/// A source file: its path relative to its crate's `src`, and its text.
#[derive(Clone)]
struct Source {
    rel: String,
    text: String,
}

fn read_tree(dir: &Path) -> Vec<Source> {
    files_with_ext(dir, "rs")
        .into_iter()
        .map(|p| Source {
            rel: p
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            text: std::fs::read_to_string(&p).unwrap(),
        })
        .collect()
}

/// The module path of a file: `worker/processor.rs` → `[worker, processor]`,
/// `worker/mod.rs` → `[worker]`, `lib.rs` → `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    if parts.first().is_some_and(|p| p == "bin") {
        parts.clear();
    }
    parts
}

fn ident_at(s: &str, at: usize) -> Option<&str> {
    let rest = &s[at..];
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The first segments named after `prefix::` at `at` in `s`: `x` for
/// `prefix::x::…`, every item's first segment for `prefix::{a, b::c}`.
fn first_segments(s: &str, at: usize) -> Vec<String> {
    if s[at..].starts_with('{') {
        let mut depth = 0;
        let mut item_start = true;
        let mut out = Vec::new();
        for (i, c) in s[at..].char_indices() {
            match c {
                '{' => {
                    depth += 1;
                    item_start = depth == 1;
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => item_start = true,
                c if item_start && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                    if let Some(id) = ident_at(s, at + i) {
                        out.push(id.to_owned());
                    }
                    item_start = false;
                }
                _ => {}
            }
        }
        out
    } else {
        ident_at(s, at)
            .map(|i| vec![i.to_owned()])
            .unwrap_or_default()
    }
}

fn is_ident_boundary(s: &str, at: usize) -> bool {
    at == 0
        || !s[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
}

/// The top-level modules a file names through `crate::` or `super::` paths.
fn imports(src: &Source) -> BTreeSet<String> {
    let text = strip_rust_comments(&src.text);
    let here = module_path(&src.rel);
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        if is_ident_boundary(&text, at) {
            out.extend(first_segments(&text, at + "crate::".len()));
        }
    }
    for (at, _) in text.match_indices("super::") {
        if !is_ident_boundary(&text, at) {
            continue;
        }
        // `super::super::x`: go up once per `super::`.
        let mut path = here.clone();
        let mut i = at;
        while text[i..].starts_with("super::") {
            path.pop();
            i += "super::".len();
        }
        match path.first() {
            Some(top) => {
                out.insert(top.clone());
            }
            None => out.extend(first_segments(&text, i)),
        }
    }
    out
}

/// Checks one crate's sources against its layer table; returns the problems
/// and the module graph (module → the modules it names).
fn check_layers(
    sources: &[Source],
    layers: &[(&str, u8)],
) -> (Vec<String>, BTreeMap<String, BTreeSet<String>>) {
    let layer: BTreeMap<&str, u8> = layers.iter().copied().collect();
    let mut problems = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for src in sources {
        let Some(top) = module_path(&src.rel).first().cloned() else {
            continue; // the crate root may re-export anything
        };
        let Some(&mine) = layer.get(top.as_str()) else {
            problems.push(format!(
                "{}: module `{top}` has no layer in the table",
                src.rel
            ));
            continue;
        };
        for dep in imports(src) {
            if dep == top {
                continue;
            }
            let Some(&theirs) = layer.get(dep.as_str()) else {
                continue; // a name re-exported at the root, e.g. `crate::Result`
            };
            graph.entry(top.clone()).or_default().insert(dep.clone());
            if theirs > mine {
                problems.push(format!(
                    "{}: `{top}` (layer {mine}) imports `{dep}` (layer {theirs}), which is above it",
                    src.rel
                ));
            }
        }
    }
    // Within a layer, no cycle.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        problems: &mut Vec<String>,
    ) {
        if let Some(pos) = stack.iter().position(|s| s == m) {
            problems.push(format!(
                "import cycle: {} -> {m}",
                stack[pos..].join(" -> ")
            ));
            return;
        }
        if !done.insert(m.to_owned()) {
            return;
        }
        stack.push(m.to_owned());
        for d in graph.get(m).into_iter().flatten() {
            visit(d, graph, stack, done, problems);
        }
        stack.pop();
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done, &mut problems);
    }
    (problems, graph)
}

/// `redis::` named outside the broker (the error type may wrap its error).
fn redis_outside_broker(crate_dir: &str, sources: &[Source]) -> Vec<String> {
    let mut problems = Vec::new();
    for src in sources {
        let allowed =
            crate_dir == "fairjob/src" && (src.rel.starts_with("broker/") || src.rel == "error.rs");
        if allowed {
            continue;
        }
        let text = strip_rust_comments(&src.text);
        for (at, _) in text.match_indices("redis::") {
            if is_ident_boundary(&text, at) {
                let line = text[..at].lines().count();
                problems.push(format!("{crate_dir}/{}:{line}: names `redis::`", src.rel));
                break;
            }
        }
    }
    problems
}

/// The longest a file under `fairjob/src/broker/` may grow (`.rs` and `.lua`).
const MAX_BROKER_FILE_LINES: usize = 700;

/// The longest a Lua file may grow: a script or an include holds one rule.
const MAX_LUA_FILE_LINES: usize = 400;

/// The Lua files under `fairjob/src/broker/`, by their path under `src/`.
fn lua_sources() -> Vec<Source> {
    let dir = workspace_root().join("fairjob/src");
    files_with_ext(&dir.join("broker"), "lua")
        .into_iter()
        .map(|p| Source {
            rel: p
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            text: std::fs::read_to_string(&p).unwrap(),
        })
        .collect()
}

/// Lua files over [`MAX_LUA_FILE_LINES`] lines.
fn lua_problems(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .filter(|s| s.text.lines().count() > MAX_LUA_FILE_LINES)
        .map(|s| {
            format!(
                "{}: {} lines, over {MAX_LUA_FILE_LINES} (one rule per include)",
                s.rel,
                s.text.lines().count()
            )
        })
        .collect()
}

/// The driver's own rules: no presentation under `broker/` (a `format`
/// module, `format_*` functions, a UI's page size), no file there over
/// [`MAX_BROKER_FILE_LINES`] lines, and no `impl RedisBroker` elsewhere.
fn driver_problems(sources: &[Source]) -> Vec<String> {
    let mut problems = Vec::new();
    for src in sources {
        let text = strip_rust_comments(&src.text);
        if !src.rel.starts_with("broker/") {
            if text.contains("impl RedisBroker") {
                problems.push(format!(
                    "{}: `impl RedisBroker` outside broker/ (build views in inspect/ over the broker's reads)",
                    src.rel
                ));
            }
            continue;
        }
        let lines = src.text.lines().count();
        if lines > MAX_BROKER_FILE_LINES {
            problems.push(format!(
                "{}: {lines} lines, over {MAX_BROKER_FILE_LINES} (split it by concern)",
                src.rel
            ));
        }
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            let words: Vec<&str> = t
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            let presentation = (t.contains("mod format") && words.contains(&"format"))
                || words
                    .windows(2)
                    .any(|w| w[0] == "fn" && w[1].starts_with("format_"))
                || words
                    .windows(2)
                    .any(|w| w[0] == "const" && w[1].ends_with("PAGE"));
            if presentation {
                problems.push(format!(
                    "{}:{}: presentation in the driver: `{t}` (it belongs in fairjob-web)",
                    src.rel,
                    i + 1
                ));
            }
        }
    }
    problems
}

/// A UI crate (the dashboard, the worker's CLI) naming the broker instead of
/// reading through `fairjob::inspect`.
fn ui_names_broker(crate_dir: &str, sources: &[Source]) -> Vec<String> {
    let mut problems = Vec::new();
    for src in sources {
        let text = strip_rust_comments(&src.text);
        for (at, _) in text.match_indices("fairjob::broker") {
            if is_ident_boundary(&text, at) {
                let line = text[..at].lines().count();
                problems.push(format!(
                    "{crate_dir}/{}:{line}: names `fairjob::broker` (read through `fairjob::inspect`)",
                    src.rel
                ));
                break;
            }
        }
    }
    problems
}

fn library_sources() -> Vec<Source> {
    let dir = workspace_root().join("fairjob/src");
    let sources = read_tree(&dir);
    assert!(
        sources.len() >= 20,
        "LAYERING CHECK FOUND ONLY {} SOURCE FILES UNDER {}: it checks nothing",
        sources.len(),
        dir.display()
    );
    sources
}

#[test]
fn the_checker_catches_planted_upward_imports_and_redis_outside_the_broker() {
    let (clean, _) = check_layers(&library_sources(), LIBRARY);
    assert!(clean.is_empty(), "{clean:#?}");
    // The library's sources with `line` appended to the file `rel`.
    let planted = |rel: &str, line: &str| {
        let mut sources = library_sources();
        let s = sources.iter_mut().find(|s| s.rel == rel).expect(rel);
        s.text.push_str(line);
        sources
    };
    let layers_of = |rel: &str, line: &str| check_layers(&planted(rel, line), LIBRARY).0;

    let found = layers_of(
        "wire/payload.rs",
        "\n#[cfg(test)]\nmod planted { use crate::worker::Worker; }\n",
    );
    let named = |p: &String, file: &str, module: &str| p.contains(file) && p.contains(module);
    assert!(
        found
            .iter()
            .any(|p| named(p, "wire/payload.rs", "`worker`")),
        "{found:#?}"
    );
    let found = layers_of(
        "fair.rs",
        "\nfn planted() { let _ = crate::client::PushJob::new; }\n",
    );
    assert!(found.iter().any(|p| p.contains("fair.rs")), "{found:#?}");
    let found = layers_of(
        "broker/keys.rs",
        "\nmod planted { use super::super::{job, error}; }\n",
    );
    assert!(
        found.iter().any(|p| named(p, "broker/keys.rs", "`job`")),
        "{found:#?}"
    );
    let sources = planted("limit.rs", "\nfn planted() { redis::cmd(\"PING\"); }\n");
    let found = redis_outside_broker("fairjob/src", &sources);
    assert!(found.iter().any(|p| p.contains("limit.rs")), "{found:#?}");
    // A same-layer cycle is caught too.
    let found = layers_of("fair.rs", "\nuse crate::config::ClientConfig;\n");
    assert!(found.iter().any(|p| p.contains("cycle")), "{found:#?}");
    // The inspection layer sits above the policies, beside the client.
    let found = layers_of(
        "inspect/mod.rs",
        "\nfn planted() { let _ = crate::job::Registry::new; }\n",
    );
    assert!(
        found.iter().any(|p| named(p, "inspect/mod.rs", "`job`")),
        "{found:#?}"
    );
    let found = layers_of("broker/keys.rs", "\nuse crate::inspect::Inspector;\n");
    assert!(
        found
            .iter()
            .any(|p| named(p, "broker/keys.rs", "`inspect`")),
        "{found:#?}"
    );
    let sources = planted("inspect/tenant.rs", "\nfn planted() { redis::pipe(); }\n");
    let found = redis_outside_broker("fairjob/src", &sources);
    assert!(
        found.iter().any(|p| p.contains("inspect/tenant.rs")),
        "{found:#?}"
    );
}

#[test]
fn the_checker_catches_planted_presentation_in_the_driver_and_ui_crates_naming_it() {
    assert!(driver_problems(&library_sources()).is_empty());
    let planted = |rel: &str, line: &str| {
        let mut sources = library_sources();
        let s = sources.iter_mut().find(|s| s.rel == rel).expect(rel);
        s.text.push_str(line);
        driver_problems(&sources)
    };
    let found = planted("broker/read/mod.rs", "\npub mod format;\n");
    assert!(
        found.iter().any(|p| p.contains("broker/read/mod.rs")),
        "{found:#?}"
    );
    let found = planted("broker/keys.rs", "\npub const WEB_PAGE: usize = 100;\n");
    assert!(found.iter().any(|p| p.contains("WEB_PAGE")), "{found:#?}");
    let found = planted(
        "broker/read/shards.rs",
        "\nfn format_time(t: f64) -> String { t.to_string() }\n",
    );
    assert!(
        found.iter().any(|p| p.contains("format_time")),
        "{found:#?}"
    );
    let found = planted("inspect/tenant.rs", "\nimpl RedisBroker { }\n");
    assert!(
        found.iter().any(|p| p.contains("inspect/tenant.rs")),
        "{found:#?}"
    );
    let lua = lua_sources();
    assert!(lua.len() >= 30, "{} Lua files found", lua.len());
    assert!(driver_problems(&lua).is_empty() && lua_problems(&lua).is_empty());
    let mut long_lua = lua.clone();
    long_lua[0]
        .text
        .push_str(&"\n-- filler".repeat(MAX_LUA_FILE_LINES));
    assert_eq!(
        lua_problems(&long_lua).len(),
        1,
        "a long Lua file slipped by"
    );
    long_lua[0]
        .text
        .push_str(&"\n-- filler".repeat(MAX_BROKER_FILE_LINES));
    assert_eq!(
        driver_problems(&long_lua).len(),
        1,
        "a very long Lua file slipped by"
    );
    let long = "\n// filler\nfn f() {}".repeat(MAX_BROKER_FILE_LINES);
    let found = planted("broker/keys.rs", &long);
    assert!(
        found
            .iter()
            .any(|p| p.contains("broker/keys.rs") && p.contains("lines")),
        "{found:#?}"
    );
    for (dir, _) in ABOVE {
        let mut sources = read_tree(&workspace_root().join(dir));
        assert!(ui_names_broker(dir, &sources).is_empty(), "{dir}");
        sources[0]
            .text
            .push_str("\nuse fairjob::broker::RedisBroker;\n");
        let found = ui_names_broker(dir, &sources);
        assert_eq!(found.len(), 1, "{dir}: {found:#?}");
    }
}

#[test]
fn each_layer_imports_only_from_the_layers_below() {
    let sources = library_sources();
    let (mut problems, graph) = check_layers(&sources, LIBRARY);
    problems.extend(redis_outside_broker("fairjob/src", &sources));
    problems.extend(driver_problems(&sources));
    let lua = lua_sources();
    problems.extend(driver_problems(&lua));
    problems.extend(lua_problems(&lua));
    println!("fairjob's module graph (module [layer] -> what it imports):");
    let layer: BTreeMap<&str, u8> = LIBRARY.iter().copied().collect();
    for (m, l) in LIBRARY {
        let deps: Vec<String> = graph
            .get(*m)
            .into_iter()
            .flatten()
            .map(|d| format!("{d} [{}]", layer[d.as_str()]))
            .collect();
        println!("  {m} [{l}] -> {}", deps.join(", "));
    }
    for (dir, layers) in ABOVE {
        let path = workspace_root().join(dir);
        if !path.exists() {
            assert!(
                !dir.starts_with("fairjob-worker"),
                "{} is missing",
                path.display()
            );
            continue;
        }
        let sources = read_tree(&path);
        assert!(
            !sources.is_empty(),
            "NO SOURCE FILES UNDER {}: the layering check would check nothing",
            path.display()
        );
        let (p, graph) = check_layers(&sources, layers);
        problems.extend(p.into_iter().map(|p| format!("{dir}/{p}")));
        problems.extend(redis_outside_broker(dir, &sources));
        problems.extend(ui_names_broker(dir, &sources));
        println!("{dir}: {graph:?}");
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
