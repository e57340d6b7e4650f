//! The command-line definitions (clap), apart from the logic in `commands`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use clap_complete::ArgValueCompleter;

use crate::duration::parse_duration;

pub(crate) mod complete;
pub(crate) mod internal;
mod values;

/// What `unilab --help` adds after the commands: the environment, durations, exit codes.
const AFTER_HELP: &str = "\
Environment:
  UNILAB_ROOT          the state root when --root is not given
  UNILAB_NVIDIA_SMI    the nvidia-smi to run (default: nvidia-smi on PATH)
  UNILAB_MPS_CONTROL   the nvidia-cuda-mps-control to run (default: on PATH)
  UNILAB_TOOL_TIMEOUT  how long an external tool may take (a duration; default 10s)
  NO_COLOR             no colour unless --color=always asks for it

Durations: plain seconds (0.5, 90) or parts with units: 500ms, 90s, 10m, 2h, 2d, 1h30m.

Soak ids: a full id, a unique prefix of one or of its random part (`ff95`), or `latest`.

Exit codes: 0 success or a soak that passed · 1 a soak failed · 2 usage error ·
  3 refused (with what to do) · 4 a stale daemon record was cleaned · 5 the event log is damaged ·
  70 a bug · mps exec: its command's code, 126 cannot run, 127 not found.

Under --json, output is JSON on stdout and a failure is one JSON object on stderr.";

#[derive(Debug, Parser)]
#[command(
    name = "unilab",
    version,
    about = "User-owned CUDA MPS daemons and soak supervision on shared GPU hosts",
    long_about = None,
    propagate_version = true,
    after_help = AFTER_HELP
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every command takes, under a heading of their own in every command's help, apart
/// from the command's own.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct GlobalArgs {
    /// State root (default: `$UNILAB_ROOT`, else `$XDG_STATE_HOME/unilab`, else
    /// `~/.local/state/unilab`)
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Machine-readable output on standard output
    #[arg(long, global = true)]
    pub json: bool,
    /// Print only data and errors
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print what unilab is doing on standard error (`-vv`: every sample of a soak too)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Colour statuses and errors: on a terminal (`auto`, unless `NO_COLOR` is set), `always`
    /// or `never`
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value = "auto"
    )]
    pub color: crate::style::ColorChoice,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Start, inspect and stop your own CUDA MPS control daemons
    #[command(subcommand)]
    Mps(MpsCommand),
    /// Supervise a long training command and judge it by its progress
    #[command(subcommand)]
    Soak(SoakCommand),
    /// A job's ranks side by side, from every host's log: which rank tripped, which hung
    #[command(subcommand)]
    Job(JobCommand),
    /// Print the runtime snapshot (source, GPU, software, environment) of a directory
    Snapshot {
        /// The directory whose git checkout to describe (default: the current one)
        dir: Option<PathBuf>,
    },
    /// Replay the event log as a timeline
    #[command(after_help = "\
Examples:
  unilab history                       every event of this user on this host
  unilab history --soak latest         one soak's timeline
  unilab --json history --follow       one JSON object a line, as events are recorded")]
    History(HistoryArgs),
    /// Inspect the event log itself
    #[command(subcommand)]
    Log(LogCommand),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), made from the definitions `--help` shows; `--dir`: all pages
    #[command(after_help = "\
