//! `--metrics-file`: the soak's metrics ([`SoakMetrics`]) rewritten at every sample and once
//! more after the verdict, for node_exporter's textfile collector (or anything that reads the
//! Prometheus text format).
//!
//! Each write is whole or not at all: the text goes to a new temporary file beside the target
//! (its name starts with `.` and does not end in `.prom`, so the collector never reads it),
//! created exclusively and without following a symbolic link (`O_CREAT | O_EXCL | O_NOFOLLOW`:
//! a link planted at its name fails the open, never redirects the write), then put in the
//! target's place in one step ([`put_in_place`]). The file is mode 0644 whatever the umask:
//! node_exporter reads it as another user, and no one else may change it. It is not synced to
//! disk: the file tells the present, and the log is the record (after a crash it may be empty,
//! which the collector reads as no series). A write that fails (a full disk, its directory gone)
//! never fails the soak: it is said once on the terminal, and in the errors of the next sample
//! each time the file stops being written; every later sample tries again. The last write, with
//! the verdict, is the one that must not fail silently: a file left as the last sample wrote it
//! would say `unilab_soak_running 1` for as long as it is served, so when that write fails the
//! file is removed (an alert on a missing series fires; one on a stuck soak would not) and that
//! is said on the terminal.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::context::SoakContext;
use crate::event::soak::{Measures, Sample};
use crate::process::{ProcSource, ProcessIdentity, SystemProc};
use crate::soak::console::Console;
use crate::soak::cost::{self, Part};
use crate::soak::metrics::{SoakLabels, SoakMetrics};
use crate::soak::request::SoakSpec;

/// A soak's metrics file; inert without `--metrics-file`.
pub(super) struct MetricsFile {
    file: Option<Written>,
}

struct Written {
    path: PathBuf,
    metrics: SoakMetrics,
    /// The text, kept between writes for its capacity.
    text: String,
    /// The last write failed.
    failing: bool,
    /// A failure was said on the terminal.
    warned: bool,
    /// A failure for the next sample's errors.
    unsaid: Option<String>,
}

impl MetricsFile {
    /// The metrics file `spec` asks for, if any.
    pub(super) fn of(ctx: &SoakContext, spec: &SoakSpec) -> Self {
        let file = spec.metrics_file.as_ref().map(|path| {
            let labels = SoakLabels {
                soak: spec.soak_id.clone(),
                host: ctx.paths.host.clone(),
                job: spec.job.as_ref().map(|j| j.member.job.as_str().to_owned()),
                rank: spec.job.as_ref().map(|j| j.member.rank),
                command: crate::text::shell_command(&spec.secrets.mask_command_line(&spec.command)),
            };
            let metrics = SoakMetrics::new(&labels, crate::process::ticks_per_second())
                .with_gpu_tool(ctx.gpu_tool_present)
                .marked(&labels, this_process());
            Written {
                path: path.clone(),
                metrics,
                text: String::new(),
                failing: false,
                warned: false,
                unsaid: None,
            }
        });
        MetricsFile { file }
    }

    /// Takes in `sample` (first adding to its errors a failure to write the file that no sample
    /// said yet), its `measures` and the steps the beats timed so far.
    pub(super) fn observe(&mut self, sample: &mut Sample, measures: &Measures, timed: (u64, f64)) {
        let Some(file) = &mut self.file else { return };
        sample.errors.extend(file.unsaid.take());
        cost::time(Part::Metrics, || {
            file.metrics.observe(sample, measures, timed)
        });
    }

    /// Writes the file, progress last seen at `last_progress_at_us` (Unix microseconds, as the
    /// watch decided it).
    pub(super) fn write(&mut self, last_progress_at_us: Option<i64>, console: &Console) {
        let Some(file) = &mut self.file else { return };
        let at = last_progress_at_us.map(|us| (crate::time::unix_seconds(us) * 1e3).round() / 1e3);
        file.metrics.progressed_at(at);
        file.write(console);
    }

