//! `unilab job`: one file a verb (`list`, `show`, `report`), and the reading of every host's
//! log they share (`read`).

mod list;
mod read;

pub(crate) use read::{Reading, job_soaks};
mod report;
mod show;

use crate::cli::job::JobCommand;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::Output;
use crate::paths::StatePaths;

pub(crate) fn run(
    paths: &StatePaths,
    command: JobCommand,
    out: &mut Output,
) -> Result<Exit, Error> {
    match command {
        JobCommand::List => list::list(paths, out),
        JobCommand::Show { job } => show::show(paths, &job, out),
        JobCommand::Report { job, output, force } => {
            report::report(paths, &job, output.as_deref(), force, out)
        }
    }
}
