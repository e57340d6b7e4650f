//! Progress, decided once: the design's "Progress in the record". This is the one place that
//! says what made a sample's progress and when progress last happened; the supervisor records
//! it with each sample (schema 12), `--stale-progress` runs from it, and every reader takes it
//! as recorded.
//!
//! - [`ProgressWatch`], the supervisor's side: a sample made progress when the progress
//!   directory's signature changed since the sample before (`files`), or when a beat arrived
//!   whose `(step, phase)` differs from the beat before it (`beat`; the heartbeat run counts
//!   those, a repeated `(step, phase)` is no progress); `beat` when both. When: for files, the
//!   newest modification time among the directory's files and directories, for beats, the
//!   arrival of the last beat that was progress (a beat's arrival is the poll that read it),
//!   the later of the two, each held within [the previous progress (or the spawn), the time
//!   the sample was taken]: a clock or a `touch` that puts a time outside never moves progress
//!   back, nor ahead of what was seen.
//! - [`ProgressReading`], the readers' side: a soak's samples in order, each sample's progress
//!   as the supervisor recorded it, or — for a sample recorded before schema 12, which carries
//!   none — decided here, once, by the rule the supervisor then followed.

use std::time::Duration;

use crate::event::soak::{ProgressNoted, ProgressSeen, ProgressSignature};

/// What one sample saw that may be progress, and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sighting {
    /// Time since the command was spawned, on the soak's own (monotonic) clock.
    pub elapsed: Duration,
    /// When the sample was taken, Unix microseconds.
    pub now_us: i64,
    /// The progress directory's signature.
    pub signature: ProgressSignature,
    /// When the last beat that was progress arrived since the previous sample, Unix
    /// microseconds; `None` when none did.
    pub beat_at_us: Option<i64>,
}

/// When progress last happened: on the wall clock, and after the spawn on the soak's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Last {
    at_us: i64,
    after_spawn: Duration,
}

/// The supervisor's progress: what it has seen of the directory and when progress last
/// happened.
#[derive(Debug, Clone)]
pub(crate) struct ProgressWatch {
    signature: ProgressSignature,
    first: Option<Duration>,
    last: Option<Last>,
    noted: ProgressNoted,
}

impl ProgressWatch {
    /// A watch over a directory whose signature before the command started is `baseline`: what
    /// it held then is no progress.
    pub(crate) fn new(baseline: ProgressSignature) -> Self {
        Self {
            signature: baseline,
            first: None,
            last: None,
            noted: ProgressNoted::default(),
        }
    }

    /// Takes in one sample's sighting; what the sample records of its progress.
    pub(crate) fn see(&mut self, seen: &Sighting) -> ProgressNoted {
        let spawned_us = seen.now_us.saturating_sub(micros(seen.elapsed));
        let floor = self.last.map_or(spawned_us, |last| last.at_us);
        // Never before the previous progress, never after the sample; `max` last: a wall
        // clock stepped back below the previous progress does not move it back.
        let within = |at_us: i64| at_us.min(seen.now_us).max(floor);
        let files = (seen.signature != self.signature).then(|| {
            let newest = seen.signature.newest_mtime_ns.map(|ns| ns.div_euclid(1000));
            within(newest.unwrap_or(seen.now_us))
        });
        self.signature = seen.signature;
        let beat = seen.beat_at_us.map(within);
        let progress_seen = match (files, beat) {
            (_, Some(_)) => Some(ProgressSeen::Beat),
            (Some(_), None) => Some(ProgressSeen::Files),
            (None, None) => None,
        };
        if let Some(at_us) = files.max(beat) {
            let before_now = Duration::from_micros(u64::try_from(seen.now_us - at_us).unwrap_or(0));
            let after_spawn = seen
                .elapsed
                .saturating_sub(before_now)
                .max(self.last.map_or(Duration::ZERO, |last| last.after_spawn));
            self.first.get_or_insert(after_spawn);
            self.last = Some(Last { at_us, after_spawn });
        }
        self.noted = ProgressNoted {
            progress_seen,
            last_progress_at_us: self.last.map(|last| last.at_us),
            last_progress_ms: self.last.map(|last| millis(last.after_spawn)),
        };
        self.noted
    }

    /// What the last sample recorded of its progress.
    pub(crate) fn noted(&self) -> ProgressNoted {
        self.noted
    }

    /// When progress first happened, after the spawn.
    pub(crate) fn first(&self) -> Option<Duration> {
        self.first
    }

