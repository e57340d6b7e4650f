//! MPS pipe and log directories: where they go, and creating them safely.
//!
//! Pipe directories (sockets, short-lived): `$XDG_RUNTIME_DIR/unilab/mps/<name>` when that variable
//! names a directory owned by the user, else `/tmp/unilab-<uid>/mps/<name>`. Log directories (kept
//! for forensics): `<root>/<hostname>/<uid>/mps/<name>/log`. Every level unilab creates is made
//! `0700`, and every existing level it relies on must be a real directory (not a symlink), owned by
//! the user and closed to others, or unilab refuses it.

use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::MpsError;
use crate::paths::{Distrust, distrust_directory};
use crate::process::ProcSource;

/// The AF_UNIX limit on a socket path, without its terminating NUL.
pub(crate) const MAX_SOCKET_PATH: usize = 107;

pub(crate) const CONTROL_SOCKET: &str = "control";
pub(crate) const PID_FILE: &str = "nvidia-cuda-mps-control.pid";
pub(crate) const CONTROL_LOCK: &str = "control_lock";

/// The default pipe directory of daemon `name`.
pub(crate) fn default_pipe_directory(runtime_dir: Option<&Path>, uid: u32, name: &str) -> PathBuf {
    runtime_base(runtime_dir, uid).join("mps").join(name)
}

/// unilab's runtime directory for user `uid`: `<runtime_dir>/unilab` when `runtime_dir`
/// (`$XDG_RUNTIME_DIR`) is an absolute directory of the user's, else `/tmp/unilab-<uid>`.
pub(crate) fn runtime_base(runtime_dir: Option<&Path>, uid: u32) -> PathBuf {
    let owned_runtime = runtime_dir.filter(|dir| {
        dir.is_absolute()
            && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid)
    });
    match owned_runtime {
        Some(dir) => dir.join("unilab"),
        None => PathBuf::from(format!("/tmp/unilab-{uid}")),
    }
}

/// `<pipe>/control`, refused when too long to bind.
pub(crate) fn control_socket(pipe_directory: &Path) -> Result<PathBuf, MpsError> {
    let path = pipe_directory.join(CONTROL_SOCKET);
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(MpsError::SocketPathTooLong { path, len });
    }
    Ok(path)
}

/// Creates `path` and any missing parents `0700`, checking every level from `trusted_base` down
/// (the base itself must exist). Levels that already exist must pass [`distrust_directory`].
pub(crate) fn ensure_private(trusted_base: &Path, path: &Path, uid: u32) -> Result<(), MpsError> {
    trusted_way(trusted_base, uid)?;
    let relative = path
        .strip_prefix(trusted_base)
        .map_err(|_| MpsError::UnsafeDirectory {
            path: path.to_owned(),
            reason: Distrust::NotUnder(trusted_base.to_owned()),
        })?;
    let mut current = trusted_base.to_owned();
    for component in relative.components() {
        current.push(component);
        match DirBuilder::new().mode(0o700).create(&current) {
            Ok(()) => {
                // The umask may have narrowed the mode; make it exactly 0700.
                std::fs::set_permissions(&current, std::fs::Permissions::from_mode(0o700))
                    .map_err(|source| MpsError::Io {
                        path: current.clone(),
                        source,
                    })?;
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(MpsError::Io {
                    path: current,
                    source,
                });
            }
        }
        if let Some(reason) = distrust_directory(&current, uid) {
            return Err(MpsError::UnsafeDirectory {
                path: current,
                reason,
            });
        }
    }
    Ok(())
}

/// The way to the base itself, from `/`: no one else may be able to replace what lies below it
/// (a `$XDG_RUNTIME_DIR` of mode 0777 is refused; `/tmp`, sticky, is fine).
fn trusted_way(base: &Path, uid: u32) -> Result<(), MpsError> {
    match crate::paths::distrust_path(base, uid) {
        None => Ok(()),
        Some((path, reason)) => Err(MpsError::UnsafeDirectory { path, reason }),
    }
}

/// Checks, without creating anything, every level of `path` under `trusted_base` that exists.
pub(crate) fn check_existing(trusted_base: &Path, path: &Path, uid: u32) -> Result<(), MpsError> {
    trusted_way(trusted_base, uid)?;
    let Ok(relative) = path.strip_prefix(trusted_base) else {
        return Ok(());
    };
    let mut level = trusted_base.to_owned();
    for component in relative.components() {
        level.push(component);
        if std::fs::symlink_metadata(&level).is_err() {
            return Ok(());
        }
        if let Some(reason) = distrust_directory(&level, uid) {
            return Err(MpsError::UnsafeDirectory {
                path: level,
                reason,
            });
        }
    }
    Ok(())
}

/// The base from which unilab creates a pipe directory: the parent of its first level that
/// unilab may create. For the defaults that is `$XDG_RUNTIME_DIR` or `/tmp`; for a directory the
/// user names, its parent.
pub(crate) fn creation_base(
    pipe_directory: &Path,
    runtime_dir: Option<&Path>,
    uid: u32,
) -> PathBuf {
    let tmp_root = PathBuf::from(format!("/tmp/unilab-{uid}"));
    if pipe_directory.starts_with(&tmp_root) {
        return PathBuf::from("/tmp");
    }
    if let Some(runtime) = runtime_dir
        && pipe_directory.starts_with(runtime.join("unilab"))
    {
        return runtime.to_owned();
    }
    pipe_directory
        .parent()
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Who holds a pipe directory's control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Occupant {
    /// No socket and no pid file.
    Empty,
    /// A socket or pid file left behind by a daemon that is gone.
    Leftovers,
    /// Something accepts connections on the control socket; `pid` is the live process the pid
    /// file names, if any (shown, never signalled).
    Live { pid: Option<u32> },
}

