//! Dynamic shell completion (`COMPLETE=bash unilab`): the shell asks the binary itself, which
//! offers what is recorded — soak ids, daemon names — besides the static subcommands and flags.
//!
//! A completer only reads: this user's log on this host, opened strictly read-only (never
//! repaired, migrated or appended to), under the `--root` on the line being completed, else the
//! usual state root. Anything that goes wrong offers nothing and says nothing: a completion never
//! prints an error into the user's prompt.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use clap_complete::CompletionCandidate;

use crate::log::{LogReader, Snapshot};
use crate::paths::StatePaths;
use crate::projection::{Daemons, Soaks};

/// Answers the shell and exits when it asks for completions (the variable `COMPLETE` names a
/// shell clap_complete knows); returns otherwise, for a normal run — also when `COMPLETE` holds
/// something else, which is then not unilab's to judge.
pub(crate) fn answer_the_shell_if_asked() {
    let asked = std::env::var("COMPLETE").is_ok_and(|shell| {
        clap_complete::env::Shells::builtins()
            .completer(&shell)
            .is_some()
    });
    if !asked {
        return;
    }
    let current_dir = std::env::current_dir().ok();
    let answered = clap_complete::CompleteEnv::with_factory(|| {
        <super::Cli as clap::CommandFactory>::command()
    })
    .try_complete(std::env::args_os(), current_dir.as_deref());
    // An error (an unknown shell, a closed pipe) leaves the shell without candidates, quietly.
    std::process::exit(if matches!(answered, Ok(true)) { 0 } else { 1 })
}

/// Soak ids that start with `current`, or whose random part does (`ff95`), and `latest`.
pub(crate) fn soak_ids(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let mut candidates = from_the_log(|snapshot| {
        let mut soaks = Soaks::rows(snapshot).ok()?;
        // Newest first: the one wanted most often.
        soaks.sort_by_key(|soak| std::cmp::Reverse(soak.first_seq));
        Some(
            soaks
                .into_iter()
                .filter(|soak| {
                    soak.soak_id.starts_with(current)
                        || soak.soak_id.rsplit_once('-').is_some_and(|(_, random)| {
                            !current.is_empty() && random.starts_with(current)
                        })
                })
                .map(|soak| {
                    CompletionCandidate::new(soak.soak_id.clone())
                        .help(Some(soak.state.as_str().into()))
                })
                .collect(),
        )
    });
    if "latest".starts_with(current) {
        candidates.push(CompletionCandidate::new("latest").help(Some("the newest soak".into())));
    }
    candidates
}

/// The names of the daemons recorded as running that start with `current`.
pub(crate) fn daemon_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    from_the_log(|snapshot| {
        let daemons = Daemons::rows(snapshot).ok()?;
        Some(
            daemons
                .into_iter()
                .filter(|row| row.0.name.starts_with(current))
                .map(|row| {
                    let gpus = row.0.gpu_uuids.join(",");
                    CompletionCandidate::new(row.0.name).help(Some(gpus.into()))
                })
                .collect(),
        )
    })
}

/// What `read` finds in the log, or nothing at all when there is no log, it cannot be read, or
/// reading it panics.
fn from_the_log(
    read: impl FnOnce(&Snapshot) -> Option<Vec<CompletionCandidate>> + std::panic::UnwindSafe,
) -> Vec<CompletionCandidate> {
    std::panic::catch_unwind(|| {
        let paths = StatePaths::resolve(root_on_the_line().as_deref()).ok()?;
        let reader = LogReader::open_other_hosts(&paths.log_path()).ok()??;
        read(&reader.snapshot().ok()?)
    })
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// The `--root` of the line being completed, which the shell passes after `--`.
fn root_on_the_line() -> Option<PathBuf> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let line = args
        .iter()
        .position(|a| a == "--")
        .map_or(&args[..], |at| &args[at + 1..]);
    let mut root = None;
    let mut words = line.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        } else if word == "--root" {
            root = words.next().map(PathBuf::from);
        } else if let Some(value) = word.to_str().and_then(|w| w.strip_prefix("--root=")) {
            root = Some(PathBuf::from(value));
        }
    }
    root
}
