//! `cargo xtask check-package`: each published crate's `cargo package --list`
//! holds every file the crate reads at build time, checked without building.
//!
//! What a crate reads at build time: the files its `src/**/*.rs` (and build
//! script) name in `include_str!`/`include_bytes!`/`include!`, resolved
//! relative to the naming file; everything under `templates/` (askama) and
//! `askama.toml`; and its `readme`/`license-file`. A `readme` outside the crate
//! directory (`readme = "../README.md"`) is copied by cargo to the package root
//! under its file name, so that name must be listed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::manifest::{self, Value};
use crate::scan::{self, Target};

/// What the check found in one crate.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Files the crate needs that were found in the list.
    pub(crate) checked: BTreeSet<String>,
    /// Each a complete sentence naming the missing or unreachable file.
    pub(crate) problems: Vec<String>,
    /// Includes that could not be checked (not a literal path).
    pub(crate) notes: Vec<String>,
}

/// Runs the check over the workspace at `root`; `Err` says what failed.
pub(crate) fn run(root: &Path, cargo: &Path) -> Result<(), String> {
    let root_manifest = read(&root.join("Cargo.toml"))?;
    let mut failed = Vec::new();
    let mut published = 0;
    for member in manifest::workspace_members(&root_manifest, root) {
        let dir = root.join(&member);
        let text = read(&dir.join("Cargo.toml"))?;
        let Some(Value::Str(name)) = manifest::value(&text, "package", "name") else {
            return Err(format!("{member}/Cargo.toml has no package name"));
        };
        match manifest::value(&text, "package", "publish") {
            Some(Value::Bool(false)) => {
                println!("check-package: {name}: not published (publish = false), skipped");
                continue;
            }
            Some(Value::Other(v)) if v.replace(' ', "") == "[]" => {
                println!("check-package: {name}: not published (publish = []), skipped");
                continue;
            }
            _ => {}
        }
        published += 1;
        let listed = package_list(root, cargo, &name)?;
        let report = check_crate(root, &member, &text, &root_manifest, &listed);
        for note in &report.notes {
            println!("check-package: {name}: note: {note}");
        }
        if report.problems.is_empty() {
            println!(
                "check-package: {name}: ok ({} files listed; all {} files it reads at build time are among them)",
                listed.len(),
                report.checked.len()
            );
        } else {
            for problem in &report.problems {
                eprintln!("check-package: {name}: {problem}");
            }
            failed.push(name);
        }
    }
    if published == 0 {
        return Err("no published crate found among the workspace members".into());
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the published package of {} would miss files it needs (see above); \
             fix `include`/`exclude` in its Cargo.toml, .gitignore, or move the file into the crate",
            failed.join(", ")
        ))
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// `cargo package --list --allow-dirty -p <name>`: the files the crate would ship.
fn package_list(root: &Path, cargo: &Path, name: &str) -> Result<BTreeSet<String>, String> {
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["package", "--list", "--allow-dirty", "-p", name])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cargo.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo package --list --allow-dirty -p {name}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().replace('\\', "/"))
        .filter(|l| !l.is_empty())
        .collect())
}

/// Every regular file under `dir`, as `/`-separated paths relative to `base`.
fn files_under(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(base, &path, out);
        } else if path.is_file() {
            out.push(relative(base, &path));
        }
    }
}

fn relative(base: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(base).unwrap_or(path);
    let parts: Vec<_> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    parts.join("/")
}

