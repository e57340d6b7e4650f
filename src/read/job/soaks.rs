//! The soaks of jobs in one host's log, each read as far as asked ([`Reading`]): its summary,
//! its row for `job show` (read in one pass over its records that keeps no sample), its series
//! for `job report`. One row a soak of a host ([`one_a_host`]) when the logs of every host are
//! read together (the command layer's loop over them).

use crate::event::soak::{Measures, ProgressNoted, Sample};
use crate::event::{Event, Subject};
use crate::log::{LogError, Snapshot};
use crate::projection::{SoakSummary, Soaks};
use crate::read::fold::{Fold, Folded, walk};
use crate::read::job::series::RankSeries;
use crate::read::job::straggler::reading::RankReading;
use crate::read::job::suspect::RankPace;
use crate::read::job::{RankCaptures, RankRow};
use crate::soak::launch::{JOB_KEY, NODE_KEY, RANK_KEY};
use crate::soak::watch::progress::{ProgressReading, SampleSeen};
use crate::time::unix_seconds;

/// One soak of a job, on its host.
pub(crate) struct JobSoak {
    pub job: String,
    /// The host the log it was found in is scoped to.
    pub host: String,
    /// Whether that log lies in its host's own directory, not a copy under another name.
    pub at_home: bool,
    pub rank: Option<u32>,
    /// The rank as recorded, whether or not it is a number (`--meta rank=...`).
    pub rank_text: Option<String>,
    pub summary: SoakSummary,
    /// How long its command ran (see [`crate::soak::abandon::ran_seconds`]).
    pub ran_seconds: Option<f64>,
    /// What `job show` reads of its records, when asked for.
    pub row: Option<RankRow>,
    /// Its progress and memory over time, bounded, when asked for (`job report`).
    pub series: Option<RankSeries>,
}

/// How much of each soak of a job is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Its summary alone (`job list`).
    Summaries,
    /// Its records too, for its row, keeping no sample (`job show`).
    Rows,
    /// Its row and its series over time (`job report`).
    RowsAndSeries,
}

/// The soaks whose job `wanted` takes in the log of one host (`snapshot`, found in the
/// directory `directory`), each read as far as `reading` says (its samples, captures and
/// verdict for its row; its series). A soak's host is the one its log is scoped to: a log
/// copied aside shows its soaks under their own host.
pub(crate) fn in_host_log(
    directory: &str,
    snapshot: &Snapshot,
    wanted: &dyn Fn(&str) -> bool,
    reading: Reading,
) -> Result<Vec<JobSoak>, LogError> {
    let host = match snapshot.meta()? {
        Some((_, scope)) => scope.host,
        None => directory.to_owned(),
    };
    let mut found = Vec::new();
    for summary in Soaks::rows(snapshot)? {
        let metadata = match first_event(snapshot, &summary)? {
            Some(Event::SoakStarted { start, .. }) => start.metadata,
            _ => continue,
        };
        let Some(job) = metadata.get(JOB_KEY).filter(|job| wanted(job)) else {
            continue;
        };
        let summary = crate::soak::ended::as_shown(snapshot, summary)?;
        let rank = metadata
            .get(RANK_KEY)
            .and_then(|r| crate::soak::launch::rank_number(r));
        let mut series = (reading == Reading::RowsAndSeries).then(RankSeries::default);
        let row = if reading == Reading::Summaries {
            None
        } else {
            let mut row = read_rank(snapshot, &summary, &host, series.as_mut())?;
            row.rank = rank;
            row.node = metadata.get(NODE_KEY).cloned();
            Some(row)
        };
        found.push(JobSoak {
            job: job.clone(),
            at_home: host == directory,
            host: host.clone(),
            rank,
            rank_text: metadata.get(RANK_KEY).cloned(),
            ran_seconds: crate::soak::abandon::ran_seconds(snapshot, &summary)?,
            summary,
            row,
            series,
        });
    }
    Ok(found)
}

