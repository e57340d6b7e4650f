//! What the suspect rule needs of one rank's records, read as they go by in one pass that keeps
//! no sample ([`RankPace`]): the phase of its last beat (its step is the row's, read with its
//! steps), how often its progress moved (the
//! median interval between the times of progress its supervisor recorded, schema 12 on) and
//! when its last sample was recorded. Serialisable, so that a summary of the soak kept in the
//! log can hold it; its size does not grow with the samples (a histogram of the intervals on a
//! log scale, a few hundred buckets at most).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::soak::{ProgressNoted, SampleBeats};
use crate::time::unix_seconds;

/// One rank's pace as its samples go by: [`RankPace::sample`] each, then [`RankPace::done`].
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankPace {
    /// The phase of the last beat that arrived; `None` before one.
    last_phase: Option<String>,
    /// When progress last happened as the samples recorded it (Unix microseconds).
    last_progress_at_us: Option<i64>,
    /// The intervals between one recorded time of progress and the next.
    intervals: Intervals,
    /// When the last sample was recorded (Unix microseconds).
    last_sample_at_us: Option<i64>,
}

/// What a rank's pace says, read: the row's `last_phase` and what stalling is measured by.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Pace {
    pub last_phase: Option<String>,
    /// The median time between two moves of its progress, seconds; `None` before two.
    pub progress_interval_seconds: Option<f64>,
    /// Its soak's sample interval, seconds.
    pub sample_interval_seconds: Option<f64>,
    /// When its last sample was recorded, Unix seconds: how far a running rank is known.
    pub last_sample_at: Option<f64>,
}

impl RankPace {
    /// A sample recorded at `at_us`, with the beats that arrived since the one before and the
    /// progress its supervisor noted at it (schema 12 on; `None` before).
    pub(crate) fn sample(
        &mut self,
        at_us: i64,
        beats: Option<&SampleBeats>,
        noted: Option<&ProgressNoted>,
    ) {
        self.last_sample_at_us = Some(self.last_sample_at_us.map_or(at_us, |t| t.max(at_us)));
        if let Some(phase) = beats.filter(|b| b.beats > 0).and_then(|b| b.phase.as_ref()) {
            self.last_phase = Some(phase.clone());
        }
        if let Some(at) = noted.and_then(|n| n.last_progress_at_us) {
            match self.last_progress_at_us {
                Some(before) if at > before => self.intervals.add(at - before),
                Some(_) => return,
                None => {}
            }
            self.last_progress_at_us = Some(at);
        }
    }

    /// What was read, with the soak's sample interval (milliseconds, from its start).
    pub(crate) fn done(&self, sample_interval_ms: Option<u64>) -> Pace {
        Pace {
            last_phase: self.last_phase.clone(),
            progress_interval_seconds: self.intervals.median_us().map(|us| us / 1e6),
            sample_interval_seconds: sample_interval_ms.map(|ms| ms as f64 / 1000.0),
            last_sample_at: self.last_sample_at_us.map(unix_seconds),
        }
    }
}

/// The ratio of one bucket's bound to the one below: a median read within 2 %.
const GROWTH: f64 = 1.04;

/// Intervals in microseconds, counted in buckets on a log scale (bucket `k` holds the values
/// in `[GROWTH^k, GROWTH^(k+1))`): a median within [`GROWTH`] of the true one, in a size that
/// does not grow with the count (some 700 buckets from a microsecond to a year).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Intervals {
    buckets: BTreeMap<u16, u64>,
    count: u64,
}

impl Intervals {
    fn add(&mut self, us: i64) {
        if us <= 0 {
            return;
        }
        let bucket = ((us as f64).ln() / GROWTH.ln())
            .floor()
            .clamp(0.0, f64::from(u16::MAX));
        let held = self.buckets.entry(bucket as u16).or_default();
        *held = held.saturating_add(1);
        self.count = self.count.saturating_add(1);
    }

    /// The median (nearest rank), read at its bucket's middle on the log scale.
    fn median_us(&self) -> Option<f64> {
        let wanted = self.count.div_ceil(2).max(1);
        let mut seen = 0_u64;
        for (&bucket, &n) in &self.buckets {
            seen = seen.saturating_add(n);
            if seen >= wanted {
                return Some(GROWTH.powf(f64::from(bucket) + 0.5));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noted(at_us: i64) -> ProgressNoted {
        ProgressNoted {
            progress_seen: None,
            last_progress_at_us: Some(at_us),
            last_progress_ms: None,
        }
    }

    fn beats(step: u64, phase: &str) -> SampleBeats {
        SampleBeats {
            beats: 2,
            step: Some(step),
            phase: Some(phase.into()),
            ..SampleBeats::default()
        }
    }

    /// Progress every second for a minute, then a stall: the median interval is a second (the
    /// stall is one interval among sixty); the last beat's phase is kept across
    /// samples without beats; a time noted again, or earlier, is no interval.
    #[test]
    fn the_median_interval_and_the_last_beat() {
        let mut pace = RankPace::default();
        let start = 1_796_479_200_000_000_i64;
        for i in 0..60 {
            let at = start + i * 1_000_000;
            pace.sample(at + 10, Some(&beats(i as u64, "train")), Some(&noted(at)));
        }
        let stalled = start + 600_000_000;
        pace.sample(stalled, Some(&beats(60, "data")), Some(&noted(stalled)));
        pace.sample(stalled + 5, None, Some(&noted(stalled)));
        pace.sample(
            stalled + 6,
            Some(&SampleBeats::default()),
            Some(&noted(stalled - 1)),
        );
        let read = pace.done(Some(500));
        let median = read.progress_interval_seconds.unwrap();
        assert!((median - 1.0).abs() <= 0.02, "{median}");
        assert_eq!(read.last_phase.as_deref(), Some("data"));
        assert_eq!(read.sample_interval_seconds, Some(0.5));
        assert_eq!(read.last_sample_at, Some(unix_seconds(stalled + 6)));
        let back: RankPace = serde_json::from_str(&serde_json::to_string(&pace).unwrap()).unwrap();
        assert_eq!(back, pace, "kept as it was");
    }

    #[test]
    fn nothing_read_is_nothing_known() {
        let read = RankPace::default().done(None);
        assert_eq!(read, Pace::default());
        let mut once = RankPace::default();
        once.sample(5, None, Some(&noted(3)));
        assert_eq!(once.done(None).progress_interval_seconds, None);
    }
}