/// Checks the crate in `member` (relative to `root`) against `listed`, the
/// output of `cargo package --list` for it.
pub(crate) fn check_crate(
    root: &Path,
    member: &str,
    manifest_text: &str,
    root_manifest: &str,
    listed: &BTreeSet<String>,
) -> Report {
    let dir = root.join(member);
    let mut report = Report::default();
    let need = |report: &mut Report, file: &str, why: String| {
        if listed.contains(file) {
            report.checked.insert(file.to_owned());
        } else {
            report.problems.push(format!(
                "{file} ({why}) is not in `cargo package --list`: the published crate would not build"
            ));
        }
    };

    // Rust sources compiled by the crate, and what they include.
    let mut sources = Vec::new();
    files_under(&dir, &dir.join("src"), &mut sources);
    let build = match manifest::value(manifest_text, "package", "build") {
        Some(Value::Str(path)) => Some(path),
        Some(Value::Bool(false)) => None,
        _ => Some("build.rs".to_owned()),
    };
    if let Some(build) = build.filter(|b| dir.join(b).is_file()) {
        sources.push(build);
    }
    sources.retain(|s| s.ends_with(".rs"));
    sources.sort();
    for source in &sources {
        need(&mut report, source, "a Rust source of the crate".into());
        let Ok(text) = std::fs::read_to_string(dir.join(source)) else {
            continue;
        };
        for include in scan::includes(&text) {
            let call = format!("{}! at {source}:{}", include.macro_name, include.line);
            match include.target {
                Target::Path(target) => match scan::resolve(source, &target) {
                    Some(file) => need(&mut report, &file, format!("read by {call}")),
                    None => report.problems.push(format!(
                        "{call} reads {target:?}, outside {member}/: a published crate holds only \
                         its own directory, so move the file into the crate \
                         (a README belongs in `readme` in Cargo.toml)"
                    )),
                },
                Target::Prefix(prefix) => {
                    let Some(pattern) = scan::resolve(source, &format!("{prefix}*")) else {
                        report.problems.push(format!(
                            "{call} reads a file under {prefix:?}, outside {member}/"
                        ));
                        continue;
                    };
                    // Every file the call could read: those in the directory
                    // whose names start with the literal prefix.
                    let (folder, start) = pattern.rsplit_once('/').unwrap_or(("", &pattern));
                    let start = start.trim_end_matches('*');
                    let mut candidates = Vec::new();
                    if let Ok(entries) = std::fs::read_dir(dir.join(folder)) {
                        for entry in entries.flatten() {
                            let name = entry.file_name().to_string_lossy().into_owned();
                            if entry.path().is_file() && name.starts_with(start) {
                                candidates.push(if folder.is_empty() {
                                    name
                                } else {
                                    format!("{folder}/{name}")
                                });
                            }
                        }
                    }
                    candidates.sort();
                    if candidates.is_empty() {
                        report
                            .notes
                            .push(format!("{call} reads {pattern}, which matches no file"));
                    }
                    for file in candidates {
                        need(&mut report, &file, format!("may be read by {call}"));
                    }
                }
                Target::Generated => {}
                Target::Unknown(expr) => report.notes.push(format!(
                    "{call} reads `{expr}`, not a literal path: not checked"
                )),
            }
        }
    }

    // askama's templates and its configuration, read by the derive at build time.
    let mut templates = Vec::new();
    files_under(&dir, &dir.join("templates"), &mut templates);
    if dir.join("askama.toml").is_file() {
        templates.push("askama.toml".into());
    }
    templates.sort();
    for file in templates {
        need(
            &mut report,
            &file,
            "an askama template or its configuration".into(),
        );
    }

    // The readme and licence file that Cargo.toml names (or the README cargo finds).
    for key in ["readme", "license-file"] {
        let path = match manifest::value(manifest_text, "package", key) {
            Some(Value::Str(path)) => Some(dir.join(path)),
            Some(Value::Workspace) => {
                match manifest::value(root_manifest, "workspace.package", key) {
                    Some(Value::Str(path)) => Some(root.join(path)),
                    _ => {
                        report.problems.push(format!(
                            "`{key}.workspace = true` but the workspace sets no `{key}`"
                        ));
                        None
                    }
                }
            }
            Some(Value::Bool(false)) => None,
            _ if key == "readme" => ["README.md", "README.txt", "README"]
                .into_iter()
                .map(|name| dir.join(name))
                .find(|p| p.is_file()),
            _ => None,
        };
        let Some(path) = path else { continue };
        let Some(file) = packaged_name(&dir, &path) else {
            report.problems.push(format!(
                "`{key}` names {}, which has no file name",
                path.display()
            ));
            continue;
        };
        if !path.is_file() {
            report.problems.push(format!(
                "`{key}` names {}, which does not exist",
                path.display()
            ));
            continue;
        }
        need(&mut report, &file, format!("the crate's `{key}`"));
    }
    report
}

/// Where cargo puts `path` in the package: its place in the crate directory,
/// or, for a file outside it (`readme = "../README.md"`), its name at the root.
fn packaged_name(dir: &Path, path: &Path) -> Option<String> {
    let normal = normalize(path);
    match normal.strip_prefix(normalize(dir)) {
        Ok(inside) => Some(relative(Path::new(""), inside)),
        Err(_) => Some(normal.file_name()?.to_string_lossy().into_owned()),
    }
}

