//! The internal subcommands, which unilab runs itself and a user never types: `__soak-guard`,
//! the process between a soak's supervisor and its command, and `__leash`, which runs a
//! long-lived tool until the process that started it is gone.
//!
//! They are a command line of their own, apart from [`super::Cli`]: nothing made from that —
//! `--help`, clap's "did you mean", the completion scripts, the shell's dynamic completion, the
//! manual pages — can offer them, since it does not know them. unilab starts them with their
//! name as the first argument, and only there are they recognised. Each name is its owner's
//! (`soak::guard::SUBCOMMAND`, `tool::LEASH`): this file only recognises them.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use crate::soak::guard::SUBCOMMAND as SOAK_GUARD;

#[derive(Debug, Parser)]
#[command(name = "unilab")]
pub(crate) enum Internal {
    /// The process between a soak's supervisor and its command
    #[command(name = SOAK_GUARD)]
    SoakGuard {
        #[arg(long)]
        status: PathBuf,
        #[arg(last = true)]
        command: Vec<OsString>,
    },
    /// Runs a long-lived tool until the process that started it is gone
    #[command(name = crate::tool::LEASH)]
    Leash {
        #[arg(last = true)]
        command: Vec<OsString>,
    },
}

impl Internal {
    /// The internal subcommand that `args` (the program's name first) start with, parsed;
    /// `None` when their first word names none, for the user's command line to be parsed.
    pub(crate) fn named_in(args: &[OsString]) -> Option<Result<Internal, clap::Error>> {
        let first = args.get(1)?;
        [SOAK_GUARD, crate::tool::LEASH]
            .contains(&first.to_str()?)
            .then(|| Internal::try_parse_from(args))
    }
}
