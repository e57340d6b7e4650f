//! The soak artifact: canonical JSON rendered from the soak's events alone, so that
//! `soak export` regenerates the bytes written when the soak ended.
//!
//! Canonical: keys in a fixed order (serde_json's sorted maps), numbers as serde_json prints
//! them, two-space indentation, a final newline. `digest` is blake3 over the rendering of the
//! same object without `digest`. Per-sample rows carry the tree's totals; every process of every
//! sample stays in the log (`unilab history --soak ID --json`).
//!
//! A soak recorded in schema 1's events renders as `unilab.soak.artifact/1` ([`v1`], frozen:
//! byte for byte what was written then); one recorded in schema 2–4's as `/2` ([`v2`], frozen
//! too); one recorded in schema 5's as `/3` ([`v3`]: `/2` with where it ran, the evidence and
//! what the verdict found, frozen too); one recorded in schema 6's as `/4` ([`v4`]: `/3` with
//! real memory, GPU health, the budgets and what the summary judges of them).

pub(crate) mod csv;
pub(crate) mod explained;
pub(crate) mod judged;
pub(crate) mod shown;
pub(crate) mod stream;
mod v1;
pub(crate) mod v2;
mod v3;
pub(crate) mod v4;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::event::soak::{self, Outcome, SoakParameters};
use crate::event::{Event, Subject};
use crate::log::chain::{Hash, to_hex};
use crate::log::{LogError, Projection, Snapshot, Update};
use crate::process::ProcessIdentity;
use crate::projection::{SoakState, SoakSummary, Soaks};
use crate::time::unix_seconds;

/// A soak's start, samples and verdict, in the form of one schema version.
#[derive(Debug, Clone, PartialEq)]
pub struct Form<Start, Sample, End> {
    pub start: Start,
    pub samples: Vec<Sample>,
    pub end: Option<Box<End>>,
}

/// A soak's start in schema 5's form: schema 2's, and how it is supervised.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub start: soak::SoakStart,
    pub supervision: soak::Supervision,
}

/// A soak's verdict in schema 5's form: schema 2's, and what it found about the tree's end.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub end: soak::SoakEnd,
    pub findings: soak::Findings,
}

/// A soak as recorded: in schema 1's events, schema 2–4's, schema 5's or schema 6's.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    V1(Form<soak::SoakStart, soak::Sample, soak::SoakEnd>),
    V2(Form<soak::SoakStart, soak::Sample, soak::SoakEnd>),
    V5(Form<Started, soak::Sample, Finished>),
    V6(Form<v4::Started6, v4::Measured, v4::Finished6>),
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
    pub soak: Recorded,
    pub abandoned: Option<Abandonment>,
    /// What the tree was doing when it was to be signalled (schema 5).
    pub evidence: Option<Box<soak::Evidence>>,
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

/// A soak's events folded into its form as they go by: what [`collect`] and the streamed
/// artifact ([`stream`]) take from them alike. Schema 1's samples are kept in the form (its frozen
/// code renders from all of them at once); later schemas' are handed back, to be kept or turned
/// into rows by the caller.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    pub soak: Option<Recorded>,
    pub abandoned: Option<Abandonment>,
    pub evidence: Option<Box<soak::Evidence>>,
}

/// What one event did to a [`Folded`] soak.
pub(crate) enum Fold {
    /// A start began the soak afresh: what came before is not part of it.
    Restarted,
    /// A sample of schema 2 or later, with what schema 6 measures beside it.
    Sample(Box<soak::Sample>, Option<Box<soak::Measures>>),
    /// Anything else.
    Folded,
}

