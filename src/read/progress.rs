//! A soak's progress as its rows go by, for its record ([`super::record::SoakRecord`]): each
//! row's progress as its supervisor recorded it with the sample (schema 12 on), or, for a row
//! of a sample recorded before, as [`ProgressReading`] reads it by the rule that supervisor
//! followed. Nothing here decides progress: the rule, old and new, is
//! `soak::watch::progress`'s alone, and every view takes what the record carries.

use super::rows::SampleRow;
use crate::event::soak::ProgressNoted;
use crate::soak::watch::progress::{ProgressReading, SampleSeen};

/// The progress of a soak's rows, as far as they have gone by.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowsProgress(ProgressReading);

impl RowsProgress {
    /// Takes in the soak's next row.
    pub(crate) fn row(&mut self, row: &SampleRow<'_>) {
        self.0.sample(SampleSeen {
            noted: row.progress.as_ref(),
            files: row.progress_files,
            bytes: row.progress_bytes,
            beats: match &row.heartbeat {
                Some(Some(beats)) => beats.beats,
                _ => 0,
            },
            elapsed_ms: (row.elapsed_seconds * 1000.0).round() as u64,
            // A row does not say when it was recorded: a sample before schema 12 says when
            // progress last happened after the spawn only.
            at_us: None,
        });
    }

    /// The soak started again under the same id: the rows so far are not part of it.
    pub(crate) fn restart(&mut self) {
        *self = Self::default();
    }

    /// The latest row's progress; `None` before a row.
    pub(crate) fn latest(&self) -> Option<ProgressNoted> {
        self.0.latest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::ProgressSeen;

    fn row(elapsed_seconds: f64, progress_files: u64) -> SampleRow<'static> {
        SampleRow::of_test(elapsed_seconds, 100, progress_files)
    }

    /// When progress last happened, seconds after the spawn.
    fn changed_at(progress: &RowsProgress) -> Option<f64> {
        let ms = progress.latest()?.last_progress_ms?;
        Some(ms as f64 / 1000.0)
    }

    /// The rows of a soak recorded before schema 12 read alike whether it renders today's
    /// artifact or schema 1's (whose rows say nothing of the exit, and hold one GPU figure):
    /// progress is the directory's last change among them; a restart forgets the rows before
    /// it.
    #[test]
    fn an_old_rows_progress_reads_alike_whatever_the_schema() {
        let rows = [
            row(1.0, 0),
            row(2.0, 1),
            row(3.0, 1),
            row(4.0, 2),
            row(5.0, 2),
        ];
        let first_schema: Vec<SampleRow> = rows
            .iter()
            .map(|r| SampleRow {
                after_exit: None,
                host_gpu_memory_used_mib: Some(0),
                gpu_utilization_percent: Some(0),
                ..r.clone()
            })
            .collect();
        let (mut today, mut first) = (RowsProgress::default(), RowsProgress::default());
        for (row, old) in rows.iter().zip(&first_schema) {
            today.row(row);
            first.row(old);
        }
        assert_eq!(today.latest(), first.latest());
        assert_eq!(changed_at(&today), Some(4.0));
        assert_eq!(today.latest().unwrap().last_progress_at_us, None, "no time");

        today.restart();
        assert_eq!(today.latest(), None);
        today.row(&rows[4]);
        assert_eq!(changed_at(&today), None, "one row: no change seen");
    }

    /// A trainer that only beats (its directory never changes) makes progress at every sample
    /// with beats, as the supervisor judged it before schema 12: `soak show` of the running
    /// soak said "no change seen yet".
    #[test]
    fn a_beat_is_progress_though_the_directory_does_not_change() {
        let numbers = std::collections::BTreeMap::new();
        let beats = |n: u32| crate::read::beats::BeatsRow {
            beats: n,
            numbers: &numbers,
            phase: Some("train"),
            step: Some(u64::from(n)),
            step_seconds_max: None,
            step_seconds_median: None,
            step_seconds_min: None,
        };
        let beaten = |elapsed: f64, n: u32| SampleRow {
            heartbeat: Some(Some(beats(n))),
            ..row(elapsed, 0)
        };
        let mut progress = RowsProgress::default();
        for r in [beaten(1.0, 3), beaten(2.0, 5), beaten(3.0, 0), row(4.0, 0)] {
            progress.row(&r);
        }
        assert_eq!(changed_at(&progress), Some(2.0));
    }

    /// A row that carries its supervisor's progress (schema 12 on) is taken as recorded, not
    /// read again by the old rule: a directory that changed is no progress where the supervisor
    /// said none (a repeated beat), and the time is the recorded one.
    #[test]
    fn a_rows_recorded_progress_is_taken_as_recorded() {
        let noted = ProgressNoted {
            progress_seen: None,
            last_progress_at_us: Some(1_764_676_800_250_000),
            last_progress_ms: Some(1_250),
        };
        let mut progress = RowsProgress::default();
        progress.row(&row(1.0, 1));
        progress.row(&SampleRow {
            progress: Some(noted),
            ..row(2.0, 2)
        });
        assert_eq!(progress.latest(), Some(noted));
        progress.row(&row(3.0, 3));
        let old = progress.latest().unwrap();
        assert_eq!(
            (old.progress_seen, old.last_progress_ms),
            (Some(ProgressSeen::Files), Some(3_000))
        );
    }
}