Examples:
  unilab man --dir ~/.local/share/man/man1     then: man unilab, man unilab-soak-run")]
    Man {
        /// Write every page (`unilab.1`, `unilab-soak.1`, `unilab-soak-run.1`, ...) into this
        /// directory, created if need be, and print their paths
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum JobCommand {
    /// The jobs whose ranks' soaks are recorded under the state root, on every host
    List,
    /// Every rank's soak of a job, from every host's log under the state root, and the verdict:
    /// which rank tripped first, whose progress stopped first, where each rank stood, which
    /// ranks straggle
    #[command(after_help = "\
A straggler is a rank whose median step time (of its heartbeats' `train` phase) is over 1.15×
the job's: the median of the ranks' median step times. Its cause is named where its GPUs (those
its processes ran on, else its `CUDA_VISIBLE_DEVICES`) differ clearly from the other ranks': a
throttle reason active in at least 10 points more of the samples and twice as often (2×), or an
SM clock at least 10 % lower on average.

Examples:
  unilab job show 4242                 a Slurm job's ranks
  unilab --json job show llama-run3    one JSON object (`ranks`, `groups`, `odd_ranks`,
                                       `stragglers`, `verdict`)")]
    Show {
        /// The job: what `soak run --job` named, or Slurm's job id
        #[arg(value_parser = job_name)]
        job: crate::job::JobId,
    },
    /// Write a self-contained HTML page of a job: what `job show` says (the verdict, the alarm,
    /// the table of ranks, the ranks grouped by stack), then every rank's progress and memory
    /// on one time axis
    #[command(after_help = "\
Examples:
  unilab job report 4242 --output job-4242.html     a Slurm job's page, opened offline
  unilab job report llama-run3 > page.html          the page on standard output")]
    Report {
        /// The job: what `soak run --job` named, or Slurm's job id
        #[arg(value_parser = job_name)]
        job: crate::job::JobId,
        /// Write it here (default: standard output)
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace `--output` if it exists
        #[arg(long, requires = "output")]
        force: bool,
    },
}

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

/// A daemon name as `mps start --name` takes it: a bad one is a usage error (exit 2).
fn daemon_name(text: &str) -> Result<String, String> {
    crate::mps::names::validate_name(text)
        .map(|()| text.to_owned())
        .map_err(|e| {
            use crate::diagnostic::Hint;
            format!("{e}; {}", e.hint().unwrap_or_default())
        })
}

/// A job's name as `soak run --job` takes it: a bad one is a usage error (exit 2).
fn job_name(text: &str) -> Result<crate::job::JobId, String> {
    crate::job::JobId::parse(text).map_err(|why| {
        format!(
            "it {}; name the job with up to 128 letters, digits and punctuation other than `/`: `--job llama-run3`",
            why.why()
        )
    })
}

/// A rank as `soak run --rank` takes it: a whole number, 0 or more.
fn rank(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("{}: `--rank 3`", crate::job::error::RANK_IS))
}

/// A signal a process can catch, by name (`USR1`, `SIGUSR1`) or number.
fn parse_dump_signal(text: &str) -> Result<i32, String> {
    use nix::sys::signal::Signal;
    let upper = text.trim().to_ascii_uppercase();
    let signal = match upper.parse::<i32>() {
        Ok(number) => Signal::try_from(number).ok(),
        Err(_) => {
            let name = if upper.starts_with("SIG") {
                upper
            } else {
                format!("SIG{upper}")
            };
            name.parse::<Signal>().ok()
        }
    };
    match signal {
        Some(Signal::SIGKILL | Signal::SIGSTOP) => Err(format!(
            "`{text}` cannot be caught, so nothing could print stacks on it (try USR1)"
        )),
        Some(signal) => Ok(signal as i32),
        None => Err(format!("`{text}` is not a signal (try USR1)")),
    }
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

/// `K=JSON`: the value parsed, credential-named values inside it masked, held as the start
/// event holds a JSON value.
fn key_json(text: &str) -> Result<(String, String), String> {
    let (key, json) = key_value(text)?;
    let mut value: serde_json::Value = serde_json::from_str(&json)
        .map_err(|e| format!("the value of `{key}` is not JSON ({e}): `{json}`"))?;
    crate::redact::redact_json(&mut value);
    Ok((key, crate::event::soak::metadata_json_value(&value)))
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
    pub meta_json: Vec<(String, String)>,
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
    #[arg(long, value_name = "NAME", value_parser = job_name)]
    pub job: Option<crate::job::JobId>,
    /// This soak's rank in its job, a whole number (default: `SLURM_PROCID`, else `RANK`)
    #[arg(long, value_name = "N", value_parser = rank)]
    pub rank: Option<u32>,
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

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Only the events of this soak
    #[arg(long, value_name = "ID", conflicts_with = "daemon", add = ArgValueCompleter::new(complete::soak_ids))]
    pub soak: Option<String>,
    /// Only the events of this daemon
    #[arg(long, value_name = "NAME", add = ArgValueCompleter::new(complete::daemon_names))]
    pub daemon: Option<String>,
    /// Start at this sequence number
    #[arg(long, value_name = "SEQ", default_value_t = 1)]
    pub since: u64,
    /// Keep printing events as they are appended
    #[arg(long, conflicts_with = "all_hosts")]
    pub follow: bool,
    /// Every host's log under the state root (read-only), merged in time order, each line with
    /// its host
    #[arg(long = "all-hosts")]
    pub all_hosts: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LogCommand {
    /// Walk the hash chain and rebuild every projection from the events
    Verify,
    /// What the log costs: its size on disk, events and bytes by kind, the largest soaks, its
    /// growth a day, and the room left (free space, your quota) (read-only)
    Stats,
    /// Move finished soaks' records out of the log into an archive file each, beside it, and
    /// give the space back
    #[command(after_help = "\
Each soak's records go, verbatim and compressed, to `events.soak-<ID>.zst` beside the log; the
log keeps one `soak_archived` event that commits to them. `soak show`, `export`, `report`,
`compare` and `history --soak` read an archived soak from its file, as before. `log verify`
checks every archive that is there against the log; remove one only if you can do without that
soak's records.

The log is compacted afterwards, which needs it alone: while another process has it open (a
running soak holds it until its verdict), the command refuses with exit 3 and names who holds
it, and nothing is archived. Only finished soaks (a verdict, or abandoned) are archived.

Examples:
  unilab log archive --finished-before 30d          every soak that ended over 30 days ago
  unilab log archive --finished-before 2026-12-01   ended before that day (local time)
  unilab log archive --soak ff95                    one soak, by id, prefix or `latest`")]
    Archive(ArchiveArgs),
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ArchiveArgs {
    /// The soak to archive: an id, a unique prefix of one or of its random part (`ff95`), or
    /// `latest`
    #[arg(long, value_name = "ID", add = ArgValueCompleter::new(complete::soak_ids))]
    pub soak: Option<String>,
    /// Every soak that finished before then: a duration ago (`30d`, `12h`) or a date
    /// (`2026-12-01`, `2026-12-01T10:00`; local time unless it ends in an offset such as `Z`)
    #[arg(long = "finished-before", value_name = "WHEN", value_parser = crate::time::parse_since)]
    pub finished_before: Option<crate::time::Since>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum MpsCommand {
    /// What this host has: GPUs, control pipes, your daemons (read-only)
    Status,
    /// Check everything `mps start` depends on (read-only; exit 3 when a check fails)
    Doctor {
        /// GPU selector: `N`, `GPU-<uuid prefix>`, `A,B`, `each:A,B` or `all`
        selector: Option<String>,
        /// Also check the framework's view: run this Python, import torch in it, and compare
        /// the GPUs it numbers with unilab's (same GPUs, same order)
        #[arg(long, value_name = "PYTHON", conflicts_with = "framework_view")]
        python: Option<PathBuf>,
        /// The framework's view as JSON, as the Python package's `doctor(torch_module=...)`
        /// writes it (instead of running a Python)
        #[arg(long = "framework-view", value_name = "FILE")]
        framework_view: Option<PathBuf>,
    },
    /// What a selector resolves to under the current mask, and whether a daemon can start for it (read-only)
    Plan {
        /// GPU selector: `N`, `GPU-<uuid prefix>`, `A,B`, `each:A,B` or `all`
        selector: Option<String>,
    },
    /// Start an MPS control daemon for one GPU
    #[command(after_help = "\
Examples:
  unilab mps start                 the sole visible GPU
  unilab mps start 1               visible ordinal 1 (see `unilab mps plan 1`)
  unilab mps start GPU-1111aaaa --name trainer
  unilab mps start 0 --foreground  until Ctrl-C
  unilab mps start 0 --active-thread-percentage 25 --pinned-memory-limit 8GiB")]
    Start(StartArgs),
    /// Stop a daemon unilab started (the sole live one when no name is given); with none
    /// recorded, there is nothing to stop (exit 0)
    Stop(StopArgs),
    /// List your daemons with their liveness (read-only)
    List,
    /// Print the environment that points CUDA clients at a daemon
    Env(TargetArgs),
    /// Run a command with the environment of a daemon
    #[command(after_help = "\
With --shared, the positional argument is a GPU selector: the first process for the GPU (in this
Slurm job, under Slurm) starts its daemon, the others wait until it is verified live and use it,
and the last one to finish stops it:
  srun -N1 -n4 unilab mps exec --shared -- python train.py")]
    Exec {
        #[command(flatten)]
        target: TargetArgs,
        /// Attach to the GPU's shared daemon, starting it if none runs; the last one out stops it
        #[arg(long, conflicts_with = "gpu")]
        shared: bool,
        #[command(flatten)]
        limits: ClientLimitArgs,
        /// The command and its arguments
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct StartArgs {
    /// GPU selector: `N`, `GPU-<uuid prefix>`; omitted: the sole visible GPU
    pub selector: Option<String>,
    /// Daemon name (default: `gpu-` and the first 8 hex digits of the GPU's UUID)
    #[arg(long, value_parser = daemon_name)]
    pub name: Option<String>,
    /// Pipe directory (default: under `$XDG_RUNTIME_DIR/unilab/mps` or `/tmp/unilab-<uid>/mps`)
    #[arg(long = "pipe-dir", value_name = "DIR")]
    pub pipe_dir: Option<PathBuf>,
    /// Log directory (default: under the state root)
    #[arg(long = "log-dir", value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Run the daemon in the foreground; Ctrl-C stops it
    #[arg(long)]
    pub foreground: bool,
    #[command(flatten)]
    pub limits: DaemonLimitArgs,
}

/// The limits `mps start` sets on the daemon: the defaults of every client it serves.
#[derive(Debug, Args)]
pub(crate) struct DaemonLimitArgs {
    /// The share of the GPU's SMs each client may use, in percent (above 0, at most 100): set on
    /// the daemon and read back; the start is refused, and the daemon stopped, if it does not hold
    #[arg(long = "active-thread-percentage", value_name = "P", value_parser = crate::mps::limits::parse_percentage)]
    pub active_thread_percentage: Option<f64>,
    /// The device memory each client process may pin (`512MiB`, `40GiB`; whole MiB): set on the
    /// daemon and read back like `--active-thread-percentage`
    #[arg(long = "pinned-memory-limit", value_name = "SIZE", value_parser = crate::mps::limits::parse_pinned_limit)]
    pub pinned_memory_limit: Option<u64>,
}

/// The limits `mps exec` gives its command, as MPS clients take them.
#[derive(Debug, Args)]
pub(crate) struct ClientLimitArgs {
    /// The share of the GPU's SMs the command may use, in percent
    /// (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`); at most what the daemon allows
    #[arg(long = "active-thread-percentage", value_name = "P", value_parser = crate::mps::limits::parse_percentage)]
    pub active_thread_percentage: Option<f64>,
    /// The device memory each client process may pin (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`): the
    /// limit applies per client process, so a command that starts several CUDA processes may
    /// pin this much in each
    #[arg(long = "pinned-memory-limit", value_name = "SIZE", value_parser = crate::mps::limits::parse_pinned_limit)]
    pub pinned_memory_limit: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The daemon to stop
    #[arg(conflicts_with = "all", add = ArgValueCompleter::new(complete::daemon_names))]
    pub name: Option<String>,
    /// Stop every daemon you have recorded
    #[arg(long, conflicts_with = "job")]
    pub all: bool,
    /// Stop every daemon of this Slurm job (for an epilog)
    #[arg(long, value_name = "ID", conflicts_with = "name")]
    pub job: Option<String>,
    /// How long to wait after `quit`, and after SIGTERM, before escalating
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// The daemon (default: the sole live one)
    #[arg(conflicts_with = "gpu", add = ArgValueCompleter::new(complete::daemon_names))]
    pub name: Option<String>,
    /// The sole live daemon serving this GPU: `N` (the visible ordinal) or `GPU-<uuid prefix>`
    #[arg(long, value_name = "SELECTOR")]
    pub gpu: Option<String>,
}
