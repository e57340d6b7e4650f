//! `unilab soak`'s definitions: a soak run, and the views of the soaks recorded.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use clap_complete::ArgValueCompleter;

use super::complete;
use crate::duration::parse_duration;
use crate::job::id::job_flag;
use crate::job::run::run_flag;
use crate::process::parse_dump_signal;

#[derive(Debug, Subcommand)]
pub(crate) enum SoakCommand {
    /// Run a command under supervision until it passes or fails
    #[command(after_help = "\
Examples:
  unilab soak run --progress-dir ckpt --output soak.json -- python train.py
  unilab soak run --progress-dir ckpt --output soak.json --report soak.html \\
      --sample-interval 10s --stale-progress 30m --meta run=baseline -- torchrun train.py
  unilab --json soak run ... | jq .outcome")]
    Run(Box<SoakRunArgs>),
    /// List soaks, newest last
    #[command(after_help = "\
Examples:
  unilab soak list --status failed --since 2d     the failures of the last two days
  unilab soak list --limit 5                      the five newest
  unilab soak list --since 2026-12-01             started on or after that day (local time)")]
    List(ListArgs),
    /// Show one soak: its verdict and why, or how a running one is going
    Show {
        /// A soak id, a unique prefix of one or of its random part (`ff95`), or `latest`
        #[arg(add = ArgValueCompleter::new(complete::soak_ids))]
        id: String,
    },
    /// Two soaks side by side: verdicts, run times, memory and its trend, GPU memory,
    /// utilisation and throttling, progress rate — what changed most first
    #[command(after_help = "\
Examples:
  unilab soak compare 20261201T100000-ab12 latest
  unilab --json soak compare ab12 cd34 | jq '.differences[0]'")]
    Compare {
        /// The soak to compare against: an id, a unique prefix of one or of its random part (`ff95`), or `latest`
        #[arg(add = ArgValueCompleter::new(complete::soak_ids))]
        a: String,
        /// The soak compared with it
        #[arg(add = ArgValueCompleter::new(complete::soak_ids))]
        b: String,
    },
    /// Regenerate a finished soak's artifact from the log, byte for byte
    Export {
        /// A soak id, a unique prefix of one or of its random part (`ff95`), or `latest`
        #[arg(add = ArgValueCompleter::new(complete::soak_ids))]
        id: String,
        /// Write it here (default: standard output)
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace `--output` if it exists
        #[arg(long, requires = "output")]
        force: bool,
        /// `json`: the canonical artifact, byte for byte; `csv`: one row per sample and GPU
        #[arg(long, value_enum, default_value = "json")]
        format: ExportFormat,
    },
    /// Write a self-contained HTML report of a soak: verdict, charts, parameters, tails, timeline
    Report {
        /// A soak id, a unique prefix of one or of its random part (`ff95`), or `latest`
        #[arg(add = ArgValueCompleter::new(complete::soak_ids))]
        id: String,
        /// Write it here (default: standard output)
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace `--output` if it exists
        #[arg(long, requires = "output")]
        force: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this Slurm job's soaks, from every host's log under the state root, with their
    /// hosts and ranks
    #[arg(long, value_name = "ID")]
    pub job: Option<String>,
    /// Only the soaks in this state
    #[arg(long, value_enum, value_name = "STATUS")]
    pub status: Option<StatusFilter>,
    /// Only the soaks started since then: a duration ago (`2d`, `3h`) or a date (`2026-12-01`,
    /// `2026-12-01T10:00`; local time unless it ends in an offset such as `Z`)
    #[arg(long, value_name = "WHEN", value_parser = crate::time::parse_since)]
    pub since: Option<crate::time::Since>,
    /// Only the N newest of those
    #[arg(long, value_name = "N", value_parser = positive_count)]
    pub limit: Option<usize>,
}

/// The states `soak list --status` selects by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StatusFilter {
    Running,
    Passed,
    Failed,
    Abandoned,
}

/// What `soak export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    Json,
    Csv,
}

