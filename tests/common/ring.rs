//! The ring all-reduce fixture (`fixtures/ring_allreduce.py`) and its launcher
//! (`fixtures/launch_ranks.py`): ranks of a job as real processes, where each one waits, and the
//! `py-spy` that reads their Python stacks (a visible skip where there is none, outside CI).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::*;

/// `python3 ring_allreduce.py` for a world of `world` ranks meeting on ports the kernel picks,
/// published in `dir`, where each rank also writes its progress (`rank-<R>.log`). The rank is
/// for the caller to give (`--rank` or `RANK`).
pub fn ring_allreduce(dir: &Path, world: u32) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(fixtures_dir().join("ring_allreduce.py"))
        .args([
            "--world",
            &world.to_string(),
            "--port-base",
            "0",
            "--progress-dir",
        ])
        .arg(dir);
    cmd
}

/// `py-spy` to use: `UNILAB_TEST_PY_SPY` (which must name a file), else one on `PATH`. Where
/// there is none, says that `skipped` (what of the test needs it) is skipped and gives `None`;
/// under CI, which installs it (`.ci/run`), its absence fails the test instead.
pub fn py_spy(skipped: &str) -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("UNILAB_TEST_PY_SPY") {
        let named = PathBuf::from(named);
        assert!(
            named.is_file(),
            "UNILAB_TEST_PY_SPY names `{}`, which is no file",
            named.display()
        );
        return Some(named);
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("py-spy"))
        .find(|path| path.is_file());
    assert!(
        found.is_some() || !under_ci(),
        "CI must install py-spy (.ci/run puts it in a venv and sets UNILAB_TEST_PY_SPY)"
    );
    if found.is_none() {
        eprintln!("skipped {skipped}: no py-spy (set UNILAB_TEST_PY_SPY or put it on PATH)");
    }
    found
}

/// `python3 launch_ranks.py --nproc N --`, to be followed by the worker's command.
pub fn launch_ranks(nproc: u32) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(fixtures_dir().join("launch_ranks.py")).args([
        "--nproc",
        &nproc.to_string(),
        "--grace",
        "5",
        "--",
    ]);
    cmd
}

/// The lines of rank `rank`'s progress in `dir` so far.
pub fn ring_progress(dir: &Path, rank: u32) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("rank-{rank}.log")))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Where the main thread of `pid` waits: its system call by name (`recvfrom`), else its
/// `wchan`; `None` where neither can be read.
pub fn waiting_in(pid: u32) -> Option<String> {
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok();
    let named = syscall.as_deref().and_then(|text| {
        let number: std::ffi::c_long = text.split_whitespace().next()?.parse().ok()?;
        syscall_numbers::native::sys_call_name(number).map(str::to_owned)
    });
    named.or_else(|| {
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok()?;
        let wchan = wchan.trim();
        (!wchan.is_empty() && wchan != "0").then(|| wchan.to_owned())
    })
}

/// Whether `place` (from [`waiting_in`]) is a blocking receive on a socket.
pub fn is_socket_receive(place: &str) -> bool {
    place.starts_with("recv") || matches!(place, "read" | "wait_woken" | "sk_wait_data")
}

/// Processes started by a test, each stopped with SIGKILL (by its pid) and reaped when this is
/// dropped, whatever the test's end.
#[derive(Default)]
pub struct Started(pub Vec<Child>);

impl Started {
    pub fn spawn(&mut self, cmd: &mut Command) -> u32 {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        let pid = child.id();
        self.0.push(child);
        pid
    }

