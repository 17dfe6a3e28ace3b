//! The include scanner: finds `include_str!`, `include_bytes!` and `include!`
//! in Rust source and says what each one reads, and resolves those paths the
//! way rustc does (relative to the file that names them).
//!
//! A small tokenizer, not a text search: comments (doc comments included) and
//! string literals never yield an include, and char literals and lifetimes do
//! not confuse it.

/// What an include macro reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A literal path, or a `concat!` of literals.
    Path(String),
    /// `concat!("dir/prefix", $var…)`: some file whose path starts with this.
    Prefix(String),
    /// Built from `env!(…)` (usually `OUT_DIR`): generated at build time, not shipped.
    Generated,
    /// Anything else, as written.
    Unknown(String),
}

/// One include macro call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Include {
    /// 1-based line of the macro's name.
    pub(crate) line: usize,
    /// `include_str`, `include_bytes` or `include`.
    pub(crate) macro_name: &'static str,
    pub(crate) target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
}

/// Tokens with their 1-based line numbers; comments, whitespace, char literals
/// and lifetimes are dropped.
fn tokenize(src: &str) -> Vec<(usize, Tok)> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            let start = line;
            let (value, next) = cooked_string(&chars, i + 1, &mut line);
            out.push((start, Tok::Str(value)));
            i = next;
        } else if c == '\'' {
            // A char literal ('x', '\n', '"') or a lifetime/label ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            let prefixed = matches!(word.as_str(), "b" | "c");
            if raw && (at(i) == '"' || at(i) == '#') {
                let hashes = chars[i..].iter().take_while(|&&h| h == '#').count();
                if at(i + hashes) == '"' {
                    let start_line = line;
                    let (value, next) = raw_string(&chars, i + hashes + 1, hashes, &mut line);
                    out.push((start_line, Tok::Str(value)));
                    i = next;
                    continue;
                }
            }
            if prefixed && at(i) == '"' {
                let start_line = line;
                let (value, next) = cooked_string(&chars, i + 1, &mut line);
                out.push((start_line, Tok::Str(value)));
                i = next;
                continue;
            }
            out.push((line, Tok::Ident(word)));
        } else {
            out.push((line, Tok::Punct(c)));
            i += 1;
        }
    }
    out
}

/// A `"…"` literal's value from just after its opening quote; returns the value
/// and the index after the closing quote.
fn cooked_string(chars: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut value = String::new();
    while i < chars.len() {
        match chars[i] {
            '"' => return (value, i + 1),
            '\\' => {
                let escaped = chars.get(i + 1).copied().unwrap_or('\\');
                i += 2;
                match escaped {
                    'n' => value.push('\n'),
                    't' => value.push('\t'),
                    'r' => value.push('\r'),
                    '0' => value.push('\0'),
                    '\n' => {
                        // A line continuation: the newline and the next line's indent.
                        *line += 1;
                        while i < chars.len() && chars[i].is_whitespace() {
                            if chars[i] == '\n' {
                                *line += 1;
                            }
                            i += 1;
                        }
                    }
                    other => value.push(other),
                }
            }
            c => {
                if c == '\n' {
                    *line += 1;
                }
                value.push(c);
                i += 1;
            }
        }
    }
    (value, i)
}

/// A raw string's value from just after its opening quote, closed by `"` and
/// `hashes` times `#`.
fn raw_string(chars: &[char], mut i: usize, hashes: usize, line: &mut usize) -> (String, usize) {
    let mut value = String::new();
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == '#')
                .count()
                == hashes
        {
            return (value, i + 1 + hashes);
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        value.push(chars[i]);
        i += 1;
    }
    (value, i)
}

/// The tokens between the bracket at `open` and its partner, and the index after it.
fn group(tokens: &[(usize, Tok)], open: usize) -> Option<(&[(usize, Tok)], usize)> {
    let mut depth = 0usize;
    for (j, (_, tok)) in tokens.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return Some((&tokens[open + 1..j], j + 1));
                }
            }
            _ => {}
        }
    }
    None
}

