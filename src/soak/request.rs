//! `soak run`'s request, checked into the specification a soak runs from.
//!
//! Validate, then act: [`SoakSpec::check`] takes a [`SoakRequest`] — what `soak run` asks for,
//! in the soak's own types, as `commands::soak::run` maps it from the command line (what
//! ripgrep calls the low-level arguments) — and gives the spec (its high-level ones) or the
//! first thing wrong with it: the job and rank decided from the request and the launcher's
//! variables, the placeholders of the file names filled, the limits checked against each
//! other, the directories against the user and the files to write against what is there, each
//! other and the progress directory ([`outputs`]) — before anything is spawned or recorded. Its
//! last step joins the job (the one thing it makes: the job's directory), once everything else
//! has passed; nothing is set on the spec after it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{Invalid, OutputFile, ProgressDirProblem, SoakError};
use super::heartbeat::limits::{StepLimits, parse_phase_timeout, parse_step_timeout};
use super::launch::{Launch, Placeholders, RUN_KEY};
use crate::event::soak::{Limits, OnJobAlarm, SoakParameters, Supervision};
use crate::job::run::{RunChoice, RunId};
use crate::job::{JobId, JobRun};
use crate::paths::{Distrust, StatePaths};
use crate::redact::Secrets;

/// What `soak run` asks for, before anything is checked: the command line's values in the
/// soak's own types (`commands::soak::run` maps clap's arguments into it; a test builds one as
/// it needs). What is given as text here (the step limits, `--py-spy`) is checked by
/// [`SoakSpec::check`], which names the flag that was wrong.
#[derive(Debug, Clone)]
pub(crate) struct SoakRequest {
    /// The command line, run as its arguments' bytes.
    pub command: Vec<OsString>,
    pub progress_dir: PathBuf,
    /// Where the artifact goes; its placeholders (`{rank}`, `{job}`, ...) are filled by the
    /// check, as those of `report` and `metrics_file` are.
    pub output: PathBuf,
    pub report: Option<PathBuf>,
    pub metrics_file: Option<PathBuf>,
    /// Replace `output`, `report` and `metrics_file` if they exist.
    pub force: bool,
    pub sample_interval: Duration,
    pub startup_timeout: Duration,
    pub stale_progress: Duration,
    pub shutdown_grace: Duration,
    pub min_duration: Duration,
    /// `--step-timeout` as typed: `auto` or a duration.
    pub step_timeout: Option<String>,
    /// Each `--phase-timeout` as typed: `PHASE=DURATION`.
    pub phase_timeouts: Vec<String>,
    /// The command's working directory (default: the current one).
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// The command's environment is `env` alone.
    pub env_clear: bool,
    /// Metadata recorded as given.
    pub meta: Vec<(String, String)>,
    /// Metadata whose values are JSON; what credential-like names hold inside them is masked
    /// before anything is recorded.
    pub meta_json: Vec<(String, serde_json::Value)>,
    /// A clean exit passes without progress ever seen.
    pub allow_no_progress: bool,
    /// The `py-spy` to run: a path, a program on `PATH`, or `off`; `None`: `py-spy` on `PATH`
    /// if there is one.
    pub py_spy: Option<String>,
    /// The signal (one a process can catch) the tree is sent before it is stopped.
    pub dump_signal: Option<i32>,
    pub dump_wait: Duration,
    pub fail_fast: bool,
    /// The budgets, each above zero: bytes, bytes, bytes an hour.
    pub max_memory: Option<u64>,
    pub max_gpu_memory: Option<u64>,
    pub max_memory_growth: Option<u64>,
    pub warmup: Option<Duration>,
    /// The job named; without one, the launcher's (`SLURM_JOB_ID`) if there is one.
    pub job: Option<JobId>,
    /// The rank given; without one, the launcher's (`SLURM_PROCID`, else `RANK`) — read only
    /// for a soak that belongs to a job.
    pub rank: Option<u32>,
    /// The job's run given; without one, the launcher's, else counted ([`crate::job::run`]).
    pub run: Option<RunId>,
    pub on_job_alarm: OnJobAlarm,
}

