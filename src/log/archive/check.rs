//! `log verify`'s look into the archive files: each one present must hold exactly the records
//! its `soak_archived` event committed to, still chained to each other and to the records kept
//! on both sides of their gaps.

use std::path::PathBuf;

use crate::event::soak::Archived;
use crate::event::{Scope, Subject};
use crate::log::chain::{Gap, Hash};
use crate::log::error::LogError;
use crate::log::snapshot::Snapshot;

/// What `log verify` found of one soak's archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveCheck {
    pub soak_id: String,
    pub path: PathBuf,
    pub records: u64,
    /// Whether the file was there (and so checked); a missing one leaves its records unchecked.
    pub present: bool,
}

/// A `soak_archived` event as the walk met it: its sequence, subject and payload.
pub(crate) type Met = (u64, Subject, Box<Archived>);

impl Snapshot {
    /// Checks the archive of each `soak_archived` event `met` whose file is present, against
    /// the event, the `gaps` of the live log (their sides' hashes) and the log's `scope`.
    pub(crate) fn check_archives(
        &self,
        met: &[Met],
        gaps: &[Gap],
        scope: &Scope,
    ) -> Result<Vec<ArchiveCheck>, LogError> {
        let mut checks = Vec::with_capacity(met.len());
        for (_, subject, archived) in met {
            let path = self.archive_path(archived)?;
            let present = std::fs::symlink_metadata(&path).is_ok();
            if present {
                self.check_archive(subject, archived, gaps, scope)?;
            }
            checks.push(ArchiveCheck {
                soak_id: match subject {
                    Subject::Soak(id) => id.clone(),
                    other => other.to_string(),
                },
                path,
                records: archived.records,
                present,
            });
        }
        Ok(checks)
    }

    fn check_archive(
        &self,
        subject: &Subject,
        archived: &Archived,
        gaps: &[Gap],
        scope: &Scope,
    ) -> Result<(), LogError> {
        let path = self.archive_path(archived)?;
        let broken = |seq: u64, what: &str| LogError::Archive {
            path: path.clone(),
            detail: format!("sequence {seq}: {what}"),
        };
        let mut previous: Option<(u64, Hash)> = None;
        self.scan_archive(subject, archived, 1, &mut |record| {
            let seq = record.envelope.seq;
            if record.envelope.scope != *scope {
                let what = format!(
                    "it was recorded for {}, not for the log's {scope}",
                    record.envelope.scope
                );
                return Err(broken(seq, &what));
            }
            let follows =
                previous.is_some_and(|(p, hash)| p + 1 == seq && hash != record.prev_hash);
            let starts_gap = gaps
                .binary_search_by_key(&seq, |g| g.first)
                .is_ok_and(|i| gaps[i].before != record.prev_hash);
            if follows || starts_gap {
                return Err(broken(
                    seq,
                    "its previous hash does not match the hash of the record before it",
                ));
            }
            let ends_gap = gaps
                .binary_search_by_key(&seq, |g| g.last)
                .is_ok_and(|i| gaps[i].after != record.hash);
            if ends_gap {
                return Err(broken(seq, "the record after it does not link to it"));
            }
            previous = Some((seq, record.hash));
            Ok(true)
        })?;
        Ok(())
    }
}
