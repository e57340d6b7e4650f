//! Where state lives: the state root, and the per-host, per-user directory under it.
//!
//! State root: `--root DIR`, else `UNILAB_ROOT`, else `$XDG_STATE_HOME/unilab`, else
//! `~/.local/state/unilab`. The event log of this user on this host is
//! `<root>/<hostname>/<uid>/events.redb`: home directories are often shared between hosts, hence
//! the host in the path.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::diagnostic::{Boundary, Exit, Hint};
use crate::env::EnvVars;
use crate::event::Scope;

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("cannot find a state root: `HOME` is not set")]
    NoHome,
    #[error("cannot read the current directory to resolve the relative state root `{0}`")]
    CurrentDir(PathBuf, #[source] std::io::Error),
    #[error("cannot read this host's name")]
    Hostname(#[source] nix::Error),
    #[error("this host's name `{0}` cannot name a directory")]
    BadHostname(String),
}

impl Boundary for PathError {
    fn exit(&self) -> Exit {
        Exit::Refused
    }
}

impl Hint for PathError {
    fn hint(&self) -> Option<String> {
        match self {
            PathError::NoHome => Some("pass `--root DIR` or set `UNILAB_ROOT`".into()),
            PathError::BadHostname(_) | PathError::Hostname(_) => {
                Some("pass `--root DIR` to keep state apart from other hosts".into())
            }
            PathError::CurrentDir(..) => None,
        }
    }
}

/// The resolved state locations of this user on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePaths {
    pub root: PathBuf,
    pub host: String,
    pub uid: u32,
}

impl StatePaths {
    /// Resolves the state root from the flag and the process environment, and reads this host's
    /// name and the caller's uid.
    pub fn resolve(root_flag: Option<&Path>) -> Result<Self, PathError> {
        let root = state_root(root_flag, |name| std::env::var_os(name))?;
        let host = nix::unistd::gethostname().map_err(PathError::Hostname)?;
        let host = host.to_string_lossy().into_owned();
        if host.is_empty() || host == "." || host == ".." || host.contains('/') {
            return Err(PathError::BadHostname(host));
        }
        Ok(Self {
            root,
            host,
            uid: nix::unistd::getuid().as_raw(),
        })
    }

    pub fn scope(&self) -> Scope {
        Scope {
            uid: self.uid,
            host: self.host.clone(),
        }
    }

    /// `<root>/<hostname>/<uid>`
    pub fn user_dir(&self) -> PathBuf {
        self.root.join(&self.host).join(self.uid.to_string())
    }

    /// `<root>/<hostname>/<uid>/events.redb`
    pub fn log_path(&self) -> PathBuf {
        self.user_dir().join("events.redb")
    }

    /// This user's log on every host under the root (a root shared between hosts, as a network
    /// home directory is), by host name in order; this host's among them when it has one. Each
    /// path where something is, or where it cannot be told (an unreadable directory on the way):
    /// whether it is a log is for the opening to say, so that nothing is left out unsaid.
    pub(crate) fn every_host_log(&self) -> std::io::Result<Vec<(String, PathBuf)>> {
        let mut logs = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(logs),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            // Followed: a host directory may be a link to where that host keeps its state.
            if !std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let host = entry.file_name().to_string_lossy().into_owned();
            let log = entry.path().join(self.uid.to_string()).join("events.redb");
            match std::fs::symlink_metadata(&log) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                _ => logs.push((host, log)),
            }
        }
        logs.sort();
        Ok(logs)
    }
}

/// The state root by the documented precedence, with `var` standing in for the environment.
/// Empty and relative XDG values are ignored, as the XDG specification asks.
pub(crate) fn state_root(
    root_flag: Option<&Path>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, PathError> {
    let chosen = if let Some(root) = root_flag {
        root.to_owned()
    } else if let Some(root) = var(EnvVars::UNILAB_ROOT).filter(|v| !v.is_empty()) {
        PathBuf::from(root)
    } else if let Some(state) = var(EnvVars::XDG_STATE_HOME)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        state.join("unilab")
    } else {
        let home = var(EnvVars::HOME)
            .filter(|v| !v.is_empty())
            .ok_or(PathError::NoHome)?;
        PathBuf::from(home).join(".local/state/unilab")
    };
    if chosen.is_absolute() {
        return Ok(chosen);
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(&chosen))
        .map_err(|e| PathError::CurrentDir(chosen, e))
}

/// Why a path cannot be trusted to be the user's alone.
#[derive(Debug, thiserror::Error)]
pub enum Distrust {
    #[error("cannot inspect it: {0}")]
    Uninspectable(std::io::Error),
    #[error("it is a symbolic link")]
    Symlink,
    #[error("it was replaced while it was being checked")]
    Replaced,
    #[error("it is not a directory")]
    NotADirectory,
    #[error("it is not under `{}`", .0.display())]
    NotUnder(PathBuf),
    #[error("it belongs to uid {owner}, not {uid}")]
    NotYours { owner: u32, uid: u32 },
    #[error("it belongs to uid {owner}, neither you ({uid}) nor root")]
    NeitherYoursNorRoot { owner: u32, uid: u32 },
    #[error("others can write to it (mode {mode:o})")]
    OthersCanWrite { mode: u32 },
    #[error(
        "others can write to it and it is not sticky (mode {mode:o}), so they could replace what lies below it"
    )]
    NotSticky { mode: u32 },
}

