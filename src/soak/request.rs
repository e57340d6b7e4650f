//! `soak run`'s arguments, as parsed, to the checked specification a soak runs from.
//!
//! Validate, then act: [`SoakSpec::from_args`] takes [`SoakRunArgs`] as clap gave them (what
//! ripgrep calls the low-level arguments) and gives the spec (its high-level ones) or the first
//! thing wrong with them: the placeholders of the file names filled, the limits checked against
//! each other, the directories against the user and the files to write against what is there —
//! before anything is spawned or recorded.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{Invalid, OutputFile, ProgressDirProblem, SoakError};
use super::heartbeat::limits::{StepLimits, parse_phase_timeout, parse_step_timeout};
use super::launch::{Launch, Placeholders};
use crate::cli::SoakRunArgs;
use crate::event::soak::{Limits, SoakParameters, Supervision};
use crate::paths::{Distrust, StatePaths};
use crate::redact::Secrets;

/// The limits to record: the budgets `soak run` was given — `--max-memory`, `--max-gpu-memory`
/// (bytes), `--max-memory-growth` (bytes an hour), each above zero as their parsers take them,
/// and `--warmup` — with the memory ceiling of this host and cgroup as they are now.
fn limits(args: &SoakRunArgs) -> Limits {
    let (memory_ceiling_bytes, memory_ceiling_source) = memory_ceiling().unzip();
    Limits {
        max_memory_bytes: args.max_memory,
        max_gpu_memory_bytes: args.max_gpu_memory,
        max_memory_growth_bytes_per_hour: args.max_memory_growth,
        warmup_ms: args.warmup.map(ms),
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
fn step_limits(args: &SoakRunArgs) -> Result<StepLimits, Invalid> {
    let step_timeout = args
        .step_timeout
        .as_deref()
        .map(parse_step_timeout)
        .transpose()?;
    let phases = args
        .phase_timeout
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
    /// The budgets it fails closed on.
    pub limits: Limits,
    /// Its part in its job, if it is a rank of one: set once it joined the job
    /// ([`JobRun::join`](crate::job::JobRun::join)).
    pub job: Option<crate::job::JobRun>,
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

impl SoakSpec {
    /// The spec of the soak `soak_id`, run where `launch` says, from `args`: the first thing
    /// wrong with them is refused. The limits are checked against each other, the directories
    /// against the user of `paths` (the progress directory must exist: a typo must not become
    /// a soak that watches nothing), and `--output`, `--report` and `--metrics-file` against
    /// what is there.
    pub(crate) fn from_args(
        args: SoakRunArgs,
        soak_id: String,
        launch: Launch,
        paths: &StatePaths,
    ) -> Result<Self, SoakError> {
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
        let output = fill(&args.output)?;
        let report = args.report.as_deref().map(fill).transpose()?;
        let metrics_file = args.metrics_file.as_deref().map(fill).transpose()?;
        let limits = limits(&args);
        let step_limits = step_limits(&args)?;
        if args.command.is_empty() {
            return invalid(Invalid::NoCommand);
        }
        if args.sample_interval < Duration::from_millis(10) {
            return invalid(Invalid::IntervalTooShort);
        }
        if args.startup_timeout < args.sample_interval {
            return invalid(Invalid::ShorterThanInterval("--startup-timeout"));
        }
        if args.stale_progress < args.sample_interval {
            return invalid(Invalid::ShorterThanInterval("--stale-progress"));
        }
        let cwd = absolute(args.cwd.unwrap_or_else(|| PathBuf::from(".")))?;
        let cwd = match std::fs::canonicalize(&cwd) {
            Ok(resolved) if resolved.is_dir() => utf8(resolved)?,
            _ => return invalid(Invalid::Cwd(cwd)),
        };
        // Recorded as text, as the command's directory is: only a name that is text.
        let progress_dir = trusted_progress_dir(utf8(absolute(args.progress_dir)?)?, paths.uid)?;
        let output = absolute(output)?;
        if !output.parent().is_some_and(Path::is_dir) {
            return invalid(Invalid::NoOutputDirectory(output));
        }
        // Found now, not when the verdict is to be written after days of running.
        refuse_to_replace(&output, OutputFile::Artifact, args.force)?;
        let (py_spy, evidence_unavailable) = py_spy(args.py_spy.as_deref())?;
        let SoakRunArgs {
            command,
            mut env,
            env_clear,
            meta,
            meta_json,
            ..
        } = args;
        // Python buffers a pipe 8 KiB at a time: without this a trainer's `print()` lines would
        // reach the terminal and the tail late, in bursts. Unless the user decided otherwise,
        // or gave the whole environment.
        if !env_clear
            && std::env::var_os(UNBUFFERED).is_none()
            && !env.iter().any(|(k, _)| k == UNBUFFERED)
        {
            env.push((UNBUFFERED.to_owned(), "1".to_owned()));
        }
        // `--meta`, then `--meta-json` (its values held as the start event holds JSON).
        let mut metadata: BTreeMap<String, String> = meta.into_iter().chain(meta_json).collect();
        launch.record_into(&mut metadata);
        let (argv, (command, command_lossy)) = (command.clone(), as_text(command));
        let secrets = Secrets::handed_to_command(&env, &command);
        let report = report
            .map(|path| checked_output(path, OutputFile::Report, args.force))
            .transpose()?;
        let metrics_file = metrics_file
            .map(|path| checked_output(path, OutputFile::Metrics, args.force))
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
            parameters: SoakParameters {
                sample_interval_ms: ms(args.sample_interval),
                startup_timeout_ms: ms(args.startup_timeout),
                stale_progress_ms: ms(args.stale_progress),
                shutdown_grace_ms: ms(args.shutdown_grace),
                min_duration_ms: ms(args.min_duration),
            },
            cwd,
            metadata,
            require_progress: !args.allow_no_progress,
            secrets,
            env,
            env_clear,
            supervision: Supervision {
                fail_fast: args.fail_fast,
                py_spy,
                dump_signal: args.dump_signal,
                dump_wait_ms: ms(args.dump_wait),
                evidence_unavailable,
                heartbeat: Some(step_limits.settings()),
            },
            step_limits,
            limits,
            job: None,
        })
    }
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

/// `--report` or `--metrics-file` (`kind`) made absolute (as the artifact's path is) and
/// checked as [`refuse_to_replace`] checks it.
fn checked_output(path: PathBuf, kind: OutputFile, force: bool) -> Result<PathBuf, SoakError> {
    let path = std::path::absolute(&path).map_err(SoakError::output(kind, &path))?;
    refuse_to_replace(&path, kind, force)?;
    Ok(path)
}

/// The `py-spy` to dump Python stacks with, and why there is none: `--py-spy` names one (a path,
/// or a program on `PATH`) or `off`; without it, `py-spy` on `PATH` if there is one. A `py-spy`
/// named but not found is refused now, not found missing when a soak fails days later.
fn py_spy(given: Option<&str>) -> Result<(Option<String>, Vec<String>), SoakError> {
    let found = |name: &str| {
        if name.contains('/') {
            let path = absolute(PathBuf::from(name)).ok()?;
            is_executable(&path).then_some(path)
        } else {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
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
