//! The driver's contract, checked statically: the table at the top of
//! `fairjob/src/broker/mod.rs` names every operation of `RedisBroker`, each
//! under the group of the files that hold it, and names nothing else.
//!
//! An operation is a method of an inherent `impl RedisBroker` block under
//! `fairjob/src/broker/` that a layer above the broker can call: `pub`,
//! `pub(crate)`, `pub(in crate)`, and `pub(super)` written in
//! `broker/mod.rs` (whose parent is the crate root). Private methods,
//! `pub(super)` below `mod.rs` and `pub(in crate::broker…)` are the broker's
//! own helpers (its Redis primitives, key choices shared by two operations):
//! nothing above can call them, so the contract does not list them, and a
//! table entry naming one is an error. Nested functions, and text in
//! comments and strings, are not methods.
//!
//! The table: a group row (`| **fetch** (`fetch.rs`) | | | |`) names, in
//! backticks, the files (`x.rs`) or folders (`read/`) its operations live
//! in; an operation row names its operations in backticks in its first
//! cell, outside parentheses (a parenthesis qualifies a row: "`push` (unique
//! jobs …)", and may quote other names). A name may have several rows (two
//! paths of one operation).
//!
//! The checker fails naming each operation missing from the table, each
//! table entry that names no operation, each operation listed under a group
//! whose files don't hold it, and each row that names nothing or sits
//! outside a group. It is tested on planted input (a fake broker and table,
//! then the real ones with planted mistakes) before it is trusted on the
//! real sources. Run with `--nocapture` to see what it read.

use std::collections::{BTreeMap, BTreeSet};

use fairjob_tests::source::{files_with_ext, rust_code_only, workspace_root};

/// A source file under `fairjob/src/broker/`: its path relative to that
/// folder (`mod.rs`, `read/queues.rs`), and its text.
#[derive(Clone)]
struct Source {
    rel: String,
    text: String,
}

/// A method of an `impl RedisBroker` block.
#[derive(Debug, Clone)]
struct Method {
    name: String,
    /// The file that holds it, relative to `broker/`.
    file: String,
    /// Its line in that file.
    line: usize,
    /// Callable from above the broker.
    operation: bool,
}

/// One name in the contract table.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    /// Its row's line in `mod.rs`.
    line: usize,
    /// The files and folders its group names.
    group_files: Vec<String>,
}