/// Why an existing directory cannot be trusted to be the user's alone, or `None` when it can:
/// it must be a real directory (not a symlink), owned by `uid`, and closed to writes by others.
pub(crate) fn distrust_directory(path: &Path, uid: u32) -> Option<Distrust> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => distrust_directory_meta(&meta, uid),
        Err(e) => Some(Distrust::Uninspectable(e)),
    }
}

/// [`distrust_directory`] of what `lstat` (or `fstat`, of a directory held open) gave `meta`.
pub(crate) fn distrust_directory_meta(meta: &std::fs::Metadata, uid: u32) -> Option<Distrust> {
    if meta.file_type().is_symlink() {
        return Some(Distrust::Symlink);
    }
    if !meta.is_dir() {
        return Some(Distrust::NotADirectory);
    }
    if meta.uid() != uid {
        return Some(Distrust::NotYours {
            owner: meta.uid(),
            uid,
        });
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Some(Distrust::OthersCanWrite {
            mode: meta.permissions().mode() & 0o7777,
        });
    }
    None
}

/// Why the way to `path` cannot be trusted, naming the component at fault; `None` when it can.
///
/// Every existing component from `/` down to `path` (the path as given, and the path its
/// symbolic links lead to) must be owned by `uid` or by root, and one that others may write to
/// must be sticky, as `/tmp` is: otherwise another user could replace what lies below it. A
/// symbolic link must itself be owned by `uid` or root. The levels a caller owns outright are
/// checked by the caller with [`distrust_directory`], which is stricter.
pub(crate) fn distrust_path(path: &Path, uid: u32) -> Option<(PathBuf, Distrust)> {
    let mut literal = PathBuf::new();
    let mut linked = false;
    for component in path.components() {
        literal.push(component);
        let Ok(meta) = std::fs::symlink_metadata(&literal) else {
            break;
        };
        if let Some(reason) = distrust_component(&meta, uid) {
            return Some((literal, reason));
        }
        linked |= meta.file_type().is_symlink();
    }
    // Without a link on the way (and an absolute path), the existing part was checked as it
    // resolves.
    if !linked && path.is_absolute() {
        return None;
    }
    // Where the links lead: the existing part of `path`, resolved.
    let mut existing = path.to_owned();
    while std::fs::symlink_metadata(&existing).is_err() {
        if !existing.pop() {
            return None;
        }
    }
    let resolved = std::fs::canonicalize(&existing).ok()?;
    let mut level = PathBuf::new();
    for component in resolved.components() {
        level.push(component);
        let meta = std::fs::metadata(&level).ok()?;
        if let Some(reason) = distrust_component(&meta, uid) {
            return Some((level, reason));
        }
    }
    None
}

fn distrust_component(meta: &std::fs::Metadata, uid: u32) -> Option<Distrust> {
    if meta.uid() != uid && meta.uid() != 0 {
        return Some(Distrust::NeitherYoursNorRoot {
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.permissions().mode();
    let others_write = mode & 0o022 != 0;
    if meta.is_dir() && others_write && mode & 0o1000 == 0 {
        return Some(Distrust::NotSticky {
            mode: mode & 0o7777,
        });
    }
    if meta.is_file() && others_write {
        return Some(Distrust::OthersCanWrite {
            mode: mode & 0o7777,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::files::fake_env as env;

    #[test]
    fn flag_beats_environment() {
        let root = state_root(Some(Path::new("/flag")), env(&[("UNILAB_ROOT", "/env")])).unwrap();
        assert_eq!(root, PathBuf::from("/flag"));
    }

    #[test]
    fn unilab_root_beats_xdg() {
        let vars = env(&[("UNILAB_ROOT", "/env"), ("XDG_STATE_HOME", "/xdg")]);
        assert_eq!(state_root(None, vars).unwrap(), PathBuf::from("/env"));
    }

    #[test]
    fn xdg_state_home_then_home() {
        let vars = env(&[("XDG_STATE_HOME", "/xdg"), ("HOME", "/home/u")]);
        assert_eq!(
            state_root(None, vars).unwrap(),
            PathBuf::from("/xdg/unilab")
        );
        let vars = env(&[("XDG_STATE_HOME", "relative"), ("HOME", "/home/u")]);
        assert_eq!(
            state_root(None, vars).unwrap(),
            PathBuf::from("/home/u/.local/state/unilab")
        );
    }

    #[test]
    fn no_home_is_an_error_with_a_hint() {
        let err = state_root(None, env(&[])).unwrap_err();
        assert!(matches!(err, PathError::NoHome));
        assert!(err.hint().unwrap().contains("--root"));
    }
}
