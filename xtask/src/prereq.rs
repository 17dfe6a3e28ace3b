//! Prerequisites: the programs the demo and the test suite start, the Debian
//! package that provides each, and the plan that installs the missing ones.
//!
//! Detection ([`missing`]) looks at `PATH` and asks `ruby`; the decision
//! ([`plan`]) is a pure function of what is missing and what the host has
//! (root, sudo, apt-get), so it is unit-tested without running apt.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How to tell whether one prerequisite is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// An executable of this name on `PATH`.
    Executable(&'static str),
    /// `ruby -e 'require "<lib>"'` succeeds.
    RubyLibrary(&'static str),
    /// PostgreSQL's server tools (`initdb`): on `PATH`, or where Debian puts
    /// them (`/usr/lib/postgresql/<version>/bin`, not on `PATH`).
    PostgresServer,
}

/// One thing the demo or the tests need, and the Debian package that provides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub(crate) probe: Probe,
    pub(crate) package: &'static str,
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.probe {
            Probe::Executable(name) => write!(f, "`{name}` (package {})", self.package),
            Probe::RubyLibrary(lib) => {
                write!(f, "Ruby's `{lib}` library (package {})", self.package)
            }
            Probe::PostgresServer => {
                write!(
                    f,
                    "PostgreSQL's `initdb` and `pg_ctl` (package {})",
                    self.package
                )
            }
        }
    }
}

const fn exe(name: &'static str, package: &'static str) -> Requirement {
    Requirement {
        probe: Probe::Executable(name),
        package,
    }
}

/// The demo starts a private `redis-server` (unless `REDIS_URL` is set).
pub(crate) const DEMO: &[Requirement] = &[exe("redis-server", "redis-server")];

/// The test suite: private redis-servers, `redis-cli` and `redis-benchmark`
/// (Debian's `redis-tools`, a dependency of `redis-server`), Ruby Sidekiq for
/// the interop tests (the `sidekiq` command and the library under `ruby`),
/// Rails' ActiveJob for the ActiveJob interop tests,
/// chromium for the dashboard's browser tests, and PostgreSQL for
/// fairjob-postgres' tests (each starts a private server with `initdb`).
pub(crate) const TEST: &[Requirement] = &[
    exe("redis-server", "redis-server"),
    exe("redis-cli", "redis-tools"),
    exe("redis-benchmark", "redis-tools"),
    exe("sidekiq", "ruby-sidekiq"),
    Requirement {
        probe: Probe::RubyLibrary("sidekiq"),
        package: "ruby-sidekiq",
    },
    Requirement {
        probe: Probe::RubyLibrary("active_job"),
        package: "ruby-activejob",
    },
    exe("chromium", "chromium"),
    Requirement {
        probe: Probe::PostgresServer,
        package: "postgresql",
    },
];

/// The executable `name` in the directories of `path` (a `PATH` value), if any.
pub(crate) fn find_executable(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

fn on_path(name: &str) -> Option<PathBuf> {
    find_executable(name, &std::env::var_os("PATH").unwrap_or_default())
}

/// Whether `requirement` is met on this machine.
fn is_met(requirement: &Requirement) -> bool {
    match requirement.probe {
        Probe::Executable(name) => on_path(name).is_some(),
        Probe::PostgresServer => {
            on_path("initdb").is_some()
                || std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
                    versions
                        .flatten()
                        .any(|v| is_executable(&v.path().join("bin/initdb")))
                })
        }
        Probe::RubyLibrary(lib) => on_path("ruby").is_some_and(|ruby| {
            Command::new(ruby)
                .args(["-e", &format!("require {lib:?}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        }),
    }
}

/// The requirements that are not met here, in the order given.
pub(crate) fn missing(requirements: &[Requirement]) -> Vec<Requirement> {
    requirements
        .iter()
        .filter(|r| !is_met(r))
        .copied()
        .collect()
}

/// The Debian packages that provide `missing`, each once, in order.
pub(crate) fn packages(missing: &[Requirement]) -> Vec<&'static str> {
    let mut packages = Vec::new();
    for r in missing {
        if !packages.contains(&r.package) {
            packages.push(r.package);
        }
    }
    packages
}

/// What the host offers for installing packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Host {
    pub(crate) is_root: bool,
    pub(crate) has_sudo: bool,
    pub(crate) has_apt_get: bool,
}

impl Host {
    /// This machine.
    pub(crate) fn detect() -> Self {
        Host {
            is_root: is_root(),
            has_sudo: on_path("sudo").is_some(),
            has_apt_get: on_path("apt-get").is_some(),
        }
    }
}

/// The effective user id is 0 (from `/proc/self/status`, else `id -u`).
fn is_root() -> bool {
    let from_proc = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            // Real, effective, saved, filesystem: the effective one decides.
            uids.split_whitespace().nth(1).map(|euid| euid == "0")
        });
    from_proc.unwrap_or_else(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
    })
}

