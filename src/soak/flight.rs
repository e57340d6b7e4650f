//! PyTorch's flight recorder (FR) for a soak: the variables that turn it on and send its dumps
//! where unilab looks, and the asking at a capture.
//!
//! The variables ([`variables`]) are set for the command unless the user set them
//! (`TORCH_FR_BUFFER_SIZE=0` is the user's opt-out), `--env-clear` or not, and recorded with the
//! start. They point into `fr/` of the soak's runtime directory (node-local, 0700, removed after
//! the verdict). Never `TORCH_WORKER_SERVER_SOCKET`: torch refuses a socket path that exists,
//! so several workers of one tree, or a restarted worker, would crash at their start.
//!
//! At a capture ([`Asking`]) every rank process that watches (`unilab.watch_collectives()`:
//! a FIFO `ask-<rank>-<pid>` in that directory) is asked by opening its FIFO, and every NCCL
//! pipe torch made there (`pipe_<rank>.pipe`) by writing `1` to it; the answers are waited for
//! at most [`ASK_WAIT`], beside the capture's `/proc` reads. Then each rank process gets what
//! was had of its collectives ([`Answers::of_process`]): its FIFO's answer, else a dump torch
//! wrote itself (`rank_<rank>`, on a timeout or through the pipe), else why there is none.
//!
//! Invariants: nothing here blocks — a FIFO is opened non-blocking and one without a reader is
//! named, not waited on; files are opened without following links and read within
//! [`crate::collectives::MAX_DUMP_BYTES`]; a dump that cannot be read is named, never fatal.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::collectives::{Dump, DumpError};
use crate::event::soak::ProcessCollectives;

/// Names the directory to `unilab.watch_collectives()`.
pub(crate) const DIR_VARIABLE: &str = "UNILAB_COLLECTIVES_DIR";

/// The FR variables' directory in the soak's runtime directory.
const DIR_NAME: &str = "fr";

/// The most a capture waits for the ranks' answers.
pub(crate) const ASK_WAIT: Duration = Duration::from_secs(2);

/// How often the answers are looked for meanwhile.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// The largest stack file read.
const STACKS_BYTES: u64 = 1 << 20;