/// Looks at a pipe directory without changing it. Only a control socket that accepts a
/// connection proves a daemon there: a pid file outlives a daemon killed with SIGKILL, and its
/// pid may since have been handed to an unrelated process, so the pid alone proves nothing.
pub(crate) fn occupant(proc: &dyn ProcSource, pipe_directory: &Path) -> Occupant {
    if socket_answers(&pipe_directory.join(CONTROL_SOCKET)) {
        let pid = read_pid_file(pipe_directory)
            .filter(|pid| proc.stat(*pid).is_some_and(|stat| !stat.has_exited()));
        return Occupant::Live { pid };
    }
    let leftovers = [CONTROL_SOCKET, PID_FILE]
        .iter()
        .any(|f| std::fs::symlink_metadata(pipe_directory.join(f)).is_ok());
    if leftovers {
        Occupant::Leftovers
    } else {
        Occupant::Empty
    }
}

/// The pid in the daemon's pid file, if it holds one.
pub(crate) fn read_pid_file(pipe_directory: &Path) -> Option<u32> {
    std::fs::read_to_string(pipe_directory.join(PID_FILE))
        .ok()
        .and_then(|text| text.trim().parse().ok())
}

/// Whether something accepts connections on the SEQPACKET socket at `path`.
pub(crate) fn socket_answers(path: &Path) -> bool {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
    let Ok(addr) = UnixAddr::new(path) else {
        return false;
    };
    let Ok(fd) = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return false;
    };
    use std::os::fd::AsRawFd;
    connect(fd.as_raw_fd(), &addr).is_ok()
}

/// Removes what a stopped daemon leaves in its pipe directory (the socket, the pid file and the
/// lock file, never following a symlink), then the directory itself if it is empty.
pub(crate) fn remove_leftovers(pipe_directory: &Path) {
    remove_leftovers_keeping_dir(pipe_directory);
    let _ = std::fs::remove_dir(pipe_directory);
}

/// Removes what a daemon proven gone left in `pipe_directory` (and the directory, if that
/// empties it) — unless some daemon still answers there.
pub(crate) fn remove_leftovers_of_the_gone(proc: &dyn ProcSource, pipe_directory: &Path) {
    if matches!(occupant(proc, pipe_directory), Occupant::Leftovers) {
        remove_leftovers(pipe_directory);
    }
}

/// Removes a gone daemon's socket, pid file and lock file, keeping the directory.
pub(crate) fn remove_leftovers_keeping_dir(pipe_directory: &Path) {
    for name in [CONTROL_SOCKET, PID_FILE, CONTROL_LOCK] {
        let path = pipe_directory.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The occupant of a pipe directory trusted its pid file: a daemon killed with SIGKILL left
    /// it behind, its pid went to an unrelated process, and the directory was taken for a foreign
    /// daemon's although nothing answered there (so `mps start` refused and `mps stop` could not
    /// remove the leftovers). Only a socket that accepts a connection proves a daemon.
    #[test]
    fn a_pid_file_naming_a_live_process_is_no_daemon_without_a_socket_that_answers() {
        use crate::testing::proc::FakeProc;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(PID_FILE), "4242\n").unwrap();
        let reused = FakeProc::new().with(4242, 9, 'S', 1000);
        assert_eq!(occupant(&reused, dir.path()), Occupant::Leftovers);
        // A socket nobody listens on any more is a leftover too.
        let socket = dir.path().join(CONTROL_SOCKET);
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        assert_eq!(occupant(&reused, dir.path()), Occupant::Leftovers);
        std::fs::remove_file(&socket).unwrap();
        std::fs::remove_file(dir.path().join(PID_FILE)).unwrap();
        assert_eq!(occupant(&reused, dir.path()), Occupant::Empty);
    }

    #[test]
    fn long_socket_paths_are_refused_before_anything_starts() {
        let ok = Path::new("/tmp/unilab-1000/mps/gpu-0f8e0c2a");
        assert!(control_socket(ok).is_ok());
        let long = PathBuf::from("/tmp").join("x".repeat(100));
        assert!(matches!(
            control_socket(&long),
            Err(MpsError::SocketPathTooLong { len: 113, .. })
        ));
    }

    #[test]
    fn private_directories_are_created_0700_and_symlinks_refused() {
        let uid = nix::unistd::getuid().as_raw();
        // 0700 whatever the umask: under umask 002 a new directory is group-writable.
        let base = crate::testing::files::private_tempdir();
        let target = base.path().join("a/b/c");
        ensure_private(base.path(), &target, uid).unwrap();
        for level in ["a", "a/b", "a/b/c"] {
            let mode = std::fs::metadata(base.path().join(level))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{level}");
        }
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), base.path().join("link")).unwrap();
        let err = ensure_private(base.path(), &base.path().join("link/x"), uid).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::create_dir(base.path().join("open")).unwrap();
        std::fs::set_permissions(
            base.path().join("open"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let err = ensure_private(base.path(), &base.path().join("open/x"), uid).unwrap_err();
        assert!(err.to_string().contains("others can write"), "{err}");
    }
}
