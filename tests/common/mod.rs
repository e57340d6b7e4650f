//! The test harness shared by the integration tests: a temporary state root, the real `unilab`
//! binary pointed at it, the NVIDIA fakes on `PATH`, test clocks, a bounded wait, a raw write to a
//! log's redb file, and whether the tests run under CI (where a tool CI installs must be found, not
//! skipped). Apart, and all reached through `crate::common::*`: a headless browser for the HTML
//! pages (`browser`), sample events of every kind (`events`, schema 10's beating soak in `beats`),
//! child processes that append to or read one log, for the multi-process tests (`children`),
//! `/proc` lookups of real processes (`processes`), private files and a small disk (`files`), a
//! command refused with an exit code and a reason (`refused`), the ranks of the ring all-reduce
//! fixture and the `py-spy` that reads their stacks (`ring`), four of them under one command
//! line and what must hold when they end (`one_line`), a Slurm cluster of two nodes
//! (`slurm`), the filters of snapshots of real runs (`snapshot`), and a process whose memory map is
//! locked (`stuck_map`).
//!
//! `UNILAB_TEST_BIN` and `UNILAB_TEST_FIXTURES` override where the binary and the fakes are, so
//! that CI can run the test binary as an unprivileged user from a copy it can read.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use unilab::Clock;
use unilab::EventLog;
use unilab::PROJECTIONS;
use unilab::Scope;
use unilab::StatePaths;

mod beats;
mod browser;
mod children;
mod events;
mod files;
mod job_events;
mod one_line;
mod processes;
mod refused;
mod ring;
mod slurm;
mod snapshot;
mod stuck_map;
pub use beats::*;
pub use browser::*;
pub use children::*;
pub use events::*;
pub use files::*;
pub use job_events::*;
pub use one_line::*;
pub use processes::*;
pub use refused::*;
pub use ring::*;
pub use slurm::*;
pub use snapshot::*;
pub use stuck_map::*;

pub fn unilab_bin() -> PathBuf {
    std::env::var_os("UNILAB_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_unilab")))
}

pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("UNILAB_TEST_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether the tests run under CI (`CI` set, as CI services and `scripts/test-unprivileged.sh`
/// set it): there a tool CI installs must be found, and its absence fails a test that would
/// skip elsewhere.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// A clock whose first reading is `start_us` and which advances `step_us` a reading.
pub struct SteppingClock {
    next_us: AtomicI64,
    step_us: i64,
}

impl SteppingClock {
    pub fn boxed(start_us: i64, step_us: i64) -> Box<dyn Clock> {
        Box::new(Self {
            next_us: AtomicI64::new(start_us),
            step_us,
        })
    }
}

impl Clock for SteppingClock {
    fn now_us(&self) -> i64 {
        self.next_us.fetch_add(self.step_us, Ordering::Relaxed)
    }
}

/// A clock that starts at 2025-12-02 12:00:00 UTC and advances 1.5 s a reading: the times the
/// snapshots of logs built from [`every_event_kind`] show.
pub fn fixed_clock() -> Box<dyn Clock> {
    SteppingClock::boxed(1_764_676_800_000_000, 1_500_000)
}

/// Whether `done` holds within `timeout`, asking every 20 ms.
pub fn within(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if done() {
            return true;
        }
        if started.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `done` holds, failing the test if it does not within `timeout`.
pub fn eventually(what: &str, timeout: Duration, done: impl FnMut() -> bool) {
    assert!(within(timeout, done), "timed out waiting for {what}");
}

/// A fresh state root in a temporary directory, removed at the end of the test. When a test
/// that passed lets it go, the log of this user on this host (if one was made) must verify:
/// `unilab log verify` is clean after every test, unless the test damaged, forged or distrusted
/// the log on purpose and said so ([`TestRoot::damaged_on_purpose`]).
pub struct TestRoot {
    dir: tempfile::TempDir,
    damaged: std::cell::Cell<bool>,
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        if std::thread::panicking() || self.damaged.get() || !self.log_path().exists() {
            return;
        }
        let verified = self
            .unilab()
            .args(["log", "verify"])
            .output()
            .expect("run unilab log verify");
        assert!(
            verified.status.success(),
            "`unilab log verify` failed at the end of the test (call `damaged_on_purpose` if the \
             test damages the log): {}{}",
            String::from_utf8_lossy(&verified.stdout),
            String::from_utf8_lossy(&verified.stderr)
        );
    }
}

impl Default for TestRoot {
    fn default() -> Self {
        Self::new()
    }
}

impl TestRoot {
    pub fn new() -> Self {
        Self {
            dir: private_tempdir("unilab-test-"),
            damaged: std::cell::Cell::new(false),
        }
    }

    /// This test damages, forges or distrusts the log on purpose (a record rewritten, a file cut
    /// short, a directory others may write to): the log is not verified when the test ends.
    pub fn damaged_on_purpose(&self) {
        self.damaged.set(true);
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn paths(&self) -> StatePaths {
        StatePaths::resolve(Some(self.root())).expect("state paths")
    }

    pub fn log_path(&self) -> PathBuf {
        self.paths().log_path()
    }

    pub fn scope(&self) -> Scope {
        self.paths().scope()
    }

    /// The log of this user on this host, opened for appending.
    pub fn log(&self) -> EventLog {
        EventLog::open(&self.log_path(), self.scope(), PROJECTIONS).expect("open the event log")
    }

    /// The real binary, with this root, the fakes first on `PATH`, and no inherited unilab or
    /// CUDA variables.
    pub fn unilab(&self) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", self.root())
            .env("LANG", "C.UTF-8")
            .env("TZ", "UTC")
            .arg("--root")
            .arg(self.root());
        cmd
    }
}

/// Opens the log of `root` as a redb file and commits `change` to it, as something other than
/// unilab would: a test's way to damage or forge what is stored.
pub fn raw_write(root: &TestRoot, change: impl FnOnce(&redb::WriteTransaction)) {
    root.damaged_on_purpose();
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.open(root.log_path()).unwrap();
    let txn = db.begin_write().unwrap();
    change(&txn);
    txn.commit().unwrap();
}

/// `unilab ARGS` on a pseudo-terminal (Python's `pty`) with `TERM=xterm` unless `env` says
/// otherwise, as [`TestRoot::unilab`] sets it up: its exit code and what the terminal received,
/// standard output and standard error together.
pub fn on_a_terminal<S: AsRef<std::ffi::OsStr>>(
    root: &TestRoot,
    env: &[(&str, &str)],
    args: impl IntoIterator<Item = S>,
) -> (Option<i32>, String) {
    const PTY: &str =
        "import os, pty, sys\nsys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))";
    let output = std::process::Command::new("python3")
        .env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env("TERM", "xterm")
        .envs(env.iter().copied())
        .args(["-c", PTY])
        .arg(unilab_bin())
        .arg("--root")
        .arg(root.root())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python3 runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

pub fn path_with_fixtures() -> OsString {
    let mut paths = vec![fixtures_dir()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).expect("a PATH")
}

/// The bundled example trainer (`UNILAB_TEST_TRAINER` overrides, for CI's unprivileged copy).
pub fn trainer() -> PathBuf {
    std::env::var_os("UNILAB_TEST_TRAINER")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/example-trainer.py"))
}

/// The Python package's directory, for `PYTHONPATH` (`UNILAB_TEST_PYTHON` overrides, for CI's
/// unprivileged copy).
pub fn python_package_dir() -> PathBuf {
    std::env::var_os("UNILAB_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("python"))
}

/// The `kind` of every event that `unilab --json history ARGS` prints through `unilab`.
pub fn history_kinds(mut unilab: assert_cmd::Command, args: &[&str]) -> Vec<String> {
    let out = unilab
        .args(["--json", "history"])
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .map(|l| {
            let event: serde_json::Value = serde_json::from_str(l).expect("one JSON object a line");
            event["kind"].as_str().expect("a kind").to_owned()
        })
        .collect()
}

/// How many times a shared daemon's history has each step of its life: started, a lease
/// acquired, a lease released, stopped.
pub fn shared_daemon_life(kinds: &[String]) -> (usize, usize, usize, usize) {
    let n = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    (
        n("daemon_started"),
        n("lease_acquired"),
        n("lease_released"),
        n("daemon_stopped"),
    )
}
