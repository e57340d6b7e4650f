//! The evidence of a soak about to be stopped: what each live process of its tree was doing —
//! its threads' states, kernel wait channels and system calls, its kernel stack, its Python
//! stack, whether it holds a GPU — with the memory cgroup and the kernel's lines about OOM kills
//! and GPU faults. Taken before the first signal, within a bounded time: reading `/proc` of a
//! process in uninterruptible sleep can block, and a `py-spy` can spin, so the capture runs on
//! a worker and what it has when the time is up is what is kept, with a note saying so. The
//! command line, which needs the process's memory map, is read through `proc_read`: a process
//! whose map is locked is kept without it, named in a note, and the others are still read.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::flight;
use super::kernel::{self, MemoryCgroup};
use super::request::SoakSpec;
use crate::env::EnvVars;
use crate::event::soak::{
    Evidence, FailureKind, ProcessCollectives, ProcessEvidence, ThreadEvidence,
};
use crate::proc_read::ProcDir;
use crate::process::{self, ProcStat};
use crate::redact::Secrets;
use crate::tool::Tool;

/// What the capture reads and runs, fixed when the soak starts.
#[derive(Clone)]
pub(crate) struct Capture {
    pub proc_root: PathBuf,
    /// `py-spy`, when found or named.
    pub py_spy: Option<Tool>,
    /// Files under this prefix are GPU devices (`/dev/nvidia`).
    pub gpu_device_prefix: PathBuf,
    pub kmsg: PathBuf,
    /// When the soak started, on the monotonic clock: older kernel lines are not its.
    pub since_mono_us: u64,
    /// The memory cgroup the command runs in, found at its start.
    pub cgroup: Option<MemoryCgroup>,
    /// Credential values, masked in every command line kept.
    pub secrets: Secrets,
    /// Why parts of the evidence cannot be gathered, known at the start.
    pub known_unavailable: Vec<String>,
    /// Why Python stacks cannot be dumped, known at the start ("py-spy not found", "off"):
    /// said only when a process of the tree is Python, there being nothing to dump otherwise.
    pub python_unavailable: Vec<String>,
    /// The soak's `fr/` directory, where its ranks are asked for their collectives
    /// ([`super::flight`]); `None` where its runtime directory could not be used.
    pub flight: Option<PathBuf>,
}

impl Capture {
    /// The capture of the soak `spec` describes, its command run by `guard`; the soak started
    /// at `started_mono_ns` on the monotonic clock.
    pub(crate) fn of(spec: &SoakSpec, guard_pid: u32, started_mono_ns: u64) -> Self {
        let proc_root = PathBuf::from("/proc");
        // The notes recorded at the start as they are; only the capture tells them apart.
        let (python_unavailable, known_unavailable) = spec
            .supervision
            .evidence_unavailable
            .iter()
            .cloned()
            .partition(|note| note.starts_with(super::request::PYTHON_STACKS));
        Self {
            cgroup: kernel::memory_cgroup(&proc_root, guard_pid),
            proc_root,
            py_spy: spec.supervision.py_spy.as_ref().map(crate::tool::external),
            gpu_device_prefix: gpu_device_prefix(),
            kmsg: kernel::kmsg_path(),
            since_mono_us: started_mono_ns / 1000,
            secrets: spec.secrets.clone(),
            known_unavailable,
            python_unavailable,
            flight: None,
        }
    }
}

/// Where NVIDIA's device files are (`/dev/nvidia0`, `/dev/nvidiactl`, `/dev/nvidia-uvm`), unless
/// `UNILAB_GPU_DEVICE_PREFIX` says otherwise (tests).
pub(crate) fn gpu_device_prefix() -> PathBuf {
    std::env::var_os(EnvVars::UNILAB_GPU_DEVICE_PREFIX)
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("/dev/nvidia"), PathBuf::from)
}

/// The least time a capture gets, on top of `py-spy`'s own timeout.
const CAPTURE_FLOOR: Duration = Duration::from_secs(5);

impl Capture {
    /// The time the capture may take: the `/proc` reads, and `py-spy` (run in parallel) under
    /// its timeout.
    pub(crate) fn budget(&self) -> Duration {
        CAPTURE_FLOOR + self.py_spy.as_ref().map_or(Duration::ZERO, |t| t.timeout)
    }

