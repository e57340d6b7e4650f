//! The heartbeat file of a running soak, read as lines arrive.
//!
//! The file is created empty (0600, exclusively) in the soak's runtime directory
//! ([`crate::soak::runtime`]: node-local, often memory) and named to the command in
//! [`VARIABLE`]; where that directory cannot be used the soak runs without heartbeats (the
//! variable is not set) and says why. From the command's spawn a thread of its own
//! ([`reading`]) reads what is appended as it arrives — woken by inotify, a read at most every
//! [`reading::BATCH`] — so each beat is stamped with its arrival to within about 10 ms whatever
//! the sample interval, and fed to the run ([`HeartbeatRun`]), which decides when it happened
//! and what it was. Each sample reads once more what is there, so every beat written before a
//! sample is in it or in one before, then takes the beats since the last; the last read, after
//! the teardown, hands back the beats no sample holds, for a last sample of their own.
//!
//! A file rewritten in place (`open(path, "w")` at each beat) or truncated is read again from
//! its start ([`HeartbeatReader`]); another file put at its name (renamed over it, or removed
//! and created again) is opened and read from its start; both are counted as truncations.
//!
//! What was read is given back with `fallocate(FALLOC_FL_PUNCH_HOLE)` (the file keeps its size,
//! so the writers' appends and the reader's offset stay as they are; truncating instead would
//! lose the lines appended between the read and the truncation): a trainer that beats a
//! thousand times a second appends about 300 MB an hour, in memory on tmpfs. A file system that
//! cannot punch holes keeps the bytes until the soak ends and its directory is removed.

mod reading;

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, fallocate};
use nix::sys::inotify::Inotify;

use self::reading::Reading;
use crate::event::soak::{HeartbeatErrors, RunBeats, SampleBeats};
use crate::soak::heartbeat::limits::{StepJudgement, StepLimits};
use crate::soak::heartbeat::reader::HeartbeatReader;
use crate::soak::heartbeat::run::HeartbeatRun;
use crate::soak::runtime::{self, Unusable};

/// The variable that names the heartbeat file to the command.
pub(crate) const VARIABLE: &str = "UNILAB_HEARTBEAT";

/// The file's name in the soak's runtime directory.
const FILE_NAME: &str = "heartbeat";

/// Holes are punched in whole pages...
const PAGE: u64 = 4096;
/// ...at least this many bytes at once between samples (a system call a read would cost more
/// than the reading).
const GIVE_BACK_AT_ONCE: u64 = 64 * 1024;

/// A soak's heartbeat file and what its beats said so far.
pub(super) struct Heartbeats {
    /// The soak's runtime directory and the file's state; `None` without heartbeats.
    placed: Option<(PathBuf, Arc<Mutex<State>>)>,
    limits: StepLimits,
    reading: Option<Reading>,
}

/// The file, its reader and the run its beats make, shared with the reading thread.
struct State {
    path: PathBuf,
    /// Open for writing too: punching a hole needs it.
    file: File,
    /// The file's device and inode: another at its name is read from its start.
    identity: (u64, u64),
    reader: HeartbeatReader,
    /// From the command's spawn (Unix seconds).
    run: Option<(f64, HeartbeatRun)>,
    /// The file's bytes before this are given back.
    punched: u64,
    /// Whether the file could not be read at the last try.
    failing: bool,
    /// What the next sample says: why the file could not be read, once, until it can again.
    unsaid_error: Option<String>,
    /// What the next sample has said once on standard error (inotify fell back to polling).
    unsaid_news: Option<String>,
    /// How many times the file was polled for want of an inotify watch.
    fallbacks: u64,
    /// When the file was last read (Unix seconds): what a read finds arrived after it.
    last_read: f64,
}

/// What a read of the file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Nothing,
    /// Lines, every beat among them timed by its own `t`: its arrival only checks that `t`.
    Clocked,
    /// Lines, a beat among them timed by its arrival (or a file found rewritten).
    Stamped,
}

/// What one sample read of the beats.
#[derive(Debug, Default)]
pub(super) struct Polled {
    pub beats: Option<SampleBeats>,
    /// When the last beat that was progress (its `(step, phase)` not the beat's before it)
    /// arrived, Unix microseconds; `None` when none did.
    pub progress_at_us: Option<i64>,
    /// The step running now against its phase's limit, if it has one.
    pub step: Option<StepJudgement>,
    /// Why the file could not be read this time (once, until it can be again).
    pub error: Option<String>,
    /// What is said once, on standard error: a `t` on another clock, a fallback to polling.
    pub news: Vec<String>,
}

/// What the last read found.
#[derive(Debug, Default)]
pub(super) struct Finished {
    /// What the verdict records; `None` when the command never ran (or without heartbeats).
    pub run: Option<RunBeats>,
    /// The beats no sample holds, and when they were read (after the spawn): a last sample's.
    pub unsampled: Option<(SampleBeats, Duration)>,
}