    /// When progress last happened, after the spawn: what `--stale-progress` runs from.
    pub(crate) fn last(&self) -> Option<Duration> {
        self.last.map(|last| last.after_spawn)
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a reader has of one sample to take its progress from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleSeen<'a> {
    /// What the supervisor recorded of its progress; `None` before schema 12.
    pub noted: Option<&'a ProgressNoted>,
    /// The progress directory's files and bytes at it.
    pub files: u64,
    pub bytes: u64,
    /// How many beats arrived since the sample before it.
    pub beats: u32,
    pub elapsed_ms: u64,
    /// When it was recorded (Unix microseconds), where the reader knows.
    pub at_us: Option<i64>,
}

/// A soak's progress as a reader follows its samples in order.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ProgressReading {
    /// The directory's files and bytes at the sample before.
    before: Option<(u64, u64)>,
    /// The latest sample's progress, and whether its supervisor recorded it.
    latest: Option<(ProgressNoted, bool)>,
}

impl ProgressReading {
    /// Takes in the next sample; its progress.
    pub(crate) fn sample(&mut self, seen: SampleSeen<'_>) -> ProgressNoted {
        let directory = (seen.files, seen.bytes);
        let noted = match seen.noted {
            Some(noted) => *noted,
            None => self.upcast(directory, seen.beats, seen.elapsed_ms, seen.at_us),
        };
        self.before = Some(directory);
        self.latest = Some((noted, seen.noted.is_some()));
        noted
    }

    /// The progress a sample recorded before schema 12 stands for, by the rule its supervisor
    /// followed: any change of the directory's files or bytes since the sample before (the
    /// first compares with nothing: its supervisor compared it with the directory before the
    /// spawn, which no record holds), or any beat; at the sample's own time (`at_us` where the
    /// reader knows it, and its time after the spawn).
    fn upcast(
        &self,
        directory: (u64, u64),
        beats: u32,
        elapsed_ms: u64,
        at_us: Option<i64>,
    ) -> ProgressNoted {
        let moved = self.before.is_some_and(|before| before != directory);
        let progress_seen = match (beats > 0, moved) {
            (true, _) => Some(ProgressSeen::Beat),
            (false, true) => Some(ProgressSeen::Files),
            (false, false) => None,
        };
        if progress_seen.is_some() {
            return ProgressNoted {
                progress_seen,
                last_progress_at_us: at_us,
                last_progress_ms: Some(elapsed_ms),
            };
        }
        let before = self.latest.map(|(noted, _)| noted).unwrap_or_default();
        ProgressNoted {
            progress_seen: None,
            ..before
        }
    }

    /// The latest sample's progress; `None` before a sample.
    pub(crate) fn latest(&self) -> Option<ProgressNoted> {
        self.latest.map(|(noted, _)| noted)
    }