/// The environment a request is checked in, by variable's name: `std::env::var_os` for
/// `soak run`, a fake one in tests. The check reads the launcher's variables (the job, the
/// rank, the placeholders), `PYTHONUNBUFFERED` and `PATH` (for `py-spy`) through it alone.
pub(crate) type Vars<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The limits to record: the budgets `soak run` was given — `--max-memory`, `--max-gpu-memory`
/// (bytes), `--max-memory-growth` (bytes an hour), each above zero as their parsers take them,
/// and `--warmup` — with the memory ceiling of this host and cgroup as they are now.
fn limits(request: &SoakRequest) -> Limits {
    let (memory_ceiling_bytes, memory_ceiling_source) = memory_ceiling().unzip();
    Limits {
        max_memory_bytes: request.max_memory,
        max_gpu_memory_bytes: request.max_gpu_memory,
        max_memory_growth_bytes_per_hour: request.max_memory_growth,
        warmup_ms: request.warmup.map(ms),
        memory_ceiling_bytes,
        memory_ceiling_source,
    }
}

/// What the tree's memory can grow to: this process's memory cgroup's limit (the command starts
/// in it), or the host's available memory, whichever is lower.
fn memory_ceiling() -> Option<(u64, String)> {
    let cgroup = crate::soak::kernel::memory_cgroup(Path::new("/proc"), std::process::id())
        .and_then(|c| Some((c.limit_bytes()?, format!("cgroup {}", c.path))));
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let kib: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()?;
            Some((kib.checked_mul(1024)?, "MemAvailable".to_owned()))
        });
    match (cgroup, available) {
        (Some(c), Some(a)) => Some(if c.0 <= a.0 { c } else { a }),
        (c, a) => c.or(a),
    }
}

/// `--step-timeout` and every `--phase-timeout`, checked.
fn step_limits(request: &SoakRequest) -> Result<StepLimits, Invalid> {
    let step_timeout = request
        .step_timeout
        .as_deref()
        .map(parse_step_timeout)
        .transpose()?;
    let phases = request
        .phase_timeouts
        .iter()
        .map(|text| parse_phase_timeout(text))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StepLimits::new(step_timeout, phases)?)
}

/// A validated `soak run`: absolute, existing, trusted paths and consistent limits.
#[derive(Debug, Clone)]
pub(crate) struct SoakSpec {
    pub soak_id: String,
    /// The command line as it is run: its arguments' bytes, as given.
    pub argv: Vec<OsString>,
    /// The command line as text, what is recorded and shown (masked): an argument that is not
    /// UTF-8 converted lossily (U+FFFD for each byte that is not).
    pub command: Vec<String>,
    /// Whether [`Self::command`] differs from [`Self::argv`]: an argument is not UTF-8.
    pub command_lossy: bool,
    pub progress_dir: PathBuf,
    pub output: PathBuf,
    /// Where the HTML report goes when the soak ends, if asked for.
    pub report: Option<PathBuf>,
    /// The metrics file rewritten at every sample (`--metrics-file`), if asked for.
    pub metrics_file: Option<PathBuf>,
    /// This soak's claim on its metrics file, where one could be made: held as long as the spec
    /// lives, past the file's last write ([`claim`]).
    #[expect(dead_code, reason = "held for its drop, which ends the claim")]
    pub metrics_claim: Option<std::sync::Arc<claim::MetricsClaim>>,
    /// `--force`: the artifact and the report replace a file at their names; without it they
    /// are put only where nothing is, when the soak ends.
    pub force: bool,
    pub parameters: SoakParameters,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// The command's environment is `env` alone.
    pub env_clear: bool,
    pub metadata: BTreeMap<String, String>,
    /// A clean exit passes only if progress was seen.
    pub require_progress: bool,
    /// The credential values the command is handed, masked in everything recorded.
    pub secrets: Secrets,
    /// How the tree is supervised beyond its limits.
    pub supervision: Supervision,
    /// How long a step its heartbeats tell may take, by phase (recorded in the supervision).
    pub step_limits: StepLimits,
    /// `$XDG_RUNTIME_DIR`, where set: the soak's runtime directory goes under it when it is the
    /// user's (`soak::runtime`).
    pub xdg_runtime_dir: Option<PathBuf>,
    /// The budgets it fails closed on.
    pub limits: Limits,
    /// Its part in its job, if it is a rank of one: the job joined ([`JobRun::join`]) as the
    /// check's last step.
    pub job: Option<JobRun>,
}

