//! `unilab soak ...` end to end, with real trainers: every outcome, the artifact and its export,
//! what is left running afterwards (nothing), and what reaches the log (no credentials).
//!
//! This module holds what the subjects share: a state root with a progress directory ([`Soak`])
//! and the ways to run, spawn and read back a soak; each subject is a module of its own.

mod argv;
mod clobber;
mod environment;
mod full_disk;
mod gpu;
mod metrics;
mod metrics_end;
mod metrics_race;
mod no_gpu_tool;
mod one_output;
mod outcomes;
mod reading;
mod refusals;
mod report;
mod report_axes;
mod series;
mod teardown;
mod terminal;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::common::*;
use serde_json::Value;

/// A state root with a private progress directory.
pub(crate) struct Soak {
    pub(crate) root: TestRoot,
}

impl Soak {
    pub(crate) fn new() -> Self {
        let root = TestRoot::new();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(root.root().join("progress"))
            .unwrap();
        Soak { root }
    }

    pub(crate) fn progress(&self) -> PathBuf {
        self.root.root().join("progress")
    }

    pub(crate) fn artifact_path(&self) -> PathBuf {
        self.root.root().join("artifact.json")
    }

    /// `unilab --root ROOT` as a `std` command, to spawn, signal or limit: the fakes first on
    /// `PATH`, nothing else inherited.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new(unilab_bin());
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", self.root.root())
            .arg("--root")
            .arg(self.root.root());
        cmd
    }

    /// What `soak run` takes after its name for a soak of the example trainer: this soak's
    /// progress directory and output, `options`, then the trainer with `trainer_args`.
    pub(crate) fn trainer_soak(
        &self,
        options: &[&str],
        trainer_args: &[&str],
    ) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--progress-dir".into(),
            self.progress().into(),
            "--output".into(),
            self.artifact_path().into(),
        ];
        args.extend(options.iter().map(Into::into));
        args.extend(["--".into(), "python3".into(), trainer().into()]);
        args.extend(["--progress-dir".into(), self.progress().into()]);
        args.extend(trainer_args.iter().map(Into::into));
        args
    }

    pub(crate) fn unilab(&self) -> assert_cmd::Command {
        let mut cmd = self.root.unilab();
        cmd.env("UNILAB_TOOL_TIMEOUT", "2");
        cmd
    }

    /// `soak run` with fast defaults, then `trainer_args` for the example trainer.
    pub(crate) fn run(&self, soak_args: &[&str], trainer_args: &[&str]) -> (Output, Value) {
        self.run_with(self.unilab(), soak_args, trainer_args)
    }

    pub(crate) fn run_with(
        &self,
        mut cmd: assert_cmd::Command,
        soak_args: &[&str],
        trainer_args: &[&str],
    ) -> (Output, Value) {
        let mut options = default_unless(soak_args, ["--sample-interval", "0.2"]);
        options.extend(default_unless(soak_args, ["--shutdown-grace", "0.5"]));
        options.extend(soak_args);
        // Each run is a soak of its own, read back from the artifact it writes: the previous
        // run's (already returned) would be refused as an existing `--output`.
        let _ = std::fs::remove_file(self.artifact_path());
        cmd.args(["--json", "soak", "run"])
            .args(self.trainer_soak(&options, trainer_args));
        let output = cmd.output().unwrap();
        let artifact = std::fs::read(self.artifact_path())
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
            .unwrap_or(Value::Null);
        (output, artifact)
    }

    pub(crate) fn history_kinds(&self, soak_id: &str) -> Vec<String> {
        history_kinds(self.unilab(), &["--soak", soak_id])
    }
}

/// `flag` and its value, unless `args` give the flag.
fn default_unless<'a>(args: &[&str], flag: [&'a str; 2]) -> Vec<&'a str> {
    if args.contains(&flag[0]) {
        Vec::new()
    } else {
        flag.to_vec()
    }
}

trait DirBuilderMode {
    fn mode(&mut self, mode: u32) -> &mut Self;
}
impl DirBuilderMode for std::fs::DirBuilder {
    fn mode(&mut self, mode: u32) -> &mut Self {
        std::os::unix::fs::DirBuilderExt::mode(self, mode)
    }
}

/// `soak run` of the example trainer in the background, sampled every `interval`.
fn spawn_soak(soak: &Soak, interval: &str, trainer_args: &[&str]) -> std::process::Child {
    soak.command()
        // Every nvidia-smi stream the fake starts notes its pid here.
        .env("FAKE_NVIDIA_SMI_PIDS", soak.root.root().join("smi-pids"))
        .args(["soak", "run"])
        .args(soak.trainer_soak(&["--sample-interval", interval], trainer_args))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn unilab soak run")
}

pub(crate) fn verdict(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    // Under `--json` standard output is exactly one JSON object: the command's output is not
    // mixed in.
    assert_eq!(
        text.lines().count(),
        1,
        "stdout: {text}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Whether the process a leaked or sampled entry names is gone (or its pid reused).
fn identity_gone(pid: u64, start_ticks: u64) -> bool {
    proc_stat(pid).is_none_or(|stat| stat.has_exited() || stat.start_ticks != start_ticks)
}

fn soak_ids(soak: &Soak) -> Vec<Value> {
    let out = soak
        .unilab()
        .args(["--json", "soak", "list"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Lines a child writes on `pipe`, gathered as they come; [`Gathered::all`] waits for the
/// pipe's end.
fn gather_lines(pipe: impl std::io::Read + Send + 'static) -> Gathered {
    use std::io::BufRead;
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shared = std::sync::Arc::clone(&text);
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut text = shared.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    Gathered { text, reader }
}

struct Gathered {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Gathered {
    fn contains(&self, what: &str) -> bool {
        self.text.lock().unwrap().contains(what)
    }

    /// Everything, once the pipe is closed.
    fn all(self) -> String {
        self.reader.join().unwrap();
        self.text.lock().unwrap().clone()
    }
}
