//! A job as it is really started: four ranks of the ring all-reduce fixture under one command
//! line (`launch_ranks.py`, as torchrun's), every rank's soak with the same limits, rank
//! [`HUNG_RANK`] hung in `load_batch`. What must hold when it ends is [`one_line_ring`]'s to
//! check: every rank captured before the first teardown, and the hung rank named the suspect,
//! first in the verdict.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::*;

/// The ranks of the ring.
pub const RING_WORLD: u32 = 4;
/// The rank that hangs.
pub const HUNG_RANK: u32 = 2;

/// How a rank of the ring ends when a peer's socket closes.
#[derive(Debug, Clone, Copy)]
pub enum OnClose {
    /// At once, failing, as Gloo's ranks do.
    Exit,
    /// Never: it waits on, as ranks whose collective has no timeout do.
    Wait,
}

impl OnClose {
    fn flag(self) -> &'static str {
        match self {
            OnClose::Exit => "exit",
            OnClose::Wait => "wait",
        }
    }
}

/// One way of running the ring: how its ranks end when a peer goes, the `py-spy` its soaks
/// dump Python stacks with (none: `--py-spy off`), and whether its ranks beat (`--beat`: the
/// hung rank's last beat in `data`, the others' in `train`).
#[derive(Debug, Clone)]
pub struct RingRun {
    pub on_close: OnClose,
    pub py_spy: Option<PathBuf>,
    pub beats: bool,
}

/// One command line, as torchrun's: the launcher (`launch_ranks.py`, which gives each worker
/// its `RANK`, and stops the others once one fails, after a grace long enough for their
/// teardown) starts four workers, each `unilab soak run --job J` with the same limits — a
/// sample a second, stale after 5 s — over its rank of a ring whose rank 2 hangs in
/// `load_batch` after 3 steps. Each rank's progress is its own directory, `progress-$RANK`, its
/// artifact `soak-{rank}.json`. Returns the launcher's exit status and what it and its workers
/// said.
fn ring_under_one_command_line(
    root: &TestRoot,
    dir: &Path,
    ring: &RingRun,
) -> (Option<i32>, String) {
    for rank in 0..RING_WORLD {
        private_dir_all(&dir.join(format!("progress-{rank}")));
    }
    let rendezvous = dir.join("ring");
    private_dir_all(&rendezvous);
    let py_spy = ring
        .py_spy
        .as_deref()
        .map_or_else(|| "off".to_owned(), |p| p.display().to_string());
    let worker = format!(
        "exec \"$0\" --root '{root}' --quiet soak run --job J --sample-interval 1 \
         --stale-progress 5s --py-spy '{py_spy}' --progress-dir '{dir}/progress-'\"$RANK\" \
         --output '{dir}/soak-{{rank}}.json' -- python3 '{script}' --world {RING_WORLD} \
         --port-base 0 --step-sleep 0.05 --hang-rank {HUNG_RANK} --hang-after 3 \
         --on-close {on_close}{beat} --progress-dir '{dir}/progress-'\"$RANK\" \
         --rendezvous-dir '{rendezvous}'",
        root = root.root().display(),
        dir = dir.display(),
        script = fixtures_dir().join("ring_allreduce.py").display(),
        on_close = ring.on_close.flag(),
        beat = if ring.beats { " --beat" } else { "" },
        rendezvous = rendezvous.display(),
    );
    let said = dir.join("said");
    let mut started = Started::default();
    let launcher = started.spawn(
        Command::new("python3")
            .arg(fixtures_dir().join("launch_ranks.py"))
            .args(["--nproc", &RING_WORLD.to_string(), "--grace", "120", "--"])
            .args(["sh", "-c", &worker])
            .arg(unilab_bin())
            .env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", root.root())
            .env("LANG", "C.UTF-8")
            .env("PYTHONPATH", python_package_dir())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&said).unwrap()),
    );
    let code = started.exit_code(launcher, Duration::from_secs(300));
    (code, std::fs::read_to_string(&said).unwrap_or_default())
}