fn broker_sources() -> Vec<Source> {
    let dir = workspace_root().join("fairjob/src/broker");
    let sources: Vec<Source> = files_with_ext(&dir, "rs")
        .into_iter()
        .map(|p| Source {
            rel: p
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            text: std::fs::read_to_string(&p).unwrap(),
        })
        .collect();
    assert!(
        sources.len() >= 20 && sources.iter().any(|s| s.rel == "mod.rs"),
        "CONTRACT CHECK FOUND ONLY {} SOURCE FILES UNDER {}: it checks nothing",
        sources.len(),
        dir.display()
    );
    sources
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether the word `word` stands at `at` in `s` (not inside a longer identifier).
fn word_at(s: &str, at: usize, word: &str) -> bool {
    let b = s.as_bytes();
    s[at..].starts_with(word)
        && (at == 0 || !is_ident_byte(b[at - 1]))
        && b.get(at + word.len()).is_none_or(|&c| !is_ident_byte(c))
}

fn ident_at(s: &str, at: usize) -> &str {
    let end = s[at..]
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(s.len(), |e| at + e);
    &s[at..end]
}

/// The module path a visibility written in file `rel` opens a method to:
/// `None` for the whole crate and beyond, else the module (as
/// `["broker", "read"]`) whose descendants may call it.
fn scope(visibility: Option<&str>, rel: &str) -> Option<Vec<String>> {
    // The file's own module: `mod.rs` → broker, `read/mod.rs` → broker::read,
    // `read/queues.rs` → broker::read::queues.
    let mut here = vec!["broker".to_owned()];
    let stem = rel.trim_end_matches(".rs");
    here.extend(stem.split('/').map(str::to_owned));
    if here.last().is_some_and(|m| m == "mod") {
        here.pop();
    }
    let Some(v) = visibility else {
        return Some(here); // private: the module and its descendants
    };
    let v = v.trim();
    if v.is_empty() {
        return None; // `pub`
    }
    let path = v.strip_prefix("in ").unwrap_or(v).trim();
    let mut out = here;
    for (i, seg) in path.split("::").map(str::trim).enumerate() {
        match seg {
            "crate" if i == 0 => out.clear(),
            "self" => {}
            "super" => {
                out.pop();
            }
            s => out.push(s.to_owned()),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Whether a method written in `rel` with `visibility` can be called from
/// outside `broker/`.
fn is_operation(visibility: Option<&str>, rel: &str) -> bool {
    scope(visibility, rel).is_none_or(|m| m.first().is_none_or(|top| top != "broker"))
}

/// The visibility written before the `fn` at `at` in the code `body` (its
/// item starting after the previous `;`, `{`, `}` or attribute): `None`
/// when private, `Some("")` for `pub`, `Some("crate")` for `pub(crate)`.
fn visibility_before(body: &str, at: usize) -> Option<String> {
    let mut head = body[..at].trim_end();
    loop {
        let stripped = ["async", "const", "unsafe"].iter().find_map(|q| {
            head.strip_suffix(q)
                .filter(|h| h.is_empty() || h.ends_with(char::is_whitespace))
        });
        match stripped {
            Some(h) => head = h.trim_end(),
            None => break,
        }
    }
    if let Some(h) = head.strip_suffix(')') {
        let open = h.rfind('(')?;
        let before = h[..open].trim_end();
        (before.ends_with("pub") && word_at(before, before.len() - 3, "pub"))
            .then(|| h[open + 1..].trim().to_owned())
    } else {
        (head.ends_with("pub") && word_at(head, head.len() - 3, "pub")).then(String::new)
    }
}

/// The methods of every inherent `impl RedisBroker { … }` block in `sources`
/// (trait impls such as `impl fmt::Debug for RedisBroker` are not read).
fn methods(sources: &[Source]) -> Vec<Method> {
    let mut out = Vec::new();
    for src in sources {
        let code = rust_code_only(&src.text);
        let b = code.as_bytes();
        for (at, _) in code.match_indices("impl") {
            if !word_at(&code, at, "impl") {
                continue;
            }
            let rest = code[at + 4..].trim_start();
            let Some(after) = rest.strip_prefix("RedisBroker") else {
                continue;
            };
            if !after.trim_start().starts_with('{') || after.starts_with(is_ident_char) {
                continue;
            }
            let open = code.len() - after.trim_start().len();
            // Walk the block; a `fn` at depth 1 is a method.
            let mut depth = 0usize;
            let mut i = open;
            while i < b.len() {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b'f' if depth == 1 && word_at(&code, i, "fn") => {
                        let name_at =
                            i + 2 + code[i + 2..].len() - code[i + 2..].trim_start().len();
                        let name = ident_at(&code, name_at).to_owned();
                        if name.is_empty() {
                            i += 2; // a function pointer type: `f: fn(u8)`
                            continue;
                        }
                        // The item starts after the last `;`, `{`, `}` or `]` before it.
                        let item_start = code[open + 1..i]
                            .rfind([';', '{', '}', ']'])
                            .map_or(open + 1, |p| open + 1 + p + 1);
                        let visibility = visibility_before(&code[item_start..], i - item_start);
                        out.push(Method {
                            operation: is_operation(visibility.as_deref(), &src.rel),
                            line: code[..i].lines().count(),
                            file: src.rel.clone(),
                            name,
                        });
                    }
                    _ => {}
                }
                i += 1;
            }
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The backticked words of `cell` outside parentheses.
fn names_outside_parentheses(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut in_tick = None;
    for (i, c) in cell.char_indices() {
        match (c, in_tick) {
            ('`', Some(start)) => {
                if depth == 0 {
                    out.push(cell[start..i].to_owned());
                }
                in_tick = None;
            }
            ('`', None) => in_tick = Some(i + 1),
            (_, Some(_)) => {}
            ('(', None) => depth += 1,
            (')', None) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    out
}

/// The contract table of `mod.rs`: its entries, and the problems of its shape.
fn table(mod_rs: &str) -> (Vec<Entry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    let mut in_contract = false;
    let mut started = false;
    let mut group: Option<Vec<String>> = None;
    for (n, line) in mod_rs.lines().enumerate() {
        let line_no = n + 1;
        let Some(doc) = line.strip_prefix("//!") else {
            if started {
                break;
            }
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with('#') {
            if started {
                break;
            }
            in_contract = doc.trim_start_matches('#').trim() == "The contract";
            continue;
        }
        if !in_contract {
            continue;
        }
        if !doc.starts_with('|') {
            if started {
                break;
            }
            continue;
        }
        let first_row = !started;
        started = true;
        let cells: Vec<&str> = doc.trim_matches('|').split('|').map(str::trim).collect();
        let first = cells[0];
        if first_row || first.chars().all(|c| matches!(c, '-' | ':' | ' ')) {
            continue; // the header and its rule
        }
        if first.starts_with("**") {
            let files: Vec<String> = first
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|w| w.ends_with(".rs") || w.ends_with('/'))
                .map(str::to_owned)
                .collect();
            if files.is_empty() {
                problems.push(format!(
                    "broker/mod.rs:{line_no}: group `{first}` names no file (`x.rs`) or folder (`x/`)"
                ));
            }
            group = Some(files);
            continue;
        }
        let names = names_outside_parentheses(first);
        let Some(files) = &group else {
            problems.push(format!(
                "broker/mod.rs:{line_no}: row `{first}` comes before any group row"
            ));
            continue;
        };
        if names.is_empty() {
            problems.push(format!(
                "broker/mod.rs:{line_no}: row `{first}` names no operation in backticks"
            ));
        }
        entries.extend(names.into_iter().map(|name| Entry {
            name,
            line: line_no,
            group_files: files.clone(),
        }));
    }
    if entries.is_empty() {
        problems.push(
            "broker/mod.rs: no contract table (a `# The contract` section of `//!` rows)".into(),
        );
    }
    (entries, problems)
}

/// Whether `file` (relative to `broker/`) is one the group names.
fn in_group(file: &str, group_files: &[String]) -> bool {
    group_files
        .iter()
        .any(|g| file == g || (g.ends_with('/') && file.starts_with(g.as_str())))
}

/// Every way the table in `sources`' `mod.rs` and the methods of the
/// broker's `impl RedisBroker` blocks disagree.
fn contract_problems(sources: &[Source]) -> Vec<String> {
    let mod_rs = sources
        .iter()
        .find(|s| s.rel == "mod.rs")
        .expect("broker/mod.rs");
    let (entries, mut problems) = table(&mod_rs.text);
    let methods = methods(sources);
    let listed: BTreeSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    let mut by_name: BTreeMap<&str, Vec<&Method>> = BTreeMap::new();
    for m in &methods {
        by_name.entry(m.name.as_str()).or_default().push(m);
    }
    for m in methods.iter().filter(|m| m.operation) {
        if !listed.contains(m.name.as_str()) {
            problems.push(format!(
                "`{}` (broker/{}:{}) is missing from the contract table in broker/mod.rs: \
                 list it under its group, or make it private to broker/ if nothing above calls it",
                m.name, m.file, m.line
            ));
        }
    }
    for e in &entries {
        let found = by_name
            .get(e.name.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        let ops: Vec<&&Method> = found.iter().filter(|m| m.operation).collect();
        if found.is_empty() {
            problems.push(format!(
                "broker/mod.rs:{}: the table lists `{}`, which names no method of RedisBroker",
                e.line, e.name
            ));
        } else if ops.is_empty() {
            problems.push(format!(
                "broker/mod.rs:{}: the table lists `{}` (broker/{}), which is private to broker/: \
                 layers above cannot call it",
                e.line, e.name, found[0].file
            ));
        } else if !ops.iter().any(|m| in_group(&m.file, &e.group_files)) {
            problems.push(format!(
                "broker/mod.rs:{}: `{}` lives in broker/{}, but its group names {:?}",
                e.line, e.name, ops[0].file, e.group_files
            ));
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

/// The problems that name `name` in backticks.
fn naming<'a>(problems: &'a [String], name: &str) -> Vec<&'a String> {
    let quoted = format!("`{name}`");
    problems.iter().filter(|p| p.contains(&quoted)).collect()
}

const FAKE_MOD: &str = r#"//! A fake broker.
//!
//! # The contract
//!
//! | operation | changes or reads | script or commands | reply |
//! |---|---|---|---|
//! | **ops** (`ops.rs`, `read/`) | | | |
//! | `listed_op`, `ghost_op` | a listed operation and one that does not exist | `GET` | `()` |
//! | `listed_op` (again, and `quoted_in_parentheses`) | a second path | `SET` | `()` |
//! | `read_op` | a read in a folder | `GET` | rows |
//! | `helper_op` | a helper only the broker may call | — | — |
//! | **elsewhere** (`elsewhere.rs`) | | | |
//! | `placed_wrong` | lives in ops.rs | — | — |
//! | (a row that names nothing) | | | |
//!
//! After the table: `not_a_row` is prose.

mod ops;

pub struct RedisBroker;

impl fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { Ok(()) }
}

impl RedisBroker {
    /// `pub(super)` in mod.rs reaches the crate root: an operation.
    pub(super) fn crate_wide(&self) {}
    fn private_here(&self) {}
}
"#;

const FAKE_OPS: &str = r##"use super::RedisBroker;

impl RedisBroker {
    pub async fn listed_op(&self) -> Result<()> {
        pub fn nested(x: u8) {}
        let s = "impl RedisBroker { pub fn in_a_string(&self) {} }";
        let r = r#"} pub fn in_a_raw_string(&self) { "#;
        let c = '}';
        Ok(())
    }

    // pub fn in_a_comment(&self) {}
    /* pub fn in_a_block_comment(&self) {} */
    #[doc(hidden)]
    pub(crate) async fn missing_op(&self) -> Result<String> {
        Ok(format!("{}", 1))
    }

    #[cfg(feature = "testing")]
    pub(super) fn helper_op(&self) {}

    pub(in crate::broker) fn scoped_op(&self) {}

    pub(in crate) const fn also_missing(&self) -> u8 { 0 }

    fn private_op(&self, pick: fn(u8) -> bool) {}

    pub fn placed_wrong(&self) {}
}

impl Other {
    pub fn not_the_broker(&self) {}
}
"##;

const FAKE_READ: &str = "impl RedisBroker {\n    pub fn read_op(&self) {}\n}\n";

#[test]
fn the_checker_catches_a_planted_missing_operation_and_a_table_entry_without_a_method() {
    let src = |rel: &str, text: &str| Source {
        rel: rel.to_owned(),
        text: text.to_owned(),
    };
    let fake = vec![
        src("mod.rs", FAKE_MOD),
        src("ops.rs", FAKE_OPS),
        src("read/queues.rs", FAKE_READ),
    ];
    let found = contract_problems(&fake);
    println!("on the fake broker: {found:#?}");
    // Missing from the table: a `pub(crate)` method, a `pub(in crate)`
    // const fn, and `pub(super)` in mod.rs (its parent is the crate).
    for name in ["missing_op", "also_missing", "crate_wide"] {
        let p = naming(&found, name);
        assert!(
            p.len() == 1 && p[0].contains("missing from the contract table"),
            "{name}: {found:#?}"
        );
    }
    // Listed, but no such method; listed, but callable only inside broker/.
    let p = naming(&found, "ghost_op");
    assert!(
        p.len() == 1 && p[0].contains("names no method"),
        "{found:#?}"
    );
    let p = naming(&found, "helper_op");
    assert!(
        p.len() == 1 && p[0].contains("private to broker/"),
        "{found:#?}"
    );
    // Listed under a group of files that does not hold it.
    let p = naming(&found, "placed_wrong");
    assert!(
        p.len() == 1 && p[0].contains("lives in broker/ops.rs"),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|p| p.contains("names no operation")),
        "{found:#?}"
    );
    // Nothing else: not the listed operations (two rows of one, one in a
    // folder), nor helpers (private, pub(super) below mod.rs, pub(in
    // crate::broker)), nested functions, another type's methods, names in
    // parentheses, in prose after the table, in comments or in strings.
    assert_eq!(found.len(), 7, "{found:#?}");
    for name in [
        "listed_op",
        "read_op",
        "quoted_in_parentheses",
        "not_a_row",
        "private_here",
        "private_op",
        "scoped_op",
        "nested",
        "not_the_broker",
        "in_a_string",
        "in_a_raw_string",
        "in_a_comment",
        "in_a_block_comment",
        "fmt",
    ] {
        assert!(naming(&found, name).is_empty(), "{name}: {found:#?}");
    }
    let names: BTreeSet<String> = methods(&fake).into_iter().map(|m| m.name).collect();
    assert_eq!(
        names,
        [
            "crate_wide",
            "private_here",
            "listed_op",
            "missing_op",
            "helper_op",
            "scoped_op",
            "also_missing",
            "private_op",
            "placed_wrong",
            "read_op",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect(),
        "every method, and nothing that is not one"
    );
}

#[test]
fn the_checker_catches_planted_mistakes_in_the_real_broker() {
    let real = broker_sources();
    assert!(contract_problems(&real).is_empty());
    let planted = |rel: &str, edit: &dyn Fn(&str) -> String| {
        let mut sources = real.clone();
        let s = sources.iter_mut().find(|s| s.rel == rel).expect(rel);
        s.text = edit(&s.text);
        contract_problems(&sources)
    };
    // A new operation that the table does not list.
    let found = planted("actions.rs", &|t| {
        format!(
            "{t}\nimpl RedisBroker {{\n    pub(crate) async fn planted_write(&self) -> Result<()> {{ Ok(()) }}\n}}\n"
        )
    });
    let p = naming(&found, "planted_write");
    assert!(
        found.len() == 1 && p.len() == 1 && p[0].contains("broker/actions.rs"),
        "{found:#?}"
    );
    // A row for an operation that does not exist.
    let found = planted("mod.rs", &|t| {
        t.replacen(
            "//! | **fetch** (`fetch.rs`) | | | |\n",
            "//! | **fetch** (`fetch.rs`) | | | |\n//! | `planted_read` | nothing | `GET` | `()` |\n",
            1,
        )
    });
    assert!(
        found.len() == 1 && naming(&found, "planted_read").len() == 1,
        "{found:#?}"
    );
    // A real operation's row taken out of the table.
    let found = planted("mod.rs", &|t| {
        t.lines()
            .filter(|l| !(l.starts_with("//! | `count`")))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    assert!(
        found.len() == 1 && naming(&found, "count").len() == 1,
        "{found:#?}"
    );
    // A helper made callable from above.
    let found = planted("mod.rs", &|t| {
        t.replacen("    async fn query<", "    pub(crate) async fn query<", 1)
    });
    assert!(
        found.len() == 1 && naming(&found, "query").len() == 1,
        "{found:#?}"
    );
}

#[test]
fn every_operation_of_the_broker_is_in_the_contract_table() {
    let sources = broker_sources();
    let methods = methods(&sources);
    let files: BTreeSet<&str> = methods.iter().map(|m| m.file.as_str()).collect();
    let operations = methods.iter().filter(|m| m.operation).count();
    println!(
        "{} methods of RedisBroker in {} files, {operations} of them operations (callable above broker/)",
        methods.len(),
        files.len()
    );
    assert!(
        methods.len() >= 150 && files.len() >= 25 && operations >= 100,
        "THE CONTRACT CHECK READ ONLY {} METHODS IN {} FILES: it checks nothing",
        methods.len(),
        files.len()
    );
    let problems = contract_problems(&sources);
    assert!(problems.is_empty(), "{problems:#?}");
}
