//! A start request resolved and checked, nothing created yet: the [`StartSpec`] every start
//! works from (`mps start`, a foreground start, the shared daemon of `mps exec --shared`), and
//! the steps that make it, which `mps doctor` runs one by one so that each finding lands under
//! its own check.

use std::path::{Path, PathBuf};

use super::Mps;
use super::decide::Claim;
use super::dirs;
use super::error::MpsError;
use super::names::{default_name, scoped_name, validate_job, validate_name};
use super::plan::{resolve, startable, topology};
use crate::event::DaemonLimits;
use crate::gpu::TopologyPlan;

/// What `mps start` asks for.
#[derive(Debug, Clone, Default)]
pub(crate) struct StartRequest {
    pub selector: Option<String>,
    pub name: Option<String>,
    pub pipe_directory: Option<PathBuf>,
    pub log_directory: Option<PathBuf>,
    /// The Slurm job it starts in (`SLURM_JOB_ID`), which scopes its default name.
    pub job: Option<String>,
    /// The limits to set on the daemon and read back before it is recorded live.
    pub limits: DaemonLimits,
}

/// A daemon about to be started: the request resolved and checked, nothing created yet.
pub(crate) struct StartSpec {
    pub name: String,
    pub gpu: String,
    /// The Slurm job it is started in, recorded with it.
    pub job: Option<String>,
    pub topology: TopologyPlan,
    pub pipe_directory: PathBuf,
    pub log_directory: PathBuf,
    pub limits: DaemonLimits,
}

impl StartSpec {
    /// The name and GPU this start claims, in its scope.
    pub(crate) fn claim(&self) -> Claim<'_> {
        Claim {
            name: &self.name,
            gpu: &self.gpu,
            job: self.job.as_deref(),
        }
    }
}

/// Resolves and validates a start request without changing anything. `mps doctor` runs the
/// same steps one by one, so that each finding lands under its own check.
pub(crate) fn spec(mps: &Mps, request: &StartRequest) -> Result<StartSpec, MpsError> {
    let topology = resolve(mps, &topology(mps)?, request.selector.as_deref())?;
    let gpu = startable(&topology)?.uuid.clone();
    if let Some(job) = &request.job {
        validate_job(job)?;
    }
    let name = match &request.name {
        Some(name) => scoped_name(name, request.job.as_deref()),
        None => default_name(&gpu, request.job.as_deref()),
    };
    validate_name(&name)?;
    control_present(mps)?;
    let pipe_directory = pipe_directory_for(mps, request.pipe_directory.as_deref(), &name);
    check_pipe_directory(mps, &pipe_directory)?;
    let log_directory = log_directory_for(mps, request.log_directory.as_deref(), &name);
    Ok(StartSpec {
        name,
        gpu,
        job: request.job.clone(),
        topology,
        pipe_directory,
        log_directory,
        limits: request.limits,
    })
}

/// The control tool, which a start runs, can be found.
pub(crate) fn control_present(mps: &Mps) -> Result<(), MpsError> {
    match mps.control.locate() {
        Some(_) => Ok(()),
        None => Err(MpsError::ControlMissing {
            program: mps.control.name(),
        }),
    }
}

/// The daemon's pipe directory: the one asked for, else the default for `name`.
pub(crate) fn pipe_directory_for(mps: &Mps, asked: Option<&Path>, name: &str) -> PathBuf {
    match asked {
        Some(dir) => absolute(dir),
        None => dirs::default_pipe_directory(mps.env.runtime_dir.as_deref(), mps.paths.uid, name),
    }
}

/// The daemon's log directory: the one asked for, else `<root>/<host>/<uid>/mps/<name>/log`.
pub(crate) fn log_directory_for(mps: &Mps, asked: Option<&Path>, name: &str) -> PathBuf {
    match asked {
        Some(dir) => absolute(dir),
        None => mps.paths.user_dir().join("mps").join(name).join("log"),
    }
}

/// A pipe directory whose control socket path fits and whose existing levels are trustworthy.
pub(crate) fn check_pipe_directory(mps: &Mps, pipe_directory: &Path) -> Result<(), MpsError> {
    dirs::control_socket(pipe_directory)?;
    dirs::check_existing(
        &dirs::creation_base(
            pipe_directory,
            mps.env.runtime_dir.as_deref(),
            mps.paths.uid,
        ),
        pipe_directory,
        mps.paths.uid,
    )
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_owned())
    }
}
