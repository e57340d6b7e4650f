//! `unilab soak export`: the artifact as JSON (byte for byte what was written) or CSV.

use super::{refuse_to_replace, resolve};
use crate::cli::soak::ExportFormat;
use crate::diagnostic::Exit;
use crate::error::{Error, stdout_error};
use crate::output::Output;
use crate::paths::StatePaths;
use crate::projection::SoakState;
use crate::read::csv::Sheet;
use crate::read::stream;
use crate::soak::artifact::{self, Placement};
use crate::soak::error::{OutputFile, SoakError};
use std::path::Path;

pub(super) fn export(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    format: ExportFormat,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    if summary.state == SoakState::Running {
        return Err(SoakError::StillRunning(summary.soak_id).into());
    }
    if let Some(path) = output {
        refuse_to_replace(path, OutputFile::Artifact, force)?;
    }
    if format == ExportFormat::Json {
        // Streamed from the log, in memory that does not grow with the soak.
        let soak_id = summary.soak_id.as_str();
        match output {
            Some(path) => {
                let written = stream::write_file(&snapshot, soak_id, path, Placement::Replace)?;
                out.note(&format!(
                    "wrote `{}` (digest {})",
                    path.display(),
                    written.digest
                ));
            }
            None => {
                out.stream(|stdout| stream::write(&snapshot, soak_id, stdout))
                    .map_err(streamed_to_stdout)?;
            }
        }
        return Ok(Exit::Success);
    }
    // Written as the rows go by, in memory that does not grow with the soak either.
    let to = output.unwrap_or(Path::new("-"));
    let mut sheet = Sheet::new(&summary.soak_id).map_err(stream::streaming(to))?;
    stream::read(&snapshot, &summary.soak_id, |piece| sheet.take(piece))
        .map_err(stream::streaming(to))?;
    match output {
        Some(path) => {
            let digest = artifact::write_atomically_with(path, |file| sheet.finish(file))
                .map_err(stream::streaming(path))?;
            out.note(&format!("wrote `{}` (digest {digest})", path.display()));
        }
        None => {
            out.stream(|stdout| sheet.finish(stdout))
                .map_err(streamed_to_stdout)?;
        }
    }
    Ok(Exit::Success)
}

/// The error of something streamed to standard output: writing there is `stdout_error`'s.
fn streamed_to_stdout(e: stream::StreamError) -> Error {
    match e {
        stream::StreamError::Io(e) => stdout_error(e),
        other => stream::streaming(Path::new("-"))(other).into(),
    }
}