/// Set for the command unless the user set it: unbuffered Python output.
const UNBUFFERED: &str = "PYTHONUNBUFFERED";

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn invalid<T>(what: Invalid) -> Result<T, SoakError> {
    Err(what.into())
}

fn absolute(path: PathBuf) -> Result<PathBuf, SoakError> {
    if path.is_absolute() {
        return Ok(path);
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(&path))
        .map_err(|source| SoakError::Io { path, source })
}

impl SoakRequest {
    /// A command is given, and the times are in order: the interval at least 10 ms, the
    /// startup timeout and the stale limit each at least an interval.
    fn check_command_and_times(&self) -> Result<(), SoakError> {
        if self.command.is_empty() {
            return invalid(Invalid::NoCommand);
        }
        if self.sample_interval < Duration::from_millis(10) {
            return invalid(Invalid::IntervalTooShort);
        }
        if self.startup_timeout < self.sample_interval {
            return invalid(Invalid::ShorterThanInterval("--startup-timeout"));
        }
        if self.stale_progress < self.sample_interval {
            return invalid(Invalid::ShorterThanInterval("--stale-progress"));
        }
        Ok(())
    }

    /// What the request says of its job: `--job`, `--rank`, `--run`.
    fn job_flags(&self) -> crate::job::Flags<'_> {
        crate::job::Flags {
            job: self.job.as_ref(),
            rank: self.rank,
            run: self.run.as_ref(),
        }
    }
}

impl SoakSpec {
    /// The spec of the soak `soak_id` that `request` asks for, checked in the environment
    /// `var` gives: the first thing wrong with it is refused. Its job and rank are decided
    /// first (the request's, else the launcher's variables: [`crate::job::resolve`]), since the
    /// file names' placeholders and the metadata name them. The limits are checked against each
    /// other, the directories against the user of `paths` (the progress directory must exist:
    /// a typo must not become a soak that watches nothing), and `--output`, `--report` and
    /// `--metrics-file` against what is there. Last, a soak of a job joins it under the state
    /// root ([`JobRun::join`]: refused when the job has raised its alarm already).
    pub(crate) fn check(
        request: SoakRequest,
        soak_id: String,
        paths: &StatePaths,
        var: Vars<'_>,
    ) -> Result<Self, SoakError> {
        let membership = crate::job::resolve(request.job_flags(), var)?;
        let launch =
            Launch::from_env(|name| var(name)?.into_string().ok()).joined(membership.as_ref());
        // `--output 'soak-{rank}.json'`: each rank of a job its own files.
        let placeholders = Placeholders {
            launch: &launch,
            host: &paths.host,
            soak_id: &soak_id,
        };
        let fill = |path: &Path| -> Result<PathBuf, Invalid> {
            let text = path
                .to_str()
                .ok_or_else(|| Invalid::NotUtf8(path.to_owned()))?;
            Ok(PathBuf::from(placeholders.fill(text)?))
        };
        let output = fill(&request.output)?;
        let report = request.report.as_deref().map(fill).transpose()?;
        let metrics_file = request.metrics_file.as_deref().map(fill).transpose()?;
        let limits = limits(&request);
        let step_limits = step_limits(&request)?;
        request.check_command_and_times()?;
        let cwd = absolute(request.cwd.unwrap_or_else(|| PathBuf::from(".")))?;
        let cwd = match std::fs::canonicalize(&cwd) {
            Ok(resolved) if resolved.is_dir() => utf8(resolved)?,
            _ => return invalid(Invalid::Cwd(cwd)),
        };
        // Recorded as text, as the command's directory is: only a name that is text.
        let progress_dir = trusted_progress_dir(utf8(absolute(request.progress_dir)?)?, paths.uid)?;
        let runtime_dir = var(crate::env::EnvVars::XDG_RUNTIME_DIR).map(PathBuf::from);
        let (output, report, (metrics_file, metrics_claim)) = checked_files(
            (output, report, metrics_file),
            request.force,
            (paths, runtime_dir.as_deref(), &soak_id),
        )?;
        outputs::apart_from_progress(
            &progress_dir,
            metrics_file.as_deref(),
            paths,
            runtime_dir.as_deref(),
        )?;
        let (py_spy, evidence_unavailable) = py_spy(request.py_spy.as_deref(), var)?;
        let env = with_unbuffered(request.env, request.env_clear, var);
        let mut metadata = metadata(
            request.meta,
            request.meta_json,
            &launch,
            membership.as_ref(),
        )?;
        let (argv, (command, command_lossy)) = (request.command.clone(), as_text(request.command));
        let secrets = Secrets::handed_to_command(&env, &command);
        let job = membership
            .map(|member| {
                join(
                    member,
                    request.on_job_alarm,
                    (paths, &soak_id),
                    &mut metadata,
                )
            })
            .transpose()?;
        Ok(SoakSpec {
            soak_id,
            argv,
            command,
            command_lossy,
            progress_dir,
            output,
            report,
            metrics_file,
            metrics_claim: metrics_claim.map(std::sync::Arc::new),
            force: request.force,
            parameters: SoakParameters {
                sample_interval_ms: ms(request.sample_interval),
                startup_timeout_ms: ms(request.startup_timeout),
                stale_progress_ms: ms(request.stale_progress),
                shutdown_grace_ms: ms(request.shutdown_grace),
                min_duration_ms: ms(request.min_duration),
            },
            cwd,
            metadata,
            require_progress: !request.allow_no_progress,
            secrets,
            env,
            env_clear: request.env_clear,
            supervision: Supervision {
                fail_fast: request.fail_fast,
                py_spy,
                dump_signal: request.dump_signal,
                dump_wait_ms: ms(request.dump_wait),
                evidence_unavailable,
                heartbeat: Some(step_limits.settings()),
            },
            step_limits,
            xdg_runtime_dir: runtime_dir,
            limits,
            job,
        })
    }
}