/// One row a soak of a host, in the order they started: its original's, else the copy that
/// got furthest.
pub(crate) fn one_a_host(mut soaks: Vec<JobSoak>) -> Vec<JobSoak> {
    soaks.sort_by(|a, b| {
        let key = |s: &JobSoak| {
            (
                s.host.clone(),
                s.summary.soak_id.clone(),
                !s.at_home,
                std::cmp::Reverse(s.summary.last_seq),
            )
        };
        key(a).cmp(&key(b))
    });
    soaks.dedup_by(|later, first| {
        later.host == first.host && later.summary.soak_id == first.summary.soak_id
    });
    soaks.sort_by_key(|s| (s.summary.started_at_us, s.host.clone()));
    soaks
}

/// The first event of a soak, its start: in the live log, or in its archive.
fn first_event(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Option<Event>, LogError> {
    let mut first = None;
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_records(&subject, soak.first_seq, |record| {
        first = Some(record.envelope.event);
        Ok::<_, LogError>(false)
    })?;
    Ok(first)
}

/// When a rank's progress last happened, Unix microseconds: as its supervisor recorded it with
/// the samples; for a soak recorded before schema 12, the verdict's figure where there is one
/// (`verdict_ms` after the spawn: its supervisor watched every change, not only the sampled
/// ones), else the samples'.
fn last_progress_at(
    progress: &ProgressReading,
    verdict_ms: Option<u64>,
    spawned_at_us: Option<i64>,
) -> Option<i64> {
    let sampled_at_us = progress.latest().and_then(|p| p.last_progress_at_us);
    match (progress.recorded(), verdict_ms, spawned_at_us) {
        (true, ..) => sampled_at_us,
        (false, Some(ms), Some(spawned)) => {
            Some(spawned.saturating_add(i64::try_from(ms).unwrap_or(0).saturating_mul(1000)))
        }
        _ => sampled_at_us,
    }
}

/// What one run of a rank's soak tells as its samples go by: its peaks and means, its steps
/// and GPUs' health ([`RankReading`]), the capture that speaks for it, when its command was
/// spawned (from the samples' times and their ages: the earliest, as a sample is recorded with
/// its batch, up to a second after it was taken), and its progress as each sample's supervisor
/// decided it ([`ProgressReading`]). Keeps no sample.
#[derive(Default)]
struct RankRun {
    peak_pss: Option<u64>,
    utilization_sum: f64,
    utilization_samples: u64,
    captures: RankCaptures,
    reading: RankReading,
    spawned_at_us: Option<i64>,
    progress: ProgressReading,
    pace: RankPace,
}

impl RankRun {
    /// A sample recorded at `at_us` with the progress its supervisor `noted` at it (schema 12
    /// on), and its progress and memory into `series` when given.
    fn sample(
        &mut self,
        at_us: i64,
        (sample, measures, noted): (&Sample, Option<&Measures>, Option<&ProgressNoted>),
        series: Option<&mut RankSeries>,
    ) {
        self.reading.sample(sample, measures);
        let elapsed_us = i64::try_from(sample.elapsed_ms)
            .unwrap_or(i64::MAX / 1000)
            .saturating_mul(1000);
        let spawned = at_us.saturating_sub(elapsed_us);
        self.spawned_at_us = Some(self.spawned_at_us.map_or(spawned, |s| s.min(spawned)));
        let pss = measures.and_then(Measures::tree_pss_bytes);
        if let Some(pss) = pss {
            self.peak_pss = Some(self.peak_pss.map_or(pss, |peak| peak.max(pss)));
        }
        if let Some(series) = series {
            let step = measures.and_then(|m| m.heartbeat.as_deref()?.step_seconds_median);
            series.add(elapsed_us, sample.progress.bytes, pss, step.map(f64::from));
        }
        let used: Vec<u32> = sample
            .gpus
            .iter()
            .flatten()
            .filter(|g| !g.processes.is_empty())
            .filter_map(|g| g.utilization_percent)
            .collect();
        if !used.is_empty() {
            self.utilization_sum +=
                used.iter().map(|u| f64::from(*u)).sum::<f64>() / used.len() as f64;
            self.utilization_samples += 1;
        }
        let beats = measures.and_then(|m| m.heartbeat.as_deref());
        self.pace.sample(at_us, beats, noted);
        self.progress.sample(SampleSeen {
            noted,
            files: sample.progress.files,
            bytes: sample.progress.bytes,
            beats: beats.map_or(0, |b| b.beats),
            elapsed_ms: sample.elapsed_ms,
            at_us: Some(at_us),
        });
    }
}

/// One rank's soak as `job show` lists it, read in one pass over its records through the
/// soak's fold (the events that belong to it, by the rule every reader of a soak takes; its
/// verdict as folded) that keeps no sample ([`RankRun`]) — and each sample's progress and
/// memory into `series` when given (bounded: see [`RankSeries`]).
fn read_rank(
    snapshot: &Snapshot,
    soak: &SoakSummary,
    host: &str,
    mut series: Option<&mut RankSeries>,
) -> Result<RankRow, LogError> {
    let mut folded = Folded::default();
    let mut run = RankRun::default();
    walk(snapshot, &soak.soak_id, |event, schema, at_us| {
        if let Event::SoakEvidenceCaptured(evidence) = &event {
            run.captures.take(evidence);
        }
        match folded.fold(event, schema) {
            // What was read of an earlier start under the same id is not part of this soak.
            Fold::Restarted => {
                run = RankRun::default();
                if let Some(series) = series.as_deref_mut() {
                    *series = RankSeries::default();
                }
                if let Some(started) = &folded.soak {
                    run.reading.start(&started.start);
                }
            }
            Fold::Sample(sample, measures, noted) => {
                let measured = (&*sample, measures.as_deref(), noted.as_ref());
                run.sample(at_us, measured, series.as_deref_mut());
            }
            Fold::Folded => {}
        }
        Ok::<_, LogError>(())
    })?;
    let RankRun {
        peak_pss,
        utilization_sum,
        utilization_samples,
        captures,
        mut reading,
        spawned_at_us,
        progress,
        pace,
        ..
    } = run;
    let verdict = folded.soak.as_ref().and_then(|s| s.end.as_deref());
    let last_progress_ms = verdict.and_then(|v| v.end.last_progress_ms);
    reading.verdict(verdict.and_then(|v| v.findings.as_ref()));
    let last_progress_at_us = last_progress_at(&progress, last_progress_ms, spawned_at_us);
    if let (Some(series), Some(spawned)) = (series, spawned_at_us) {
        series.spawned_at(spawned);
    }
    let soak_started = folded.soak.as_ref();
    let pace = pace.done(soak_started.map(|s| s.start.parameters.sample_interval_ms));
    let (signature, last_capture_us) = captures.done();
    let read = reading.done();
    let (signature, top_frames) = match signature {
        Some(s) => (Some(s.signature), s.top_frames),
        None => (None, Vec::new()),
    };
    Ok(RankRow {
        rank: None,
        host: host.to_owned(),
        node: None,
        soak_id: soak.soak_id.clone(),
        run: soak_started.and_then(|s| s.job.as_ref()?.run.clone()),
        status: soak.state.as_str().to_owned(),
        failure_kind: soak.failure_kind,
        started_at: unix_seconds(soak.started_at_us),
        ended_at: soak.ended_at_us.map(unix_seconds),
        ended: soak.state.end(),
        last_progress_at: last_progress_at_us.map(unix_seconds),
        last_step: read.last_step,
        last_phase: pace.last_phase.clone(),
        median_step_seconds: read.median_step_seconds,
        peak_tree_pss_bytes: peak_pss,
        gpu_utilization_mean: (utilization_samples > 0)
            .then(|| utilization_sum / utilization_samples as f64),
        signature,
        top_frames,
        tripped_at: soak
            .failure_kind
            .and(last_capture_us.or(soak.ended_at_us))
            .map(unix_seconds),
        reason: soak.reason.clone(),
        gpus: read.gpus,
        pace,
    })
}
