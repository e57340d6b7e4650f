//! `soak run`'s arguments, and the checked specification a soak runs from.
//!
//! Validate, then act: [`SoakRequest::validate`] checks the limits against each other and the
//! directories against the user before anything is spawned or recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{Invalid, ProgressDirProblem, SoakError, Written};
use super::launch::Launch;
use crate::event::soak::{Limits, SoakParameters, Supervision};
use crate::paths::Distrust;
use crate::redact::Secrets;

/// What `soak run` was asked for, as given.
#[derive(Debug, Clone)]
pub(crate) struct SoakRequest {
    pub command: Vec<String>,
    pub progress_dir: PathBuf,
    pub output: PathBuf,
    /// `--force`: an existing `output` is replaced, not refused.
    pub force: bool,
    pub sample_interval: Duration,
    pub startup_timeout: Duration,
    pub stale_progress: Duration,
    pub shutdown_grace: Duration,
    pub min_duration: Duration,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// `--env-clear`: the command gets `env` and nothing else.
    pub env_clear: bool,
    /// `--meta`, then `--meta-json` (its values held as the start event holds JSON).
    pub metadata: Vec<(String, String)>,
    /// `--allow-no-progress`: a clean exit without progress passes.
    pub allow_no_progress: bool,
    /// `--py-spy`: a path, a name on `PATH`, `off`; `None` looks for `py-spy` on `PATH`.
    pub py_spy: Option<String>,
    /// `--dump-signal`, by number.
    pub dump_signal: Option<i32>,
    pub dump_wait: Duration,
    /// `--fail-fast`: a process of the tree that fails while the command runs fails the soak.
    pub fail_fast: bool,
    pub budgets: Budgets,
    /// The id the soak will have (`{soak_id}` in `--output`).
    pub soak_id: String,
    /// Where it runs in a launcher's job, recorded with it.
    pub launch: Launch,
}

/// The budgets `soak run` was given: `--max-memory`, `--max-gpu-memory` (bytes),
/// `--max-memory-growth` (bytes an hour), each above zero as their parsers take them, and
/// `--warmup`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Budgets {
    pub max_memory: Option<u64>,
    pub max_gpu_memory: Option<u64>,
    pub max_memory_growth: Option<u64>,
    pub warmup: Option<Duration>,
}

impl Budgets {
    /// The limits to record, with the memory ceiling of this host and cgroup as they are now.
    fn limits(self) -> Limits {
        let (memory_ceiling_bytes, memory_ceiling_source) = memory_ceiling().unzip();
        Limits {
            max_memory_bytes: self.max_memory,
            max_gpu_memory_bytes: self.max_gpu_memory,
            max_memory_growth_bytes_per_hour: self.max_memory_growth,
            warmup_ms: self.warmup.map(ms),
            memory_ceiling_bytes,
            memory_ceiling_source,
        }
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

/// A validated `soak run`: absolute, existing, trusted paths and consistent limits.
#[derive(Debug, Clone)]
pub(crate) struct SoakSpec {
    pub soak_id: String,
    pub command: Vec<String>,
    pub progress_dir: PathBuf,
    pub output: PathBuf,
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
    /// How the tree is supervised beyond its limits (schema 5).
    pub supervision: Supervision,
    /// The budgets it fails closed on (schema 6).
    pub limits: Limits,
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
    /// Checks the limits against each other and the directories against `uid`. The progress
    /// directory must exist: a typo must not become a soak that watches nothing.
    pub(crate) fn validate(self, uid: u32) -> Result<SoakSpec, SoakError> {
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
        let cwd = absolute(self.cwd.unwrap_or_else(|| PathBuf::from(".")))?;
        let cwd = match std::fs::canonicalize(&cwd) {
            Ok(resolved) if resolved.is_dir() => resolved,
            _ => return invalid(Invalid::Cwd(cwd)),
        };
        let progress_dir = trusted_progress_dir(absolute(self.progress_dir)?, uid)?;
        let output = absolute(self.output)?;
        if !output.parent().is_some_and(Path::is_dir) {
            return invalid(Invalid::NoOutputDirectory(output));
        }
        // Found now, not when the verdict is to be written after days of running.
        crate::soak::artifact::check_target(&output)
            .map_err(SoakError::output(Written::Artifact, &output))?;
        if !self.force && output.exists() {
            return Err(SoakError::OutputExists(output));
        }
        let (py_spy, evidence_unavailable) = py_spy(self.py_spy.as_deref())?;
        let limits = self.budgets.limits();
        let mut env = self.env;
        // Python buffers a pipe 8 KiB at a time: without this a trainer's `print()` lines would
        // reach the terminal and the tail late, in bursts. Unless the user decided otherwise,
        // or gave the whole environment.
        if !self.env_clear
            && std::env::var_os(UNBUFFERED).is_none()
            && !env.iter().any(|(k, _)| k == UNBUFFERED)
        {
            env.push((UNBUFFERED.to_owned(), "1".to_owned()));
        }
        let mut metadata: BTreeMap<String, String> = self.metadata.into_iter().collect();
        self.launch.record_into(&mut metadata);
        let secrets = Secrets::handed_to_command(&env, &self.command);
        Ok(SoakSpec {
            soak_id: self.soak_id,
            command: self.command,
            progress_dir,
            output,
            parameters: SoakParameters {
                sample_interval_ms: ms(self.sample_interval),
                startup_timeout_ms: ms(self.startup_timeout),
                stale_progress_ms: ms(self.stale_progress),
                shutdown_grace_ms: ms(self.shutdown_grace),
                min_duration_ms: ms(self.min_duration),
            },
            cwd,
            metadata,
            require_progress: !self.allow_no_progress,
            secrets,
            env,
            env_clear: self.env_clear,
            supervision: Supervision {
                fail_fast: self.fail_fast,
                py_spy,
                dump_signal: self.dump_signal,
                dump_wait_ms: ms(self.dump_wait),
                evidence_unavailable,
            },
            limits,
        })
    }
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
        Some("off") => Ok((None, vec!["python stacks: off (--py-spy off)".into()])),
        Some(name) => match found(name) {
            Some(path) => Ok((Some(path.display().to_string()), Vec::new())),
            None => invalid(Invalid::NoPySpy(name.to_owned())),
        },
        None => Ok(match found("py-spy") {
            Some(path) => (Some(path.display().to_string()), Vec::new()),
            None => (
                None,
                vec!["python stacks: py-spy not found on PATH (`pip install py-spy`, or --py-spy PATH)".into()],
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