/// One command of an install plan: `[sudo] DEBIAN_FRONTEND=noninteractive apt-get …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AptCommand {
    pub(crate) sudo: bool,
    pub(crate) args: Vec<String>,
}

impl AptCommand {
    /// A `Command` ready to run (sudo passes the variable on its command line,
    /// since it does not keep the caller's environment).
    pub(crate) fn command(&self) -> Command {
        let mut command;
        if self.sudo {
            command = Command::new("sudo");
            command.args(["DEBIAN_FRONTEND=noninteractive", "apt-get"]);
        } else {
            command = Command::new("apt-get");
            command.env("DEBIAN_FRONTEND", "noninteractive");
        }
        command.args(&self.args);
        command
    }
}

impl fmt::Display for AptCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sudo {
            f.write_str("sudo ")?;
        }
        write!(
            f,
            "DEBIAN_FRONTEND=noninteractive apt-get {}",
            self.args.join(" ")
        )
    }
}

/// What to do about the missing prerequisites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Nothing is missing.
    Ready,
    /// Run these commands, in order, each only if the one before succeeded.
    Install(Vec<AptCommand>),
    /// This machine cannot install them by itself: say what to install and stop.
    Manual {
        /// Why not (no apt-get; not root and no sudo).
        reason: String,
        /// The Debian packages that are missing.
        packages: Vec<&'static str>,
    },
}

/// The plan for `missing` on `host`.
pub(crate) fn plan(missing: &[Requirement], host: Host) -> Plan {
    let packages = packages(missing);
    if packages.is_empty() {
        return Plan::Ready;
    }
    if !host.has_apt_get {
        return Plan::Manual {
            reason: "there is no apt-get on this system".into(),
            packages,
        };
    }
    if !host.is_root && !host.has_sudo {
        return Plan::Manual {
            reason: "installing needs root, and there is no sudo".into(),
            packages,
        };
    }
    let sudo = !host.is_root;
    let mut install: Vec<String> = vec!["install".into(), "-y".into()];
    install.extend(packages.iter().map(|p| (*p).to_owned()));
    Plan::Install(vec![
        AptCommand {
            sudo,
            args: vec!["update".into()],
        },
        AptCommand {
            sudo,
            args: install,
        },
    ])
}

