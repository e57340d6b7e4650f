//! The soak artifact: canonical JSON rendered from the soak's events alone, so that
//! `soak export` regenerates the bytes written when the soak ended.
//!
//! Canonical: keys in a fixed order (serde_json's sorted maps), numbers as serde_json prints
//! them, two-space indentation, a final newline. `digest` is blake3 over the rendering of the
//! same object without `digest`. Per-sample rows carry the tree's totals; every process of every
//! sample stays in the log (`unilab history --soak ID --json`).
//!
//! A soak's events are folded into one upcast [`Soak`], which keeps the schema its start was
//! recorded in: a soak recorded in schema 6's forms or later renders the artifact this unilab
//! writes, `unilab.soak.artifact/4` ([`current`], its rows in [`rows`]); an older one renders
//! the artifact its own version wrote, frozen ([`frozen`]: `/1`, `/2`, `/3`). Every reader of
//! the rows — the CSV ([`csv`]), the report, `soak show` ([`shown`]) — reads them as today's
//! typed rows, whatever the artifact.

pub(crate) mod beats;
pub(crate) mod csv;
mod current;
pub(crate) mod explained;
mod frozen;
pub(crate) mod judged;
pub(crate) mod rows;
pub(crate) mod shown;
pub(crate) mod stepped;
pub(crate) mod stream;

use std::path::Path;

use serde_json::Value;

use crate::event::soak::{self, Measures, ProgressNoted, Sample};
use crate::event::{Event, Subject};
use crate::log::chain::Hash;
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;
use crate::projection::{SoakState, SoakSummary, Soaks};

pub(crate) use rows::CpuClock;

/// A sample with what was measured beside it, where its form measured it, and the progress its
/// supervisor decided at it, where its form recorded that (schema 12 on).
pub type Measured = (Sample, Option<Measures>, Option<ProgressNoted>);

/// A soak as its events tell it, upcast: its start, samples and verdict in today's shape, and
/// the schema of the form its start was recorded in, which decides the artifact it renders.
#[derive(Debug, Clone, PartialEq)]
pub struct Soak {
    /// The schema of the form its start was recorded in (as its envelope says).
    pub schema: u32,
    pub start: soak::SoakStart,
    pub supervision: Option<soak::Supervision>,
    pub limits: Option<soak::Limits>,
    /// An argument of its command is not UTF-8: `start.command` holds it lossily (schema 11).
    pub command_lossy: bool,
    /// The job it is a rank of (schema 9), and the run it joined (schema 13).
    pub job: Option<soak::JobMember>,
    /// Every sample, when gathered whole ([`collect`]); the streamed artifact turns them into
    /// rows as they go by instead.
    pub samples: Vec<Measured>,
    pub end: Option<Box<Verdict>>,
}

/// A soak's verdict: how it ended, what it found about the tree's end, the budget that failed
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub end: soak::SoakEnd,
    pub findings: Option<soak::Findings>,
    pub limit: Option<soak::ResourceLimit>,
}

/// The supervisor vanished before a verdict: `soak_abandoned`.
#[derive(Debug, Clone, PartialEq)]
pub struct Abandonment {
    pub supervisor: ProcessIdentity,
    pub reason: String,
}

/// Everything the artifact is made of: the soak's events up to and including its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakRecords {
    /// The `soaks` projection folded over exactly these events: state, times and sequences.
    pub summary: SoakSummary,
    pub soak: Soak,
    pub abandoned: Option<Abandonment>,
    /// What the tree was doing when it was to be signalled.
    pub evidence: Option<Box<soak::Evidence>>,
    /// What the tree was doing when another rank of its job raised the alarm, if one did.
    pub job_evidence: Option<Box<soak::Evidence>>,
    /// The job's alarm, as this soak saw it, if it saw one.
    pub job_alarm: Option<Box<soak::JobAlarmSeen>>,
    /// The hash of the last of these events, which ties the artifact to the chain.
    pub last_hash: Hash,
    /// The host the log is scoped to.
    pub host: String,
}

/// What [`walk`] found of a soak besides its events.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Walked {
    /// The `soaks` projection folded over exactly the soak's events.
    pub summary: SoakSummary,
    /// The hash of the last of them.
    pub last_hash: Hash,
    /// The host of the log they are in.
    pub host: String,
}

/// A soak's events folded as they go by: what [`collect`] and the streamed artifact
/// ([`stream`]) take from them alike. Samples are handed back, to be kept or turned into rows
/// by the caller.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    pub soak: Option<Soak>,
    pub abandoned: Option<Abandonment>,
    pub evidence: Option<Box<soak::Evidence>>,
    pub job_evidence: Option<Box<soak::Evidence>>,
    pub job_alarm: Option<Box<soak::JobAlarmSeen>>,
}

