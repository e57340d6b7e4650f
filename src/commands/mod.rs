//! The commands, one module per verb group. Each takes validated arguments and an [`Output`] and
//! returns the exit status; errors bubble up to `main` for rendering.

pub(crate) mod history;
mod job;
pub(crate) mod log;
mod man;
pub(crate) mod mps;
pub(crate) mod soak;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::internal::Internal;
use crate::cli::{Cli, Command};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::Snapshot;
use crate::output::Output;
use crate::paths::StatePaths;
use crate::read::job::soaks::{self, JobSoak, Reading};

/// Runs `show`, which prints records read from `snapshot`, after the quick check of the log's
/// head. A log that fails it still has its records shown — they may be what the user needs —
/// and then the damage is reported, with its exit code (5).
pub(crate) fn checked_show(
    snapshot: Option<&Snapshot>,
    show: impl FnOnce() -> Result<Exit, Error>,
) -> Result<Exit, Error> {
    let damage = snapshot.and_then(|s| s.check_head().err());
    let exit = show()?;
    match damage {
        Some(e) => Err(e.into()),
        None => Ok(exit),
    }
}

/// This user's log on this host, opened for reading; `None` when nothing was recorded. A log
/// recorded for another scope (a copy brought in for forensics) is read as it is — never
/// repaired, migrated or appended to — with a warning that says whose it is.
pub(crate) fn read_own_log(
    paths: &StatePaths,
    out: &Output,
) -> Result<Option<crate::log::LogReader>, Error> {
    let reader =
        crate::log::LogReader::open_keeping(&paths.log_path(), &paths.scope(), crate::read::VIEWS)?;
    if let Some(reader) = &reader
        && reader.scope() != &paths.scope()
    {
        out.warn(&format!(
            "this log was recorded for {}, not for {}: it is read as it is, and nothing is written to it",
            reader.scope(),
            paths.scope()
        ));
    }
    Ok(reader)
}

/// Visits this user's log on every host under the state root, by host name, each opened for
/// reading: this host's as usual, another host's strictly read-only (never repaired or migrated
/// from here: one writer host a file). This host's log is read as every command reads it — damage
/// is an error (exit 5). Another host's that cannot be read or fails while `visit` reads it
/// (empty, truncated, not a log, left unclean by a writer killed there, not a regular file,
/// unreadable) is named in a warning, with why, and left out: a job's view shows what can be
/// read, which is when it is needed most. A caller that has read this host's log already hands
/// its read over as `own`, so that it is opened (and a warning about it given) once.
pub(crate) fn for_every_host_log(
    paths: &StatePaths,
    out: &Output,
    own: Option<Snapshot>,
    visit: impl FnMut(&str, &Snapshot) -> Result<(), Error>,
) -> Result<(), Error> {
    for_every_host_log_told(paths, out, own, &mut Vec::new(), visit)
}

/// [`for_every_host_log`], each warning about another host's log also kept in `told` (for a
/// page that shows them).
pub(crate) fn for_every_host_log_told(
    paths: &StatePaths,
    out: &Output,
    mut own: Option<Snapshot>,
    told: &mut Vec<String>,
    mut visit: impl FnMut(&str, &Snapshot) -> Result<(), Error>,
) -> Result<(), Error> {
    let logs = paths
        .every_host_log()
        .map_err(|source| crate::soak::error::SoakError::Io {
            path: paths.root.clone(),
            source,
        })?;
    for (host, log) in logs {
        if host == paths.host {
            let snapshot = match own.take() {
                Some(snapshot) => Some(snapshot),
                None => read_own_log(paths, out)?
                    .map(|reader| reader.snapshot())
                    .transpose()?,
            };
            if let Some(snapshot) = snapshot {
                visit(&host, &snapshot)?;
            }
            continue;
        }
        let read = crate::log::LogReader::open_other_hosts(&log)
            .map_err(Error::from)
            .and_then(|reader| match reader {
                Some(reader) => visit(&host, &reader.snapshot()?),
                None => Ok(()),
            });
        if let Err(e) = read {
            let warning = format!(
                "cannot read the log of host `{}` (`{}`): {}; what it holds is not shown",
                crate::text::foreign(&host),
                crate::text::foreign(&log.display().to_string()),
                crate::text::foreign(&e.chain_text())
            );
            out.warn(&warning);
            told.push(warning);
        }
    }
    Ok(())
}

/// The soaks of jobs read from every host's log, and the warnings about host logs that could
/// not be read (each also given as a warning).
pub(crate) struct JobSoaks {
    pub soaks: Vec<JobSoak>,
    pub warnings: Vec<String>,
}

