//! What a soak writes, checked against each other and against what it watches, before anything
//! runs:
//!
//! - `--output`, `--report` and `--metrics-file` name three different files: compared, after
//!   their placeholders are filled, by their directory's device and inode and their name, so
//!   that `d/../F` or a path through a linked directory is the same file as `F` ([`distinct`]).
//! - A `--metrics-file` that exists is rewritten without `--force` when it is a unilab metrics
//!   file whose soak no longer runs: it says `unilab_soak_running 0`, or its supervisor (named
//!   by pid and start time on its first line) is gone from this host. A running soak's file, a
//!   file of another host's soak that says it runs, and a file that is not unilab's are refused
//!   ([`metrics_file`]). That check is made under the soak's claim on the file ([`super::claim`]),
//!   so that of two soaks started at one moment one takes the file and the other is refused as
//!   if the first had written it already ([`claimed_metrics_file`]).
//! - The progress directory neither holds nor lies inside what unilab writes while the soak
//!   runs — its state directory on this host, its jobs directory, the metrics file, its runtime
//!   directory — by the devices and inodes of every directory above each, so that no spelling
//!   of a path slips by ([`apart_from_progress`]): unilab's writes there would be the command's
//!   progress, and a hung trainer would never be judged stale.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::claim::{self, Claimed, MetricsClaim};
use crate::paths::StatePaths;
use crate::process::{Liveness, ProcessIdentity, SystemProc};
use crate::soak::error::{Invalid, ProgressDirProblem, SoakError};

/// The most of an existing metrics file read to tell whose it is: its mark is its first line,
/// its running series among the first few.
const READ_AT_MOST: u64 = 1 << 20;