/// The command's variables, with unbuffered Python output added. Python buffers a pipe 8 KiB
/// at a time: without it a trainer's `print()` lines would reach the terminal and the tail
/// late, in bursts. Unless the user decided otherwise (in unilab's environment or the
/// command's), or gave the whole environment.
fn with_unbuffered(
    mut env: Vec<(String, String)>,
    env_clear: bool,
    var: Vars<'_>,
) -> Vec<(String, String)> {
    if !env_clear && var(UNBUFFERED).is_none() && !env.iter().any(|(k, _)| k == UNBUFFERED) {
        env.push((UNBUFFERED.to_owned(), "1".to_owned()));
    }
    env
}

/// `--meta`, then `--meta-json` — the JSON values with what credential-like names hold inside
/// them masked, held as the start event holds JSON — then the soak's place in its launcher's
/// job (`launch`) and in its job (`membership`). What the user's metadata says of the soak's
/// place must be what it records ([`Launch::check_given`]); the soak records its own (a rank
/// as text).
fn metadata(
    meta: Vec<(String, String)>,
    meta_json: Vec<(String, serde_json::Value)>,
    launch: &Launch,
    membership: Option<&crate::job::Membership>,
) -> Result<BTreeMap<String, String>, crate::job::JobError> {
    let asked_run = membership.map(|m| match &m.run {
        RunChoice::Named(run) => Some(run.as_str()),
        RunChoice::Counted => None,
    });
    launch.check_given(asked_run, given_place(&meta, &meta_json))?;
    let mine = |key: &String| !launch.records(key, membership.is_some());
    let meta_json = meta_json
        .into_iter()
        .filter(|(key, _)| mine(key))
        .map(|(key, mut value)| {
            crate::redact::redact_json(&mut value);
            (key, crate::event::soak::metadata_json_value(&value))
        });
    let mut metadata: BTreeMap<String, String> = meta
        .into_iter()
        .filter(|(key, _)| mine(key))
        .chain(meta_json)
        .collect();
    launch.record_into(&mut metadata);
    Ok(metadata)
}

