//! The waits between samples: one `poll(2)` on everything that can end one before its time —
//! the guard's status file written (inotify on the soak's working directory: the command
//! started or exited, a child failed), the guard's death (its pidfd), and a stop signal (a
//! socket each of SIGINT, SIGTERM and SIGHUP writes to) — with the next sample's time as its
//! timeout. So a wait wakes once, when something happened or the sample is due, never to look
//! and find nothing.
//!
//! The guard's status is read again only when its file was written since it was last read, and
//! `/proc` asked whether the guard died only once its pidfd says it exited. Where one of these
//! cannot be had (no inotify watch left, a kernel without pidfds, no socket), what it would have
//! told is looked at as before: every [`FALLBACK`] while waiting, and at each sample.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use signal_hook::SigId;

use super::child::Guard;
use crate::soak::cost;
use crate::soak::guard::GuardStatus;
use crate::soak::watch::Failure;

/// How often a wait looks at what it could not be woken by.
pub(super) const FALLBACK: Duration = Duration::from_millis(100);

/// The signals that stop a soak (those `soak run` raises its flag on).
const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// What wakes a wait, and the guard's status as last read.
pub(super) struct Waits {
    /// The soak's working directory, where the guard writes its status file.
    written: Option<Inotify>,
    /// Readable once the guard has exited.
    guard_exit: Option<OwnedFd>,
    /// Readable once a stop signal came; the handlers, removed when done.
    signals: Option<(UnixStream, Vec<SigId>)>,
    /// The status as last read; `None` until it is read, or once its file was written since.
    status: Option<GuardStatus>,
    /// The guard's death, once seen.
    died: Option<Failure>,
}

impl Waits {
    /// The waits of the soak whose guard is `guard`, writing its status into `work_dir`.
    pub(super) fn new(work_dir: &Path, guard: &Guard) -> Self {
        let written = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .ok()
            .filter(|inotify| {
                let flags = AddWatchFlags::IN_MODIFY
                    | AddWatchFlags::IN_CLOSE_WRITE
                    | AddWatchFlags::IN_CREATE
                    | AddWatchFlags::IN_MOVED_TO;
                inotify.add_watch(work_dir, flags).is_ok()
            });
        let guard_exit = i32::try_from(guard.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            });
        Self {
            written,
            guard_exit,
            signals: signal_socket(),
            status: None,
            died: None,
        }
    }

    /// Whether every change is woken for: nothing is looked at on a clock.
    fn complete(&self) -> bool {
        self.written.is_some() && self.guard_exit.is_some() && self.signals.is_some()
    }

    /// The guard's status, read again only when its file was written since; and the failure
    /// when the guard died before the command was reported to exit.
    pub(super) fn status(&mut self, guard: &Guard) -> (GuardStatus, Option<Failure>) {
        cost::time(cost::Part::Guard, || {
            let [written, exited, signalled] = self.ready();
            self.take_news(written, signalled);
            let status = match &self.status {
                Some(status) => status.clone(),
                None => {
                    let status = guard.status();
                    if self.written.is_some() {
                        self.status = Some(status.clone());
                    }
                    status
                }
            };
            if self.died.is_none() && (self.guard_exit.is_none() || exited) {
                self.died = guard.died(&status);
            }
            (status, self.died.clone())
        })
    }

    /// Which of the status file's watch, the guard's pidfd and the signals' socket are readable
    /// now, asked in one `poll(2)`: a status look that finds nothing costs one system call.
    /// Where the poll fails, each is taken as readable (and read, as without it).
    fn ready(&self) -> [bool; 3] {
        let fds = self.fds();
        let mut polled: Vec<PollFd<'_>> = fds
            .iter()
            .flatten()
            .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
            .collect();
        let asked = poll(&mut polled, PollTimeout::ZERO).is_ok();
        let mut readable = polled.iter().map(|fd| {
            !asked
                || fd.revents().is_some_and(|events| {
                    events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
                })
        });
        fds.map(|fd| fd.is_some() && readable.next().unwrap_or(true))
    }

    /// What a wait sleeps on: the status file's watch, the guard's pidfd and the signals'
    /// socket, each where it could be had.
    fn fds(&self) -> [Option<BorrowedFd<'_>>; 3] {
        [
            self.written.as_ref().map(AsFd::as_fd),
            self.guard_exit.as_ref().map(AsFd::as_fd),
            self.signals.as_ref().map(|(socket, _)| socket.as_fd()),
        ]
    }

    /// Takes what woke or would wake a wait: the status file written (read it again) and the
    /// signals' bytes; `written` and `signalled`: whether their files are readable.
    fn take_news(&mut self, written: bool, signalled: bool) {
        match &self.written {
            Some(inotify) if written => {
                if drain(inotify.as_fd()) {
                    self.status = None;
                }
            }
            Some(_) => {}
            None => self.status = None,
        }
        if let Some((socket, _)) = self.signals.as_ref().filter(|_| signalled) {
            drain(socket.as_fd());
        }
    }

    /// Waits until the sample `due`, the command's exit, the guard's death or an interruption,
    /// whichever comes first.
    pub(super) fn until(&mut self, due: Instant, guard: &Guard, interrupted: &AtomicBool) {
        cost::time(cost::Part::Wait, || {
            loop {
                if interrupted.load(Ordering::Relaxed) {
                    return;
                }
                let (status, died) = self.status(guard);
                if status.exited() || died.is_some() {
                    return;
                }
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                // The verdict may wait this long after the command exits; sampling does not.
                let timeout = if self.complete() {
                    left
                } else {
                    left.min(FALLBACK)
                };
                self.sleep(timeout);
                cost::woke();
            }
        });
    }

    /// Sleeps until something to wake for happens, or `timeout`.
    fn sleep(&self, timeout: Duration) {
        let mut fds: Vec<PollFd<'_>> = self
            .fds()
            .into_iter()
            .flatten()
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        let limit = PollTimeout::try_from(timeout.max(Duration::from_millis(1)))
            .unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, limit) {
            Ok(_) | Err(Errno::EINTR) => {}
            // Nothing can be polled: sleep instead, as a wait without them.
            Err(_) => std::thread::sleep(FALLBACK.min(timeout)),
        }
    }
}

impl Drop for Waits {
    fn drop(&mut self) {
        if let Some((_, ids)) = self.signals.take() {
            for id in ids {
                signal_hook::low_level::unregister(id);
            }
        }
    }
}

/// Reads what `fd` (non-blocking) holds until it holds nothing: whether it held anything.
fn drain(fd: BorrowedFd<'_>) -> bool {
    let mut buffer = [0u8; 4096];
    let mut held = false;
    while matches!(nix::unistd::read(fd, &mut buffer), Ok(n) if n > 0) {
        held = true;
    }
    held
}

/// A socket each stop signal writes a byte to, beside the flag it raises.
fn signal_socket() -> Option<(UnixStream, Vec<SigId>)> {
    let (read, write) = UnixStream::pair().ok()?;
    read.set_nonblocking(true).ok()?;
    let mut ids = Vec::new();
    for signal in STOP_SIGNALS {
        let registered = write
            .try_clone()
            .ok()
            .and_then(|write| signal_hook::low_level::pipe::register(signal, write).ok());
        match registered {
            Some(id) => ids.push(id),
            None => {
                for id in ids {
                    signal_hook::low_level::unregister(id);
                }
                return None;
            }
        }
    }
    Some((read, ids))
}
