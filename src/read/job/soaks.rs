//! The soaks of jobs in one host's log, each read as far as asked ([`Reading`]): its summary,
//! its row for `job show`, its series for `job report`. One row a soak of a host
//! ([`one_a_host`]) when the logs of every host are read together (the command layer's loop
//! over them).
//!
//! A rank's row comes from what the log keeps of it ([`kept`]: its job, and its [`RankFold`]
//! folded as its events were appended), without a look at its samples or its archive; where
//! the log keeps none — another host's log not migrated, a soak archived before the log kept
//! them — its records are folded whole, with a warning that says so. A soak's job is known
//! from the same row, so a soak outside the job asked for is not read at all; one whose job
//! cannot be told (its archive cannot be read) is named in a warning and left out.

use serde::{Deserialize, Serialize};

pub(crate) mod kept;

use crate::event::soak::{Measures, ProgressNoted, Sample};
use crate::event::{Event, Subject};
use crate::log::{LogError, Snapshot};
use crate::projection::{SoakSummary, Soaks};
use crate::read::fold::walk;
use crate::read::job::series::RankSeries;
use crate::read::job::straggler::reading::RankReading;
use crate::read::job::suspect::RankPace;
use crate::read::job::{RankCaptures, RankRow};
use crate::soak::watch::progress::{ProgressReading, SampleSeen};
use crate::text::foreign;
use crate::time::unix_seconds;
use kept::Member;

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
    /// Its row too, from what the log keeps of it (`job show`).
    Rows,
    /// Its row and its series over time (`job report`).
    RowsAndSeries,
}