    /// Writes the file a last time, with the verdict: whether it `passed`, after a command
    /// that ran for `run`.
    pub(super) fn finish(&mut self, passed: bool, run: Duration, console: &Console) {
        let Some(file) = &mut self.file else { return };
        // In milliseconds, as the verdict records it.
        file.metrics
            .finish(passed, crate::soak::request::ms(run) as f64 / 1000.0);
        file.metrics.render(&mut file.text);
        let Err(e) = write_atomically(&file.path, file.text.as_bytes()) else {
            return;
        };
        let path = file.path.display();
        let removed = match std::fs::symlink_metadata(&file.path) {
            Ok(meta) if meta.is_file() => std::fs::remove_file(&file.path),
            // Nothing there, or not a file this soak wrote: nothing to take back.
            _ => Ok(()),
        };
        console.warn(&match removed {
            Ok(()) => format!(
                "cannot write the verdict to the metrics file `{path}`: {e}; it is removed, so that it does not say the soak still runs"
            ),
            Err(removing) => format!(
                "cannot write the verdict to the metrics file `{path}`: {e}; nor remove it ({removing}): it still says the soak runs"
            ),
        });
    }
}

/// This process, as its identity (pid and start time) names it.
fn this_process() -> ProcessIdentity {
    let pid = std::process::id();
    SystemProc::default().stat(pid).map_or(
        ProcessIdentity {
            pid,
            start_ticks: 0,
        },
        |s| s.identity(),
    )
}

impl Written {
    fn write(&mut self, console: &Console) {
        self.metrics.render(&mut self.text);
        match write_atomically(&self.path, self.text.as_bytes()) {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                let said = format!(
                    "cannot write the metrics file `{}`: {e}; the soak goes on, and tries again at every sample",
                    self.path.display()
                );
                if !self.warned {
                    self.warned = true;
                    console.warn(&said);
                }
                self.unsaid = Some(said);
            }
            Err(_) => {}
        }
    }
}

/// Replaces `path` with `bytes` at once: a reader sees the old file or the new, never a part.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("it names no file"))?;
    let (temp, file) = create_beside(dir, &name.to_string_lossy(), random_part)?;
    let written = (&file)
        .write_all(bytes)
        .and_then(|()| put_in_place(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Puts the file at `temp` in `path`'s place, at once. Over a regular file the two names are
/// exchanged (`renameat2(RENAME_EXCHANGE)`) and the old file, now at `temp`, removed: a plain
/// rename over a file makes ext4 (`auto_da_alloc`) start writing the new file's data out before
/// it returns: 2.25 ms a write on a busy disk, 38 % of a 100-process sample, against 0.11 ms
/// exchanged (`benches/metrics.rs`). Where there is nothing to exchange with, or the file system
/// cannot exchange, a plain rename.
fn put_in_place(temp: &Path, path: &Path) -> std::io::Result<()> {
    // By its system call (rustix), not glibc's wrapper: glibc has none before 2.28, and the
    // wheel links against 2.17.
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let exchange = |a: &Path, b: &Path| renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE);
    let regular = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file());
    if regular && exchange(temp, path).is_ok() {
        return std::fs::remove_file(temp).inspect_err(|_| {
            // What came back is not a file to remove (a directory put there meanwhile): it goes
            // back where it was, and the new file is removed by the caller.
            let _ = exchange(temp, path);
        });
    }
    std::fs::rename(temp, path)
}

