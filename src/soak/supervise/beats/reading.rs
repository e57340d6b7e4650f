//! The thread that reads the heartbeat file as lines arrive.
//!
//! It sleeps in `poll(2)` on an inotify descriptor watching the soak's runtime directory (the
//! file's writes, and another file put at its name) and on a pipe that stops it. Woken, it
//! takes the events waiting, reads the file — every line there, each stamped with the time of
//! that read — and then sleeps a batch and reads again, for as long as each read finds lines;
//! only a read that finds none sends it back to wait. A batch is [`BATCH`] while beats are
//! timed by their arrival (no `t`): a trainer that beats a thousand times a second costs at
//! most a hundred reads and wake-ups a second, each beat stamped within [`BATCH`] of its write
//! (and one that beats ten times a second about thirty wake-ups a second). While every beat
//! read is timed by its own `t`, whose arrival only checks it to a second, a batch is
//! [`BATCH_CLOCKED`]: ten wake-ups a second, which cost more than the reading (13 µs of CPU a
//! wake-up on the benchmark's host against 0.4 µs a beat). Where inotify has nothing to give (the user's watches or instances ran
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

use super::{Read, State, lock};

/// The least time between two reads of the file while its beats are timed by their arrival,
/// and how often it is read without inotify: a beat's arrival is its time to within this.
pub(crate) const BATCH: Duration = Duration::from_millis(10);

/// The least time between two reads while every beat read is timed by its own `t`: its arrival
/// only checks that `t` (to a second), and a wake-up costs more than the reading.
pub(crate) const BATCH_CLOCKED: Duration = Duration::from_millis(100);

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

/// The thread's loop, until `stop` is closed: a read, a sleep of a batch, another read, and so
/// on while each finds lines; once one finds none, the events that came are taken, the file
/// read once more (a line written between that read and the taking would have no event left
/// to wake for), and only then a wait for the next event. While lines keep coming a batch
/// costs a sleep and a read, no inotify event taken (the kernel folds a file's repeated writes
/// into one event waiting).
fn read_as_written(state: &Mutex<State>, inotify: Option<&Inotify>, stop: &PipeReader) {
    let Some(inotify) = inotify else {
        // Polled: the name is looked at each time.
        loop {
            if wait(stop.as_fd(), None, timeout(BATCH)) == Woken::Stop {
                return;
            }
            let _ = lock(state).read(super::now(), None, true);
        }
    };
    let mut renamed = false;
    // When the wait for an event ended: what the next read finds came then or after.
    let mut woken = None;
    loop {
        let mut read = lock(state).read(super::now(), woken.take(), std::mem::take(&mut renamed));
        if read == Read::Nothing {
            renamed = take_events(inotify).unwrap_or(false);
            read = lock(state).read(super::now(), None, std::mem::take(&mut renamed));
        }
        let batch = match read {
            Read::Nothing => {
                match wait(stop.as_fd(), Some(inotify.as_fd()), PollTimeout::NONE) {
                    Woken::Stop => return,
                    Woken::Read => renamed = take_events(inotify).unwrap_or(false),
                }
                woken = Some(super::now());
                continue;
            }
            Read::Clocked => BATCH_CLOCKED,
            Read::Stamped => BATCH,
        };
        if wait(stop.as_fd(), None, timeout(batch)) == Woken::Stop {
            return;
        }
    }
}

fn timeout(batch: Duration) -> PollTimeout {
    PollTimeout::try_from(batch).unwrap_or(PollTimeout::MAX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    Stop,
    /// Something to read, or the time ran out.
    Read,
}

/// Waits until `stop` is closed (or readable), `events` has events, or `timeout` passes.
fn wait(stop: BorrowedFd<'_>, events: Option<BorrowedFd<'_>>, timeout: PollTimeout) -> Woken {
    let mut fds = [
        PollFd::new(stop, PollFlags::POLLIN),
        PollFd::new(events.unwrap_or(stop), PollFlags::POLLIN),
    ];
    let fds = &mut fds[..1 + usize::from(events.is_some())];
    loop {
        match poll(fds, timeout) {
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

/// Takes the events waiting (those past one read's buffer are taken at the next), without
/// waiting: whether one may have put another file at the name; `None` when none was waiting.
/// Read as bytes, not through `read_events`, which allocates for each event and its name.
fn take_events(inotify: &Inotify) -> Option<bool> {
    const HEADER: usize = std::mem::size_of::<nix::libc::inotify_event>();
    let renamed =
        AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_Q_OVERFLOW;
    let mut buffer = [0u8; 4096];
    let n = nix::unistd::read(inotify.as_fd(), &mut buffer).ok()?;
    let mut at = 0;
    let mut any = false;
    // Each event: `wd` (4 bytes), `mask` (4), `cookie` (4), `len` (4), then `len` bytes of name.
    while at + HEADER <= n {
        let word = |i: usize| {
            let bytes: [u8; 4] = buffer[at + 4 * i..at + 4 * i + 4]
                .try_into()
                .unwrap_or_default();
            u32::from_ne_bytes(bytes)
        };
        any |= AddWatchFlags::from_bits_truncate(word(1)).intersects(renamed);
        at += HEADER + word(3) as usize;
    }
    Some(any)
}