    /// SIGTERM to `pid`, one of these, and its exit code once it has ended (up to `timeout`).
    pub fn terminate(&mut self, pid: u32, timeout: std::time::Duration) -> Option<i32> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.exit_code(pid, timeout)
    }

    /// The exit code of the process `pid` once it has ended, waiting up to `timeout`.
    pub fn exit_code(&mut self, pid: u32, timeout: std::time::Duration) -> Option<i32> {
        let child = self.0.iter_mut().find(|c| c.id() == pid)?;
        let mut status = None;
        within(timeout, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        status.map(|s| {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
        })
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `<root>/jobs/<uid>/<job>/runs/<run>`: the directory of run `run` of job `job`.
pub fn run_dir(root: &TestRoot, job: &str, run: &str) -> PathBuf {
    let uid = nix::unistd::getuid().as_raw().to_string();
    root.root()
        .join("jobs")
        .join(uid)
        .join(job)
        .join("runs")
        .join(run)
}

/// The alarm of run `run` of job `job`, as the rank that failed first wrote it.
pub fn run_alarm(root: &TestRoot, job: &str, run: &str) -> serde_json::Value {
    let path = run_dir(root, job, run).join("alarm");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// The names in `dir` that a rank of each of `ranks` wrote there, sorted: its `ranks/`,
/// `captured/` or `torn/` (or none, when the directory is not there).
pub fn marked_ranks(dir: &Path) -> Vec<u32> {
    let mut ranks: Vec<u32> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ranks.sort_unstable();
    ranks
}

/// `unilab --quiet soak run --job JOB --rank RANK` in a cleared environment (`PATH` with the
/// fixtures, `HOME` the state root, `LANG`), its progress in a private directory
/// `progress-RANK` under `dir` and its artifact `soak-RANK.json` there; flags, more environment
/// and the command are the caller's to add. With the progress directory's path.
pub fn job_rank_soak(root: &TestRoot, dir: &Path, job: &str, rank: u32) -> (Command, PathBuf) {
    let progress = dir.join(format!("progress-{rank}"));
    private_dir_all(&progress);
    let mut cmd = Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("LANG", "C.UTF-8")
        .arg("--root")
        .arg(root.root())
        .args(["--quiet", "soak", "run", "--job", job, "--rank"])
        .arg(rank.to_string())
        .arg("--progress-dir")
        .arg(&progress)
        .arg("--output")
        .arg(dir.join(format!("soak-{rank}.json")));
    (cmd, progress)
}

/// `unilab soak run --job J --rank R` over rank `rank` of a ring of `world` ranks in which rank
/// `hung` hangs in `load_batch` after `hang_after` steps: its progress in its own directory
/// under `dir` (the ring's port files in `dir`, so that they count as no rank's progress), its
/// artifact `soak-R.json` and its standard error `err-R` there, `flags` given to `soak run`, its
/// evidence's Python stacks by `py_spy` (none without: `--py-spy off`, whatever `PATH` holds).
pub fn ring_rank_soak(
    root: &TestRoot,
    dir: &Path,
    (rank, world, hung, hang_after): (u32, u32, u32, u32),
    py_spy: Option<&Path>,
    flags: &[&str],
) -> Command {
    let (mut cmd, progress) = job_rank_soak(root, dir, "J", rank);
    cmd.env("TZ", "UTC")
        .args(flags)
        .arg("--py-spy")
        .arg(py_spy.map_or(std::ffi::OsStr::new("off"), Path::as_os_str))
        .args(["--", "python3"])
        .arg(fixtures_dir().join("ring_allreduce.py"))
        .args(["--port-base", "0", "--step-sleep", "0.05"])
        .args(["--world", &world.to_string(), "--rank", &rank.to_string()])
        .args(["--hang-rank", &hung.to_string()])
        .args(["--hang-after", &hang_after.to_string()])
        .arg("--progress-dir")
        .arg(&progress)
        .arg("--rendezvous-dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("err-{rank}"))).unwrap());
    cmd
}

/// The ranks `0..world` of a ring, each under its own soak of job `J` ([`ring_rank_soak`], rank
/// `hung` hung after `hang_after` steps, `flags_of(rank)` given to its `soak run`), run until
/// every soak has ended, each failed (exit 1) or the test fails with its standard error.
pub fn failed_ring(
    root: &TestRoot,
    dir: &Path,
    (world, hung, hang_after): (u32, u32, u32),
    py_spy: Option<&Path>,
    flags_of: impl Fn(u32) -> Vec<&'static str>,
) {
    let mut started = Started::default();
    let pids: Vec<u32> = (0..world)
        .map(|rank| {
            started.spawn(&mut ring_rank_soak(
                root,
                dir,
                (rank, world, hung, hang_after),
                py_spy,
                &flags_of(rank),
            ))
        })
        .collect();
    for (rank, pid) in pids.iter().enumerate() {
        let code = started.exit_code(*pid, std::time::Duration::from_secs(300));
        let err = std::fs::read_to_string(dir.join(format!("err-{rank}"))).unwrap_or_default();
        assert_eq!(code, Some(1), "rank {rank}'s soak: {err}");
    }
}

/// `unilab --quiet soak run` in a cleared environment (`PATH` with the fixtures, `HOME` the
/// state root, `LANG`), sampled every 0.1 s without progress required, watching a private
/// directory `progress-<n>` of `dir` and writing its artifact as `soak-<n>.json` there; the job,
/// the launcher's variables and the command are the caller's to add.
pub fn quiet_soak(root: &TestRoot, dir: &Path, n: u32) -> Command {
    let progress = dir.join(format!("progress-{n}"));
    private_dir_all(&progress);
    let mut cmd = Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("LANG", "C.UTF-8")
        .arg("--root")
        .arg(root.root())
        .args(["--quiet", "soak", "run", "--progress-dir"])
        .arg(&progress)
        .arg("--output")
        .arg(dir.join(format!("soak-{n}.json")))
        .args(["--allow-no-progress", "--sample-interval", "0.1"])
        .stdout(Stdio::null());
    cmd
}
