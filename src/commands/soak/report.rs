//! `unilab soak report`: the self-contained HTML report.

use super::{refuse_to_replace, resolve};
use crate::commands::write_report;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::soak::error::OutputFile;
use std::path::Path;

pub(super) fn report(
    paths: &StatePaths,
    id: &str,
    output: Option<&Path>,
    force: bool,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, summary) = resolve(paths, id, out)?;
    if let Some(path) = output {
        refuse_to_replace(path, OutputFile::Report, force)?;
    }
    let html = crate::view::report::of_soak(&snapshot, &summary.soak_id)?;
    write_report(output, &html, out)
}