fn is_open(tok: Option<&(usize, Tok)>) -> bool {
    matches!(tok, Some((_, Tok::Punct('(' | '[' | '{'))))
}

fn render(tokens: &[(usize, Tok)]) -> String {
    let mut text = String::new();
    for (_, tok) in tokens {
        match tok {
            Tok::Ident(word) => {
                if text.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    text.push(' ');
                }
                text.push_str(word);
            }
            Tok::Str(value) => text.push_str(&format!("{value:?}")),
            Tok::Punct(c) => text.push(*c),
        }
    }
    text
}

/// What the arguments of an include macro name.
fn target(args: &[(usize, Tok)]) -> Target {
    let is_env = |w: &[(usize, Tok)]| matches!(w, [(_, Tok::Ident(name)), (_, Tok::Punct('!'))] if name == "env" || name == "option_env");
    if args.windows(2).any(is_env) {
        return Target::Generated;
    }
    match args {
        [(_, Tok::Str(path))] => return Target::Path(path.clone()),
        [(_, Tok::Ident(name)), (_, Tok::Punct('!')), rest @ ..]
            if name == "concat" && is_open(rest.first()) =>
        {
            if let Some((inner, end)) = group(rest, 0)
                && end == rest.len()
            {
                let mut prefix = String::new();
                for piece in inner.split(|(_, t)| *t == Tok::Punct(',')) {
                    match piece {
                        [] => {}
                        [(_, Tok::Str(s))] => prefix.push_str(s),
                        _ => return Target::Prefix(prefix),
                    }
                }
                return Target::Path(prefix);
            }
        }
        _ => {}
    }
    Target::Unknown(render(args))
}