impl Folded {
    /// Folds `event`, stored in the form of `schema`: a soak's start decides which artifact it
    /// renders (schema 1's form `/1`, schema 2–4's `/2`, schema 5's `/3`, later ones `/4`).
    pub(crate) fn fold(&mut self, event: Event, schema: u32) -> Fold {
        fn fresh<S, T, E>(start: S) -> Form<S, T, E> {
            Form {
                start,
                samples: Vec::new(),
                end: None,
            }
        }
        let restarted = match (event, &mut self.soak) {
            (
                Event::SoakStarted {
                    start,
                    supervision,
                    limits,
                },
                _,
            ) => match schema {
                ..=1 => Recorded::V1(fresh(*start)),
                2..=4 => Recorded::V2(fresh(*start)),
                5 => Recorded::V5(fresh(Started {
                    start: *start,
                    supervision: supervision.unwrap_or_default(),
                })),
                _ => Recorded::V6(fresh(v4::Started6 {
                    started: Started {
                        start: *start,
                        supervision: supervision.unwrap_or_default(),
                    },
                    limits: limits.unwrap_or_default(),
                })),
            },
            (Event::SoakSampled { sample, .. }, Some(Recorded::V1(form))) => {
                form.samples.push(*sample);
                return Fold::Folded;
            }
            (Event::SoakSampled { sample, .. }, Some(Recorded::V2(_) | Recorded::V5(_))) => {
                return Fold::Sample(sample, None);
            }
            (Event::SoakSampled { sample, measures }, Some(Recorded::V6(_))) => {
                return Fold::Sample(sample, Some(measures.unwrap_or_default()));
            }
            (Event::SoakFinished { end, .. }, Some(Recorded::V1(form))) => {
                form.end = Some(end);
                return Fold::Folded;
            }
            (Event::SoakFinished { end, .. }, Some(Recorded::V2(form))) => {
                form.end = Some(end);
                return Fold::Folded;
            }
            (Event::SoakFinished { end, findings, .. }, Some(Recorded::V5(form))) => {
                form.end = Some(Box::new(Finished {
                    end: *end,
                    findings: findings.map(|f| *f).unwrap_or_default(),
                }));
                return Fold::Folded;
            }
            (
                Event::SoakFinished {
                    end,
                    findings,
                    limit,
                    ..
                },
                Some(Recorded::V6(form)),
            ) => {
                form.end = Some(Box::new(v4::Finished6 {
                    finished: Finished {
                        end: *end,
                        findings: findings.map(|f| *f).unwrap_or_default(),
                    },
                    limit,
                }));
                return Fold::Folded;
            }
            (Event::SoakEvidenceCaptured(captured), Some(Recorded::V5(_) | Recorded::V6(_))) => {
                self.evidence = Some(captured);
                return Fold::Folded;
            }
            (Event::SoakAbandoned { supervisor, reason }, _) => {
                self.abandoned = Some(Abandonment { supervisor, reason });
                return Fold::Folded;
            }
            _ => return Fold::Folded,
        };
        (self.soak, self.evidence) = (Some(restarted), None);
        Fold::Restarted
    }

    /// Keeps a sample [`fold`](Self::fold) handed back in the soak's form.
    fn keep(&mut self, sample: soak::Sample, measures: Option<soak::Measures>) {
        match (&mut self.soak, measures) {
            (Some(Recorded::V2(form)), None) => form.samples.push(sample),
            (Some(Recorded::V5(form)), None) => form.samples.push(sample),
            (Some(Recorded::V6(form)), Some(measures)) => form.samples.push((sample, measures)),
            _ => {}
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
            last_hash: walked.last_hash,
            host: walked.host,
        })
    }
}

/// Gathers a soak's events, up to and including its verdict; `None` for an unknown soak.
pub fn collect(snapshot: &Snapshot, soak_id: &str) -> Result<Option<SoakRecords>, LogError> {
    let mut folded = Folded::default();
    let walked = walk(snapshot, soak_id, |event, schema| {
        if let Fold::Sample(sample, measures) = folded.fold(event, schema) {
            folded.keep(*sample, measures.map(|m| *m));
        }
        Ok::<(), LogError>(())
    })?;
    Ok(folded.records(walked))
}

/// Calls `visit` with each event of a soak, in order, up to and including its verdict, in one
/// scan of the log; then returns the `soaks` projection folded over exactly those events, the
/// hash of the last of them and the log's host (`None` for an unknown soak). Which events belong to the soak is the
/// projection's rule ([`Soaks::apply`]), applied here too. `visit` is given each event with
/// the schema of the form it is stored in.
pub(crate) fn walk<E: From<LogError>>(
    snapshot: &Snapshot,
    soak_id: &str,
    mut visit: impl FnMut(Event, u32) -> Result<(), E>,
) -> Result<Option<Walked>, E> {
    let mut summary: Option<SoakSummary> = None;
    let mut last_hash = None;
    let mut host = None;
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
                    Update::Put(next) => summary = Some(next),
                    _ => return Ok(true),
                },
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
        (Some(summary), Some(last_hash), Some(host)) => Some(Walked {
            summary,
            last_hash,
            host,
        }),
        _ => None,
    })
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// `status` (`running` until the verdict), `failure_kind` and `reason`.
fn outcome(records: &SoakRecords, verdict: Option<&Outcome>) -> Value {
    match (verdict, &records.abandoned) {
        (Some(outcome), _) => json!({
            "status": outcome.status.as_str(),
            "failure_kind": outcome.failure_kind,
            "reason": outcome.reason,
        }),
        (None, Some(Abandonment { supervisor, reason })) => json!({
            "status": records.summary.state.as_str(),
            "failure_kind": null,
            "reason": format!("{reason} (supervisor pid {})", supervisor.pid),
        }),
        (None, None) => json!({
            "status": records.summary.state.as_str(),
            "failure_kind": null,
            "reason": "",
        }),
    }
}

