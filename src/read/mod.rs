//! The read layer: a soak as its events tell it, folded once into a typed record, and what is
//! rendered from it for others to keep. Between the commands and the log: the supervisor
//! (`soak`) writes the record and never reads through here (it is handed how its artifact and
//! report are rendered); views (`view`) present what is read here, and parse nothing back.
//!
//! - [`fold`]: a soak's events folded once, upcast, as they go by or gathered whole;
//! - [`record`]: the soak's typed record, every figure its views present computed once from
//!   the fold and its rows, what its schema did not record decided there as unknown ([`shown`]:
//!   its parts; [`parameters`]: what it ran with; [`stepped`]: the steps of the trainer's
//!   beats; [`progress`]: the progress as of its latest sample, as its supervisor recorded
//!   it);
//! - [`rows`]: each sample as a typed row, and what the rows tell of the run as they go by
//!   ([`beats`]: a row's beats);
//! - [`artifact`]: the canonical JSON of a soak (this unilab's, and the frozen forms of older
//!   soaks), [`stream`]: written as the log is read, in memory that does not grow with the soak,
//!   [`csv`]: its rows as a spreadsheet;
//! - [`signature`]: where a captured process stood, as a short signature, and ranks grouped by
//!   it;
//! - [`job`]: a job's ranks side by side and its verdict, from each rank's record (and what
//!   the log keeps of each, a view of its own: [`VIEWS`] lists every view the log keeps);
//! - [`naming`]: which soak an id, a prefix or `latest` names;
//! - [`sketch`]: a record made up from a few figures, for the tests of the views.

pub(crate) mod artifact;
pub(crate) mod beats;
pub(crate) mod collectives;
pub(crate) mod csv;
pub(crate) mod fold;
pub(crate) mod job;
pub(crate) mod naming;
pub(crate) mod parameters;
pub(crate) mod progress;
pub(crate) mod record;
pub(crate) mod rows;
pub(crate) mod shown;
pub(crate) mod signature;
pub(crate) mod sketch;
pub(crate) mod stepped;
pub(crate) mod stream;

use crate::log::Views;
use crate::projection::{DaemonJobs, DaemonLimitsView, Daemons, Intents, Leases, Soaks};

/// Every view the log keeps: the projections' ([`crate::projection::ALL`]) and what the job
/// views keep of each soak ([`job::soaks::kept`]). Every command that writes to the log hands
/// it these, and `log verify` checks them; a view missing here would be left behind by the
/// writers that know it not.
pub static VIEWS: Views = &[
    &Daemons,
    &Soaks,
    &Intents,
    &Leases,
    &DaemonJobs,
    &DaemonLimitsView,
    &job::soaks::kept::KeptRanks,
];

/// Milliseconds as the seconds the artifact shows.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}