#[derive(Debug, Args)]
pub(crate) struct SoakRunArgs {
    /// The directory whose growth proves the command is alive (owned by you, not writable by others)
    #[arg(long = "progress-dir", value_name = "DIR")]
    pub progress_dir: PathBuf,
    /// Where to write the artifact; `{rank}`, `{local_rank}`, `{host}`, `{job}` and `{soak_id}`
    /// are filled in (from Slurm's or torchrun's variables)
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
    /// Also write the soak's HTML report here when it ends (as `unilab soak report` does; the
    /// same placeholders)
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Rewrite FILE at every sample with the soak's metrics in the Prometheus text format, for
    /// node_exporter's textfile collector (which reads `*.prom`); the same placeholders
    #[arg(long = "metrics-file", value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
    /// Replace `--output` (and `--report`, `--metrics-file`) if it exists; without it an
    /// existing file is refused before the command runs
    #[arg(long)]
    pub force: bool,
    /// Time between samples
    #[arg(long = "sample-interval", value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub sample_interval: Duration,
    /// Fail if no progress appears within this time
    #[arg(long = "startup-timeout", value_name = "DURATION", default_value = "600s", value_parser = parse_duration)]
    pub startup_timeout: Duration,
    /// Fail if progress stops for this long
    #[arg(long = "stale-progress", value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub stale_progress: Duration,
    /// How long processes get between SIGTERM and SIGKILL, and to exit after the command
    #[arg(long = "shutdown-grace", value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Fail a command that exits 0 sooner than this
    #[arg(long = "min-duration", value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub min_duration: Duration,
    /// Fail the soak (`stale_progress`) when a step the trainer's heartbeats tell takes longer
    /// than DURATION, in any phase; `auto`: each phase's limit learned from its own steps once it
    /// has 20 — the larger of 5 × its p99 step time and 10 s. A phase without a limit (yet) is
    /// judged by `--stale-progress`
    #[arg(long = "step-timeout", value_name = "auto|DURATION")]
    pub step_timeout: Option<String>,
    /// One phase's step limit, `PHASE=DURATION` (`checkpoint=30m`; repeatable): while its
    /// heartbeats say a step of PHASE runs, it may take this long, whatever `--stale-progress`
    /// and `--step-timeout` say
    #[arg(long = "phase-timeout", value_name = "PHASE=DURATION")]
    pub phase_timeout: Vec<String>,
    /// Working directory of the command
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Set a variable for the command; `--env NAME` passes NAME's value from unilab's own
    /// environment (values of credential-like names are never recorded)
    #[arg(long = "env", value_name = "K=V|NAME", value_parser = env_entry)]
    pub env: Vec<(String, String)>,
    /// Start the command's environment empty: it gets only the `--env` variables (what
    /// `subprocess`'s `env=` does), and `UNILAB_HEARTBEAT`
    #[arg(long = "env-clear")]
    pub env_clear: bool,
    /// Record metadata with the soak
    #[arg(long = "meta", value_name = "K=V", value_parser = key_value)]
    pub meta: Vec<(String, String)>,
    /// Record metadata whose value is JSON (a number, a list, an object...): `lr=3e-4`,
    /// `tags=["a","b"]`; values under credential-like names are never recorded
    #[arg(long = "meta-json", value_name = "K=JSON", value_parser = key_json)]
    pub meta_json: Vec<(String, serde_json::Value)>,
    /// Pass a command that exits 0 without its progress directory ever changing
    #[arg(long = "allow-no-progress")]
    pub allow_no_progress: bool,
    /// The `py-spy` that dumps the Python stacks of a failing soak's processes into its evidence
    /// before they are stopped (default: `py-spy` on `PATH` if there is one); `off` for none
    #[arg(long = "py-spy", value_name = "PATH|off")]
    pub py_spy: Option<String>,
    /// Before a failing soak's tree is stopped, send it this signal (e.g. `USR1`, for a trainer
    /// that registered `faulthandler` on it) so that it prints its own stacks; processes that
    /// do not handle it end by it
    #[arg(long = "dump-signal", value_name = "SIG", value_parser = parse_dump_signal)]
    pub dump_signal: Option<i32>,
    /// Fail the soak as soon as any process of its tree exits non-zero or is killed while the
    /// command runs (`child_failed`), as when one rank of a job dies and the others hang. Off by
    /// default: dataloader workers and shell pipelines may exit non-zero by design
    #[arg(long = "fail-fast")]
    pub fail_fast: bool,
    /// Fail the soak (`resource_limit`) when the tree's memory — its proportional set size,
    /// shared pages split among the processes sharing them — goes over SIZE (`512MiB`, `40GiB`)
    #[arg(long = "max-memory", value_name = "SIZE", value_parser = crate::size::parse_size_budget)]
    pub max_memory: Option<u64>,
    /// Fail the soak when the tree's memory on any one GPU goes over SIZE
    #[arg(long = "max-gpu-memory", value_name = "SIZE", value_parser = crate::size::parse_size_budget)]
    pub max_gpu_memory: Option<u64>,
    /// Fail the soak when the tree's memory grows faster than RATE (`200MiB/h`): when the 95 %
    /// lower bound of its trend's slope (Theil–Sen's, with Sen's rank-based interval) is over
    /// RATE. Judged after the warm-up, once at least 1 minute and 60 samples have passed and the
    /// slope is known to within RATE, so that noise, however wide, does not pass for growth
    #[arg(long = "max-memory-growth", value_name = "RATE", value_parser = crate::size::parse_rate_budget)]
    pub max_memory_growth: Option<u64>,
    /// How long memory growth is not judged, while allocators and caches fill [default: a tenth
    /// of the run so far, at least 5m]
    #[arg(long = "warmup", value_name = "DURATION", value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// How long the tree has after `--dump-signal` to print before it is stopped
    #[arg(long = "dump-wait", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub dump_wait: Duration,
    /// The job this soak is a rank of, for ranks that `torchrun`, `mpirun` or you start: the
    /// soaks given one name are one job, and when one of them fails the others capture their
    /// evidence (`--on-job-alarm`). Under Slurm the job is `SLURM_JOB_ID` unless this names one
    #[arg(long, value_name = "NAME", value_parser = job_flag)]
    pub job: Option<crate::job::JobId>,
    /// This soak's rank in its job, a whole number (default: `SLURM_PROCID`, else `RANK`)
    #[arg(long, value_name = "N", value_parser = rank)]
    pub rank: Option<u32>,
    /// This run of the job, for a job run more than once (default: Slurm's step and restart
    /// count, else torchrun's run and restart count, else counted: a job whose run has ended
    /// starts the next)
    #[arg(long, value_name = "ID", value_parser = run_flag)]
    pub run: Option<crate::job::run::RunId>,
    /// What this soak does when another rank of its job fails first and raises the job's alarm
    #[arg(
        long = "on-job-alarm",
        value_enum,
        value_name = "WHAT",
        default_value = "capture"
    )]
    pub on_job_alarm: crate::event::soak::OnJobAlarm,
    /// The command and its arguments (run as their bytes, recorded as text)
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// A rank as `soak run --rank` takes it: a whole number, 0 or more.
fn rank(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("{}: `--rank 3`", crate::job::error::RANK_IS))
}

/// A count of at least one.
fn positive_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{text}` is not a whole number above 0")),
    }
}

fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// `K=V`, or a variable's name whose value unilab's own environment gives.
fn env_entry(text: &str) -> Result<(String, String), String> {
    if text.contains('=') {
        return key_value(text);
    }
    match std::env::var(text) {
        Ok(value) if !text.is_empty() => Ok((text.to_owned(), value)),
        _ => Err(format!(
            "`{text}` is not set in unilab's environment: give `--env {text}=VALUE`"
        )),
    }
}

/// `K=JSON`: the value parsed (the soak's check masks what it must and holds it as the start
/// event holds a JSON value).
fn key_json(text: &str) -> Result<(String, serde_json::Value), String> {
    let (key, json) = key_value(text)?;
    let value = serde_json::from_str(&json)
        .map_err(|e| format!("the value of `{key}` is not JSON ({e}): `{json}`"))?;
    Ok((key, value))
}