/// A new file in `dir` named after `name` and a `random` part, created exclusively (never a
/// link followed, never a file already there opened), mode [`MODE`] whatever the umask; a name
/// taken is tried again with another.
fn create_beside(
    dir: &Path,
    name: &str,
    mut random: impl FnMut() -> String,
) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut tries = 0;
    loop {
        let temp = dir.join(format!(".{name}.{}.tmp", random()));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(MODE)
            .custom_flags(libc_flags::O_NOFOLLOW | libc_flags::O_CLOEXEC)
            .open(&temp);
        match opened {
            // The umask took what it took from the mode at the open; set it whole (`fchmod`),
            // before the file has its name.
            Ok(file) => {
                let set = file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(MODE));
                if let Err(e) = set {
                    let _ = std::fs::remove_file(&temp);
                    return Err(e);
                }
                return Ok((temp, file));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The metrics file's mode: read by all (node_exporter runs as its own user), written by its
/// owner alone.
const MODE: u32 = 0o644;

/// The open flags, as `nix` names them.
mod libc_flags {
    use nix::fcntl::OFlag;

    pub(super) const O_NOFOLLOW: i32 = OFlag::O_NOFOLLOW.bits();
    pub(super) const O_CLOEXEC: i32 = OFlag::O_CLOEXEC.bits();
}

/// Sixteen hex digits that differ from call to call and from process to process.
fn random_part() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&CALLS.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.update(&jiff::Timestamp::now().as_nanosecond().to_le_bytes());
    hasher.finalize().to_hex()[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_nothing_beside_it() {
        let dir = crate::testing::files::private_tempdir();
        let path = dir.path().join("unilab.prom");
        write_atomically(&path, b"first\n").unwrap();
        write_atomically(&path, b"second\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["unilab.prom"]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644, "{mode:o}");
    }

    /// The file was created as any file is, 0666 less the umask: 0664 under umask 002, where
    /// the group could rewrite what Prometheus reads, and 0600 under umask 077, where
    /// node_exporter, another user, could not read it at all. It is 0644 whatever the umask. The
    /// umask is the process's, so the writes are done by a copy of this test binary that runs
    /// this test alone.
    #[test]
    fn the_metrics_file_is_0644_under_umask_002_and_under_umask_077() {
        const CHILD: &str = "UNILAB_TEST_METRICS_UMASK_DIR";
        const UMASKS: [u32; 2] = [0o002, 0o077];
        let name = |umask: u32| format!("umask-{umask:03o}.prom");
        if let Some(dir) = std::env::var_os(CHILD) {
            for umask in UMASKS {
                nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(umask));
                let path = Path::new(&dir).join(name(umask));
                write_atomically(&path, b"first\n").unwrap();
                write_atomically(&path, b"second\n").unwrap();
            }
            return;
        }
        let dir = crate::testing::files::private_tempdir();
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "soak::supervise::metrics::tests::the_metrics_file_is_0644_under_umask_002_and_under_umask_077",
                "--test-threads=1",
                "--quiet",
            ])
            .env(CHILD, dir.path())
            .output()
            .unwrap();
        assert!(
            child.status.success(),
            "{}{}",
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr)
        );
        for umask in UMASKS {
            let path = dir.path().join(name(umask));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o644, "under umask {umask:03o}: {mode:o}");
        }
    }

    #[test]
    fn a_link_at_the_target_is_replaced_not_written_through() {
        let dir = crate::testing::files::private_tempdir();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let path = dir.path().join("unilab.prom");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomically(&path, b"metrics\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    }

    #[test]
    fn a_link_planted_at_a_temporary_name_is_never_followed() {
        let dir = crate::testing::files::private_tempdir();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(".unilab.prom.planted.tmp")).unwrap();
        let mut names = ["planted", "fresh"].into_iter().map(String::from);
        let (temp, mut file) =
            create_beside(dir.path(), "unilab.prom", || names.next().unwrap()).unwrap();
        assert_eq!(temp, dir.path().join(".unilab.prom.fresh.tmp"));
        file.write_all(b"x").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // A name that stays taken gives up, saying why.
        let e = create_beside(dir.path(), "unilab.prom", || "planted".into()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[test]
    fn a_directory_at_the_target_is_left_where_it_is() {
        let dir = crate::testing::files::private_tempdir();
        let path = dir.path().join("unilab.prom");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "keep").unwrap();
        assert!(write_atomically(&path, b"x").is_err());
        assert_eq!(
            std::fs::read_to_string(path.join("inside")).unwrap(),
            "keep"
        );
        let names = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(names, 1, "the temporary file is removed");
    }

    #[test]
    fn a_directory_gone_is_an_error_not_a_panic() {
        let dir = crate::testing::files::private_tempdir();
        let path = dir.path().join("gone/unilab.prom");
        let e = write_atomically(&path, b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
