//! A process whose memory map lock stays taken, as next to a hung NFS or FUSE mount: reading its
//! `/proc/<pid>/cmdline`, `environ` or `smaps_rollup` blocks in the kernel, as `ps` does. Made
//! for real: a FUSE file system whose reads never return (`fixtures/stuck-mm/hang_fs.py`, on
//! `mfusepy` or `fusepy` and libfuse), and a process that has the kernel fault a page of it in
//! while it holds the process's map lock, with a change of the map queued behind
//! (`fixtures/stuck-mm/stuck_mm.py`).
//!
//! Where FUSE cannot be had (no `/dev/fuse`, no `fusermount`, mounting not permitted, no Python
//! binding), [`HangingMount::new`] says why and gives `None`: the test skips. `mfusepy` is looked
//! for in `UNILAB_TEST_FUSE_LIB` (a directory for `PYTHONPATH`; CI installs it there), else in
//! `target/fuse-lib`, else wherever `python3` finds it.
//!
//! Dropping a [`HangingMount`] kills the stuck processes it was told of and its server, and
//! unmounts it, even when the test failed: a mount left hanging hangs whatever touches it next.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{exited, fixtures_dir, private_tempdir, within};

/// The name (`comm`) of a `stuck_mm.py`: the tests' own scans of every process pass it by.
pub const STUCK_MM_NAME: &str = "stuck-mm";

/// A FUSE file system whose one file, `hang`, never answers a read.
pub struct HangingMount {
    server: Child,
    dir: tempfile::TempDir,
    /// Processes stuck on it, killed before the server.
    stuck: Vec<u32>,
    /// The stuck processes this test spawned itself, reaped at the end.
    children: Vec<Child>,
}

fn fuse_lib() -> Option<PathBuf> {
    std::env::var_os("UNILAB_TEST_FUSE_LIB")
        .map(PathBuf::from)
        .or_else(|| {
            Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuse-lib"))
                .filter(|dir| dir.is_dir())
        })
}

fn on_path(program: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|dir| dir.join(program).is_file())
}

/// `fixtures/stuck-mm/NAME` run by `python3`, with the FUSE binding on its path.
pub fn stuck_mm_python(name: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(fixtures_dir().join("stuck-mm").join(name));
    if let Some(lib) = fuse_lib() {
        cmd.env("PYTHONPATH", lib);
    }
    cmd
}

impl HangingMount {
    /// Mounts the file system; `None`, saying why, where FUSE cannot be had here.
    pub fn new() -> Option<Self> {
        let skip = |why: &str| {
            eprintln!(
                "skipped: FUSE is unavailable ({why}); the test needs fuse3 and mfusepy, as .ci/run installs them"
            );
            None
        };
        if !Path::new("/dev/fuse").exists() {
            return skip("no /dev/fuse");
        }
        if !on_path("fusermount3") && !on_path("fusermount") {
            return skip("no fusermount3 or fusermount on PATH");
        }
        let dir = private_tempdir("unilab-hang-fs-");
        let log = dir.path().with_extension("log");
        let mut server = stuck_mm_python("hang_fs.py")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("python3");
        let hang = dir.path().join("hang");
        within(Duration::from_secs(60), || {
            hang.exists() || server.try_wait().is_ok_and(|exit| exit.is_some())
        });
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let mount = HangingMount {
            server,
            dir,
            stuck: Vec::new(),
            children: Vec::new(),
        };
        if !hang.exists() {
            // libfuse says why on a line of its own (`fuse: failed to open /dev/fuse: ...`).
            let said = said
                .lines()
                .find(|l| {
                    l.starts_with("fuse") || l.starts_with("hang_fs") || l.contains("fusermount")
                })
                .or(said.lines().last())
                .unwrap_or("no message")
                .to_owned();
            // Dropped: the server killed, whatever it mounted unmounted.
            drop(mount);
            return skip(&format!("the file system did not mount: {said}"));
        }
        Some(mount)
    }

    /// The file whose reads never return.
    pub fn file(&self) -> PathBuf {
        self.dir.path().join("hang")
    }

    /// A process stuck on this mount, spawned here; its pid.
    pub fn stuck_process(&mut self) -> u32 {
        let child = stuck_mm_python("stuck_mm.py")
            .arg(self.file())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("python3");
        let pid = child.id();
        self.children.push(child);
        self.stuck.push(pid);
        wait_until_stuck(pid);
        pid
    }

    /// `pid` is stuck on this mount (a process another one spawned): it is killed at the end.
    pub fn holds(&mut self, pid: u32) {
        self.stuck.push(pid);
    }
}

/// The state letters of the threads of `pid`, from their `stat` (readable however stuck it is).
fn thread_states(pid: u32) -> Vec<char> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter_map(|stat| {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .chars()
                .next()
        })
        .collect()
}

/// Waits until `pid` (a `stuck_mm.py`) is stuck, and proves that reading its environment blocks:
/// a test that passes because the read returned would prove nothing.
pub fn wait_until_stuck(pid: u32) {
    assert!(
        within(Duration::from_secs(60), || {
            thread_states(pid).iter().filter(|s| **s == 'D').count() >= 2
        }),
        "pid {pid} did not get stuck: its threads are {:?}",
        thread_states(pid)
    );
    let (tx, rx) = std::sync::mpsc::channel();
    // Blocked until the mount goes away; the wait is killable, so it never holds up the exit.
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(format!("/proc/{pid}/environ")).is_ok());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(2)).is_err(),
        "reading /proc/{pid}/environ returned: this kernel does not block it"
    );
}

fn unmount(dir: &Path) {
    for (program, args) in [
        ("fusermount3", &["-u", "-z"][..]),
        ("fusermount", &["-u", "-z"][..]),
        ("umount", &["-l"][..]),
    ] {
        let done = Command::new(program)
            .args(args)
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if done {
            return;
        }
    }
}

impl Drop for HangingMount {
    fn drop(&mut self) {
        for pid in &self.stuck {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        // The page reads waiting on the server fail once it is gone; then the stuck end.
        let _ = self.server.kill();
        let _ = self.server.wait();
        unmount(self.dir.path());
        for child in &mut self.children {
            let _ = child.wait();
        }
        let gone = within(Duration::from_secs(30), || self.stuck.iter().all(exited));
        if !gone && !std::thread::panicking() {
            panic!("stuck processes outlived their mount: {:?}", self.stuck);
        }
    }
}
