//! Naming a soak: a full id, a unique prefix of one or of its random part, or `latest` — as
//! every verb that takes a soak, `history --soak` and `log archive` resolve it.

use crate::log::Snapshot;
use crate::projection::{SoakMatch, SoakSummary, Soaks};
use crate::soak::error::SoakError;

/// The soak `id` names, if any; a prefix of several is an error that lists them.
pub(crate) fn named(snapshot: &Snapshot, id: &str) -> Result<Option<SoakSummary>, SoakError> {
    match Soaks::find(snapshot, id)? {
        SoakMatch::One(summary) => Ok(Some(*summary)),
        SoakMatch::None => Ok(None),
        SoakMatch::Ambiguous(candidates) => Err(SoakError::Ambiguous {
            id: id.to_owned(),
            candidates,
        }),
    }
}
