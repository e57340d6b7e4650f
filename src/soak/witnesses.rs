//! What watches a soak from outside its tree: the kernel's log (OOM kills, GPU faults), the
//! command's memory cgroup, the GPUs and their device files, and the capture of evidence. Started
//! with the soak, consulted at each sample, and asked at the end what they saw.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::capture::{self, Capture};
use super::guard::GuardStatus;
use super::kernel::{self, KernelLog, MemoryCgroup};
use super::oom::{self, CgroupCount, OomClues, OomFound};
use super::release;
use super::request::SoakSpec;
use crate::event::soak::{ChildExit, ExitInfo, GpuRelease, Sample};
use crate::process::{ProcSource, SystemProc, WaitExit};
use crate::time::monotonic_ns;
use crate::tool::Tool;

pub(super) struct Witnesses {
    kernel: KernelLog,
    /// Until the end asks whether the GPUs were given back.
    gpus_before: Option<release::Before>,
    /// What is captured of the tree before the first signal.
    pub capture: Capture,
    oom_kills_before: Option<u64>,
    /// Every process of the tree a sample saw, by pid: to name those the kernel or the guard
    /// speak of once they are gone.
    names: HashMap<u32, String>,
    fail_fast: bool,
}

impl Witnesses {
    /// Starts watching, before the command starts: what the kernel logs from now on, and what
    /// the GPU device files and the memory cgroup held before.
    pub(super) fn start(spec: &SoakSpec, uid: u32) -> Self {
        // The guard and the command start in this process's memory cgroup.
        let capture = Capture::of(spec, std::process::id(), monotonic_ns());
        Self {
            kernel: KernelLog::follow(&kernel::kmsg_path()),
            gpus_before: Some(release::Before::start(capture::gpu_device_prefix(), uid)),
            oom_kills_before: capture.cgroup.as_ref().and_then(MemoryCgroup::oom_kills),
            capture,
            names: HashMap::new(),
            fail_fast: spec.supervision.fail_fast,
        }
    }

    /// Takes in a sample, adding to it the kernel's lines about OOM kills and GPU faults logged
    /// since the last one; under `--fail-fast`, while the command runs (`status`), the process
    /// of the tree found failed, if any.
    pub(super) fn saw(&mut self, sample: &mut Sample, status: &GuardStatus) -> Option<ChildExit> {
        sample.errors.extend(
            self.kernel
                .new_lines()
                .into_iter()
                .map(|line| format!("kernel: {line}")),
        );
        self.names
            .extend(sample.processes.iter().map(|p| (p.pid, p.name.clone())));
        if let Some(before) = &mut self.gpus_before {
            before.saw(sample.gpus.as_deref());
        }
        (self.fail_fast && !sample.after_exit)
            .then(|| failed_child(sample, status, &self.names))
            .flatten()
    }

    /// Once the tree is gone: the OOM kills among its processes, and — checked for at most the
    /// grace period — whether the GPUs were given back (if the command ever started; asked once).
    pub(super) fn end(
        &mut self,
        smi: &Tool,
        spec: &SoakSpec,
        status: &GuardStatus,
    ) -> (OomFound, Option<GpuRelease>) {
        let gpu_release = status.started.and_then(|_| {
            self.gpus_before.take()?.check(
                smi,
                Duration::from_millis(spec.parameters.shutdown_grace_ms),
            )
        });
        // The lines logged since the last sample: an OOM kill that ended the command is there.
        self.kernel.new_lines();
        let cgroup = self.capture.cgroup.as_ref();
        let oom = oom::attribute(&OomClues {
            cgroup: cgroup.map(|cgroup| CgroupCount {
                path: cgroup.path.clone(),
                limit_bytes: cgroup.limit_bytes(),
                before: self.oom_kills_before,
                after: cgroup.oom_kills(),
            }),
            logged: self
                .kernel
                .unavailable()
                .is_none()
                .then(|| self.kernel.oom_kills()),
            tree: Some(&self.names),
            command_killed: status
                .started
                .filter(|_| status.exit_signal == Some(nix::libc::SIGKILL))
                .map(|command| (command.pid, command_name(&self.names, command.pid, spec))),
        });
        (oom, gpu_release)
    }
}

/// The command's name as a sample saw it, else its program's.
fn command_name(names: &HashMap<u32, String>, pid: u32, spec: &SoakSpec) -> String {
    names.get(&pid).cloned().unwrap_or_else(|| {
        spec.command
            .first()
            .map(|program| {
                Path::new(program)
                    .file_name()
                    .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_default()
    })
}

/// The first process of the tree found failed at this sample — a zombie its parent has not
/// reaped, that exited non-zero or by a signal, or an orphan the guard reaped so — other than
/// the command itself, whose exit is the guard's to report.
fn failed_child(
    sample: &Sample,
    status: &GuardStatus,
    names: &HashMap<u32, String>,
) -> Option<ChildExit> {
    let command = status.started.map(|c| c.pid);
    let failed = |exit: &ExitInfo| exit.code != Some(0);
    let proc = SystemProc::default();
    sample
        .processes
        .iter()
        .filter(|p| p.state == 'Z' && Some(p.pid) != command)
        .find_map(|p| {
            let stat = proc
                .stat(p.pid)
                .filter(|s| s.start_ticks == p.start_ticks)?;
            let exit = match stat.exit()? {
                WaitExit::Code(code) => ExitInfo {
                    code: Some(code),
                    signal: None,
                },
                WaitExit::Signal(signal) => ExitInfo {
                    code: None,
                    signal: Some(signal),
                },
            };
            failed(&exit).then_some(())?;
            Some(ChildExit {
                pid: p.pid,
                name: p.name.clone(),
                exit,
            })
        })
        .or_else(|| {
            status.failed_children.first().map(|(pid, exit)| ChildExit {
                pid: *pid,
                name: names.get(pid).cloned().unwrap_or_else(|| "?".into()),
                exit: *exit,
            })
        })
}
