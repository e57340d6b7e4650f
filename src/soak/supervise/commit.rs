//! The samples of a soak on their way to the log: committed together when they come faster
//! than a second, and held in memory, within a bound, while the log's disk is full.
//!
//! A full disk never fails the soak: its samples wait (the oldest dropped past
//! [`MAX_HELD_BYTES`], the first recorded afterwards saying how many) and are tried again every
//! [`FULL_RETRY`]; what is still held when sampling ends goes in with the verdict. Any other
//! failure to record a sample fails the soak (`monitor_error`).

use std::time::{Duration, Instant};

use crate::event::soak::{FailureKind, Measures, ProgressNoted, Sample};
use crate::event::{Event, Subject};
use crate::log::{EventLog, LogError};
use crate::soak::console::Console;
use crate::soak::cost::{self, Part};
use crate::soak::watch::Failure;

/// How often samples taken faster than this are committed, together.
const GROUP_COMMIT: Duration = Duration::from_secs(1);

/// The samples of a soak on their way to the log: each committed at once when the interval is
/// a second or more; below that, gathered and committed together at most once a second, so a
/// 50 ms interval costs two syncs a second, not forty. A crash loses at most the samples of the
/// last second; lifecycle events never wait here.
pub(super) struct GroupCommit<'a> {
    log: &'a EventLog,
    console: &'a Console,
    subject: Subject,
    pending: Vec<(Subject, Event)>,
    every: Duration,
    last: Instant,
    /// While the log's disk is full: the samples dropped, oldest first, to keep what is held
    /// within [`MAX_HELD_BYTES`].
    full: Option<Full>,
}

/// What a full disk has cost so far.
#[derive(Debug, Default)]
struct Full {
    dropped: u64,
}

/// How often a soak tries its log again while its disk is full.
const FULL_RETRY: Duration = Duration::from_secs(5);

/// How much the samples a full disk holds back may take in memory (estimated): past it the
/// oldest are dropped, and the first sample recorded afterwards says how many.
const MAX_HELD_BYTES: usize = 16 << 20;

/// About what a sample takes in memory: its processes and GPUs.
fn held_size(event: &Event) -> usize {
    match event {
        Event::SoakSampled { sample, .. } => {
            512 + 168 * sample.processes.len()
                + sample.gpus.as_ref().map_or(0, |gpus| 128 * gpus.len())
                + sample.errors.iter().map(String::len).sum::<usize>()
        }
        _ => 256,
    }
}

impl<'a> GroupCommit<'a> {
    pub(super) fn new(
        log: &'a EventLog,
        console: &'a Console,
        subject: Subject,
        interval: Duration,
    ) -> Self {
        Self {
            log,
            console,
            subject,
            pending: Vec::new(),
            every: if interval >= GROUP_COMMIT {
                Duration::ZERO
            } else {
                GROUP_COMMIT
            },
            last: Instant::now(),
            full: None,
        }
    }

    /// Records `sample`, `measures` and the progress the watch decided at it (`progress`).
    pub(super) fn push(
        &mut self,
        sample: Sample,
        measures: Measures,
        progress: ProgressNoted,
    ) -> Result<(), Failure> {
        cost::time(Part::Commit, || {
            let sampled = Event::sampled(sample, measures, Some(progress));
            self.pending.push((self.subject.clone(), sampled));
            if self.last.elapsed() >= self.every {
                self.commit()?;
            }
            Ok(())
        })
    }

    /// Commits what is pending. A full disk does not fail the soak: the samples are held (the
    /// oldest dropped past [`MAX_HELD_BYTES`]) and tried again at the next commit.
    pub(super) fn commit(&mut self) -> Result<(), Failure> {
        if self.pending.is_empty() {
            self.last = Instant::now();
            return Ok(());
        }
        // While the disk is full each try opens the log again (a repair, which takes a while
        // on a long log): tried every few seconds, not every sample.
        if self.full.is_some() && self.last.elapsed() < FULL_RETRY {
            self.trim_held();
            return Ok(());
        }
        self.last = Instant::now();
        match self.log.append_all(self.noted()) {
            Ok(_) => {
                self.pending.clear();
                if self.full.take().is_some() {
                    self.console
                        .warn("the event log has space again: the samples held back are recorded");
                }
                Ok(())
            }
            Err(e @ LogError::NoSpace { .. }) => {
                if self.full.is_none() {
                    self.console.warn(&format!(
                        "{e}: the soak goes on; its samples are held in memory (at most {} MiB) until there is space",
                        MAX_HELD_BYTES >> 20
                    ));
                }
                self.full.get_or_insert_with(Full::default);
                self.trim_held();
                Ok(())
            }
            Err(e) => {
                self.pending.clear();
                Err(Failure::new(
                    FailureKind::MonitorError,
                    format!("cannot record a sample: {e}"),
                ))
            }
        }
    }

