//! `unilab snapshot`: the runtime snapshot of a directory, as `soak run` records it.

use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::Output;
use crate::snapshot::runtime_snapshot;
use crate::soak::error::SoakError;
use crate::tool;
use std::path::Path;

pub(crate) fn snapshot(dir: Option<&Path>, out: &mut Output) -> Result<Exit, Error> {
    let dir = match dir {
        Some(dir) => dir.to_owned(),
        None => {
            std::env::current_dir().map_err(Error::environment("read the current directory"))?
        }
    };
    // A snapshot of a directory that is not there would describe a made-up one.
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(SoakError::NotADirectory {
                path: dir,
                source: std::io::Error::from(std::io::ErrorKind::NotADirectory),
            }
            .into());
        }
        Err(source) => return Err(SoakError::NotADirectory { path: dir, source }.into()),
    }
    let value = runtime_snapshot(&dir, &tool::nvidia_smi());
    if out.json {
        out.json_line(&value)?;
    } else {
        out.line(
            &serde_json::to_string_pretty(&value).map_err(|e| Error::Internal(e.to_string()))?,
        )?;
    }
    Ok(Exit::Success)
}
