//! The commands, one module per verb group. Each takes validated arguments and an [`Output`] and
//! returns the exit status; errors bubble up to `main` for rendering.

pub mod history;
pub mod log;
pub mod mps;

use crate::cli::{Cli, Command, LogCommand};
use crate::error::{Error, Exit};
use crate::output::Output;
use crate::paths::StatePaths;

pub fn run(cli: Cli) -> Result<Exit, Error> {
    let mut out = Output::new(cli.global.json, cli.global.quiet, cli.global.verbose);
    let paths = StatePaths::resolve(cli.global.root.as_deref())?;
    out.detail(&format!("event log: `{}`", paths.log_path().display()));
    let status = match cli.command {
        Command::History(args) => history::run(&paths, &args, &mut out),
        Command::Log(LogCommand::Verify) => log::verify(&paths, &mut out),
        Command::Mps(command) => mps::run(&paths, command, &mut out),
    };
    // Flush what was printed before an error too, so partial output is not lost.
    let flushed = out.flush();
    let status = status?;
    flushed?;
    Ok(status)
}