    /// Captures `live`, the tree about to be signalled for `trigger`, in at most
    /// [`budget`](Self::budget).
    pub(crate) fn take(&self, live: &[ProcStat], trigger: FailureKind, now_us: i64) -> Evidence {
        let shared = Arc::new(Mutex::new(Partial {
            evidence: Evidence {
                trigger,
                captured_at_us: now_us,
                processes: Vec::new(),
                cgroup: None,
                kernel_messages: Vec::new(),
                unavailable: self.known_unavailable.clone(),
                mps: Vec::new(),
            },
            reading: None,
        }));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = {
            let (capture, live, shared) = (self.clone(), live.to_vec(), Arc::clone(&shared));
            std::thread::Builder::new()
                .name("unilab-capture".into())
                .spawn(move || {
                    capture.gather(&live, &shared);
                    let _ = done_tx.send(());
                })
        };
        let finished = worker.is_ok() && done_rx.recv_timeout(self.budget()).is_ok();
        let partial = shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut evidence = partial.evidence.clone();
        if !finished {
            // The worker is left to end on its own: a thread blocked in the kernel cannot be
            // stopped, and the soak must not wait on it.
            evidence.unavailable.push(match partial.reading {
                Some(pid) => format!(
                    "the capture stopped after {}: reading /proc/{pid} had not returned (a process in uninterruptible sleep holds it, or the host is too loaded)",
                    crate::text::duration(self.budget().as_secs_f64())
                ),
                None => format!(
                    "the capture stopped after {}",
                    crate::text::duration(self.budget().as_secs_f64())
                ),
            });
        }
        evidence
    }

    /// Everything, into `shared` as it is read: what the kernel says, each process, then the
    /// Python stacks (dumped in parallel meanwhile).
    fn gather(&self, live: &[ProcStat], shared: &Mutex<Partial>) {
        let with = |f: &mut dyn FnMut(&mut Partial)| {
            f(&mut shared.lock().unwrap_or_else(|e| e.into_inner()))
        };
        // Asked first: the ranks answer while `/proc` is read.
        let live_pids: Vec<u32> = live.iter().map(|s| s.pid).collect();
        let asking = self
            .flight
            .as_deref()
            .map(|dir| flight::Asking::start(dir, &live_pids));
        let cgroup = self.cgroup.as_ref().map(MemoryCgroup::evidence);
        let messages = kernel::kernel_messages(
            &self.kmsg,
            self.since_mono_us,
            jiff::Timestamp::now().as_microsecond(),
            crate::time::monotonic_ns() / 1000,
        );
        with(&mut |p| {
            p.evidence.cgroup = cgroup.clone();
            if cgroup.is_none() {
                p.evidence
                    .unavailable
                    .push("memory cgroup: not found for the command".into());
            }
            match &messages {
                Ok(lines) => p.evidence.kernel_messages = lines.clone(),
                Err(why) => p.evidence.unavailable.push(why.clone()),
            }
        });
        let pythons: Vec<&ProcStat> = live
            .iter()
            .filter(|stat| is_python(&self.proc_root, stat))
            .collect();
        if !pythons.is_empty() {
            with(&mut |p| {
                p.evidence
                    .unavailable
                    .extend(self.python_unavailable.iter().cloned())
            });
        }
        let dumps: Vec<_> = match &self.py_spy {
            Some(py_spy) => pythons
                .iter()
                .map(|stat| {
                    let (py_spy, pid) = (py_spy.clone(), stat.pid);
                    (pid, std::thread::spawn(move || dump_python(&py_spy, pid)))
                })
                .collect(),
            None => Vec::new(),
        };
        let mut notes = Notes::default();
        for stat in live {
            with(&mut |p| p.reading = Some(stat.pid));
            if let Some(found) = self.process(stat, &mut notes) {
                with(&mut |p| p.evidence.processes.push(found.clone()));
            }
        }
        with(&mut |p| p.reading = None);
        for (pid, dump) in dumps {
            let dumped = dump
                .join()
                .unwrap_or_else(|_| Err("py-spy: the dump failed".into()));
            with(&mut |p| match &dumped {
                Ok(text) => {
                    if let Some(found) = p.evidence.processes.iter_mut().find(|e| e.pid == pid) {
                        found.python_stack = Some(self.secrets.mask(text).into_owned());
                    }
                }
                Err(why) => p.evidence.unavailable.push(format!("pid {pid}: {why}")),
            });
        }
        let answers = asking.map(|a| a.finish(&notes.servers));
        with(&mut |p| self.collectives(&mut p.evidence.processes, answers.as_ref()));
        with(&mut |p| p.evidence.unavailable.extend(notes.said.iter().cloned()));
    }