/// The soaks whose job `wanted` takes in the log of one host (`snapshot`, found in the
/// directory `directory`), each read as far as `reading` says (its row; its series). A soak's
/// host is the one its log is scoped to: a log copied aside shows its soaks under their own
/// host. What could not be read as it should — a soak whose job cannot be told, a rank read from
/// every sample or left out — is said in `warnings`.
pub(crate) fn in_host_log(
    directory: &str,
    snapshot: &Snapshot,
    wanted: &dyn Fn(&str) -> bool,
    reading: Reading,
    warnings: &mut Vec<String>,
) -> Result<Vec<JobSoak>, LogError> {
    let host = match snapshot.meta()? {
        Some((_, scope)) => scope.host,
        None => directory.to_owned(),
    };
    let mut kept = kept::rows(snapshot)?;
    let mut unkept_said = false;
    let mut found = Vec::new();
    for summary in Soaks::rows(snapshot)? {
        let row = kept.as_mut().and_then(|k| k.remove(&summary.soak_id));
        let member = match &row {
            Some(row) => row.member.clone(),
            None => match start_of(snapshot, &summary) {
                Ok(member) => member,
                Err(e) if e.is_archive() => {
                    warnings.push(format!(
                        "soak `{}` on host `{}`: {}: whether it is a rank of a job cannot be told, and it is left out",
                        foreign(&summary.soak_id),
                        foreign(&host),
                        foreign(&said(&e))
                    ));
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        let Some(member) = member.filter(|m| wanted(&m.job)) else {
            continue;
        };
        let summary = crate::soak::ended::as_shown(snapshot, summary)?;
        // What the log kept of it, unless its records went on past it (a writer that kept none).
        let fold = row
            .filter(|r| r.seen_seq == summary.last_seq)
            .map(|r| r.fold);
        let who = format!(
            "{} on host `{}` (soak `{}`)",
            member
                .rank
                .map_or_else(|| "a rank".to_owned(), |r| format!("rank {r}")),
            foreign(&host),
            foreign(&summary.soak_id)
        );
        if reading == Reading::Rows && fold.is_none() {
            match kept {
                None if !unkept_said => {
                    warnings.push(format!(
                        "the log of host `{}` keeps no summary of its ranks of version {} (an older unilab's, not migrated, or a newer one's): its ranks are read from every sample",
                        foreign(&host),
                        kept::STATE_VERSION
                    ));
                    unkept_said = true;
                }
                None => {}
                Some(_) => warnings.push(format!(
                    "{who}: the log keeps no summary of it that is up to date: it is read from every sample"
                )),
            }
        }
        let read = RankRead {
            snapshot,
            soak: &summary,
            host: &host,
            who: &who,
        };
        let Some((row, series)) = read.as_asked(reading, fold, warnings)? else {
            continue;
        };
        let row = row.map(|mut row| {
            row.rank = member.rank;
            row.node = member.node.clone();
            row.run = member.run.clone();
            row
        });
        found.push(JobSoak {
            job: member.job,
            at_home: host == directory,
            host: host.clone(),
            rank: member.rank,
            rank_text: member.rank_text,
            ran_seconds: crate::soak::abandon::ran_seconds(snapshot, &summary)?,
            summary,
            row,
            series,
        });
    }
    Ok(found)
}

/// A rank's row and series, each where asked for.
type AsAsked = (Option<RankRow>, Option<RankSeries>);

/// One rank's soak of a host's log, to be read as asked.
struct RankRead<'a> {
    snapshot: &'a Snapshot,
    soak: &'a SoakSummary,
    host: &'a str,
    /// The rank, its host and its soak, as warnings name it.
    who: &'a str,
}

impl RankRead<'_> {
    /// Its row and series as `reading` asks: the row from what the log kept (`fold`) where it
    /// can, else from its records; the series from its records. `None` when it cannot be read
    /// (its archive), said in `warnings`.
    fn as_asked(
        &self,
        reading: Reading,
        fold: Option<RankFold>,
        warnings: &mut Vec<String>,
    ) -> Result<Option<AsAsked>, LogError> {
        let (soak, host, who) = (self.soak, self.host, self.who);
        match (reading, fold) {
            (Reading::Summaries, _) => Ok(Some((None, None))),
            (Reading::Rows, Some(fold)) => Ok(Some((Some(fold.row(soak, host)), None))),
            (_, fold) => {
                let mut series = (reading == Reading::RowsAndSeries).then(RankSeries::default);
                match read_rank(self.snapshot, soak, host, series.as_mut()) {
                    Ok(row) => Ok(Some((Some(row), series))),
                    Err(e) if e.is_archive() => {
                        let why = foreign(&said(&e)).into_owned();
                        Ok(match fold {
                            Some(fold) => {
                                warnings.push(format!("{who}: {why}: its samples are not drawn"));
                                Some((Some(fold.row(soak, host)), None))
                            }
                            None => {
                                warnings.push(format!("{who}: {why}: it is left out"));
                                None
                            }
                        })
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }
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

/// The job a soak is a rank of, from its start: in the live log, or in its archive (which may
/// fail to be read). `None` for a soak outside a job.
fn start_of(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Option<Member>, LogError> {
    let mut member = None;
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_records(&subject, soak.first_seq, |record| {
        if let Event::SoakStarted { start, job, .. } = &record.envelope.event {
            member = Member::of(start, job.as_ref());
        }
        Ok::<_, LogError>(false)
    })?;
    Ok(member)
}

/// An error with its causes, on one line.
fn said(error: &LogError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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
/// decided it ([`ProgressReading`]). Keeps no sample. What the log keeps of a rank (see
/// [`RankFold`]), so each of its parts is stored as it is: a new part comes along, and a
/// changed shape is a new [`kept::STATE_VERSION`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

/// Where a [`RankFold`] stands in its soak's events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
enum Stage {
    /// Before its start: nothing of it is folded.
    #[default]
    Unstarted,
    Running,
    /// Past its verdict or its abandonment: nothing more is folded.
    Over,
}

/// One rank's soak as `job show` lists it, folded event by event by the rule every reader of
/// a soak takes ([`walk`]: nothing before its start, a start begins it afresh, nothing after
/// its verdict or abandonment) into a [`RankRun`] and what its verdict says. The log keeps it
/// for each soak as its events are appended ([`kept`]); a full fold of its records makes the
/// same ([`read_rank`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankFold {
    run: RankRun,
    /// Its start's sample interval, which its pace is judged by.
    sample_interval_ms: Option<u64>,
    /// When its verdict says progress last happened (`last_progress_ms` after the spawn).
    verdict_progress_ms: Option<u64>,
    stage: Stage,
}

impl RankFold {
    /// Folds one event of the soak, recorded at `at_us` (each sample's progress and memory into
    /// `series` too, when given); whether it changed what is folded.
    pub(crate) fn event(
        &mut self,
        event: &Event,
        at_us: i64,
        series: Option<&mut RankSeries>,
    ) -> bool {
        match (event, self.stage) {
            (_, Stage::Over) => false,
            // What was read of an earlier start under the same id is not part of this soak.
            (Event::SoakStarted { start, .. }, _) => {
                *self = RankFold {
                    stage: Stage::Running,
                    sample_interval_ms: Some(start.parameters.sample_interval_ms),
                    ..RankFold::default()
                };
                self.run.reading.start(start);
                if let Some(series) = series {
                    *series = RankSeries::default();
                }
                true
            }
            (_, Stage::Unstarted) => false,
            (
                Event::SoakSampled {
                    sample,
                    measures,
                    progress,
                },
                Stage::Running,
            ) => {
                let measured = (&**sample, measures.as_deref(), progress.as_ref());
                self.run.sample(at_us, measured, series);
                true
            }
            (Event::SoakEvidenceCaptured(evidence), Stage::Running) => {
                self.run.captures.take(evidence);
                true
            }
            (Event::SoakFinished { end, findings, .. }, Stage::Running) => {
                self.verdict_progress_ms = end.last_progress_ms;
                self.run.captures.tail(&end.stderr_tail);
                self.run.reading.verdict(findings.as_deref());
                self.stage = Stage::Over;
                true
            }
            (Event::SoakAbandoned { .. }, Stage::Running) => {
                self.stage = Stage::Over;
                true
            }
            _ => false,
        }
    }

    /// Forgets what was folded of the run, keeping where it stands: a soak outside a job.
    pub(crate) fn forget_run(&mut self) {
        self.run = RankRun::default();
        self.verdict_progress_ms = None;
    }

    /// When its command was spawned (Unix microseconds), once a sample tells.
    fn spawned_at_us(&self) -> Option<i64> {
        self.run.spawned_at_us
    }

    /// Its row, of soak `soak` (its row of the `soaks` view, as shown) on `host`; its rank,
    /// node and run are its job's to say.
    pub(crate) fn row(self, soak: &SoakSummary, host: &str) -> RankRow {
        let RankRun {
            peak_pss,
            utilization_sum,
            utilization_samples,
            captures,
            reading,
            spawned_at_us,
            progress,
            pace,
            ..
        } = self.run;
        let pace = pace.done(self.sample_interval_ms);
        let last_progress_at_us =
            last_progress_at(&progress, self.verdict_progress_ms, spawned_at_us);
        let (signature, last_capture_us, collectives) = captures.done();
        let read = reading.done();
        let (signature, top_frames) = match signature {
            Some(s) => (Some(s.signature), s.top_frames),
            None => (None, Vec::new()),
        };
        RankRow {
            rank: None,
            host: host.to_owned(),
            node: None,
            soak_id: soak.soak_id.clone(),
            run: None,
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
            collectives,
        }
    }
}

/// One rank's soak as `job show` lists it, read in one pass over its records ([`folded`]) —
/// and each sample's progress and memory into `series` when given (bounded: see
/// [`RankSeries`]). What a log that keeps no [`RankFold`] of the soak is read with, and `job
/// report`'s series.
pub(crate) fn read_rank(
    snapshot: &Snapshot,
    soak: &SoakSummary,
    host: &str,
    mut series: Option<&mut RankSeries>,
) -> Result<RankRow, LogError> {
    let fold = folded(snapshot, &soak.soak_id, series.as_deref_mut())?;
    if let (Some(series), Some(spawned)) = (series, fold.spawned_at_us()) {
        series.spawned_at(spawned);
    }
    Ok(fold.row(soak, host))
}

/// The [`RankFold`] of soak `soak_id`, folded over all its records (through the soak's
/// [`walk`]), keeping no sample; each sample's progress and memory into `series` when given.
pub(crate) fn folded(
    snapshot: &Snapshot,
    soak_id: &str,
    mut series: Option<&mut RankSeries>,
) -> Result<RankFold, LogError> {
    let mut fold = RankFold::default();
    walk(snapshot, soak_id, |event, _, at_us| {
        fold.event(&event, at_us, series.as_deref_mut());
        Ok::<_, LogError>(())
    })?;
    Ok(fold)
}
