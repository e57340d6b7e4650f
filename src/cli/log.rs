//! `unilab log`'s definitions: the event log itself.

use clap::{Args, Subcommand};
use clap_complete::ArgValueCompleter;

use super::complete;

#[derive(Debug, Subcommand)]
pub(crate) enum LogCommand {
    /// Walk the hash chain and rebuild every projection from the events
    Verify,
    /// What the log costs: its size on disk, events and bytes by kind, the largest soaks, its
    /// growth a day, and the room left (free space, your quota) (read-only)
    Stats,
    /// Move finished soaks' records out of the log into an archive file each, beside it, and
    /// give the space back
    #[command(after_help = "\
Each soak's records go, verbatim and compressed, to `events.soak-<ID>.zst` beside the log; the
log keeps one `soak_archived` event that commits to them. `soak show`, `export`, `report`,
`compare` and `history --soak` read an archived soak from its file, as before. `log verify`
checks every archive that is there against the log; remove one only if you can do without that
soak's records.

The log is compacted afterwards, which needs it alone: while another process has it open (a
running soak holds it until its verdict), the command refuses with exit 3 and names who holds
it, and nothing is archived. Only finished soaks (a verdict, or abandoned) are archived.

Examples:
  unilab log archive --finished-before 30d          every soak that ended over 30 days ago
  unilab log archive --finished-before 2026-12-01   ended before that day (local time)
  unilab log archive --soak ff95                    one soak, by id, prefix or `latest`")]
    Archive(ArchiveArgs),
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ArchiveArgs {
    /// The soak to archive: an id, a unique prefix of one or of its random part (`ff95`), or
    /// `latest`
    #[arg(long, value_name = "ID", add = ArgValueCompleter::new(complete::soak_ids))]
    pub soak: Option<String>,
    /// Every soak that finished before then: a duration ago (`30d`, `12h`) or a date
    /// (`2026-12-01`, `2026-12-01T10:00`; local time unless it ends in an offset such as `Z`)
    #[arg(long = "finished-before", value_name = "WHEN", value_parser = crate::time::parse_since)]
    pub finished_before: Option<crate::time::Since>,
}
