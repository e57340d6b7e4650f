//! Projections: views of the event log, materialised as tables beside it.
//!
//! A projection is a pure fold over the events of one kind of subject ([`Projection`]). The
//! log applies every view it is handed (`crate::read::VIEWS`: these projections, and what the
//! read layer keeps beside them) inside each append's write transaction, and `log verify`
//! folds the whole log again in memory and compares. Projections are caches: the events are
//! the truth. Adding one: write it here, give it its table, and list it in `read::VIEWS`.

pub(crate) mod daemons;
pub(crate) mod intents;
pub(crate) mod jobs;
pub(crate) mod leases;
pub(crate) mod limits;
pub(crate) mod soaks;

pub use daemons::{DaemonRow, Daemons};
pub(crate) use intents::{IntentRow, Intents};
pub(crate) use jobs::DaemonJobs;
pub(crate) use leases::Leases;
pub(crate) use limits::DaemonLimitsView;
pub(crate) use soaks::{SoakMatch, Soaks};
pub use soaks::{SoakState, SoakSummary};

#[cfg(test)]
pub(crate) use in_memory::fold;

#[cfg(test)]
mod in_memory {
    use std::collections::BTreeMap;

    use crate::event::Envelope;
    use crate::log::codec::{self, CodecError};
    use crate::log::{FoldedView, Projection};

    /// The rows `projection` holds after `events`, folded in memory through the same [`FoldedView`] and
    /// codec that `log verify` uses: given these events, the projection holds these rows.
    pub(crate) fn fold<P: Projection>(
        projection: &P,
        events: &[Envelope],
    ) -> Result<BTreeMap<String, P::Row>, CodecError> {
        let mut fold = FoldedView::new(projection);
        for envelope in events {
            fold.apply(envelope)?;
        }
        fold.into_rows()
            .into_iter()
            .map(|(key, row)| Ok((key, codec::decode(&row)?)))
            .collect()
    }
}