/// The limits, where the progress was watched and what unilab set for the command.
fn parameters(
    params: &SoakParameters,
    progress_dir: &str,
    output: &str,
    environment: &BTreeMap<String, String>,
) -> Map<String, Value> {
    let mut object = Map::new();
    for (key, ms) in [
        ("sample_interval_seconds", params.sample_interval_ms),
        ("startup_timeout_seconds", params.startup_timeout_ms),
        ("stale_progress_seconds", params.stale_progress_ms),
        ("shutdown_grace_seconds", params.shutdown_grace_ms),
        ("min_duration_seconds", params.min_duration_ms),
    ] {
        object.insert(key.into(), seconds(ms).into());
    }
    object.insert("progress_dir".into(), progress_dir.into());
    object.insert("output".into(), output.into());
    object.insert("environment".into(), json!(environment));
    object
}

/// What every version of the artifact shows alike.
struct Frame<'a> {
    schema: &'static str,
    soak_id: &'a str,
    command: &'a [String],
    cwd: &'a str,
    metadata: &'a BTreeMap<String, String>,
    runtime_json: &'a str,
    supervisor: ProcessIdentity,
    outcome: Option<&'a Outcome>,
    exit: Option<soak::ExitInfo>,
    leaked: &'a [soak::LeakedProcess],
    /// Standard output and error, once the soak has ended.
    tails: Option<(&'a [u8], &'a [u8])>,
}

/// The fields every version shows alike: identity, times, outcome, exit, leaks, output, and the
/// place in the log.
fn frame(records: &SoakRecords, frame: &Frame) -> Map<String, Value> {
    let summary = &records.summary;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut object = Map::new();
    object.insert("schema".into(), frame.schema.into());
    object.insert("soak_id".into(), frame.soak_id.into());
    object.insert("command".into(), json!(frame.command));
    object.insert("cwd".into(), frame.cwd.into());
    object.insert(
        "metadata".into(),
        crate::event::soak::metadata_view(frame.metadata),
    );
    object.insert(
        "runtime".into(),
        serde_json::from_str(frame.runtime_json).unwrap_or(Value::Null),
    );
    object.insert(
        "supervisor".into(),
        json!({ "pid": frame.supervisor.pid, "start_ticks": frame.supervisor.start_ticks }),
    );
    object.insert(
        "started_at".into(),
        unix_seconds(summary.started_at_us).into(),
    );
    object.insert(
        "ended_at".into(),
        json!(summary.ended_at_us.map(unix_seconds)),
    );
    object.insert("outcome".into(), outcome(records, frame.outcome));
    object.insert(
        "exit".into(),
        json!(
            frame
                .exit
                .map(|e| json!({ "code": e.code, "signal": e.signal }))
        ),
    );
    object.insert(
        "leaked_processes".into(),
        json!(frame.leaked
            .iter()
            .map(|l| json!({ "pid": l.identity.pid, "start_ticks": l.identity.start_ticks, "name": l.name, "cmdline": l.cmdline }))
            .collect::<Vec<_>>()),
    );
    object.insert(
        "output_tail".into(),
        json!({
            "stdout": frame.tails.map(|(out, _)| text(out)).unwrap_or_default(),
            "stderr": frame.tails.map(|(_, err)| text(err)).unwrap_or_default(),
        }),
    );
    object.insert(
        "log".into(),
        json!({ "first_seq": summary.first_seq, "last_seq": summary.last_seq, "chain_hash": to_hex(&records.last_hash) }),
    );
    object
}

fn canonical(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The artifact as a JSON object, without `digest`: also what `soak show` reads a soak from,
/// running or not.
pub(crate) fn view(records: &SoakRecords) -> Value {
    match &records.soak {
        Recorded::V1(soak) => v1::body(records, soak),
        Recorded::V2(soak) => v2::body(records, soak),
        Recorded::V5(soak) => v3::body(records, soak),
        Recorded::V6(soak) => v4::body(records, soak),
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

/// Whether `path` is absent or a regular file, which a rename may replace.
fn check_kind(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.file_type().is_file()) {
        return Err(std::io::Error::other(
            "it exists and is not a regular file; writing the artifact would replace it",
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
