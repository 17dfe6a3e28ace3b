//! Just enough of Cargo.toml for xtask: one key of one table, and the workspace
//! members. Our manifests are plain (one `key = value` a line), and a TOML
//! crate would be xtask's only dependency.

use std::path::Path;

/// A manifest value as xtask needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Str(String),
    Bool(bool),
    /// `key.workspace = true` or `key = { workspace = true }`.
    Workspace,
    /// Anything else, as written (comment removed).
    Other(String),
}

/// The table a header line opens (`[package]` → `package`); `[[bin]]` and the
/// like are returned with their brackets, so they match no plain table.
fn header(line: &str) -> Option<String> {
    let line = strip_comment(line).trim();
    if line.starts_with("[[") {
        return Some(line.to_owned());
    }
    let name = line.strip_prefix('[')?.strip_suffix(']')?;
    Some(name.replace(' ', ""))
}

/// `line` up to a `#` that is not inside a string.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' => return &line[..i],
            None => {}
        }
    }
    line
}

fn parse_value(raw: &str) -> Value {
    let raw = strip_comment(raw).trim();
    if let Some(rest) = raw.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Value::Str(value),
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some(other) => value.push(other),
                    None => {}
                },
                c => value.push(c),
            }
        }
        return Value::Other(raw.to_owned());
    }
    if let Some(rest) = raw.strip_prefix('\'')
        && let Some((value, _)) = rest.split_once('\'')
    {
        return Value::Str(value.to_owned());
    }
    match raw {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ if raw.starts_with('{') && raw.replace(' ', "").contains("workspace=true") => {
            Value::Workspace
        }
        _ => Value::Other(raw.to_owned()),
    }
}

/// The value of `key` in table `table` (`package`, `workspace.package`).
pub(crate) fn value(text: &str, table: &str, key: &str) -> Option<Value> {
    let mut current = String::new();
    for line in text.lines() {
        if let Some(name) = header(line) {
            current = name;
            continue;
        }
        if current != table {
            continue;
        }
        let Some((lhs, rhs)) = line.split_once('=') else {
            continue;
        };
        let lhs = lhs.trim().trim_matches('"');
        if lhs == key {
            return Some(parse_value(rhs));
        }
        if lhs.replace(' ', "") == format!("{key}.workspace") {
            return (parse_value(rhs) == Value::Bool(true)).then_some(Value::Workspace);
        }
    }
    None
}

/// The `[workspace] members` of the root manifest `text`, with a trailing `/*`
/// expanded to the directories under `root` that hold a Cargo.toml.
pub(crate) fn workspace_members(text: &str, root: &Path) -> Vec<String> {
    let mut current = String::new();
    let mut array = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(name) = header(line) {
            current = name;
            continue;
        }
        let Some((lhs, rhs)) = line.split_once('=') else {
            continue;
        };
        if current != "workspace" || lhs.trim() != "members" {
            continue;
        }
        array.push_str(strip_comment(rhs));
        while !array.contains(']') {
            let Some(next) = lines.next() else { break };
            array.push('\n');
            array.push_str(strip_comment(next));
        }
        break;
    }
    let mut members = Vec::new();
    for (i, piece) in array.split('"').enumerate() {
        // The odd pieces are the insides of the quoted strings.
        if i % 2 == 0 {
            continue;
        }
        match piece.strip_suffix("/*") {
            Some(parent) => {
                let mut found: Vec<String> = std::fs::read_dir(root.join(parent))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.path().join("Cargo.toml").is_file())
                    .map(|e| format!("{parent}/{}", e.file_name().to_string_lossy()))
                    .collect();
                found.sort();
                members.extend(found);
            }
            None => members.push(piece.to_owned()),
        }
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = include_str!("../../Cargo.toml");

    #[test]
    fn reads_the_workspace_members() {
        let members = workspace_members(ROOT, &crate::workspace_root());
        for member in [
            "fairjob",
            "fairjob-macros",
            "fairjob-worker",
            "examples",
            "tests",
            "xtask",
        ] {
            assert!(
                members.iter().any(|m| m == member),
                "{member} not in {members:?}"
            );
        }
        let multi_line = "[workspace]\nresolver = \"3\"\nmembers = [\n  \"a\", # the core\n  'ignored-literal-strings-are-not-ours',\n  \"b\",\n]\n[workspace.package]\nmembers = [\"no\"]\n";
        assert_eq!(workspace_members(multi_line, Path::new(".")), ["a", "b"]);
    }

    #[test]
    fn reads_one_key_of_one_table() {
        let text = "[package]\nname = \"fairjob\" # the library\nreadme = '../README.md'\npublish = false\nlicense.workspace = true\nedition = { workspace = true }\n\n[[bin]]\nname = \"other\"\n[package.metadata.x]\nreadme = \"no\"\n";
        assert_eq!(
            value(text, "package", "name"),
            Some(Value::Str("fairjob".into()))
        );
        assert_eq!(
            value(text, "package", "readme"),
            Some(Value::Str("../README.md".into()))
        );
        assert_eq!(value(text, "package", "publish"), Some(Value::Bool(false)));
        assert_eq!(value(text, "package", "license"), Some(Value::Workspace));
        assert_eq!(value(text, "package", "edition"), Some(Value::Workspace));
        assert_eq!(value(text, "package", "build"), None);
        assert_eq!(value(text, "workspace", "name"), None);
    }

    #[test]
    fn the_published_crates_today() {
        let published: Vec<String> = workspace_members(ROOT, &crate::workspace_root())
            .into_iter()
            .filter(|m| {
                let text =
                    std::fs::read_to_string(crate::workspace_root().join(m).join("Cargo.toml"))
                        .unwrap();
                value(&text, "package", "publish") != Some(Value::Bool(false))
            })
            .collect();
        for crate_dir in ["fairjob", "fairjob-macros", "fairjob-worker"] {
            assert!(published.iter().any(|p| p == crate_dir), "{published:?}");
        }
        for unpublished in ["examples", "tests", "xtask"] {
            assert!(!published.iter().any(|p| p == unpublished), "{published:?}");
        }
    }
}