/// Creates `fr/` (0700) in runtime directory `soak_dir`.
pub(crate) fn create(soak_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = soak_dir.join(DIR_NAME);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The variables set for the command, directory `dir` being the soak's `fr/`, but for those
/// `user_set` says the user set.
pub(crate) fn variables(dir: &Path, user_set: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    let at = |name: &str| dir.join(name).display().to_string();
    [
        ("TORCH_FR_BUFFER_SIZE", "2000".to_owned()),
        ("TORCH_FR_DUMP_ON_TIMEOUT", "1".to_owned()),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1".to_owned()),
        ("TORCH_FR_DUMP_TEMP_FILE", at("rank_")),
        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", at("rank_")),
        ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", at("pipe_")),
        (DIR_VARIABLE, dir.display().to_string()),
    ]
    .into_iter()
    .filter(|(name, _)| !user_set(name))
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// One process asked through its FIFO.
struct Asked {
    rank: u32,
    pid: u32,
    /// Why it could not be asked (no reader on its FIFO).
    refused: Option<String>,
}

/// The asking of one capture: started before the `/proc` reads, waited for after them.
pub(crate) struct Asking {
    dir: PathBuf,
    asked: Vec<Asked>,
    /// The ranks whose NCCL pipe was written to, and when their dump was written before.
    piped: Vec<(u32, Option<std::time::SystemTime>)>,
    started: Instant,
}

impl Asking {
    /// Asks every process of `live` (pids) that watches, and every NCCL pipe, in `dir`.
    pub(crate) fn start(dir: &Path, live: &[u32]) -> Self {
        let mut asking = Asking {
            dir: dir.to_owned(),
            asked: Vec::new(),
            piped: Vec::new(),
            started: Instant::now(),
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return asking;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some((rank, pid)) = fifo_name(name).filter(|(_, pid)| live.contains(pid)) {
                for old in answer_names(rank, pid) {
                    let _ = std::fs::remove_file(dir.join(old));
                }
                let refused = poke(&entry.path(), b"").err();
                asking.asked.push(Asked { rank, pid, refused });
            } else if let Some(rank) = pipe_name(name) {
                // A dump torch wrote before (on a timeout) stays until the new one replaces it.
                let before = modified(&dir.join(format!("rank_{rank}")));
                if poke(&entry.path(), b"1\n").is_ok() {
                    asking.piped.push((rank, before));
                }
            }
        }
        asking
    }

    /// Waits, until [`ASK_WAIT`] after the start, for every process asked to answer, asks the
    /// worker servers of `servers` (pid, socket) meanwhile, then reads what is there.
    pub(crate) fn finish(self, servers: &[(u32, PathBuf)]) -> Answers {
        let served: Vec<(u32, Result<Dump, String>)> = servers
            .iter()
            .map(|(pid, socket)| {
                let left = ASK_WAIT.saturating_sub(self.started.elapsed());
                (*pid, ask_worker_server(socket, left.max(LOOK_EVERY)))
            })
            .collect();
        // The watcher writes its dump (or why none), then the stacks: both are there.
        let answered = |a: &Asked| {
            let [json, error, stacks] = answer_names(a.rank, a.pid);
            a.refused.is_some()
                || ((self.dir.join(json).exists() || self.dir.join(error).exists())
                    && self.dir.join(stacks).exists())
        };
        let dumped = |(rank, before): &(u32, Option<std::time::SystemTime>)| {
            let now = modified(&self.dir.join(format!("rank_{rank}")));
            now.is_some() && now != *before
        };
        while self.started.elapsed() < ASK_WAIT
            && !(self.asked.iter().all(answered) && self.piped.iter().all(dumped))
        {
            std::thread::sleep(LOOK_EVERY);
        }
        Answers {
            dir: self.dir,
            asked: self.asked,
            piped: self.piped.into_iter().map(|(rank, _)| rank).collect(),
            served,
        }
    }
}

/// What the ranks answered.
pub(crate) struct Answers {
    dir: PathBuf,
    asked: Vec<Asked>,
    piped: Vec<u32>,
    /// What torch's worker servers answered, by pid.
    served: Vec<(u32, Result<Dump, String>)>,
}

impl Answers {
    /// What was had of the collectives of process `pid` of rank `rank`, and the Python stacks
    /// its watcher wrote.
    pub(crate) fn of_process(&self, pid: u32, rank: u32) -> (ProcessCollectives, Option<String>) {
        let mut found = ProcessCollectives::default();
        let mut stacks = None;
        let asked = self.asked.iter().find(|a| a.pid == pid);
        if let Some(asked) = asked {
            let [json, error, stack] = answer_names(asked.rank, pid);
            match (&asked.refused, self.read(&json)) {
                (Some(why), _) => found.missing.push(format!(
                    "its `unilab.watch_collectives()` did not take the request: {why}"
                )),
                (None, Ok(Some(dump))) => {
                    found.sources.push("fifo".to_owned());
                    found.groups = dump.groups;
                }
                (None, Err(e)) => found.missing.push(format!("{json}: {e}")),
                (None, Ok(None)) => {
                    found
                        .missing
                        .push(match read_bounded(&self.dir.join(&error), 4096) {
                            Ok(why) => format!(
                                "its `unilab.watch_collectives()` answered: {}",
                                String::from_utf8_lossy(&why).trim()
                            ),
                            Err(_) => format!(
                                "its `unilab.watch_collectives()` did not answer within {}",
                                crate::text::duration(ASK_WAIT.as_secs_f64())
                            ),
                        })
                }
            }
            stacks = read_bounded(&self.dir.join(stack), STACKS_BYTES)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned());
        }
        if let Some((_, served)) = self.served.iter().find(|(p, _)| *p == pid) {
            match served {
                Ok(dump) if found.groups.is_empty() => {
                    found.sources.push("worker_server".to_owned());
                    found.groups.clone_from(&dump.groups);
                    found.missing.clear();
                }
                Ok(_) => {}
                Err(why) => found.missing.push(format!("its worker server: {why}")),
            }
        }
        if found.groups.is_empty() {
            let dump = format!("rank_{rank}");
            match self.read(&dump) {
                Ok(Some(read)) => {
                    let source = if self.piped.contains(&rank) {
                        "nccl_pipe"
                    } else {
                        "dump_file"
                    };
                    found.sources.push(source.to_owned());
                    found.groups = read.groups;
                }
                Err(e) => found.missing.push(format!("{dump}: {e}")),
                Ok(None) if asked.is_none() && found.missing.is_empty() => found.missing.push(
                    "no `unilab.watch_collectives()` runs in it, and torch wrote no dump"
                        .to_owned(),
                ),
                Ok(None) => {}
            }
        }
        (found, stacks)
    }

    /// The dump named `name` in the directory; `None` when there is none.
    fn read(&self, name: &str) -> Result<Option<Dump>, DumpError> {
        let path = self.dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => crate::collectives::read_dump_file(&path).map(Some),
        }
    }
}

