//! The heartbeat file of a running soak: created empty in the soak's private working directory
//! (0600, exclusively), named to the command in [`VARIABLE`], read at every sample by
//! [`HeartbeatReader`] and judged by [`HeartbeatRun`].
//!
//! The working directory is under the user's runtime directory, often memory (tmpfs): a trainer
//! that beats a thousand times a second appends about 300 MB an hour. What was read is given
//! back with `fallocate(FALLOC_FL_PUNCH_HOLE)` (the file keeps its size, so the writers' appends
//! and the reader's offset stay as they are; truncating instead would lose the lines appended
//! between the read and the truncation). A file system that cannot punch holes keeps the bytes
//! until the soak ends and its directory is removed.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use nix::fcntl::{FallocateFlags, fallocate};

use crate::event::soak::{RunBeats, SampleBeats};
use crate::soak::heartbeat::limits::{StepJudgement, StepLimits};
use crate::soak::heartbeat::reader::HeartbeatReader;
use crate::soak::heartbeat::run::HeartbeatRun;

/// The variable that names the heartbeat file to the command.
pub(crate) const VARIABLE: &str = "UNILAB_HEARTBEAT";

/// Holes are punched in whole pages.
const PAGE: u64 = 4096;

/// A soak's heartbeat file and what its beats said so far.
pub(super) struct Heartbeats {
    /// Open for writing too: punching a hole needs it.
    file: File,
    reader: HeartbeatReader,
    limits: StepLimits,
    /// Created at the first poll, when the command's spawn is known: with it, Unix seconds.
    run: Option<(f64, HeartbeatRun)>,
    /// The file's bytes before this are given back.
    punched: u64,
    /// Why the file could not be read, once: said in that sample's errors.
    failing: bool,
}

/// What one sample read of the beats.
pub(super) struct Polled {
    pub beats: Option<SampleBeats>,
    /// When the last beat that was progress (its `(step, phase)` not the beat's before it)
    /// arrived, Unix microseconds; `None` when none did. A beat arrives when the poll reads it.
    pub progress_at_us: Option<i64>,
    /// The step running now against its phase's limit, if it has one.
    pub step: Option<StepJudgement>,
    /// Why the file could not be read this time (once, until it can be again).
    pub error: Option<String>,
}

impl Heartbeats {
    /// Creates the file at `path`, empty, readable and writable by this user alone.
    pub(super) fn create(path: &Path, limits: StepLimits) -> std::io::Result<Self> {
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let reader = HeartbeatReader::new(file.try_clone()?);
        Ok(Heartbeats {
            file,
            reader,
            limits,
            run: None,
            punched: 0,
            failing: false,
        })
    }

    /// Reads what was appended since the last poll, at `now_us` (Unix microseconds), `elapsed`
    /// seconds after the command's spawn.
    pub(super) fn poll(&mut self, now_us: i64, elapsed: f64) -> Polled {
        let now = crate::time::unix_seconds(now_us);
        let limits = &self.limits;
        let (_, run) = self.run.get_or_insert_with(|| {
            let spawned = now - elapsed;
            (spawned, HeartbeatRun::new(spawned, limits.clone()))
        });
        let mut error = None;
        match self.reader.poll_each(now, |beat| run.add(beat)) {
            Ok(_) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                error = Some(format!("cannot read the heartbeat file: {e}"));
            }
            Err(_) => {}
        }
        let beats = run.take_sample();
        let progress_at_us = (run.take_progressed() > 0).then_some(now_us);
        let step = run.judge(now);
        self.give_back();
        Polled {
            beats,
            progress_at_us,
            step,
            error,
        }
    }

    /// Every step timed so far, of any phase: how many, and their seconds together.
    pub(super) fn timed(&self) -> (u64, f64) {
        self.run.as_ref().map_or((0, 0.0), |(_, run)| run.timed())
    }

    /// What the verdict records of a command that ran for `run`, `stalled` when it failed on
    /// staleness; `None` when it was never sampled. The file is read a last time first: the
    /// beats appended since the last sample are the run's too, and a last line without its
    /// newline (a writer stopped halfway through it) is counted malformed.
    pub(super) fn finish(&mut self, run: Duration, stalled: bool) -> Option<RunBeats> {
        let (spawned, beats) = self.run.as_mut()?;
        let end = *spawned + run.as_secs_f64();
        // What cannot be read now is the file's errors' to say.
        let _ = self.reader.finish_each(end, |beat| beats.add(beat));
        Some(beats.finish(end, stalled, self.reader.errors()))
    }

    /// Punches out the whole pages read, short of the last byte read (which the reader reads
    /// again to tell a rewritten file).
    fn give_back(&mut self) {
        let end = self.reader.consumed().saturating_sub(1) / PAGE * PAGE;
        if end <= self.punched {
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
mod tests {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn the_file_is_the_users_alone_and_what_was_read_is_given_back() {
        let dir = crate::testing::files::private_tempdir();
        let path = dir.path().join("heartbeat");
        let mut beats = Heartbeats::create(&path, StepLimits::default()).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(
            Heartbeats::create(&path, StepLimits::default()).is_err(),
            "never reused"
        );
        let mut writer = File::options().append(true).open(&path).unwrap();
        for step in 0..2_000 {
            writeln!(writer, r#"{{"step": {step}, "loss": 0.5}}"#).unwrap();
        }
        let polled = beats.poll(2_000_000_000_000_000, 1.0);
        assert_eq!(polled.beats.unwrap().beats, 2_000);
        assert_eq!(polled.progress_at_us, Some(2_000_000_000_000_000));
        assert!(polled.error.is_none());
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.len() > 40_000, "the size stays: {}", meta.len());
        // Where the file system punches holes (tmpfs, ext4, xfs), the pages read are gone.
        if beats.punched > 0 {
            assert!(meta.blocks() * 512 < meta.len(), "{} blocks", meta.blocks());
        }
        // And beats appended after the holes are read as before.
        writeln!(writer, r#"{{"step": 2000, "phase": "eval"}}"#).unwrap();
        let polled = beats.poll(2_000_000_001_000_000, 2.0);
        let sample = polled.beats.unwrap();
        assert_eq!((sample.beats, sample.phase.as_deref()), (1, Some("eval")));
        // The last read, at the end: a beat since the last sample is the run's, and a line
        // left without its newline is malformed.
        write!(writer, "{{\"step\": 2001}}\n{{\"step\": 2002, \"lo").unwrap();
        let found = beats.finish(Duration::from_secs(3), false).unwrap();
        assert_eq!(found.steps["train"].count, 2_001);
        assert_eq!(found.errors.malformed, 1);
    }
}