/// Joins the job `member` names as soak `soak_id` of this host, under the state root of
/// `paths` ([`JobRun::join`]), and records the run it joined in `metadata`.
fn join(
    member: crate::job::Membership,
    on_alarm: OnJobAlarm,
    (paths, soak_id): (&StatePaths, &str),
    metadata: &mut BTreeMap<String, String>,
) -> Result<JobRun, crate::job::JobError> {
    let job = JobRun::join(
        &paths.root,
        paths.uid,
        member,
        on_alarm,
        (soak_id, &paths.host),
    )?;
    metadata.insert(RUN_KEY.to_owned(), job.run.id.to_string());
    Ok(job)
}

/// The user's metadata (`--meta`, then `--meta-json`) as text: a JSON string as its content,
/// any other JSON value as it is written.
fn given_place<'a>(
    meta: &'a [(String, String)],
    meta_json: &'a [(String, serde_json::Value)],
) -> impl Iterator<Item = (&'a str, String)> {
    let json = meta_json.iter().map(|(key, value)| {
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        (key.as_str(), text)
    });
    meta.iter()
        .map(|(key, value)| (key.as_str(), value.clone()))
        .chain(json)
}

/// `path`, refused (a usage error) when it is not UTF-8: what is recorded of it as text must be
/// the name itself.
fn utf8(path: PathBuf) -> Result<PathBuf, Invalid> {
    match path.to_str() {
        Some(_) => Ok(path),
        None => Err(Invalid::NotUtf8(path)),
    }
}

/// The command line as text, and whether that lost anything: an argument that is not UTF-8 is
/// run as its bytes, but recorded and shown lossily (U+FFFD for each byte that is not).
fn as_text(argv: Vec<OsString>) -> (Vec<String>, bool) {
    let mut lossy = false;
    let text = argv
        .into_iter()
        .map(|arg| {
            arg.into_string().unwrap_or_else(|arg| {
                lossy = true;
                arg.to_string_lossy().into_owned()
            })
        })
        .collect();
    (text, lossy)
}

/// An artifact or report (`kind`) is written only over a regular file, and over an existing one
/// only with `--force`: a rename over a device, a FIFO or a symlink would replace that instead
/// of writing into it.
pub(crate) fn refuse_to_replace(
    path: &Path,
    kind: OutputFile,
    force: bool,
) -> Result<(), SoakError> {
    crate::soak::artifact::check_target(path).map_err(SoakError::output(kind, path))?;
    if path.exists() && !force {
        return Err(SoakError::OutputExists(path.to_owned()));
    }
    Ok(())
}

/// How a note on why there are no Python stacks starts: the capture says these only where a
/// process of the tree is Python.
pub(crate) const PYTHON_STACKS: &str = "python stacks: ";

/// `--output`, `--report` and `--metrics-file`, their placeholders filled, made absolute and
/// checked: three different files ([`outputs::distinct`]), each one that can be written — found
/// now, not when the verdict is to be written after days of running. The metrics file comes
/// with soak `soak_id`'s claim on it, where one could be made in the runtime directory
/// (`runtime_dir` being `$XDG_RUNTIME_DIR`).
fn checked_files(
    (output, report, metrics_file): (PathBuf, Option<PathBuf>, Option<PathBuf>),
    force: bool,
    (paths, runtime_dir, soak_id): (&StatePaths, Option<&Path>, &str),
) -> Result<(PathBuf, Option<PathBuf>, ClaimedMetricsFile), SoakError> {
    let output = absolute(output)?;
    if !output.parent().is_some_and(Path::is_dir) {
        return invalid(Invalid::NoOutputDirectory(output));
    }
    let report = report.map(absolute).transpose()?;
    let metrics_file = metrics_file.map(absolute).transpose()?;
    outputs::distinct(&[
        ("--output", Some(&output)),
        ("--report", report.as_deref()),
        ("--metrics-file", metrics_file.as_deref()),
    ])?;
    refuse_to_replace(&output, OutputFile::Artifact, force)?;
    let report = report
        .map(|path| checked_output(path, OutputFile::Report, force))
        .transpose()?;
    let metrics_file = match metrics_file {
        Some(path) => checked_metrics_file(path, force, (paths, runtime_dir, soak_id))?,
        None => (None, None),
    };
    Ok((output, report, metrics_file))
}