/// The soaks whose job `wanted` takes, from this user's log on every host under the state root
/// ([`for_every_host_log`]: a log that cannot be read is named in a warning and the rest shown;
/// so is a soak whose job cannot be told, or a rank that cannot be read as asked),
/// each read as far as `reading` says; one row a soak of a host ([`soaks::one_a_host`]). This
/// host's abandoned soaks are settled first; other hosts' logs are only read. What `job` shows,
/// and `soak list --job`.
pub(crate) fn job_soaks(
    paths: &StatePaths,
    out: &Output,
    wanted: &dyn Fn(&str) -> bool,
    reading: Reading,
) -> Result<JobSoaks, Error> {
    let own = match read_own_log(paths, out)? {
        Some(reader) => Some(crate::soak::abandon::settle(
            paths,
            &reader,
            &crate::process::SystemProc::default(),
            crate::read::VIEWS,
        )?),
        None => None,
    };
    let mut soaks = Vec::new();
    let mut warnings = Vec::new();
    let mut of_soaks = Vec::new();
    for_every_host_log_told(paths, out, own, &mut warnings, |directory, snapshot| {
        // A host's soaks are taken whole or not at all: its log may fail half-way.
        let mut said = Vec::new();
        soaks.extend(soaks::in_host_log(
            directory, snapshot, wanted, reading, &mut said,
        )?);
        for warning in said {
            out.warn(&warning);
            of_soaks.push(warning);
        }
        Ok(())
    })?;
    warnings.extend(of_soaks);
    Ok(JobSoaks {
        soaks: soaks::one_a_host(soaks),
        warnings,
    })
}

/// A report's page written to `output` atomically (said on the terminal), else to standard
/// output: `soak report`'s and `job report`'s.
pub(crate) fn write_report(
    output: Option<&std::path::Path>,
    html: &str,
    out: &mut Output,
) -> Result<Exit, Error> {
    use crate::soak::error::{OutputFile, SoakError};
    match output {
        Some(path) => {
            crate::soak::artifact::write_atomically(path, html.as_bytes())
                .map_err(SoakError::output(OutputFile::Report, path))?;
            out.note(&format!("wrote the report `{}`", path.display()));
        }
        None => out.raw(html.as_bytes())?,
    }
    Ok(Exit::Success)
}

/// The signals that ask unilab to stop what it runs: Ctrl-C, `kill`, a closed terminal.
pub(crate) const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// A flag raised when one of `signals` arrives, in place of the signal's default action.
pub(crate) fn raised_on(signals: &[i32]) -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    for &signal in signals {
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .map_err(Error::environment("install a signal handler"))?;
    }
    Ok(flag)
}

/// The completion script of `shell`, from the command-line definitions themselves.
fn completions(shell: clap_complete::Shell, out: &mut Output) -> Result<Exit, Error> {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "unilab",
        &mut script,
    );
    out.raw(&script)?;
    Ok(Exit::Success)
}

/// Runs an internal subcommand: it needs no state and prints nothing of unilab's own, only
/// runs its command and passes its exit code on.
pub(crate) fn run_internal(internal: Internal) -> Exit {
    let code = match internal {
        Internal::SoakGuard { status, command } => crate::soak::guard::run(&status, &command),
        Internal::Leash { command } => crate::tool::leash(&command),
    };
    Exit::Passthrough(u8::try_from(code).unwrap_or(1))
}

pub(crate) fn run(cli: Cli) -> Result<Exit, Error> {
    let mut out = Output::new(cli.global.json, cli.global.quiet, cli.global.color);
    let verbosity = if cli.global.quiet {
        0
    } else {
        cli.global.verbose
    };
    crate::trace::init(verbosity, out.paint_stderr);
    crate::tool::check_timeout_variable().map_err(|source| Error::Variable {
        name: crate::env::EnvVars::UNILAB_TOOL_TIMEOUT,
        source,
    })?;
    let root = cli.global.root.as_deref();
    let paths = || -> Result<StatePaths, Error> {
        let paths = StatePaths::resolve(root)?;
        crate::trace::detail!(
            crate::trace::STEPS,
            "event log: `{}`",
            paths.log_path().display()
        );
        Ok(paths)
    };
    let status = match cli.command {
        Command::History(args) => history::run(&paths()?, &args, &mut out),
        Command::Log(command) => log::run(&paths()?, command, &mut out),
        Command::Mps(command) => mps::run(&paths()?, command, &mut out),
        Command::Soak(command) => soak::run(&paths()?, command, &mut out),
        Command::Job(command) => job::run(&paths()?, command, &mut out),
        Command::Snapshot { dir } => soak::snapshot(dir.as_deref(), &mut out),
        Command::Completions { shell } => completions(shell, &mut out),
        Command::Man { dir } => man::man(dir.as_deref(), &mut out),
    };
    // Flush what was printed before an error too, so partial output is not lost.
    let flushed = out.flush();
    let status = status?;
    flushed?;
    Ok(status)
}
