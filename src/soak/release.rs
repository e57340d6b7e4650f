//! Whether a soak gave its GPUs back once its tree was gone: each GPU's memory in use came back
//! to what the soak's first GPU reading said (taken as the command starts, from the sampler's
//! own `nvidia-smi` stream: no process is started for it, so none can be running when the tree
//! is stopped), and no process of this user that appeared during the soak still holds a GPU
//! device file (a dataloader worker that escaped, a daemon the trainer had started elsewhere).
//! What held a device before the soak is not the soak's doing and is not listed.
//!
//! The holders before are looked for on a thread of its own while the command starts; the check
//! after is bounded by the grace period.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::capture::file_held_under;
use crate::event::soak::{GpuHolder, GpuRelease, GpuReleased, GpuSample};
use crate::gpu::smi;
use crate::process::{self, ProcSource, ProcessIdentity, SystemProc};
use crate::tool::Tool;

/// Memory in use may stay this far above the reading before and still count as given back: the
/// driver's own use moves by a few MiB.
const TOLERANCE_MIB: u64 = 64;

/// How often the memory in use is read again while it has not come back yet.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// What the GPUs and their device files looked like before: the holders, looked for as the
/// command starts, and each GPU's memory in use, from the soak's first GPU reading.
pub(crate) struct Before {
    holders: JoinHandle<HashSet<ProcessIdentity>>,
    /// Each GPU's memory in use, by UUID; `None` until a sample read the GPUs.
    memory: Option<Vec<(String, Option<u64>)>>,
    device_prefix: PathBuf,
    uid: u32,
}

impl Before {
    /// Starts looking for the holders of files under `device_prefix`.
    pub(crate) fn start(device_prefix: PathBuf, uid: u32) -> Self {
        let prefix = device_prefix.clone();
        let holders = std::thread::spawn(move || {
            holders(&prefix, uid)
                .into_iter()
                .map(|(identity, _, _)| identity)
                .collect()
        });
        Self {
            holders,
            memory: None,
            device_prefix,
            uid,
        }
    }

    /// Takes in a sample's GPUs: the first reading is what each GPU held before.
    pub(crate) fn saw(&mut self, gpus: Option<&[GpuSample]>) {
        if self.memory.is_none()
            && let Some(gpus) = gpus
        {
            self.memory = Some(
                gpus.iter()
                    .map(|g| (g.uuid.clone(), g.memory_used_mib))
                    .collect(),
            );
        }
    }

    /// Checks through `smi`, for at most `within` (one reading at least), that the memory came
    /// back, then lists the new holders; `None` when no sample read the GPUs (no nvidia-smi).
    pub(crate) fn check(self, smi: &Tool, within: Duration) -> Option<GpuRelease> {
        let before_holders = self.holders.join().ok()?;
        let before_memory = self.memory?;
        let started = Instant::now();
        let gpus = loop {
            let after = smi::memory_used(smi).ok();
            let gpus = compare(&before_memory, after.as_deref());
            let all_back = gpus.iter().all(|g| g.released != Some(false));
            if all_back || started.elapsed() + LOOK_EVERY > within {
                break gpus;
            }
            std::thread::sleep(LOOK_EVERY);
        };
        let holders = holders(&self.device_prefix, self.uid)
            .into_iter()
            .filter(|(identity, _, _)| !before_holders.contains(identity))
            .map(|(identity, name, path)| GpuHolder {
                pid: identity.pid,
                name,
                path: path.display().to_string(),
            })
            .collect();
        Some(GpuRelease { gpus, holders })
    }
}

/// Each GPU of the reading before against the reading after (`None`: nvidia-smi failed).
fn compare(
    before: &[(String, Option<u64>)],
    after: Option<&[(String, Option<u64>)]>,
) -> Vec<GpuReleased> {
    before
        .iter()
        .map(|(uuid, used_before)| {
            let used_after = after
                .and_then(|after| after.iter().find(|(u, _)| u == uuid))
                .and_then(|(_, used)| *used);
            GpuReleased {
                uuid: uuid.clone(),
                memory_used_before_mib: *used_before,
                memory_used_after_mib: used_after,
                released: used_before
                    .zip(used_after)
                    .map(|(b, a)| a <= b + TOLERANCE_MIB),
            }
        })
        .collect()
}

/// Every live process of `uid` that holds a file under `prefix`, but this one and its
/// descendants (unilab's own helpers): its identity, name and the file.
fn holders(prefix: &Path, uid: u32) -> Vec<(ProcessIdentity, String, PathBuf)> {
    let proc = SystemProc::default();
    let me = std::process::id();
    let mine: HashSet<u32> = proc.tree(me).iter().map(|s| s.pid).chain([me]).collect();
    holders_but(&proc, prefix, uid, &mine)
}

/// Every live process of `uid` but those of `except` that holds a file under `prefix`.
fn holders_but(
    proc: &dyn ProcSource,
    prefix: &Path,
    uid: u32,
    except: &HashSet<u32>,
) -> Vec<(ProcessIdentity, String, PathBuf)> {
    let proc_root = Path::new("/proc");
    process::all_processes(proc_root)
        .into_iter()
        .filter(|stat| !stat.has_exited() && !except.contains(&stat.pid))
        .filter(|stat| proc.uid(stat.pid) == Some(uid))
        .filter_map(|stat| {
            let held = file_held_under(&proc_root.join(stat.pid.to_string()), prefix)?;
            Some((stat.identity(), stat.comm, held))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_back_within_the_tolerance_is_released_and_an_unknown_figure_is_unknown() {
        let before = [
            ("GPU-a".to_owned(), Some(100)),
            ("GPU-b".to_owned(), Some(100)),
            ("GPU-c".to_owned(), None),
            ("GPU-d".to_owned(), Some(0)),
        ];
        let after = [
            ("GPU-a".to_owned(), Some(100 + TOLERANCE_MIB)),
            ("GPU-b".to_owned(), Some(4_000)),
            ("GPU-c".to_owned(), Some(5)),
        ];
        let released: Vec<_> = compare(&before, Some(&after))
            .into_iter()
            .map(|g| (g.uuid, g.released))
            .collect();
        assert_eq!(
            released,
            [
                ("GPU-a".to_owned(), Some(true)),
                ("GPU-b".to_owned(), Some(false)),
                ("GPU-c".to_owned(), None),
                ("GPU-d".to_owned(), None)
            ]
        );
        assert!(compare(&before, None).iter().all(|g| g.released.is_none()));
    }

    #[test]
    fn a_process_holding_a_device_file_is_found_unless_it_is_excepted() {
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("nvidia0");
        std::fs::write(&device, "").unwrap();
        let mut holder = std::process::Command::new("sh")
            .args(["-c", "exec 3<\"$0\"; echo; exec sleep 30"])
            .arg(&device)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Once it printed, it holds the file.
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let uid = nix::unistd::getuid().as_raw();
        let prefix = dir.path().join("nvidia");
        let proc = SystemProc::default();
        let found = holders_but(&proc, &prefix, uid, &HashSet::new());
        let pid = holder.id();
        assert!(
            found
                .iter()
                .any(|(id, _, path)| id.pid == pid && *path == device),
            "{found:?}"
        );
        assert!(holders_but(&proc, &prefix, uid, &HashSet::from([pid])).is_empty());
        assert!(
            holders(&prefix, uid).is_empty(),
            "this process's children are its own"
        );
        let _ = holder.kill();
        let _ = holder.wait();
    }
}
