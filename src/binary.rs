//! The `unilab` binary's body: parse arguments, run the command, map the result to an exit
//! code and report errors (`src/main.rs` only calls [`main`]).

use std::ffi::OsString;
use std::io::Write;
use std::panic;
use std::process::ExitCode;
use std::sync::Mutex;

use crate::cli::Cli;
use crate::cli::internal::Internal;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::style::{self, ColorChoice, Palette};
use crate::usage::UsageError;
use clap::{CommandFactory, FromArgMatches};

/// Where the panic hook leaves the message of a panic for the renderer.
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// Runs `unilab` with the process's arguments; what the binary returns.
pub fn main() -> ExitCode {
    // A panic is a bug: keep its message for the error report instead of printing a backtrace
    // notice. Panics the library catches itself (inside redb, on a damaged log) become errors.
    panic::set_hook(Box::new(|info| {
        if let Ok(mut slot) = PANIC_MESSAGE.lock() {
            *slot = Some(info.to_string());
        }
    }));
    // unilab running its own internal subcommand: nothing else of the line is the user's.
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(internal) = Internal::named_in(&args) {
        let internal = internal.unwrap_or_else(|e| e.exit());
        let exit = match caught(|| Ok(crate::commands::run_internal(internal))) {
            Ok(exit) => exit,
            Err(error) => {
                let _ = std::io::stderr().write_all(error.render(Palette::PLAIN).as_bytes());
                error.exit()
            }
        };
        return ExitCode::from(exit.code());
    }
    // A shell asking for completions (`COMPLETE=bash unilab -- ...`) is answered, and that is all.
    crate::cli::complete::answer_the_shell_if_asked();
    // `--color` decides how clap renders help and usage errors too, so it is read before the
    // line is parsed (which may fail).
    let color = ColorChoice::in_args(std::env::args_os());
    let command = || {
        Cli::command()
            .color(color.for_clap())
            .styles(style::clap_styles())
    };
    let parsed = command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        // `--help` and `--version` print to standard output and succeed.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // Whether `--json` was asked for, though the line did not parse as a whole (after
            // `--` it is the command's own argument).
            let json = args
                .iter()
                .take_while(|a| *a != "--")
                .any(|a| a == "--json");
            let usage = UsageError::new(e, command(), &args);
            let text = if json {
                format!("{}\n", usage.to_json())
            } else {
                usage.render(color)
            };
            let _ = std::io::stderr().write_all(text.as_bytes());
            return ExitCode::from(Exit::Usage.code());
        }
    };
    let json = cli.global.json;
    let palette = Palette::stderr(cli.global.color);
    let result = caught(|| crate::commands::run(cli));
    let exit = match result {
        Ok(exit) => exit,
        Err(Error::BrokenPipe) => Exit::Success,
        Err(error) => {
            let text = if json {
                format!("{}\n", error.to_json())
            } else {
                error.render(palette)
            };
            let _ = std::io::stderr().write_all(text.as_bytes());
            error.exit()
        }
    };
    ExitCode::from(exit.code())
}

/// What `run` returns, or a panic in it as the bug it is.
fn caught(run: impl FnOnce() -> Result<Exit, Error> + panic::UnwindSafe) -> Result<Exit, Error> {
    panic::catch_unwind(run).unwrap_or_else(|_| {
        let message = PANIC_MESSAGE
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(Error::Internal(message))
    })
}
