//! The workspace's own source files, for the static checks (`tests/layering.rs`,
//! `tests/contract.rs`, `tests/lua_static.rs`): where the workspace is, its
//! files by extension, and Rust source without its comments (or without its
//! comments and strings).

use std::path::{Path, PathBuf};

/// The workspace root (the parent of this package).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every file under `dir` (recursively) whose name ends in `.<ext>`, sorted;
/// none when `dir` does not exist.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

/// Rust source with its comments removed (`//` to the end of the line, and
/// `/* … */`, nested) and every char literal written `' '`, so that what is
/// left is code and string literals only (raw strings, `r#"…"#`, included).
/// Line breaks inside block comments are kept, so line numbers stay right.
pub fn strip_rust_comments(src: &str) -> String {
    strip(src, Strings::Keep)
}

/// Rust code only: [`strip_rust_comments`], and every string literal's
/// text blanked (`"…"` and `r#"…"#` become `""`, keeping their line
/// breaks), so braces, `fn` and `impl` inside strings are not read as code
/// (the contract check counts braces).
pub fn rust_code_only(src: &str) -> String {
    strip(src, Strings::Blank)
}

#[derive(Clone, Copy, PartialEq)]
enum Strings {
    Keep,
    Blank,
}

/// Pushes the string literal `lit` (quotes included) to `out`, or with
/// [`Strings::Blank`] `""` and the line breaks it held.
fn push_string(out: &mut String, lit: &str, strings: Strings) {
    match strings {
        Strings::Keep => out.push_str(lit),
        Strings::Blank => {
            out.push_str("\"\"");
            out.extend(lit.chars().filter(|&c| c == '\n'));
        }
    }
}

/// When a raw string (`r"…"`, `r#"…"#`, `br"…"`) opens at `i`: the number
/// of its `#`s.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if b[i] != b'r' {
        return None;
    }
    let starts_token = match i {
        0 => true,
        1 => !ident(b[0]) || b[0] == b'b',
        _ => !ident(b[i - 1]) || (b[i - 1] == b'b' && !ident(b[i - 2])),
    };
    if !starts_token {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

fn strip(src: &str, strings: Strings) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    // Every cut below is at an ASCII byte, so on a char boundary.
    while i < b.len() {
        if let Some(hashes) = raw_string_at(b, i) {
            let body = i + 1 + hashes + 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            push_string(&mut out, &src[i..end], strings);
            i = end;
            continue;
        }
        match b[i] {
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                push_string(&mut out, &src[i..end], strings);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            out.push('\n');
                        }
                        i += 1;
                    }
                }
            }
            b'\'' => match char_literal_len(&src[i..]) {
                Some(len) => {
                    out.push_str("' '");
                    i += len;
                }
                None => {
                    // A lifetime or a label.
                    out.push('\'');
                    i += 1;
                }
            },
            _ => {
                let start = i;
                while i < b.len()
                    && !matches!(b[i], b'"' | b'/' | b'\'')
                    && raw_string_at(b, i).is_none()
                {
                    i += 1;
                }
                if i == start {
                    // A lone `/`.
                    i += 1;
                }
                out.push_str(&src[start..i]);
            }
        }
    }
    out
}

/// The length of the char literal `s` starts with (`'a'`, `'é'`, `'\n'`,
/// `'\''`, `'\u{1F600}'`), or None when its `'` opens a lifetime or a label.
fn char_literal_len(s: &str) -> Option<usize> {
    let rest = &s[1..];
    if let Some(escaped) = rest.strip_prefix('\\') {
        // An escape: up to the next `'` after the escaped character.
        let first = escaped.chars().next()?;
        let close = escaped[first.len_utf8()..].find('\'')?;
        return Some(2 + first.len_utf8() + close + 1);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..]
        .starts_with('\'')
        .then(|| 1 + c.len_utf8() + 1)
}

#[cfg(test)]
mod tests {
    use super::{rust_code_only, strip_rust_comments};

    #[test]
    fn comments_go_code_strings_and_lines_stay() {
        let src = "let a = \"// not a comment\"; // a comment\n\
                   /* block /* nested */ still */ let b = 1;\n\
                   /* two\nlines */ let c = '\"'; let d: &'static str = \"é\";\n\
                   let e = '\\''; let f = 'é'; let g = x / y;";
        let out = strip_rust_comments(src);
        assert_eq!(
            out,
            "let a = \"// not a comment\"; \n \
             let b = 1;\n\
             \n let c = ' '; let d: &'static str = \"é\";\n\
             let e = ' '; let f = ' '; let g = x / y;"
        );
    }

    #[test]
    fn raw_strings_are_strings_and_code_only_blanks_every_string() {
        let src = "let a = r#\"{ \"// not a comment\" }\"#; // a comment\n\
                   let b = br\"x\"; let c = \"fn f() {\n}\"; let rr = 1; let d = bar\"y\";";
        assert_eq!(
            strip_rust_comments(src),
            "let a = r#\"{ \"// not a comment\" }\"#; \n\
             let b = br\"x\"; let c = \"fn f() {\n}\"; let rr = 1; let d = bar\"y\";"
        );
        assert_eq!(
            rust_code_only(src),
            "let a = \"\"; \n\
             let b = b\"\"; let c = \"\"\n; let rr = 1; let d = bar\"\";"
        );
    }
}