/// `--metrics-file`, if given, and the claim on it, if one could be made.
type ClaimedMetricsFile = (Option<PathBuf>, Option<claim::MetricsClaim>);

/// `--report` or `--metrics-file` (`kind`) made absolute (as the artifact's path is) and
/// checked as [`refuse_to_replace`] checks it.
fn checked_output(path: PathBuf, kind: OutputFile, force: bool) -> Result<PathBuf, SoakError> {
    let path = std::path::absolute(&path).map_err(SoakError::output(kind, &path))?;
    refuse_to_replace(&path, kind, force)?;
    Ok(path)
}

/// `--metrics-file` made absolute, its kind checked as [`refuse_to_replace`] checks it, then
/// claimed and checked under the claim ([`outputs::claimed_metrics_file`]): an existing file is
/// taken without `--force` when its soak no longer runs, and one another soak holds is refused.
fn checked_metrics_file(
    path: PathBuf,
    force: bool,
    (paths, runtime_dir, soak_id): (&StatePaths, Option<&Path>, &str),
) -> Result<ClaimedMetricsFile, SoakError> {
    let kind = OutputFile::Metrics;
    let path = std::path::absolute(&path).map_err(SoakError::output(kind, &path))?;
    crate::soak::artifact::check_target(&path).map_err(SoakError::output(kind, &path))?;
    let claim = outputs::claimed_metrics_file(&path, force, paths, (runtime_dir, soak_id))?;
    Ok((Some(path), claim))
}

/// The `py-spy` to dump Python stacks with, and why there is none: `--py-spy` names one (a path,
/// or a program on `PATH`) or `off`; without it, `py-spy` on `PATH` if there is one. A `py-spy`
/// named but not found is refused now, not found missing when a soak fails days later.
fn py_spy(given: Option<&str>, var: Vars<'_>) -> Result<(Option<String>, Vec<String>), SoakError> {
    let found = |name: &str| {
        if name.contains('/') {
            let path = absolute(PathBuf::from(name)).ok()?;
            is_executable(&path).then_some(path)
        } else {
            std::env::split_paths(&var("PATH").unwrap_or_default())
                .map(|dir| dir.join(name))
                .find(|path| is_executable(path))
        }
    };
    match given {
        Some("off") => Ok((None, vec![format!("{PYTHON_STACKS}off (--py-spy off)")])),
        Some(name) => match found(name) {
            Some(path) => Ok((Some(path.display().to_string()), Vec::new())),
            None => invalid(Invalid::NoPySpy(name.to_owned())),
        },
        None => Ok(match found("py-spy") {
            Some(path) => (Some(path.display().to_string()), Vec::new()),
            None => (
                None,
                vec![format!(
                    "{PYTHON_STACKS}py-spy not found on PATH (`pip install py-spy`, or --py-spy PATH)"
                )],
            ),
        }),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The progress directory, which must exist. Others' writes would fake progress: it must be the
/// user's alone.
fn trusted_progress_dir(progress_dir: PathBuf, uid: u32) -> Result<PathBuf, SoakError> {
    let refused = |path, problem| Err(SoakError::ProgressDir { path, problem });
    if !progress_dir.is_dir() {
        let problem = if progress_dir.exists() {
            ProgressDirProblem::Distrusted(Distrust::NotADirectory)
        } else {
            ProgressDirProblem::Missing
        };
        return refused(progress_dir, problem);
    }
    if let Some(reason) = crate::paths::distrust_directory(&progress_dir, uid) {
        return refused(progress_dir, ProgressDirProblem::Distrusted(reason));
    }
    // The whole way to it: another user able to replace a directory above it could swap in a
    // directory of their own and fake progress.
    match crate::paths::distrust_path(&progress_dir, uid) {
        None => Ok(progress_dir),
        Some((at, reason)) => refused(progress_dir, ProgressDirProblem::OnTheWay { at, reason }),
    }
}

mod claim;
mod outputs;
#[cfg(test)]
mod tests;
