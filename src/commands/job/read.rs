//! The soaks of jobs, from this user's log on every host under the state root
//! ([`for_every_host_log`](crate::commands::for_every_host_log): a log that cannot be read is
//! named in a warning and the rest shown), one row a soak of a host.

use crate::error::Error;
use crate::event::{Event, Subject};
use crate::log::Snapshot;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::process::SystemProc;
use crate::projection::{SoakSummary, Soaks};
use crate::soak::job_view::{RankCaptures, RankRow};
use crate::soak::launch::{JOB_KEY, NODE_KEY, RANK_KEY};
use crate::soak::report::job::series::RankSeries;
use crate::soak::straggler::reading::RankReading;
use crate::soak::watch::progress::{ProgressReading, SampleSeen};
use crate::time::unix_seconds;

/// One soak of a job, on its host.
pub(crate) struct JobSoak {
    pub job: String,
    /// The host the log it was found in is scoped to.
    pub host: String,
    /// Whether that log lies in its host's own directory, not a copy under another name.
    at_home: bool,
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

/// The soaks of jobs read, and the warnings about host logs that could not be read (each also
/// given as a warning).
pub(crate) struct JobSoaks {
    pub soaks: Vec<JobSoak>,
    pub warnings: Vec<String>,
}

/// The soaks whose job `wanted` takes, from every host's log, each read as far as `reading`
/// says (its samples, captures and verdict for its row; its series). This host's abandoned soaks are settled first; other
/// hosts' logs are only read. A soak's host is the one its log is scoped to: a log copied aside
/// shows its soaks under their own host, and once (the original's row when both are there).
pub(crate) fn job_soaks(
    paths: &StatePaths,
    out: &Output,
    wanted: &dyn Fn(&str) -> bool,
    reading: Reading,
) -> Result<JobSoaks, Error> {
    let own = match crate::commands::read_own_log(paths, out)? {
        Some(reader) => Some(crate::soak::abandon::settle(
            paths,
            &reader,
            &SystemProc::default(),
        )?),
        None => None,
    };
    let mut soaks = Vec::new();
    let mut warnings = Vec::new();
    crate::commands::for_every_host_log_told(
        paths,
        out,
        own,
        &mut warnings,
        |directory, snapshot| {
            let host = match snapshot.meta()? {
                Some((_, scope)) => scope.host,
                None => directory.to_owned(),
            };
            // A host's soaks are taken whole or not at all: its log may fail half-way.
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
            soaks.extend(found);
            Ok(())
        },
    )?;
    // One row a soak of a host: its original's, else the copy that got furthest.
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
    Ok(JobSoaks { soaks, warnings })
}

/// The first event of a soak, its start: in the live log, or in its archive.
fn first_event(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Option<Event>, Error> {
    let mut first = None;
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_records(&subject, soak.first_seq, |record| {
        first = Some(record.envelope.event);
        Ok::<_, Error>(false)
    })?;
    Ok(first)
}

/// One rank's soak as `job show` lists it, read in one pass over its records that keeps no
/// sample: its peaks and means as they go by, its steps and GPUs' health ([`RankReading`]),
/// the capture that speaks for it, its verdict — and each sample's progress and memory into `series` when given (bounded: see
/// [`RankSeries`]).
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

fn read_rank(
    snapshot: &Snapshot,
    soak: &SoakSummary,
    host: &str,
    mut series: Option<&mut RankSeries>,
) -> Result<RankRow, Error> {
    let mut peak_pss: Option<u64> = None;
    let (mut utilization_sum, mut utilization_samples) = (0.0_f64, 0_u64);
    let mut captures = RankCaptures::default();
    let mut reading = RankReading::default();
    // When the command was spawned (from the samples' times and their ages: the earliest, as a
    // sample is recorded with its batch, up to a second after it was taken), and when
    // progress last happened, as each sample's supervisor decided it.
    let mut spawned_at_us: Option<i64> = None;
    let mut progress = ProgressReading::default();
    let mut last_progress_ms: Option<u64> = None;
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_records(&subject, soak.first_seq, |record| {
        let at_us = record.envelope.recorded_at_us;
        match &record.envelope.event {
            Event::SoakStarted { start, .. } => reading.start(start),
            Event::SoakSampled {
                sample,
                measures,
                progress: noted,
            } => {
                reading.sample(sample, measures.as_deref());
                let elapsed_us = i64::try_from(sample.elapsed_ms)
                    .unwrap_or(i64::MAX / 1000)
                    .saturating_mul(1000);
                let spawned = at_us.saturating_sub(elapsed_us);
                spawned_at_us = Some(spawned_at_us.map_or(spawned, |s| s.min(spawned)));
                let pss = measures.as_ref().and_then(|m| m.tree_pss_bytes());
                if let Some(pss) = pss {
                    peak_pss = Some(peak_pss.map_or(pss, |peak| peak.max(pss)));
                }
                if let Some(series) = series.as_deref_mut() {
                    series.add(elapsed_us, sample.progress.bytes, pss);
                }
                let used: Vec<u32> = sample
                    .gpus
                    .iter()
                    .flatten()
                    .filter(|g| !g.processes.is_empty())
                    .filter_map(|g| g.utilization_percent)
                    .collect();
                if !used.is_empty() {
                    utilization_sum +=
                        used.iter().map(|u| f64::from(*u)).sum::<f64>() / used.len() as f64;
                    utilization_samples += 1;
                }
                let beats = measures.as_ref().and_then(|m| m.heartbeat.as_deref());
                progress.sample(SampleSeen {
                    noted: noted.as_ref(),
                    files: sample.progress.files,
                    bytes: sample.progress.bytes,
                    beats: beats.map_or(0, |b| b.beats),
                    elapsed_ms: sample.elapsed_ms,
                    at_us: Some(at_us),
                });
            }
            Event::SoakEvidenceCaptured(evidence) => captures.take(evidence),
            Event::SoakFinished { end, findings, .. } => {
                last_progress_ms = end.last_progress_ms;
                reading.verdict(findings.as_deref());
            }
            _ => {}
        }
        Ok::<_, Error>(true)
    })?;
    let last_progress_at_us = last_progress_at(&progress, last_progress_ms, spawned_at_us);
    if let (Some(series), Some(spawned)) = (series, spawned_at_us) {
        series.spawned_at(spawned);
    }
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
        status: soak.state.as_str().to_owned(),
        failure_kind: soak.failure_kind,
        started_at: unix_seconds(soak.started_at_us),
        ended_at: soak.ended_at_us.map(unix_seconds),
        ended: soak.state.end(),
        last_progress_at: last_progress_at_us.map(unix_seconds),
        last_step: read.last_step,
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
    })
}