/// What one event did to a [`Folded`] soak.
pub(crate) enum Fold {
    /// A start began the soak afresh: what came before is not part of it.
    Restarted,
    /// A sample, with what was measured beside it and the progress decided at it.
    Sample(Box<Sample>, Option<Box<Measures>>, Option<ProgressNoted>),
    /// Anything else.
    Folded,
}

impl Folded {
    /// Folds `event`, stored in the form of `schema`.
    pub(crate) fn fold(&mut self, event: Event, schema: u32) -> Fold {
        match (event, &mut self.soak) {
            (
                Event::SoakStarted {
                    start,
                    supervision,
                    limits,
                    command_lossy,
                    job,
                },
                _,
            ) => {
                self.soak = Some(Soak {
                    schema,
                    start: *start,
                    supervision,
                    limits,
                    command_lossy,
                    job,
                    samples: Vec::new(),
                    end: None,
                });
                self.evidence = None;
                self.job_evidence = None;
                self.job_alarm = None;
                return Fold::Restarted;
            }
            (
                Event::SoakSampled {
                    sample,
                    measures,
                    progress,
                },
                Some(_),
            ) => {
                return Fold::Sample(sample, measures, progress);
            }
            (
                Event::SoakFinished {
                    end,
                    findings,
                    limit,
                    ..
                },
                Some(soak),
            ) => {
                soak.end = Some(Box::new(Verdict {
                    end: *end,
                    findings: findings.map(|f| *f),
                    limit,
                }));
            }
            (Event::SoakEvidenceCaptured(captured), Some(_)) => {
                if captured.trigger == soak::FailureKind::JobAlarm {
                    self.job_evidence = Some(captured);
                } else {
                    self.evidence = Some(captured);
                }
            }
            // The first alarm seen is the job's (one alarm a job).
            (Event::SoakJobAlarmSeen(seen), Some(_)) if self.job_alarm.is_none() => {
                self.job_alarm = Some(seen);
            }
            (Event::SoakAbandoned { supervisor, reason }, _) => {
                self.abandoned = Some(Abandonment { supervisor, reason });
            }
            _ => {}
        }
        Fold::Folded
    }

    /// Keeps a sample [`fold`](Self::fold) handed back.
    fn keep(&mut self, measured: Measured) {
        if let Some(soak) = &mut self.soak {
            soak.samples.push(measured);
        }
    }

    /// The records, with what [`walk`] found of the soak; `None` for an unknown soak.
    pub(crate) fn records(self, walked: Option<Walked>) -> Option<SoakRecords> {
        let (walked, soak) = (walked?, self.soak?);
        Some(SoakRecords {
            summary: walked.summary,
            soak,
            abandoned: self.abandoned,
            evidence: self.evidence,
            job_evidence: self.job_evidence,
            job_alarm: self.job_alarm,
            last_hash: walked.last_hash,
            host: walked.host,
        })
    }
}

/// Gathers a soak's events, up to and including its verdict; `None` for an unknown soak.
pub fn collect(snapshot: &Snapshot, soak_id: &str) -> Result<Option<SoakRecords>, LogError> {
    let mut folded = Folded::default();
    let walked = walk(snapshot, soak_id, |event, schema| {
        if let Fold::Sample(sample, measures, progress) = folded.fold(event, schema) {
            folded.keep((*sample, measures.map(|m| *m), progress));
        }
        Ok::<(), LogError>(())
    })?;
    Ok(folded.records(walked))
}

