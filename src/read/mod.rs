//! The read layer: a soak as its events tell it, folded once, and what is rendered from it for
//! others to keep. Between the commands and the log: the supervisor (`soak`) writes the record
//! and never reads through here; views (`view`) present what is read here.
//!
//! - [`fold`]: a soak's events folded once, upcast, as they go by or gathered whole;
//! - [`rows`]: each sample as a typed row, and what the rows tell of the run as they go by
//!   ([`beats`]: a row's beats); [`stepped`]: the steps of the trainer's beats;
//!   [`shown`]: the figures of a soak's record that its views present;
//! - [`artifact`]: the canonical JSON of a soak (this unilab's, and the frozen forms of older
//!   soaks), [`stream`]: written as the log is read, in memory that does not grow with the soak,
//!   [`csv`]: its rows as a spreadsheet;
//! - [`job`]: a job's ranks side by side and its verdict, from each rank's record;
//! - [`naming`]: which soak an id, a prefix or `latest` names.

pub(crate) mod artifact;
pub(crate) mod beats;
pub(crate) mod csv;
pub(crate) mod fold;
pub(crate) mod job;
pub(crate) mod naming;
pub(crate) mod rows;
pub(crate) mod shown;
pub(crate) mod stepped;
pub(crate) mod stream;

/// Milliseconds as the seconds the artifact shows.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}