    /// Whether the latest sample's progress is as its supervisor recorded it (schema 12 on).
    pub(crate) fn recorded(&self) -> bool {
        self.latest.is_some_and(|(_, recorded)| recorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01, in Unix microseconds: the spawn of the soaks below.
    const SPAWN_US: i64 = 1_767_225_600_000_000;

    fn signature(files: u64, newest_s: f64) -> ProgressSignature {
        ProgressSignature {
            files,
            bytes: files * 10,
            newest_mtime_ns: Some(SPAWN_US * 1000 + (newest_s * 1e9) as i64),
        }
    }

    fn at(seconds: u64, signature: ProgressSignature, beat_s: Option<f64>) -> Sighting {
        Sighting {
            elapsed: Duration::from_secs(seconds),
            now_us: SPAWN_US + seconds as i64 * 1_000_000,
            signature,
            beat_at_us: beat_s.map(|s| SPAWN_US + (s * 1e6) as i64),
        }
    }

    fn us(seconds: f64) -> Option<i64> {
        Some(SPAWN_US + (seconds * 1e6) as i64)
    }

    #[test]
    fn progress_is_when_the_newest_file_changed_not_when_it_was_seen() {
        let mut watch = ProgressWatch::new(signature(0, -5.0));
        let noted = watch.see(&at(1, signature(0, -5.0), None));
        assert_eq!(noted, ProgressNoted::default(), "nothing changed");
        let noted = watch.see(&at(3, signature(1, 2.25), None));
        assert_eq!(noted.progress_seen, Some(ProgressSeen::Files));
        assert_eq!(noted.last_progress_at_us, us(2.25));
        assert_eq!(noted.last_progress_ms, Some(2_250));
        assert_eq!(watch.first(), Some(Duration::from_millis(2_250)));
        // Later samples that see nothing new keep it.
        let noted = watch.see(&at(4, signature(1, 2.25), None));
        assert_eq!(noted.progress_seen, None);
        assert_eq!(noted.last_progress_at_us, us(2.25));
        assert_eq!(watch.last(), Some(Duration::from_millis(2_250)));
    }

    #[test]
    fn a_time_outside_the_previous_progress_and_the_sample_is_held_within_them() {
        let mut watch = ProgressWatch::new(signature(0, -5.0));
        // A file stamped in the future (another host's clock): no later than the sample.
        let noted = watch.see(&at(2, signature(1, 60.0), None));
        assert_eq!(noted.last_progress_at_us, us(2.0));
        // A file stamped long ago (`cp -p`, a tar): no earlier than the previous progress.
        let noted = watch.see(&at(5, signature(2, -100.0), None));
        assert_eq!(noted.progress_seen, Some(ProgressSeen::Files));
        assert_eq!(noted.last_progress_at_us, us(2.0));
        // Before any progress, no earlier than the spawn.
        let mut watch = ProgressWatch::new(signature(0, -5.0));
        let noted = watch.see(&at(3, signature(1, -100.0), None));
        assert_eq!(
            (noted.last_progress_at_us, noted.last_progress_ms),
            (us(0.0), Some(0))
        );
    }

    #[test]
    fn a_beat_and_a_file_in_one_sample_is_a_beat_at_the_later_of_the_two() {
        let mut watch = ProgressWatch::new(signature(0, -5.0));
        let noted = watch.see(&at(2, signature(1, 1.5), Some(1.75)));
        assert_eq!(noted.progress_seen, Some(ProgressSeen::Beat));
        assert_eq!(noted.last_progress_at_us, us(1.75));
        let noted = watch.see(&at(3, signature(2, 2.5), Some(2.0)));
        assert_eq!(noted.last_progress_at_us, us(2.5));
        let noted = watch.see(&at(4, signature(2, 2.5), Some(4.0)));
        assert_eq!(
            (noted.progress_seen, noted.last_progress_ms),
            (Some(ProgressSeen::Beat), Some(4_000))
        );
    }

    /// A wall clock stepped back below the previous progress: the wall time stays at the
    /// previous progress, and the soak's own clock, which cannot tell when within the interval
    /// the change was, takes the sample's time.
    #[test]
    fn a_wall_clock_stepped_back_moves_progress_back_on_neither_clock() {
        let mut watch = ProgressWatch::new(signature(0, -5.0));
        watch.see(&at(4, signature(1, 4.0), None));
        // Sampled at 5 s after the spawn, but the wall clock now reads 3 s after it.
        let mut back = at(5, signature(2, 2.5), None);
        back.now_us = SPAWN_US + 3_000_000;
        let noted = watch.see(&back);
        assert_eq!(noted.last_progress_at_us, us(4.0));
        assert_eq!(noted.last_progress_ms, Some(5_000));
    }

    fn seen(noted: Option<&ProgressNoted>, files: u64, beats: u32, s: u64) -> SampleSeen<'_> {
        SampleSeen {
            noted,
            files,
            bytes: files * 10,
            beats,
            elapsed_ms: s * 1000,
            at_us: us(s as f64 + 0.5),
        }
    }

    #[test]
    fn an_old_sample_is_read_by_the_old_rule_at_its_own_time() {
        let mut reading = ProgressReading::default();
        assert_eq!(reading.latest(), None);
        // The first compares with nothing: the files it holds may have been there before.
        let noted = reading.sample(seen(None, 3, 0, 1));
        assert_eq!(noted, ProgressNoted::default());
        let noted = reading.sample(seen(None, 4, 0, 2));
        assert_eq!(
            noted,
            ProgressNoted {
                progress_seen: Some(ProgressSeen::Files),
                last_progress_at_us: us(2.5),
                last_progress_ms: Some(2_000),
            }
        );
        // Any beat was progress then, a repeated step too.
        let noted = reading.sample(seen(None, 4, 1, 3));
        assert_eq!(noted.progress_seen, Some(ProgressSeen::Beat));
        assert_eq!(noted.last_progress_ms, Some(3_000));
        let noted = reading.sample(seen(None, 4, 0, 4));
        assert_eq!(
            (noted.progress_seen, noted.last_progress_ms),
            (None, Some(3_000))
        );
        assert!(!reading.recorded());
    }

    #[test]
    fn a_recorded_sample_is_read_as_recorded() {
        let mut reading = ProgressReading::default();
        let recorded = ProgressNoted {
            progress_seen: None,
            last_progress_at_us: us(0.25),
            last_progress_ms: Some(250),
        };
        // Its directory and beats moved, but its supervisor said it was no progress.
        reading.sample(seen(None, 1, 0, 1));
        let noted = reading.sample(seen(Some(&recorded), 5, 3, 2));
        assert_eq!(noted, recorded);
        assert_eq!(reading.latest(), Some(recorded));
        assert!(reading.recorded());
    }
}