    /// Each rank process's collectives (a process whose parent has its rank is the rank's
    /// child: a data loader, not the rank), and its watcher's Python stacks where py-spy gave
    /// none.
    fn collectives(&self, processes: &mut [ProcessEvidence], answers: Option<&flight::Answers>) {
        let ranks: Vec<(u32, Option<u32>)> = processes.iter().map(|p| (p.pid, p.rank)).collect();
        for process in processes.iter_mut() {
            let Some(rank) = process.rank else { continue };
            if ranks
                .iter()
                .any(|&(pid, r)| pid == process.ppid && r == Some(rank))
            {
                continue;
            }
            let Some(answers) = answers else {
                process.collectives = Some(ProcessCollectives {
                    missing: vec![
                        "the soak's runtime directory could not be used: no rank was asked"
                            .to_owned(),
                    ],
                    ..ProcessCollectives::default()
                });
                continue;
            };
            let (collectives, stacks) = answers.of_process(process.pid, rank);
            process.collectives = Some(collectives);
            if process.python_stack.is_none() {
                process.python_stack = stacks.map(|s| self.secrets.mask(&s).into_owned());
            }
        }
    }

    /// One process as `/proc` shows it now; `None` if it is gone or another process by now.
    fn process(&self, stat: &ProcStat, notes: &mut Notes) -> Option<ProcessEvidence> {
        let dir = self.proc_root.join(stat.pid.to_string());
        let mut buf = Vec::new();
        let now =
            process::read_proc_file(&dir.join("stat"), &mut buf).and_then(process::parse_stat)?;
        if now.start_ticks != stat.start_ticks || now.has_exited() {
            return None;
        }
        let proc_dir = ProcDir::new(&self.proc_root, now.pid, now.start_ticks);
        let cmdline = match proc_dir.cmdline() {
            Ok(args) => self
                .secrets
                .mask_command_line_kept(&args, crate::event::soak::CMDLINE_BYTES),
            Err(blocked) => {
                notes.once(format!(
                    "{blocked}; it is recorded without its command line"
                ));
                Vec::new()
            }
        };
        let kernel_stack = match std::fs::read_to_string(dir.join("stack")) {
            Ok(text) => Some(text),
            Err(e) => {
                notes.once(match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        "kernel stacks: this kernel has no /proc/<pid>/stack".to_owned()
                    }
                    _ => "kernel stacks: /proc/<pid>/stack is readable by root only".to_owned(),
                });
                None
            }
        };
        let holds_gpu_device = holds_file_under(&dir, &self.gpu_device_prefix, notes);
        let (rank, server) =
            crate::proc_rank::rank_and_server_of(&proc_dir).unwrap_or_else(|blocked| {
                notes.once(format!("{blocked}; it is recorded without its rank"));
                (None, None)
            });
        if let Some(server) = server.filter(|_| rank.is_some()) {
            notes.servers.push((now.pid, server));
        }
        Some(ProcessEvidence {
            pid: now.pid,
            ppid: now.ppid,
            start_ticks: now.start_ticks,
            name: now.comm,
            state: now.state,
            cmdline,
            threads: threads(&dir, &mut buf),
            kernel_stack,
            python_stack: None,
            holds_gpu_device,
            rank,
            collectives: None,
        })
    }
}

/// What the capture has so far, and the process it is reading (to say which one held it up).
struct Partial {
    evidence: Evidence,
    reading: Option<u32>,
}

/// Reasons something could not be read, each said once; and, by pid, the sockets of torch's
/// worker servers the rank processes' environments name.
#[derive(Default)]
struct Notes {
    said: Vec<String>,
    servers: Vec<(u32, PathBuf)>,
}

impl Notes {
    fn once(&mut self, note: String) {
        if !self.said.contains(&note) {
            self.said.push(note);
        }
    }
}

