//! A view's table built from the events. When a log is opened with a view it has no table for
//! — a log of an older schema that gained the view (the migration to it), one migrated by a
//! reader that was handed no views, or a view whose rows changed shape and so took a table of
//! another name — the opening write transaction folds the whole log through the view, as `log
//! verify` folds it, and writes the rows. Both share how an archived soak is folded for a view
//! whose rows outlive the archive ([`View::kept_past_archive`]): over the records in its
//! archive file, where it can be read.
//!
//! A log that cannot be folded whole (a damaged record) is opened all the same, its table left
//! to the appends: a reader takes a soak the table holds no row of for one it must read from
//! its records, and `log verify` names the damage.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{Database, TableHandle, WriteTransaction};

use super::error::LogError;
use super::io::{damaged, open_read_table, unreadable};
use super::snapshot::Snapshot;
use super::view::{FoldedView, View, Views};
use crate::event::soak::Archived;
use crate::event::{Event, Subject};

/// The views among `views` whose table the log lacks.
fn lacking<'v>(
    tables: impl Iterator<Item = redb::UntypedTableHandle>,
    views: &'v [&'v dyn View],
) -> Vec<&'v dyn View> {
    let have: Vec<String> = tables.map(|t| t.name().to_owned()).collect();
    views
        .iter()
        .filter(|v| !have.iter().any(|name| name == v.table().name()))
        .copied()
        .collect()
}

/// Whether the log read in `txn` lacks the table of one of `views`.
pub(super) fn lacks_any(
    path: &Path,
    txn: &redb::ReadTransaction,
    views: Views,
) -> Result<bool, LogError> {
    let tables = txn.list_tables().map_err(unreadable(path))?;
    Ok(!lacking(tables, views).is_empty())
}

/// Builds, in `txn` (which holds the write lock of `db`), the table of each of `views` that the
/// log lacks, from its events as they stand (see the module's docs).
pub(super) fn build_lacking(
    db: &Database,
    path: &Path,
    txn: &WriteTransaction,
    views: Views,
) -> Result<(), LogError> {
    let tables = txn.list_tables().map_err(unreadable(path))?;
    let missing = lacking(tables, views);
    if missing.is_empty() {
        return Ok(());
    }
    // The write lock is held: what this read sees is what the transaction appends to.
    let snapshot = Snapshot::begin(db, path)?;
    let folded = snapshot.fold_views(&missing);
    drop(snapshot);
    let Ok(folded) = folded else {
        return Ok(());
    };
    for (view, rows) in missing.iter().zip(folded) {
        let mut table = txn.open_table(view.table()).map_err(unreadable(path))?;
        for (key, row) in rows {
            table
                .insert(key.as_str(), row.as_slice())
                .map_err(unreadable(path))?;
        }
    }
    Ok(())
}

impl Snapshot {
    /// Each of `views` folded over the whole log, archived soaks' records included where their
    /// archives can be read: the rows its table must hold.
    fn fold_views(&self, views: &[&dyn View]) -> Result<Vec<BTreeMap<String, Vec<u8>>>, LogError> {
        let path = self.path.clone();
        let mut folds: Vec<FoldedView> = views.iter().map(|v| FoldedView::new(*v)).collect();
        let mut fault = None;
        self.replay(|envelope| {
            if fault.is_some() {
                return;
            }
            if let Event::SoakArchived(archived) = &envelope.event {
                self.fold_archived(&envelope.subject, archived, &mut folds, |_, _| Ok(()))
                    .unwrap_or_else(|e| fault = Some(e));
            }
            for fold in &mut folds {
                if let Err(e) = fold.apply(&envelope) {
                    fault = Some(damaged(&path, format!("sequence {}: {e}", envelope.seq)));
                }
            }
        })?;
        match fault {
            Some(fault) => Err(fault),
            None => Ok(folds.into_iter().map(FoldedView::into_rows).collect()),
        }
    }

    /// Folds the records `archived` moved out of the live log into each of `folds` whose view
    /// keeps its rows past an archive; where the archive cannot be read (missing, damaged),
    /// `unread` is handed each such fold and the subject's key instead, and nothing of the
    /// archive is folded.
    pub(super) fn fold_archived(
        &self,
        subject: &Subject,
        archived: &Archived,
        folds: &mut [FoldedView],
        mut unread: impl FnMut(&mut FoldedView, &str) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let keeping: Vec<usize> = (0..folds.len())
            .filter(|&i| {
                let view = folds[i].view();
                view.kept_past_archive() && view.key(subject).is_some()
            })
            .collect();
        if keeping.is_empty() {
            return Ok(());
        }
        let mut fresh: Vec<FoldedView> = keeping
            .iter()
            .map(|&i| FoldedView::new(folds[i].view()))
            .collect();
        let path = self.path.clone();
        let read = self.scan_archive(subject, archived, 1, &mut |record| {
            for fold in &mut fresh {
                fold.apply(&record.envelope).map_err(|e| {
                    damaged(&path, format!("sequence {}: {e}", record.envelope.seq))
                })?;
            }
            Ok::<_, LogError>(true)
        });
        for (&i, fresh) in keeping.iter().zip(fresh) {
            let fold = &mut folds[i];
            let Some(key) = fold.view().key(subject).map(str::to_owned) else {
                continue;
            };
            match &read {
                Ok(_) => fold.seed(&key, fresh.into_rows().remove(&key)),
                Err(_) => unread(fold, &key)?,
            }
        }
        Ok(())
    }

    /// The row a view's table holds at `key`, as stored; none for a missing table or row.
    pub(super) fn encoded_row(
        &self,
        table: super::tables::ViewTable,
        key: &str,
    ) -> Result<Option<Vec<u8>>, LogError> {
        let path = self.path.as_path();
        super::io::guarded(path, || {
            let Some(table) = open_read_table(path, &self.txn, table)? else {
                return Ok(None);
            };
            let row = table.get(key).map_err(unreadable(path))?;
            Ok(row.map(|r| r.value().to_vec()))
        })
    }
}
