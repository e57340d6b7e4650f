//! `unilab job report JOB`: the job's page (see [`crate::view::report::job`]), what `job show`
//! says with every rank's progress and memory over time, as one self-contained HTML file.

use std::path::Path;

use super::show::read_view;
use crate::commands::write_report;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::job::JobId;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::read::job::soaks::Reading;
use crate::soak::error::OutputFile;
use crate::soak::request::refuse_to_replace;

pub(super) fn report(
    paths: &StatePaths,
    job: &JobId,
    output: Option<&Path>,
    force: bool,
    out: &mut Output,
) -> Result<Exit, Error> {
    // An output that cannot be written is refused before any log is read.
    if let Some(path) = output {
        refuse_to_replace(path, OutputFile::Report, force)?;
    }
    let read = read_view(paths, job, out, Reading::RowsAndSeries)?;
    let html = crate::view::report::job::render(&read.view, read.series, &read.warnings);
    write_report(output, &html, out)
}
