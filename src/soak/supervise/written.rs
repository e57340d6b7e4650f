//! What a soak writes when it ends, once its verdict is recorded: the artifact, rendered from
//! the log and recorded as written, then the HTML report, if asked for. Both are written
//! atomically; neither can undo the verdict, which is recorded already. How they are rendered
//! is the read layer's, handed down ([`Renderers`]): the supervisor records a soak, and reads
//! nothing back through it.

use std::path::Path;

use crate::event::{Event, Subject};
use crate::log::{EventLog, Snapshot};
use crate::soak::artifact::{self, Placement, Written};
use crate::soak::error::{OutputFile, SoakError};

/// How a soak's artifact and report are rendered from the log (the read layer's functions,
/// which the command layer hands down).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renderers {
    /// Writes the artifact of the soak named to `path`, atomically, put in place as told.
    pub artifact: fn(&Snapshot, &str, &Path, Placement) -> Result<Written, SoakError>,
    /// The HTML report of the soak named.
    pub report: fn(&Snapshot, &str) -> Result<String, SoakError>,
}

/// Renders the soak's artifact from the log, writes it atomically to `path` (put in place as
/// `placement` says) and records that.
pub(crate) fn write_artifact(
    log: &EventLog,
    soak_id: &str,
    (path, placement): (&Path, Placement),
    render: &Renderers,
    record: impl FnOnce(Vec<(Subject, Event)>) -> Result<(), SoakError>,
) -> Result<String, SoakError> {
    let snapshot = log.snapshot()?;
    let written = (render.artifact)(&snapshot, soak_id, path, placement)?;
    drop(snapshot);
    record(vec![(
        Subject::Soak(soak_id.to_owned()),
        Event::ArtifactWritten {
            path: path.display().to_string(),
            digest: written.digest.clone(),
            bytes: written.bytes,
        },
    )])?;
    Ok(written.digest)
}

/// Writes the soak's HTML report to `path` (put in place as `placement` says), from the log as
/// it is now (its verdict and artifact recorded); what cannot be written says how to write it
/// again.
pub(super) fn write_report(
    log: &EventLog,
    soak_id: &str,
    (path, placement): (&Path, Placement),
    render: &Renderers,
) -> Result<(), SoakError> {
    let html = (render.report)(&log.snapshot()?, soak_id)?;
    artifact::write_placed(path, html.as_bytes(), placement).map_err(|e| SoakError::NotWritten {
        kind: OutputFile::Report,
        soak_id: soak_id.to_owned(),
        path: path.to_owned(),
        source: Box::new(SoakError::output(OutputFile::Report, path)(e)),
    })
}
