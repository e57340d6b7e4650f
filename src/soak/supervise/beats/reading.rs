//! The thread that reads the heartbeat file as lines arrive.
//!
//! It sleeps in `poll(2)` on an inotify descriptor watching the soak's runtime directory (the
//! file's writes, and another file put at its name) and on a pipe that stops it. Woken, it
//! takes every event waiting, reads the file once — every line there, each stamped with the
//! time of that read — and then sleeps [`BATCH`] before it waits again, so that a trainer that
//! beats a thousand times a second costs at most a hundred reads a second, each beat stamped
//! within [`BATCH`] of its write (and a trainer that beats ten times a second about twenty
//! wake-ups a second). Where inotify has nothing to give (the user's watches or instances ran
//! out) the file is read every [`BATCH`] instead: the same stamps, a hundred wake-ups a second
//! however often the trainer beats. Stopping it closes the pipe: it ends at once, whatever it
//! waits on.

use std::io::{PipeReader, PipeWriter};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::{State, lock};

/// The least time between two reads of the file, and how often it is read without inotify.
pub(crate) const BATCH: Duration = Duration::from_millis(10);

/// The events of the runtime directory that call for a read: the file written or cut, and
/// another file put at its name.
fn watched() -> AddWatchFlags {
    AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
}

/// The reading thread; dropped, it is stopped and joined.
pub(super) struct Reading {
    stop: Option<PipeWriter>,
    thread: Option<JoinHandle<()>>,
}

impl Reading {
    /// Starts reading the file of `state` as it is written, woken by `inotify` (see [`watch`]);
    /// and whether inotify watches it (else why not: the file is then polled).
    pub(super) fn start(
        state: Arc<Mutex<State>>,
        inotify: Result<Inotify, Errno>,
    ) -> (Self, Result<(), String>) {
        let (watched, inotify) = match inotify {
            Ok(inotify) => (Ok(()), Some(inotify)),
            Err(e) => (Err(e.desc().to_owned()), None),
        };
        let Ok((stop_read, stop_write)) = std::io::pipe() else {
            // No pipe to stop it by: no thread. Each sample still reads the file.
            let none = Reading {
                stop: None,
                thread: None,
            };
            return (none, Err("no pipe to stop a reading thread by".to_owned()));
        };
        let thread = std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || read_as_written(&state, inotify.as_ref(), &stop_read));
        let reading = Reading {
            stop: Some(stop_write),
            thread: thread.ok(),
        };
        (reading, watched)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An inotify descriptor watching runtime directory `dir`, where the file is.
pub(super) fn watch(dir: &Path) -> Result<Inotify, Errno> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    inotify.add_watch(dir, watched())?;
    Ok(inotify)
}

/// The thread's loop, until `stop` is closed.
fn read_as_written(state: &Mutex<State>, inotify: Option<&Inotify>, stop: &PipeReader) {
    loop {
        let woken = match inotify {
            Some(inotify) => wait(stop.as_fd(), Some(inotify.as_fd()), PollTimeout::NONE),
            None => wait(stop.as_fd(), None, batch_timeout()),
        };
        let renamed = match (woken, inotify) {
            (Woken::Stop, _) => return,
            (_, Some(inotify)) => take_events(inotify),
            // Polled: the name is looked at each time.
            (_, None) => true,
        };
        let now = crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond());
        lock(state).read(now, renamed);
        if inotify.is_some() && wait(stop.as_fd(), None, batch_timeout()) == Woken::Stop {
            return;
        }
    }
}

fn batch_timeout() -> PollTimeout {
    PollTimeout::try_from(BATCH).unwrap_or(PollTimeout::MAX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    Stop,
    /// Something to read, or the time ran out.
    Read,
}

/// Waits until `stop` is closed (or readable), `events` has events, or `timeout` passes.
fn wait(stop: BorrowedFd<'_>, events: Option<BorrowedFd<'_>>, timeout: PollTimeout) -> Woken {
    let mut fds = vec![PollFd::new(stop, PollFlags::POLLIN)];
    fds.extend(events.map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
    loop {
        match poll(&mut fds, timeout) {
            Err(Errno::EINTR) => continue,
            // A descriptor that cannot be polled: stop rather than spin.
            Err(_) => return Woken::Stop,
            Ok(_) => {
                let stopped = fds[0].revents().is_some_and(|r| !r.is_empty());
                return if stopped { Woken::Stop } else { Woken::Read };
            }
        }
    }
}

/// Takes every event waiting; whether one may have put another file at the name.
fn take_events(inotify: &Inotify) -> bool {
    let renamed =
        AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_Q_OVERFLOW;
    let mut any = false;
    while let Ok(events) = inotify.read_events() {
        any |= events.iter().any(|event| event.mask.intersects(renamed));
        if events.is_empty() {
            break;
        }
    }
    any
}
