//! `unilab log`: one file a verb (`verify`, `stats`, `archive`); here the dispatch.

mod archive;
mod stats;
mod verify;

use crate::cli::log::LogCommand;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::Output;
use crate::paths::StatePaths;

pub(crate) fn run(
    paths: &StatePaths,
    command: LogCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    match command {
        LogCommand::Verify => verify::verify(paths, out),
        LogCommand::Stats => stats::stats(paths, out),
        LogCommand::Archive(args) => archive::archive(paths, &args, out),
    }
}
