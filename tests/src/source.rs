//! The workspace's own source files, for the static checks (`tests/layering.rs`,
//! `tests/lua_static.rs`): where the workspace is, its files by extension, and
//! Rust source without its comments.

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
/// left is code and string literals only. Line breaks inside block comments
/// are kept, so line numbers stay right.
pub fn strip_rust_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    // Every cut below is at an ASCII byte, so on a char boundary.
    while i < b.len() {
        match b[i] {
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                out.push_str(&src[i..end]);
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
                while i < b.len() && !matches!(b[i], b'"' | b'/' | b'\'') {
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
    use super::strip_rust_comments;

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
}