/// Asks torch's worker server on Unix socket `socket` for its flight recorder as JSON
/// (`POST /handler/fr_trace_json`, as torch's own debug frontend does), within `patience`.
fn ask_worker_server(socket: &Path, patience: Duration) -> Result<Dump, String> {
    use std::os::unix::net::UnixStream;
    let mut stream =
        UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    let deadline = Instant::now() + patience;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    stream
        .set_write_timeout(Some(left()))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"POST /handler/fr_trace_json HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let limit = crate::collectives::MAX_DUMP_BYTES + 64 * 1024;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if Instant::now() >= deadline {
            return Err(format!(
                "no answer within {}",
                crate::text::duration(patience.as_secs_f64())
            ));
        }
        stream
            .set_read_timeout(Some(left()))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if response.len() + n <= limit => response.extend_from_slice(&chunk[..n]),
            Ok(_) => return Err("its answer is too large".to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("its answer is not HTTP")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        let first = head.lines().next().unwrap_or("");
        return Err(format!("it answered `{}`", crate::text::foreign(first)));
    }
    let body = &response[split + 4..];
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    let body = length.map_or(body, |n| &body[..n.min(body.len())]);
    crate::collectives::read_dump(body).map_err(|e| e.to_string())
}

/// When the file at `path` was last written; `None` when there is none.
fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
}

/// `ask-<rank>-<pid>`'s rank and pid.
fn fifo_name(name: &str) -> Option<(u32, u32)> {
    let (rank, pid) = name.strip_prefix("ask-")?.split_once('-')?;
    Some((rank.parse().ok()?, pid.parse().ok()?))
}

/// `pipe_<rank>.pipe`'s rank (torch's `TORCH_NCCL_DEBUG_INFO_PIPE_FILE` + rank + `.pipe`).
fn pipe_name(name: &str) -> Option<u32> {
    name.strip_prefix("pipe_")?
        .strip_suffix(".pipe")?
        .parse()
        .ok()
}

/// The answer's names: the dump, the reason there is none, the stacks.
fn answer_names(rank: u32, pid: u32) -> [String; 3] {
    [
        format!("fr-{rank}-{pid}.json"),
        format!("fr-{rank}-{pid}.error"),
        format!("stacks-{rank}-{pid}.txt"),
    ]
}

/// Opens FIFO `path` for writing without blocking, writes `bytes` and closes it: why not, when
/// it has no reader or is no FIFO.
fn poke(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut fifo = OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ENXIO) => {
                "nothing reads its FIFO (the thread is gone, or busy)".to_owned()
            }
            _ => e.to_string(),
        })?;
    let is_fifo = fifo.metadata().is_ok_and(|m| m.file_type().is_fifo());
    if !is_fifo {
        return Err("not a FIFO".to_owned());
    }
    fifo.write_all(bytes).map_err(|e| e.to_string())
}

/// The regular file at `path` (see [`crate::collectives::read_regular`]), at most `limit`
/// bytes (more is an error).
fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let bytes = crate::collectives::read_regular(path, limit + 1)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other("too large"));
    }
    Ok(bytes)
}