/// Every `include_str!`, `include_bytes!` and `include!` in `src`, in order.
pub(crate) fn includes(src: &str) -> Vec<Include> {
    let tokens = tokenize(src);
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (line, tok) = &tokens[i];
        let macro_name = match tok {
            Tok::Ident(w) if w == "include_str" => "include_str",
            Tok::Ident(w) if w == "include_bytes" => "include_bytes",
            Tok::Ident(w) if w == "include" => "include",
            _ => {
                i += 1;
                continue;
            }
        };
        if matches!(tokens.get(i + 1), Some((_, Tok::Punct('!'))))
            && is_open(tokens.get(i + 2))
            && let Some((args, end)) = group(&tokens, i + 2)
        {
            // A trailing comma is allowed in macro calls.
            let args = match args {
                [rest @ .., (_, Tok::Punct(','))] => rest,
                _ => args,
            };
            found.push(Include {
                line: *line,
                macro_name,
                target: target(args),
            });
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

/// Resolves `target` as rustc does for an include in `file` (both relative to
/// the crate directory, `/`-separated): relative to the file's directory.
/// `None` when the result leaves the crate directory or `target` is absolute.
pub(crate) fn resolve(file: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.starts_with('\\') || target.contains(':') {
        return None;
    }
    let mut parts: Vec<&str> = file.split('/').collect();
    parts.pop(); // the file's own name
    for part in target.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(src: &str) -> Vec<(usize, &'static str, Target)> {
        includes(src)
            .into_iter()
            .map(|i| (i.line, i.macro_name, i.target))
            .collect()
    }

    fn path(p: &str) -> Target {
        Target::Path(p.into())
    }

    #[test]
    fn finds_each_include_macro_with_its_line() {
        let src = r#"
const A: &str = include_str!("scripts/push.lua");
static B: &[u8] = include_bytes!( "../assets/logo.png" );
include!("generated_by_hand.rs");
const C: &str = std::include_str!["qualified.txt"];
"#;
        assert_eq!(
            targets(src),
            [
                (2, "include_str", path("scripts/push.lua")),
                (3, "include_bytes", path("../assets/logo.png")),
                (4, "include", path("generated_by_hand.rs")),
                (5, "include_str", path("qualified.txt")),
            ]
        );
    }

    #[test]
    fn comments_strings_and_other_names_are_not_includes() {
        let src = r###"
//! Each script is loaded with `include_str!("doc.lua")`.
/// include_bytes!("doc_comment.bin")
// include_str!("line_comment.txt")
/* include_str!("block.txt") /* nested include_str!("nested.txt") */ still comment */
const S: &str = "include_str!(\"in_a_string.txt\")";
const R: &str = r#"include_str!("in_a_raw_string.txt")"#;
my_include_str!("not_the_macro.txt");
const INCLUDE: &str = "include";
let include = 1;
const REAL: &str = include_str!("real.txt");
"###;
        assert_eq!(targets(src), [(11, "include_str", path("real.txt"))]);
    }

    #[test]
    fn char_literals_and_lifetimes_do_not_derail_the_tokenizer() {
        let src = r#"
fn f<'a>(s: &'a str) -> bool { s.contains('"') && s.contains('\'') && s.contains('\u{22}') }
'outer: loop { break 'outer; }
const X: &str = include_str!("after.txt");
"#;
        assert_eq!(targets(src), [(4, "include_str", path("after.txt"))]);
    }

    #[test]
    fn raw_and_escaped_literals_give_their_value() {
        let src = r###"
include_str!(r"raw\path.txt");
include_str!(r##"hashes"#.txt"##);
include_bytes!("esc\"aped.txt",);
"###;
        assert_eq!(
            targets(src),
            [
                (2, "include_str", path(r"raw\path.txt")),
                (3, "include_str", path("hashes\"#.txt")),
                (4, "include_bytes", path("esc\"aped.txt")),
            ]
        );
    }

    #[test]
    fn concat_of_literals_is_a_path_and_with_a_variable_a_prefix() {
        let src = r#"
macro_rules! script {
    ($file:literal) => {
        include_str!(concat!("scripts/", $file))
    };
}
const A: &str = include_str!(concat!("scripts/", "lib", ".lua"));
include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
const B: &str = include_str!(some_const_fn());
"#;
        assert_eq!(
            targets(src),
            [
                (4, "include_str", Target::Prefix("scripts/".into())),
                (7, "include_str", path("scripts/lib.lua")),
                (8, "include", Target::Generated),
                (9, "include_str", Target::Unknown("some_const_fn()".into())),
            ]
        );
    }

    #[test]
    fn the_real_script_loader_is_read_as_written() {
        // fairjob's loader: a macro with a per-script include, and a table of literals.
        let src = include_str!("../../fairjob/src/broker/scripts.rs");
        let found = includes(src);
        assert!(
            found
                .iter()
                .any(|i| i.target == path("scripts/lib/dispatch/reserve.lua"))
        );
        assert!(
            found
                .iter()
                .any(|i| i.target == Target::Prefix("scripts/".into()))
        );
        assert!(found.iter().any(|i| i.target == path("scripts/push.lua")));
        assert!(
            !found.iter().any(|i| matches!(i.target, Target::Unknown(_))),
            "{found:?}"
        );
    }

    #[test]
    fn resolves_relative_to_the_including_file() {
        assert_eq!(
            resolve("src/broker/scripts.rs", "scripts/push.lua").as_deref(),
            Some("src/broker/scripts/push.lua")
        );
        assert_eq!(
            resolve("src/lib.rs", "../README.md").as_deref(),
            Some("README.md")
        );
        assert_eq!(
            resolve("src/a/b.rs", "./../c/./d.txt").as_deref(),
            Some("src/c/d.txt")
        );
        assert_eq!(
            resolve("build.rs", "templates/x.html").as_deref(),
            Some("templates/x.html")
        );
    }

    #[test]
    fn a_path_outside_the_crate_or_absolute_does_not_resolve() {
        assert_eq!(resolve("src/lib.rs", "../../README.md"), None);
        assert_eq!(resolve("src/lib.rs", "/etc/hostname"), None);
        assert_eq!(resolve("src/lib.rs", "C:\\x.txt"), None);
    }
}
