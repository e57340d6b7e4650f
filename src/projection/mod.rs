//! Projections: views of the event log, materialised as tables beside it.
//!
//! A projection is a pure fold over the events of one kind of subject ([`Projection`]). The
//! log applies every projection in [`ALL`] inside each append's write transaction, and
//! `log verify` folds the whole log again in memory and compares. Projections are caches: the
//! events are the truth. Adding one touches this folder only: write it, give it its table, and
//! list it in [`ALL`].

pub mod daemons;
pub mod intents;
pub mod jobs;
pub mod leases;
pub mod soaks;

use std::collections::BTreeMap;

use crate::event::Envelope;
use crate::log::codec::{self, CodecError};
use crate::log::{Fold, Projection, Views};

pub use daemons::{DaemonRow, Daemons};
pub use intents::{IntentRow, Intents};
pub use jobs::{DaemonJobs, JobRow};
pub use leases::{Lease, LeaseRow, Leases};
pub use soaks::{Found, SoakState, SoakSummary, Soaks};

/// Every projection the log keeps.
pub static ALL: Views = &[&Daemons, &Soaks, &Intents, &Leases, &DaemonJobs];

/// The rows `projection` holds after `events`, folded in memory through the same [`Fold`] and
/// codec that `log verify` uses: given these events, the projection holds these rows.
pub fn fold<P: Projection>(
    projection: &P,
    events: &[Envelope],
) -> Result<BTreeMap<String, P::Row>, CodecError> {
    let mut fold = Fold::new(projection);
    for envelope in events {
        fold.apply(envelope)?;
    }
    fold.into_rows()
        .into_iter()
        .map(|(key, row)| Ok((key, codec::decode(&row)?)))
        .collect()
}