impl Heartbeats {
    /// The heartbeat file of soak `soak_id`, created in its runtime directory (`runtime_dir`
    /// being `$XDG_RUNTIME_DIR`, `uid` the user's); why none could be, otherwise.
    pub(super) fn create(
        runtime_dir: Option<&Path>,
        uid: u32,
        soak_id: &str,
        limits: StepLimits,
    ) -> Result<Self, Unusable> {
        let dir = runtime::create(runtime_dir, uid, soak_id)?;
        let path = dir.join(FILE_NAME);
        let state = State::create(&path)
            .map_err(|e| Unusable(format!("cannot create `{}`: {e}", path.display())))?;
        Ok(Heartbeats {
            placed: Some((dir, Arc::new(Mutex::new(state)))),
            limits,
            reading: None,
        })
    }

    /// A soak without heartbeats.
    pub(super) fn none(limits: StepLimits) -> Self {
        Heartbeats {
            placed: None,
            limits,
            reading: None,
        }
    }

    /// The soak's runtime directory, where the file is; `None` without one.
    pub(super) fn runtime_dir(&self) -> Option<PathBuf> {
        self.placed.as_ref().map(|(dir, _)| dir.clone())
    }

    /// The file, named to the command; `None` without heartbeats.
    pub(super) fn path(&self) -> Option<PathBuf> {
        let (dir, _) = self.placed.as_ref()?;
        Some(dir.join(FILE_NAME))
    }

    /// The command was spawned at `spawned` (Unix seconds): its beats are read as they arrive
    /// from now on.
    pub(super) fn start(&mut self, spawned: f64) {
        let Some((dir, _)) = &self.placed else {
            return;
        };
        let inotify = reading::watch(dir);
        self.start_reading(spawned, inotify);
    }

    /// [`Self::start`], woken by `inotify`: the file is polled without it.
    fn start_reading(&mut self, spawned: f64, inotify: Result<Inotify, Errno>) {
        let Some((_, state)) = &self.placed else {
            return;
        };
        lock(state).run = Some((spawned, HeartbeatRun::new(spawned, self.limits.clone())));
        let (reading, watched) = Reading::start(Arc::clone(state), inotify);
        if let Err(why) = watched {
            let mut state = lock(state);
            state.fallbacks += 1;
            state.unsaid_news = Some(format!(
                "no inotify watch for the heartbeat file ({why}): it is polled every {} ms \
                 instead (raise `fs.inotify.max_user_watches` or `max_user_instances`)",
                reading::BATCH.as_millis()
            ));
        }
        self.reading = Some(reading);
    }

    /// Reads what is there now, at `now_us` (Unix microseconds): the beats since the last
    /// sample, and what they say.
    pub(super) fn poll(&mut self, now_us: i64) -> Polled {
        let Some((_, state)) = &self.placed else {
            return Polled::default();
        };
        let now = crate::time::unix_seconds(now_us);
        let mut state = lock(state);
        let _ = state.read(now, None, true);
        let error = state.unsaid_error.take();
        let mut news: Vec<String> = state.unsaid_news.take().into_iter().collect();
        let Some((_, run)) = state.run.as_mut() else {
            return Polled {
                error,
                news,
                ..Polled::default()
            };
        };
        news.extend(run.take_clock_news());
        Polled {
            beats: run.take_sample(),
            progress_at_us: run.take_progress_at().map(|at| (at * 1e6).round() as i64),
            step: run.judge(now),
            error,
            news,
        }
    }

    /// Every step timed so far, of any phase: how many, and their seconds together.
    pub(super) fn timed(&self) -> (u64, f64) {
        let Some((_, state)) = &self.placed else {
            return (0, 0.0);
        };
        lock(state)
            .run
            .as_ref()
            .map_or((0, 0.0), |(_, run)| run.timed())
    }

    /// What the verdict records of a command that ran for `run`, `stalled` when it failed on
    /// staleness, and the beats no sample holds. The file is read a last time first, once the
    /// reading thread has stopped: the beats appended since the last sample are the run's too,
    /// and a last line without its newline (a writer stopped halfway through it) is counted
    /// malformed.
    pub(super) fn finish(&mut self, run: Duration, stalled: bool) -> Finished {
        drop(self.reading.take());
        let Some((_, state)) = &self.placed else {
            return Finished::default();
        };
        let mut state = lock(state);
        let state = &mut *state;
        let Some((spawned, beats)) = state.run.as_mut() else {
            return Finished::default();
        };
        let now = now();
        // What cannot be read now is the file's errors' to say.
        let _ = state.reader.finish_each(now, |beat| beats.add(beat));
        let after_spawn = Duration::from_secs_f64((now - *spawned).max(0.0));
        let unsampled = beats.take_sample().map(|sample| (sample, after_spawn));
        let end = *spawned + run.as_secs_f64();
        let errors = HeartbeatErrors {
            polling_fallbacks: Some(state.fallbacks),
            ..state.reader.errors()
        };
        Finished {
            run: Some(beats.finish(end, stalled, errors)),
            unsampled,
        }
    }