/// The files of `named` (each with its flag), refused when two are one: the same name in the
/// same directory. A file whose directory cannot be read is left to the checks that follow.
pub(super) fn distinct(named: &[(&'static str, Option<&Path>)]) -> Result<(), Invalid> {
    let keys: Vec<_> = named
        .iter()
        .filter_map(|&(flag, path)| Some((flag, path?, key(path?)?)))
        .collect();
    for (i, (first, _, key)) in keys.iter().enumerate() {
        if let Some((second, path, _)) = keys[i + 1..].iter().find(|(_, _, k)| k == key) {
            return Err(Invalid::SameFile {
                first,
                second,
                path: path.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// The device and inode of `path`'s directory, and its name.
fn key(path: &Path) -> Option<(u64, u64, std::ffi::OsString)> {
    let name = path.file_name()?.to_owned();
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).ok()?;
    Some((meta.dev(), meta.ino(), name))
}

/// `--metrics-file` at `path` (absolute, its kind checked) claimed for soak `soak_id`, then
/// checked ([`metrics_file`]) under the claim, `runtime_dir` being `$XDG_RUNTIME_DIR`: refused
/// when another soak holds the claim, unless `--force` (`force`); taken without a claim when
/// none can be made here.
pub(super) fn claimed_metrics_file(
    path: &Path,
    force: bool,
    paths: &StatePaths,
    (runtime_dir, soak_id): (Option<&Path>, &str),
) -> Result<Option<MetricsClaim>, SoakError> {
    let held = match claim::claim(path, runtime_dir, paths.uid, soak_id) {
        Claimed::Held(held) => Some(held),
        Claimed::Taken(_) if force => None,
        Claimed::Taken(holder) => {
            let (soak_id, why) = match holder {
                Some(holder) => (
                    crate::text::foreign(&holder.soak_id).into_owned(),
                    format!(
                        "its supervisor, pid {}, is running and holds the file's claim",
                        holder.pid
                    ),
                ),
                None => (
                    "unknown".to_owned(),
                    "another soak holds the file's claim, and its claim names no soak".to_owned(),
                ),
            };
            return Err(SoakError::MetricsFileInUse {
                path: path.to_owned(),
                soak_id,
                why,
            });
        }
        Claimed::Unavailable(why) => {
            crate::trace::detail!(
                crate::trace::STEPS,
                "no claim on the metrics file `{}`: {why}; checked without one",
                path.display()
            );
            None
        }
    };
    metrics_file(path, force, paths)?;
    Ok(held)
}

/// `--metrics-file` at `path` (absolute, its kind checked), taken as it is when nothing is
/// there, with `--force`, or when it is a unilab metrics file whose soak no longer runs on the
/// host of `paths`; refused otherwise.
pub(super) fn metrics_file(path: &Path, force: bool, paths: &StatePaths) -> Result<(), SoakError> {
    if force || std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let Some(mark) = read_mark(path) else {
        return Err(SoakError::OutputExists(path.to_owned()));
    };
    if !mark.running {
        return Ok(());
    }
    let why = match &mark.supervised {
        None => "it says so, and names no supervisor to ask".to_owned(),
        Some((host, _)) if *host != paths.host => format!(
            "it says so, and its supervisor is on host `{}`, which cannot be asked from here",
            crate::text::foreign(host)
        ),
        Some((_, supervisor)) => match supervisor_liveness(*supervisor, paths.uid) {
            Liveness::Gone | Liveness::Reused { .. } => return Ok(()),
            Liveness::Live => format!("its supervisor, pid {}, is running", supervisor.pid),
            Liveness::NotOwned { uid } => format!(
                "its supervisor, pid {}, is running as another user (uid {uid})",
                supervisor.pid
            ),
        },
    };
    Err(SoakError::MetricsFileInUse {
        path: path.to_owned(),
        soak_id: crate::text::foreign(&mark.soak).into_owned(),
        why,
    })
}

/// Whose metrics file `path` is, if unilab wrote it: read without following a link, at most
/// [`READ_AT_MOST`] bytes of it.
fn read_mark(path: &Path) -> Option<crate::soak::metrics::mark::Mark> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(READ_AT_MOST).read_to_string(&mut text).ok()?;
    crate::soak::metrics::mark::read(&text)
}

fn supervisor_liveness(supervisor: ProcessIdentity, uid: u32) -> Liveness {
    crate::process::liveness(&SystemProc::default(), supervisor, uid)
}

/// The progress directory `progress` (existing, absolute), refused when it holds or lies inside
/// what unilab writes while the soak runs: the state directory of `paths` on this host and its
/// jobs directory, the metrics file, the runtime directory (`runtime_dir` as
/// `XDG_RUNTIME_DIR` gives it).
pub(super) fn apart_from_progress(
    progress: &Path,
    metrics_file: Option<&Path>,
    paths: &StatePaths,
    runtime_dir: Option<&Path>,
) -> Result<(), SoakError> {
    let written: [(&'static str, Option<PathBuf>); 4] = [
        ("unilab's state directory", Some(paths.user_dir())),
        (
            "unilab's jobs directory",
            Some(
                paths
                    .root
                    .join(crate::job::dir::JOBS)
                    .join(paths.uid.to_string()),
            ),
        ),
        ("the metrics file", metrics_file.map(Path::to_owned)),
        (
            "unilab's runtime directory",
            Some(crate::mps::dirs::runtime_base(runtime_dir, paths.uid)),
        ),
    ];
    let Ok(meta) = std::fs::metadata(progress) else {
        return Ok(());
    };
    let progress_id = (meta.dev(), meta.ino());
    let above_progress = lineage(progress);
    for (what, at) in written {
        let Some(at) = at else { continue };
        let refused = |holds| SoakError::ProgressDir {
            path: progress.to_owned(),
            problem: ProgressDirProblem::Overlaps {
                what,
                at: at.clone(),
                holds,
            },
        };
        if lineage(&at).contains(&progress_id) {
            return Err(refused(true));
        }
        if let Ok(meta) = std::fs::metadata(&at)
            && above_progress.contains(&(meta.dev(), meta.ino()))
        {
            return Err(refused(false));
        }
    }
    Ok(())
}

/// The device and inode of `path` (or, where it does not exist yet, of the nearest directory
/// above it that does) and of every directory above that, up to `/`: its real place, whatever
/// links and `..` its spelling takes.
fn lineage(path: &Path) -> Vec<(u64, u64)> {
    let Some(existing) = path
        .ancestors()
        .find_map(|at| std::fs::canonicalize(at).ok())
    else {
        return Vec::new();
    };
    existing
        .ancestors()
        .filter_map(|at| std::fs::metadata(at).ok())
        .map(|meta| (meta.dev(), meta.ino()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::ProcSource;

    #[test]
    fn one_file_by_any_spelling_is_the_same_file() {
        let dir = crate::testing::files::private_tempdir();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let f = d.join("F");
        let dotted = d.join("..").join("d").join("F");
        let linked = link.join("F");
        for other in [&f, &dotted, &linked] {
            let e = distinct(&[("--output", Some(&f)), ("--report", Some(other))]).unwrap_err();
            assert!(
                matches!(
                    e,
                    Invalid::SameFile {
                        first: "--output",
                        second: "--report",
                        ..
                    }
                ),
                "{e}"
            );
        }
        let g = d.join("G");
        distinct(&[
            ("--output", Some(&f)),
            ("--report", Some(&g)),
            ("--metrics-file", None),
        ])
        .unwrap();
        let e = distinct(&[
            ("--output", Some(&f)),
            ("--report", Some(&g)),
            ("--metrics-file", Some(&linked)),
        ])
        .unwrap_err();
        assert!(
            matches!(
                e,
                Invalid::SameFile {
                    first: "--output",
                    second: "--metrics-file",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// Each kind of file already at `--metrics-file`, without `--force`: what is taken, what is
    /// refused and why. The supervisors are real processes: this one (running), and one whose
    /// start time is not this process's (gone; its pid taken by another).
    #[test]
    fn a_metrics_file_is_taken_when_its_soak_no_longer_runs_and_refused_while_it_may() {
        let dir = crate::testing::files::private_tempdir();
        let paths = StatePaths {
            root: dir.path().join("state"),
            host: "node-7".into(),
            uid: nix::unistd::getuid().as_raw(),
        };
        let me = SystemProc::default()
            .stat(std::process::id())
            .unwrap()
            .identity();
        let gone = ProcessIdentity {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        let file = |mark: Option<(&str, ProcessIdentity)>, running: u8| {
            let mark = mark.map_or_else(
                || "# HELP unilab_soak_info A soak\n".to_owned(),
                |(host, who)| format!("{}\n", crate::soak::metrics::mark::line("s1", host, who)),
            );
            format!("{mark}unilab_soak_running{{soak=\"s1\"}} {running}\n# EOF\n")
        };
        let path = dir.path().join("unilab.prom");
        let check = |text: &str, force: bool| {
            std::fs::write(&path, text).unwrap();
            metrics_file(&path, force, &paths)
        };
        for (text, says) in [
            (file(Some(("node-7", me)), 1), "its supervisor, pid"),
            (file(Some(("node-8", me)), 1), "on host `node-8`"),
            (file(None, 1), "names no supervisor"),
        ] {
            match check(&text, false) {
                Err(SoakError::MetricsFileInUse { soak_id, why, .. }) => {
                    assert_eq!(soak_id, "s1");
                    assert!(why.contains(says), "{why}");
                }
                other => panic!("{text}: {other:?}"),
            }
            check(&text, true).unwrap();
        }
        for ended in [
            file(Some(("node-7", me)), 0),
            file(Some(("node-8", me)), 0),
            file(None, 0),
            file(Some(("node-7", gone)), 1),
        ] {
            check(&ended, false).unwrap_or_else(|e| panic!("{ended}: {e}"));
        }
        assert!(matches!(
            check("# not unilab's\n", false),
            Err(SoakError::OutputExists(_))
        ));
        std::fs::remove_file(&path).unwrap();
        metrics_file(&path, false, &paths).unwrap();
    }

    /// Another soak's claim refuses the file, naming that soak, unless `--force`; where no
    /// claim can be made the file is checked without one.
    #[test]
    fn a_claimed_metrics_file_is_refused_and_one_that_cannot_be_claimed_is_checked_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::testing::files::private_tempdir();
        let runtime = crate::testing::files::private_tempdir();
        let paths = StatePaths {
            root: dir.path().join("state"),
            host: "node-7".into(),
            uid: nix::unistd::getuid().as_raw(),
        };
        let path = dir.path().join("unilab.prom");
        let claimed =
            |force, soak| claimed_metrics_file(&path, force, &paths, (Some(runtime.path()), soak));
        let held = claimed(false, "s1").unwrap();
        assert!(held.is_some());
        match claimed(false, "s2") {
            Err(SoakError::MetricsFileInUse { soak_id, why, .. }) => {
                assert_eq!(soak_id, "s1");
                let pid = std::process::id();
                assert!(why.contains(&format!("pid {pid}, is running")), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(claimed(true, "s2").unwrap().is_none(), "taken, unclaimed");
        drop(held);
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(claimed(false, "s3").unwrap().is_none());
        std::fs::write(&path, "# not unilab's\n").unwrap();
        assert!(matches!(
            claimed(false, "s3"),
            Err(SoakError::OutputExists(_))
        ));
    }

    #[test]
    fn the_lineage_of_a_path_not_made_yet_is_that_of_its_nearest_directory() {
        let dir = crate::testing::files::private_tempdir();
        let meta = std::fs::metadata(dir.path()).unwrap();
        let lineage = lineage(&dir.path().join("a/b/c"));
        assert_eq!(lineage.first(), Some(&(meta.dev(), meta.ino())));
        let root = std::fs::metadata("/").unwrap();
        assert_eq!(lineage.last(), Some(&(root.dev(), root.ino())));
    }
}