/// Calls `visit` with each event of a soak, in order, up to and including its verdict, in one
/// scan of the log; then returns the `soaks` projection folded over exactly those events (an
/// abandoned soak's end at its last sample, as every view has it:
/// [`crate::soak::ended::end_at_last_sample`]), the hash of the last of them and the log's
/// host (`None` for an unknown soak). Which events belong to the soak is the projection's rule
/// ([`Soaks::apply`]), applied here too. `visit` is given each event with the schema of the form
/// it is stored in.
pub(crate) fn walk<E: From<LogError>>(
    snapshot: &Snapshot,
    soak_id: &str,
    mut visit: impl FnMut(Event, u32) -> Result<(), E>,
) -> Result<Option<Walked>, E> {
    let mut summary: Option<SoakSummary> = None;
    let mut last_hash = None;
    let mut host = None;
    // When its last sample was recorded: an abandoned soak's end.
    let mut last_sample_at_us = None;
    snapshot.scan_records(
        &Subject::Soak(soak_id.to_owned()),
        1,
        |record| -> Result<bool, E> {
            if summary
                .as_ref()
                .is_some_and(|s| s.state != SoakState::Running)
            {
                return Ok(false);
            }
            match &mut summary {
                // A sample (most events) changes the row in place: no copy an event.
                Some(current) if !Soaks::starts(&record.envelope.event) => {
                    if !Soaks::advance(current, &record.envelope) {
                        return Ok(true);
                    }
                }
                _ => match Soaks::apply(summary.as_ref(), &record.envelope) {
                    Update::Put(next) => {
                        summary = Some(next);
                        last_sample_at_us = None;
                    }
                    _ => return Ok(true),
                },
            }
            if let Event::SoakSampled { .. } = record.envelope.event {
                last_sample_at_us = Some(record.envelope.recorded_at_us);
            }
            last_hash = Some(record.hash);
            if host.is_none() {
                host = Some(record.envelope.scope.host.clone());
            }
            visit(record.envelope.event, record.envelope.schema)?;
            Ok(true)
        },
    )?;
    Ok(match (summary, last_hash, host) {
        (Some(mut summary), Some(last_hash), Some(host)) => Some(Walked {
            summary: {
                crate::soak::ended::end_at_last_sample(&mut summary, last_sample_at_us);
                summary
            },
            last_hash,
            host,
        }),
        _ => None,
    })
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn canonical(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The artifact as a JSON object, without `digest`: also what `soak show` reads a soak from,
/// running or not.
pub(crate) fn view(records: &SoakRecords) -> Value {
    if frozen::renders(&records.soak) {
        frozen::body(records)
    } else {
        current::body(records)
    }
}

/// The digest of an artifact whose [`view`] is `view`: blake3 of its canonical rendering.
pub(crate) fn digest(view: &Value) -> String {
    blake3::hash(&canonical(view)).to_hex().to_string()
}

/// The artifact's bytes and its digest.
pub fn render(records: &SoakRecords) -> (Vec<u8>, String) {
    let mut value = view(records);
    let digest = digest(&value);
    if let Value::Object(object) = &mut value {
        object.insert("digest".into(), digest.clone().into());
    }
    (canonical(&value), digest)
}

/// Checks an artifact's digest: blake3 of its rendering without `digest`.
pub fn digest_matches(bytes: &[u8]) -> bool {
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    let Some(Value::String(digest)) = object.remove("digest") else {
        return false;
    };
    self::digest(&Value::Object(object)) == digest
}

/// Whether an artifact can be written to `path`: its directory takes a new file, the name
/// itself can be created there, and `path` is absent or a regular file. Anything else (a device, a FIFO, a symlink, a directory) would be
/// replaced by the rename that writes the artifact, so it is refused — before a soak starts, not
/// days later. The directory is proven by creating (and removing) a file in it: `access(2)`
/// grants root a read-only or pseudo file system (`/sys`) where creating one fails.
pub(crate) fn check_target(path: &Path) -> std::io::Result<()> {
    check_kind(path)?;
    tempfile::Builder::new()
        .prefix(".unilab-probe-")
        .tempfile_in(directory_of(path))
        .map(drop)?;
    check_name(path)
}

/// Whether the filesystem takes `path`'s own name: a temporary file beside it proves the
/// directory writable, not that a name of 300 bytes, or a path past the system's limit, can be
/// created there — that would be found only when the verdict is written. Proven by creating
/// the file (exclusively: nothing there is touched) and removing it again; a file already there
/// is proof enough.
fn check_name(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => {
            drop(file);
            std::fs::remove_file(path)
        }
        // Made meanwhile by someone else: the name is taken, so it can be.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `path` is absent or a regular file, which a rename may replace. The error says
/// nothing of what was to be written there: the caller's names it (the artifact, the report, the
/// metrics file).
fn check_kind(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.file_type().is_file()) {
        return Err(std::io::Error::other(
            "it exists and is not a regular file, which the rename that writes the file would replace",
        ));
    }
    Ok(())
}

fn directory_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, then renamed over
/// `path` (only ever a regular file, checked again just before), and the directory synced so the
/// rename survives a crash. The file gets the mode the user's umask gives a new file: it holds
/// the command line and output tails, which are the user's to share.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    write_atomically_with(path, |file| file.write_all(bytes))
}

/// [`write_atomically`] what `write` writes into the file (buffered; flushed here).
pub(crate) fn write_atomically_with<T, E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> Result<T, E>,
) -> Result<T, E> {
    use std::io::Write;
    let dir = directory_of(path);
    let temp = tempfile::NamedTempFile::new_in(dir)?;
    let mut buffered = std::io::BufWriter::with_capacity(1 << 16, temp.as_file());
    let written = write(&mut buffered)?;
    buffered.flush()?;
    drop(buffered);
    std::fs::set_permissions(
        temp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o666 & !umask()),
    )?;
    temp.as_file().sync_all()?;
    check_kind(path)?;
    temp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(written)
}

/// This process's umask, read from `/proc` (changing it to read it would race other threads);
/// `022` where it cannot be read.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Umask:"))
                .and_then(|mask| u32::from_str_radix(mask.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}