    /// Removes the soak's runtime directory, the file with it: once the verdict is recorded.
    pub(super) fn remove(&mut self) {
        drop(self.reading.take());
        if let Some((dir, _)) = self.placed.take() {
            runtime::remove(&dir);
        }
    }
}

/// A soak that ends before its verdict (a start that could not be recorded) leaves nothing in
/// its runtime directory either.
impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The state, whoever held it last: a reading that panicked leaves it as it was.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens the heartbeat file at `path` to read it and punch holes in it, without waiting on it
/// (a FIFO put at its name), without following a link, and without its access time written at
/// every read (a journal write a read on ext4: a third of a read's cost) where the file is the
/// user's (`O_NOATIME` is refused otherwise).
fn open_to_read(path: &Path, create: bool) -> std::io::Result<File> {
    let open = |noatime: bool| {
        let mut options = File::options();
        let flags = nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC;
        let noatime = if noatime { nix::libc::O_NOATIME } else { 0 };
        options.read(true).write(true).custom_flags(flags | noatime);
        if create {
            options.create_new(true).mode(0o600);
        }
        options.open(path)
    };
    let file = match open(true) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EPERM) => open(false),
        opened => opened,
    }?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    Ok(file)
}

/// Now, Unix seconds.
fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl State {
    /// The file created at `path`, empty, readable and writable by this user alone.
    fn create(path: &Path) -> std::io::Result<Self> {
        let file = open_to_read(path, true)?;
        let meta = file.metadata()?;
        let reader = HeartbeatReader::new(file.try_clone()?);
        Ok(State {
            path: path.to_owned(),
            file,
            identity: (meta.dev(), meta.ino()),
            reader,
            run: None,
            punched: 0,
            failing: false,
            unsaid_error: None,
            unsaid_news: None,
            fallbacks: 0,
            last_read: 0.0,
        })
    }

    /// Reads what was appended since the last read, read at `now` (Unix seconds), once the
    /// command runs; first, with `look`, whether another file was put at the file's name.
    /// What it read.
    ///
    /// The beats of one read arrived after the last read, or after `woken` (when the thread
    /// was woken by the first of them), and by `now`: several are spread evenly over that
    /// time, not all given `now` — a loaded host that reads two beats at once would make a
    /// step of one of them and nothing of the other.
    fn read(&mut self, now: f64, woken: Option<f64>, look: bool) -> Read {
        if look {
            self.follow_the_name();
        }
        let Some((_, run)) = self.run.as_mut() else {
            return Read::Nothing;
        };
        let since = woken.unwrap_or(self.last_read).max(self.last_read);
        self.last_read = now;
        let (consumed, stamped) = (self.reader.consumed(), run.stamped());
        let polled = self
            .reader
            .poll_each_between(since, now, |beat| run.add(beat));
        let read = match polled {
            Ok(polled) => {
                self.failing = false;
                if !polled.truncated && self.reader.consumed() == consumed {
                    Read::Nothing
                } else if run.stamped() == stamped {
                    Read::Clocked
                } else {
                    Read::Stamped
                }
            }
            Err(e) => {
                if !self.failing {
                    self.failing = true;
                    self.unsaid_error = Some(format!("cannot read the heartbeat file: {e}"));
                }
                Read::Nothing
            }
        };
        self.give_back();
        read
    }

    /// Another file at the file's name (renamed over it, or removed and created again) is read
    /// from its start; a name that holds nothing, or no regular file, changes nothing.
    fn follow_the_name(&mut self) {
        let Ok(meta) = std::fs::symlink_metadata(&self.path) else {
            return;
        };
        if !meta.is_file() || (meta.dev(), meta.ino()) == self.identity {
            return;
        }
        let Ok(file) = open_to_read(&self.path, false) else {
            return;
        };
        let (Ok(reading), Ok(meta)) = (file.try_clone(), file.metadata()) else {
            return;
        };
        self.reader.replace(reading);
        self.file = file;
        self.identity = (meta.dev(), meta.ino());
        self.punched = 0;
    }

    /// Punches out the whole pages read, short of the bytes the reader reads again to tell a
    /// rewritten file, once there are [`GIVE_BACK_AT_ONCE`] of them.
    fn give_back(&mut self) {
        let consumed = self.reader.consumed();
        let keep = crate::soak::heartbeat::reader::TAIL as u64;
        let end = consumed.saturating_sub(keep) / PAGE * PAGE;
        if end < self.punched + GIVE_BACK_AT_ONCE {
            return;
        }
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        let (Ok(offset), Ok(len)) = (
            i64::try_from(self.punched),
            i64::try_from(end - self.punched),
        ) else {
            return;
        };
        if fallocate(self.file.as_fd(), flags, offset, len).is_ok() {
            self.punched = end;
        }
    }
}

#[cfg(test)]
mod tests;