    /// Keeps what a full disk holds back within [`MAX_HELD_BYTES`], dropping the oldest.
    fn trim_held(&mut self) {
        let Some(full) = &mut self.full else {
            return;
        };
        let mut size: usize = self.pending.iter().map(|(_, e)| held_size(e)).sum();
        let mut drop_first = 0;
        while size > MAX_HELD_BYTES && drop_first + 1 < self.pending.len() {
            size -= held_size(&self.pending[drop_first].1);
            drop_first += 1;
        }
        self.pending.drain(..drop_first);
        full.dropped += drop_first as u64;
    }

    /// The samples pending, the first saying how many a full disk made drop before it: what a
    /// commit records (the note goes in only with a commit that succeeds).
    fn noted(&self) -> impl Iterator<Item = (Subject, Event)> + '_ {
        let mut note = self.full.as_ref().filter(|f| f.dropped > 0).map(|full| {
            format!(
                "{} taken while the disk holding the event log was full could not be kept",
                crate::text::count(full.dropped, "sample")
            )
        });
        self.pending
            .iter()
            .cloned()
            .map(move |(subject, mut event)| {
                if let (Some(text), Event::SoakSampled { sample, .. }) = (note.take(), &mut event) {
                    sample.errors.push(text);
                }
                (subject, event)
            })
    }

    /// What could not be recorded yet (a full disk), with the note of what was dropped.
    pub(super) fn held(&mut self) -> Vec<(Subject, Event)> {
        let held = self.noted().collect();
        self.pending.clear();
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::ProgressSignature;

    fn sample(index: u64, processes: usize) -> Sample {
        Sample {
            index,
            elapsed_ms: index * 50,
            after_exit: false,
            processes: crate::event::soak::a_tree(processes),
            reaped_cpu_ticks: 0,
            gpus: None,
            progress: ProgressSignature::default(),
            sampler_cost_us: 0,
            errors: vec!["x".into()],
        }
    }

    fn private_log() -> (tempfile::TempDir, EventLog) {
        let dir = crate::testing::files::private_tempdir();
        let scope = crate::event::Scope {
            uid: nix::unistd::getuid().as_raw(),
            host: "node".into(),
        };
        let log = EventLog::open(
            &dir.path().join("events.redb"),
            scope,
            &[&crate::projection::Soaks],
        )
        .unwrap();
        (dir, log)
    }

    fn recorded_samples(log: &EventLog) -> usize {
        let mut n = 0;
        log.snapshot()
            .unwrap()
            .scan(1, |record| {
                n += usize::from(matches!(record.envelope.event, Event::SoakSampled { .. }));
                Ok::<bool, LogError>(true)
            })
            .unwrap();
        n
    }

    #[test]
    fn samples_faster_than_a_second_are_committed_together() {
        let (_dir, log) = private_log();
        let console = Console::new(false, false, false);
        let subject = Subject::Soak("s".into());
        let mut samples = GroupCommit::new(&log, &console, subject, Duration::from_millis(50));
        for index in 0..3 {
            samples
                .push(
                    sample(index, 1),
                    Measures::default(),
                    ProgressNoted::default(),
                )
                .unwrap();
        }
        assert_eq!(recorded_samples(&log), 0, "held for the group's commit");
        samples.commit().unwrap();
        assert_eq!(recorded_samples(&log), 3);
    }

    #[test]
    fn samples_a_full_disk_holds_back_stay_within_their_bound_and_say_what_was_dropped() {
        let (_dir, log) = private_log();
        let console = Console::new(false, false, false);
        let subject = Subject::Soak("s".into());
        let mut samples = GroupCommit::new(&log, &console, subject, Duration::from_secs(1));
        // As after a commit that found the disk full: the next tries wait, and what waits is bounded.
        samples.full = Some(Full::default());
        samples.last = Instant::now();
        for index in 0..40 {
            samples
                .push(
                    sample(index, 4_000),
                    Measures::default(),
                    ProgressNoted::default(),
                )
                .unwrap();
        }
        let held: usize = samples.pending.iter().map(|(_, e)| held_size(e)).sum();
        assert!(held <= MAX_HELD_BYTES, "{held}");
        let dropped = samples.full.as_ref().unwrap().dropped;
        assert_eq!(dropped as usize + samples.pending.len(), 40);
        assert!(dropped > 0);
        let kept = samples.held();
        let Some((_, Event::SoakSampled { sample: first, .. })) = kept.first() else {
            panic!("nothing held");
        };
        assert_eq!(first.index, dropped, "the oldest were dropped");
        assert!(
            first
                .errors
                .last()
                .unwrap()
                .starts_with(&format!("{dropped} samples taken while the disk")),
            "{:?}",
            first.errors.last()
        );
        assert!(
            matches!(kept.last(), Some((_, Event::SoakSampled { sample, .. })) if sample.index == 39)
        );
        assert_eq!(
            recorded_samples(&log),
            0,
            "nothing was tried before the retry is due"
        );
    }
}
