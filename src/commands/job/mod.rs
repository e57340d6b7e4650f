//! `unilab job`: one file a verb (`list`, `show`, `report`); the reading of every host's log
//! they share is the command layer's ([`crate::commands::job_soaks`]) over the read layer's
//! ([`crate::read::job::soaks`]).

mod list;
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