/// What is wrong with rank `rank`'s part in a ring of [`ring_under_one_command_line`] that
/// ended: its soak has no evidence (neither its own nor the one made at the alarm) of its ring
/// process as it ran; its run has no capture marker of it, or one made after the run's first
/// teardown; its entry has not ended. `None` when nothing is.
fn wrong_with(root: &TestRoot, dir: &Path, rank: u32) -> Option<String> {
    let path = dir.join(format!("soak-{rank}.json"));
    let Ok(bytes) = std::fs::read(&path) else {
        return Some(format!("rank {rank}: no artifact"));
    };
    let artifact: Value = serde_json::from_slice(&bytes).unwrap();
    let of_the_ring = |evidence: &Value| {
        evidence["processes"].as_array().is_some_and(|processes| {
            processes.iter().any(|p| {
                p["cmdline"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|a| a.as_str().is_some_and(|a| a.contains("ring_allreduce.py")))
                })
            })
        })
    };
    if !of_the_ring(&artifact["evidence"]) && !of_the_ring(&artifact["job_evidence"]) {
        return Some(format!(
            "rank {rank} ({}): no evidence of its ring process (evidence: {}, job_evidence: {})",
            artifact["outcome"]["failure_kind"],
            artifact["evidence"]["trigger"],
            artifact["job_evidence"]["trigger"],
        ));
    }
    let run = run_dir(root, "J", "1");
    let read = |sub: &str| -> Option<Value> {
        serde_json::from_slice(&std::fs::read(run.join(sub).join(rank.to_string())).ok()?).ok()
    };
    match read("captured") {
        None => return Some(format!("rank {rank}: no `captured/{rank}`")),
        Some(mark) if mark["captured"] != true || mark["late_by"] != 0.0 => {
            return Some(format!("rank {rank}: captured late or not at all: {mark}"));
        }
        Some(_) => {}
    }
    match read("ranks") {
        Some(entry) if entry["ended_at"].is_f64() => None,
        entry => Some(format!("rank {rank}: its entry has not ended: {entry:?}")),
    }
}

/// What is wrong with what `job show J` says of a ring that ended: the hung rank is not the
/// suspect, or not first in the verdict (the JSON's sentence and the human output's first
/// line); with py-spy, its place is not `load_batch`; with beats, a rank's last phase is not
/// `data` for the hung rank and `train` for the others; a signal names another rank.
fn wrong_with_the_verdict(root: &TestRoot, ring: &RingRun) -> Vec<String> {
    let shown = root
        .unilab()
        .args(["--json", "job", "show", "J"])
        .output()
        .unwrap();
    let Ok(view) = serde_json::from_slice::<Value>(&shown.stdout) else {
        return vec![format!("`job show --json J` said no JSON: {shown:?}")];
    };
    let mut wrong = Vec::new();
    let suspect = &view["suspect"];
    let host = view["ranks"][HUNG_RANK as usize]["host"]
        .as_str()
        .unwrap_or("?");
    let first = format!("rank {HUNG_RANK} on {host} is the suspect: ");
    if suspect["rank"] != HUNG_RANK {
        wrong.push(format!("the suspect is not rank {HUNG_RANK}: {suspect}"));
    }
    if suspect["disagreements"] != serde_json::json!([]) {
        wrong.push(format!("signals disagree: {}", suspect["disagreements"]));
    }
    let verdict = view["verdict"].as_str().unwrap_or_default();
    if !verdict.starts_with(&first) {
        wrong.push(format!(
            "the verdict does not start with the suspect: {verdict}"
        ));
    }
    if ring.py_spy.is_some()
        && !suspect["detail"]
            .as_str()
            .is_some_and(|d| d.contains("`load_batch`"))
    {
        wrong.push(format!("not named by its place in load_batch: {suspect}"));
    }
    if ring.beats {
        for (rank, row) in view["ranks"].as_array().into_iter().flatten().enumerate() {
            let phase = if rank == HUNG_RANK as usize {
                "data"
            } else {
                "train"
            };
            if row["last_phase"] != phase {
                wrong.push(format!("rank {rank}'s last phase: {}", row["last_phase"]));
            }
        }
    }
    let human = root.unilab().args(["job", "show", "J"]).output().unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    if !human.starts_with(&first) {
        wrong.push(format!(
            "`job show J` does not start with the suspect:\n{human}"
        ));
    }
    if !wrong.is_empty() {
        wrong.push(format!("the view: {view:#}"));
    }
    wrong
}

/// The ring of [`ring_under_one_command_line`] run once: every rank's soak has evidence of its
/// ring process, every rank's capture is marked in the run before its first teardown, the
/// launcher fails as its first worker did, `job show` names the hung rank the suspect first
/// in its verdict, nothing of the ring is left running, and the log verifies. What went wrong,
/// or `None`.
pub fn one_line_ring(ring: &RingRun) -> Option<String> {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-barrier-");
    let (code, said) = ring_under_one_command_line(&root, dir.path(), ring);
    let mut wrong: Vec<String> = (0..RING_WORLD)
        .filter_map(|rank| wrong_with(&root, dir.path(), rank))
        .collect();
    if code != Some(1) {
        wrong.push(format!("the launcher exited {code:?}"));
    }
    if marked_ranks(&run_dir(&root, "J", "1").join("torn")).is_empty() {
        wrong.push("no rank marked its teardown".into());
    }
    wrong.extend(wrong_with_the_verdict(&root, ring));
    let marker = dir.path().display().to_string();
    let left_running = || {
        live_pids_where(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("ring_allreduce.py") && c.contains(&marker)
            })
        })
    };
    if !within(Duration::from_secs(30), || left_running().is_empty()) {
        wrong.push(format!("ring processes left running: {:?}", left_running()));
    }
    root.unilab().args(["log", "verify"]).assert().success();
    (!wrong.is_empty()).then(|| format!("{ring:?}: {}\n{said}", wrong.join("; ")))
}
