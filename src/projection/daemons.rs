//! The daemon records: one row for each daemon recorded as started and not yet recorded as
//! stopped, stale or failed.

use redb::TableDefinition;

use super::{Projection, Update};
use crate::log::event::{Envelope, Event, Subject};
use crate::log::tables;
use crate::mps::DaemonRecord;

pub struct Daemons;

impl Projection for Daemons {
    type Row = DaemonRecord;
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = tables::DAEMONS;

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    fn apply(_current: Option<&DaemonRecord>, envelope: &Envelope) -> Update<DaemonRecord> {
        match &envelope.event {
            Event::DaemonStarted { record, .. } => Update::Put(record.clone()),
            Event::DaemonStopped { .. }
            | Event::DaemonStaleCleaned { .. }
            | Event::DaemonStartFailed { .. } => Update::Delete,
            _ => Update::Keep,
        }
    }
}