/// The message for [`Plan::Manual`]: exactly what to install, with Debian's
/// names and the equivalents elsewhere (the missing items are listed before it).
pub(crate) fn manual_instructions(reason: &str, packages: &[&str]) -> String {
    let mut text = format!(
        "cannot install what is missing: {reason}.\n\
         on Debian or Ubuntu, as root:\n    apt-get update && apt-get install -y {}\n\
         elsewhere, install and put on PATH:\n",
        packages.join(" ")
    );
    let mut seen = Vec::new();
    for package in packages {
        let equivalent = match *package {
            "redis-server" | "redis-tools" => {
                "Redis 7: `redis-server`, `redis-cli` and `redis-benchmark`"
            }
            "ruby-sidekiq" => "Ruby with Sidekiq 6: `gem install sidekiq -v '~> 6.4'`",
            "ruby-activejob" => "Rails' ActiveJob: `gem install activejob -v '~> 6.1'`",
            "chromium" => "Chromium, as `chromium`",
            other => other,
        };
        if !seen.contains(&equivalent) {
            seen.push(equivalent);
            text.push_str(&format!("    - {equivalent}\n"));
        }
    }
    text.push_str("then run the command again");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: Host = Host {
        is_root: true,
        has_sudo: false,
        has_apt_get: true,
    };

    fn args(plan: &Plan) -> Vec<String> {
        match plan {
            Plan::Install(commands) => commands.iter().map(ToString::to_string).collect(),
            other => panic!("expected an install plan, got {other:?}"),
        }
    }

    #[test]
    fn nothing_missing_is_ready_whatever_the_host() {
        for host in [
            ROOT,
            Host {
                is_root: false,
                has_sudo: false,
                has_apt_get: false,
            },
        ] {
            assert_eq!(plan(&[], host), Plan::Ready);
        }
    }

    #[test]
    fn root_with_apt_get_updates_then_installs_each_package_once() {
        let missing = TEST.to_vec();
        assert_eq!(
            args(&plan(&missing, ROOT)),
            [
                "DEBIAN_FRONTEND=noninteractive apt-get update",
                "DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools ruby-sidekiq ruby-activejob chromium postgresql",
            ]
        );
    }

    #[test]
    fn only_the_missing_packages_are_installed() {
        let missing = [TEST[3], TEST[4]]; // the sidekiq command and library
        assert_eq!(
            args(&plan(&missing, ROOT))[1],
            "DEBIAN_FRONTEND=noninteractive apt-get install -y ruby-sidekiq"
        );
        let missing = [TEST[1]]; // redis-cli alone
        assert_eq!(
            args(&plan(&missing, ROOT))[1],
            "DEBIAN_FRONTEND=noninteractive apt-get install -y redis-tools"
        );
    }

    #[test]
    fn not_root_goes_through_sudo() {
        let host = Host {
            is_root: false,
            has_sudo: true,
            has_apt_get: true,
        };
        let plan = plan(DEMO, host);
        assert_eq!(
            args(&plan),
            [
                "sudo DEBIAN_FRONTEND=noninteractive apt-get update",
                "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server",
            ]
        );
        let Plan::Install(commands) = plan else {
            unreachable!()
        };
        let command = commands[1].command();
        assert_eq!(command.get_program(), "sudo");
        let argv: Vec<_> = command.get_args().collect();
        assert_eq!(
            argv,
            [
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "redis-server"
            ]
        );
    }

    #[test]
    fn root_runs_apt_get_itself_with_a_noninteractive_frontend() {
        let Plan::Install(commands) = plan(DEMO, ROOT) else {
            panic!("expected an install plan")
        };
        let command = commands[0].command();
        assert_eq!(command.get_program(), "apt-get");
        assert!(
            command
                .get_envs()
                .any(|(k, v)| k == "DEBIAN_FRONTEND" && v == Some(OsStr::new("noninteractive")))
        );
    }

    #[test]
    fn without_apt_get_or_a_way_to_root_the_plan_is_manual() {
        let no_apt = Host {
            is_root: true,
            has_sudo: true,
            has_apt_get: false,
        };
        let Plan::Manual { reason, packages } = plan(TEST, no_apt) else {
            panic!("expected a manual plan")
        };
        assert!(reason.contains("no apt-get"), "{reason}");
        assert_eq!(
            packages,
            [
                "redis-server",
                "redis-tools",
                "ruby-sidekiq",
                "ruby-activejob",
                "chromium",
                "postgresql"
            ]
        );
        let text = manual_instructions(&reason, &packages);
        assert!(
            text.contains(
                "apt-get update && apt-get install -y redis-server redis-tools ruby-sidekiq ruby-activejob chromium postgresql"
            ),
            "{text}"
        );
        assert_eq!(text.matches("Redis 7").count(), 1, "{text}");
        assert!(text.contains("gem install sidekiq"), "{text}");
        assert!(text.contains("gem install activejob"), "{text}");
        assert!(text.contains("Chromium, as `chromium`"), "{text}");

        let no_sudo = Host {
            is_root: false,
            has_sudo: false,
            has_apt_get: true,
        };
        let Plan::Manual { reason, .. } = plan(DEMO, no_sudo) else {
            panic!("expected a manual plan")
        };
        assert!(reason.contains("no sudo"), "{reason}");
    }

    #[test]
    fn demo_needs_only_redis_server_and_test_needs_all_three_tools() {
        assert_eq!(packages(DEMO), ["redis-server"]);
        let test = packages(TEST);
        for package in ["redis-server", "ruby-sidekiq", "ruby-activejob", "chromium"] {
            assert!(test.contains(&package), "{package} missing from {test:?}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn find_executable_looks_through_each_path_entry() {
        use std::os::unix::fs::PermissionsExt;

        let dir = crate::TempDir::new("find-executable");
        let first = dir.path().join("a");
        let second = dir.path().join("b");
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        let tool = second.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        // A plain file is not an executable.
        assert_eq!(find_executable("tool", second.as_os_str()), None);
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([&first, &second]).unwrap();
        assert_eq!(find_executable("tool", &path), Some(tool));
        assert_eq!(find_executable("tool", first.as_os_str()), None);
        assert_eq!(find_executable("tool", OsStr::new("")), None);
    }
}