/// `path` with `.` and `..` removed lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Renders a report as the command prints it (for tests and messages).
#[cfg(test)]
fn render(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    for p in &report.problems {
        let _ = writeln!(text, "problem: {p}");
    }
    for n in &report.notes {
        let _ = writeln!(text, "note: {n}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TempDir;

    /// A workspace with one crate `lib/` holding a script loader like fairjob's.
    fn fixture() -> TempDir {
        let ws = TempDir::new("check-package");
        let root = ws.path();
        let write = |rel: &str, text: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("Cargo.toml", "[workspace]\nmembers = [\"lib\"]\n");
        write("README.md", "# readme\n");
        write(
            "lib/Cargo.toml",
            "[package]\nname = \"lib\"\nreadme = \"../README.md\"\n",
        );
        write(
            "lib/src/lib.rs",
            "//! include_str!(\"not_read.txt\")\nmod scripts;\nconst A: &[u8] = include_bytes!(\"../assets/a.bin\");\n",
        );
        write(
            "lib/src/scripts.rs",
            "macro_rules! s { ($f:literal) => { include_str!(concat!(\"scripts/\", $f)) } }\n\
             const P: &str = include_str!(\"scripts/push.lua\");\n",
        );
        write("lib/src/scripts/push.lua", "return 1\n");
        write("lib/src/scripts/fetch.lua", "return 2\n");
        write("lib/assets/a.bin", "a");
        write("lib/templates/index.html", "<p>{{ x }}</p>\n");
        ws
    }

    fn complete() -> BTreeSet<String> {
        [
            "Cargo.toml",
            "Cargo.toml.orig",
            "README.md",
            "assets/a.bin",
            "src/lib.rs",
            "src/scripts.rs",
            "src/scripts/fetch.lua",
            "src/scripts/push.lua",
            "templates/index.html",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    }

    fn check(ws: &TempDir, listed: &BTreeSet<String>) -> Report {
        let root = ws.path();
        let manifest = std::fs::read_to_string(root.join("lib/Cargo.toml")).unwrap();
        let root_manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        check_crate(root, "lib", &manifest, &root_manifest, listed)
    }

    #[test]
    fn a_complete_list_passes() {
        let ws = fixture();
        let report = check(&ws, &complete());
        assert!(report.problems.is_empty(), "{}", render(&report));
        let checked: Vec<&str> = report.checked.iter().map(String::as_str).collect();
        assert_eq!(
            checked,
            [
                "README.md",
                "assets/a.bin",
                "src/lib.rs",
                "src/scripts.rs",
                "src/scripts/fetch.lua",
                "src/scripts/push.lua",
                "templates/index.html",
            ]
        );
    }

    #[test]
    fn each_missing_file_is_named_with_who_reads_it() {
        let ws = fixture();
        for (missing, expected) in [
            ("src/scripts/push.lua", "include_str! at src/scripts.rs:2"),
            (
                "src/scripts/fetch.lua",
                "may be read by include_str! at src/scripts.rs:1",
            ),
            ("assets/a.bin", "include_bytes! at src/lib.rs:3"),
            ("templates/index.html", "askama template"),
            ("README.md", "the crate's `readme`"),
            ("src/scripts.rs", "a Rust source"),
        ] {
            let mut listed = complete();
            listed.remove(missing);
            let report = check(&ws, &listed);
            let text = render(&report);
            assert!(
                report
                    .problems
                    .iter()
                    .any(|p| p.starts_with(missing) && p.contains(expected)),
                "without {missing}:\n{text}"
            );
        }
    }

    #[test]
    fn an_include_outside_the_crate_is_a_problem_even_if_the_file_exists() {
        let ws = fixture();
        std::fs::write(
            ws.path().join("lib/src/lib.rs"),
            "#![doc = include_str!(\"../../README.md\")]\n",
        )
        .unwrap();
        let report = check(&ws, &complete());
        assert_eq!(report.problems.len(), 1, "{}", render(&report));
        assert!(
            report.problems[0].contains("\"../../README.md\", outside lib/"),
            "{}",
            render(&report)
        );
    }

    #[test]
    fn a_readme_inside_the_crate_keeps_its_path_and_a_missing_one_is_reported() {
        let ws = fixture();
        let root = ws.path();
        std::fs::create_dir_all(root.join("lib/docs")).unwrap();
        std::fs::write(root.join("lib/docs/README.md"), "x").unwrap();
        let manifest = "[package]\nname = \"lib\"\nreadme = \"docs/README.md\"\n";
        let mut listed = complete();
        listed.insert("docs/README.md".into());
        listed.remove("README.md");
        let report = check_crate(root, "lib", manifest, "", &listed);
        assert!(report.problems.is_empty(), "{}", render(&report));

        let manifest = "[package]\nname = \"lib\"\nreadme = \"../NOPE.md\"\n";
        let report = check_crate(root, "lib", manifest, "", &listed);
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains("NOPE.md, which does not exist")),
            "{}",
            render(&report)
        );
    }

    #[test]
    fn a_readme_from_the_workspace_is_packaged_under_its_name() {
        let ws = fixture();
        let root = ws.path();
        let manifest = "[package]\nname = \"lib\"\nreadme.workspace = true\n";
        let root_manifest = "[workspace.package]\nreadme = \"README.md\"\n";
        let report = check_crate(root, "lib", manifest, root_manifest, &complete());
        assert!(report.problems.is_empty(), "{}", render(&report));
        let mut listed = complete();
        listed.remove("README.md");
        let report = check_crate(root, "lib", manifest, root_manifest, &listed);
        assert_eq!(report.problems.len(), 1, "{}", render(&report));
    }

    #[test]
    fn packaged_names_follow_cargo() {
        let dir = Path::new("/ws/fairjob");
        assert_eq!(
            packaged_name(dir, &dir.join("../README.md")).as_deref(),
            Some("README.md")
        );
        assert_eq!(
            packaged_name(dir, &dir.join("docs/./intro.md")).as_deref(),
            Some("docs/intro.md")
        );
    }
}