/// Each thread of the process at `dir`, by id.
fn threads(dir: &Path, buf: &mut Vec<u8>) -> Vec<ThreadEvidence> {
    let Ok(entries) = std::fs::read_dir(dir.join("task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    tids.sort_unstable();
    tids.into_iter()
        .filter_map(|tid| {
            let task = dir.join("task").join(tid.to_string());
            let stat =
                process::read_proc_file(&task.join("stat"), buf).and_then(process::parse_stat)?;
            let wchan = process::read_proc_file(&task.join("wchan"), buf)
                .map(str::trim)
                .filter(|w| !w.is_empty() && *w != "0")
                .map(str::to_owned);
            let syscall =
                process::read_proc_file(&task.join("syscall"), buf).and_then(syscall_name);
            Some(ThreadEvidence {
                tid,
                name: stat.comm,
                state: stat.state,
                wchan,
                syscall,
            })
        })
        .collect()
}

/// What `/proc/<pid>/task/<tid>/syscall` says a thread is doing: a system call by name (its
/// number where this architecture's table has no name for it), `running`, or `none` (blocked
/// outside one). The names are the kernel's whole table for the architecture unilab was built
/// for (`syscall-numbers`), not a hand-picked few.
fn syscall_name(text: &str) -> Option<String> {
    let first = text.split_whitespace().next()?;
    if first == "running" {
        return Some(first.to_owned());
    }
    let number: i64 = first.parse().ok()?;
    if number < 0 {
        return Some("none".to_owned());
    }
    Some(
        std::ffi::c_long::try_from(number)
            .ok()
            .and_then(syscall_numbers::native::sys_call_name)
            .map_or_else(|| number.to_string(), str::to_owned),
    )
}

/// Whether the process at `dir` holds a file open under `prefix`.
fn holds_file_under(dir: &Path, prefix: &Path, notes: &mut Notes) -> bool {
    if std::fs::read_dir(dir.join("fd")).is_err() {
        notes.once("open files: /proc/<pid>/fd of a process is not readable".into());
        return false;
    }
    file_held_under(dir, prefix).is_some()
}

/// A file the process at `dir` (`/proc/<pid>`) holds open under `prefix`, if it holds one and
/// its open files can be read.
pub(crate) fn file_held_under(dir: &Path, prefix: &Path) -> Option<PathBuf> {
    let fds = std::fs::read_dir(dir.join("fd")).ok()?;
    let prefix = prefix.as_os_str().as_encoded_bytes();
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .find(|target| target.as_os_str().as_encoded_bytes().starts_with(prefix))
}

/// Whether a process runs Python: its executable's or its command's name starts `python` (not
/// known for one whose command line cannot be read in time).
fn is_python(proc_root: &Path, stat: &ProcStat) -> bool {
    let dir = proc_root.join(stat.pid.to_string());
    let named_python = |path: &Path| {
        path.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("python"))
    };
    std::fs::read_link(dir.join("exe")).is_ok_and(|exe| named_python(&exe))
        || ProcDir::new(proc_root, stat.pid, stat.start_ticks)
            .cmdline()
            .is_ok_and(|args| {
                args.first()
                    .is_some_and(|arg0| named_python(Path::new(arg0)))
            })
}

/// `py-spy dump` of one process, without stopping it, under the tool's timeout (a `py-spy` that
/// overruns is killed and reaped); the stacks, or why there are none.
fn dump_python(py_spy: &Tool, pid: u32) -> Result<String, String> {
    let mut cmd = py_spy.command();
    cmd.args(["dump", "--nonblocking", "--pid", &pid.to_string()]);
    match py_spy.run(cmd, b"") {
        Ok(out) if out.status.success() => Ok(out.stdout),
        Ok(out) => {
            let said = out
                .stderr
                .lines()
                .chain(out.stdout.lines())
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message")
                .trim()
                .to_owned();
            let lower = said.to_lowercase();
            Err(
                if lower.contains("permission denied") || lower.contains("operation not permitted")
                {
                    format!("py-spy: ptrace not permitted ({said})")
                } else {
                    format!("py-spy failed (exit {}): {said}", out.code())
                },
            )
        }
        Err(e) => Err(format!("py-spy: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_system_call_is_named_where_known() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            syscall_name("202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12").as_deref(),
            Some("futex")
        );
        #[cfg(target_arch = "aarch64")]
        assert_eq!(
            syscall_name("98 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12").as_deref(),
            Some("futex")
        );
        assert_eq!(syscall_name("running\n").as_deref(), Some("running"));
        assert_eq!(syscall_name("-1 0x7ffd 0x7f12\n").as_deref(), Some("none"));
        assert_eq!(syscall_name("99999 0x1").as_deref(), Some("99999"));
        assert_eq!(syscall_name(""), None);
    }

    /// `vfork` (58) and `tgkill` (234) showed as numbers on x86_64: the table was a hand-picked
    /// few. Every system call a thread is commonly found blocked or spinning in has its name,
    /// in the tables of both architectures unilab is built for (numbers checked against the
    /// kernel's `unistd_64.h` and `asm-generic/unistd.h`), and this host's is the one used.
    #[test]
    fn the_system_calls_threads_are_commonly_found_in_are_named() {
        let x86_64: &[(i64, &str)] = &[
            (0, "read"),
            (1, "write"),
            (7, "poll"),
            (16, "ioctl"),
            (23, "select"),
            (34, "pause"),
            (35, "nanosleep"),
            (43, "accept"),
            (45, "recvfrom"),
            (47, "recvmsg"),
            (56, "clone"),
            (57, "fork"),
            (58, "vfork"),
            (59, "execve"),
            (61, "wait4"),
            (62, "kill"),
            (73, "flock"),
            (74, "fsync"),
            (128, "rt_sigtimedwait"),
            (130, "rt_sigsuspend"),
            (200, "tkill"),
            (202, "futex"),
            (230, "clock_nanosleep"),
            (232, "epoll_wait"),
            (234, "tgkill"),
            (247, "waitid"),
            (257, "openat"),
            (271, "ppoll"),
            (281, "epoll_pwait"),
            (435, "clone3"),
            (426, "io_uring_enter"),
            (441, "epoll_pwait2"),
            (449, "futex_waitv"),
        ];
        let aarch64: &[(i64, &str)] = &[
            (22, "epoll_pwait"),
            (29, "ioctl"),
            (63, "read"),
            (64, "write"),
            (73, "ppoll"),
            (82, "fsync"),
            (95, "waitid"),
            (98, "futex"),
            (101, "nanosleep"),
            (115, "clock_nanosleep"),
            (129, "kill"),
            (130, "tkill"),
            (131, "tgkill"),
            (133, "rt_sigsuspend"),
            (137, "rt_sigtimedwait"),
            (202, "accept"),
            (207, "recvfrom"),
            (212, "recvmsg"),
            (220, "clone"),
            (221, "execve"),
            (260, "wait4"),
            (426, "io_uring_enter"),
            (435, "clone3"),
            (441, "epoll_pwait2"),
        ];
        type Table = fn(std::ffi::c_long) -> Option<&'static str>;
        type Common<'a> = &'a [(i64, &'a str)];
        let tables: [(&str, Table, Common); 2] = [
            ("x86_64", syscall_numbers::x86_64::sys_call_name, x86_64),
            ("aarch64", syscall_numbers::aarch64::sys_call_name, aarch64),
        ];
        for (arch, table, common) in tables {
            for (number, name) in common {
                assert_eq!(table(*number), Some(*name), "{arch} {number}");
                if arch == std::env::consts::ARCH {
                    let line = format!("{number} 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f12");
                    assert_eq!(syscall_name(&line).as_deref(), Some(*name), "{number}");
                }
            }
        }
    }

    #[test]
    fn a_live_process_is_captured_with_its_threads_and_a_file_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("nvidia0");
        std::fs::write(&device, "").unwrap();
        let held = std::fs::File::open(&device).unwrap();
        let me = std::process::id();
        let stat = process::SystemProc::default();
        let stat = process::ProcSource::stat(&stat, me).unwrap();
        let capture = Capture {
            proc_root: PathBuf::from("/proc"),
            py_spy: None,
            gpu_device_prefix: dir.path().join("nvidia"),
            kmsg: dir.path().join("no-kmsg"),
            since_mono_us: 0,
            cgroup: None,
            secrets: Secrets::default(),
            known_unavailable: vec!["a note known at the start".into()],
            python_unavailable: vec!["python stacks: off (--py-spy off)".into()],
            flight: None,
        };
        let evidence = capture.take(&[stat], FailureKind::StaleProgress, 7);
        drop(held);
        assert_eq!(evidence.trigger, FailureKind::StaleProgress);
        let [found] = evidence.processes.as_slice() else {
            panic!("{evidence:?}");
        };
        assert_eq!(found.pid, me);
        assert!(found.holds_gpu_device);
        assert!(found.threads.iter().any(|t| t.tid == me));
        assert!(found.threads.len() >= 2, "the test harness runs threads");
        assert_eq!(evidence.unavailable[0], "a note known at the start");
        assert!(
            !evidence.unavailable.iter().any(|u| u.contains("python")),
            "the test harness is no Python: {:?}",
            evidence.unavailable
        );
        assert!(
            evidence
                .unavailable
                .iter()
                .any(|u| u.starts_with("kernel log: cannot open")),
            "{:?}",
            evidence.unavailable
        );
    }
}
