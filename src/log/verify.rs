//! `log verify`: walk the whole chain, check it ends at the recorded head and that every gap
//! is an archived soak's, then rebuild the subject index and every view from the events and
//! compare them with the stored tables, then check each archive file present against its event.
//! A view whose rows outlive an archive is rebuilt from the archive's records where they can be
//! read, and its stored row taken where they cannot (see `build`).

use redb::TableHandle;

use super::archive::{ArchiveCheck, Met};
use super::chain::{self, Hash};
use super::error::LogError;
use super::io::{damaged, guarded, open_read_table};
use super::meta::recorded_head;
use super::migrate::SCHEMA_VERSION;
use super::snapshot::Snapshot;
use super::tables;
use super::view::{FoldedView, Views};
use crate::event::{Event, Scope};

/// What `log verify` found in a log that verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub events: u64,
    pub head: Hash,
    pub schema_version: u32,
    pub scope: Option<Scope>,
    /// Each view's table and how many rows it holds.
    pub views: Vec<(String, usize)>,
    /// Each archived soak's archive, and whether it was there to check.
    pub archives: Vec<ArchiveCheck>,
}

impl Snapshot {
    /// Walks the whole chain, then rebuilds the subject index and each of `views` from the
    /// events and compares them with the materialised tables.
    pub fn verify(&self, views: Views) -> Result<VerifyReport, LogError> {
        let path = self.path.as_path();
        let meta = self.meta()?;
        let mut index = EntrySet::new();
        let mut key = String::new();
        let mut folds: Vec<FoldedView> = views.iter().map(|v| FoldedView::new(*v)).collect();
        let mut fault = None;
        let mut archived: Vec<Met> = Vec::new();
        // The stored subject index is read on a thread of its own while the chain is walked
        // (or after it, here, where no thread can be started).
        let stored_keys = index.empty_like();
        let (walker, stored) = std::thread::scope(|threads| {
            let stored = std::thread::Builder::new()
                .spawn_scoped(threads, || self.stored_index(stored_keys))
                .ok();
            let walker = self.replay(|envelope| {
                if fault.is_some() {
                    return;
                }
                if let Some((_, scope)) = &meta
                    && envelope.scope != *scope
                {
                    fault = Some(damaged(
                        path,
                        format!(
                            "sequence {} was recorded for {}, not for the log's {scope}",
                            envelope.seq, envelope.scope
                        ),
                    ));
                    return;
                }
                envelope.subject.key_into(&mut key);
                index.add(&key, envelope.seq);
                if let Event::SoakArchived(event) = &envelope.event {
                    archived.push((envelope.seq, envelope.subject.clone(), event.clone()));
                    // A row kept past the archive is folded from it, or taken as stored where
                    // it cannot be read (which the archives' check below reports).
                    let kept =
                        self.fold_archived(&envelope.subject, event, &mut folds, |fold, key| {
                            fold.seed(key, self.encoded_row(fold.view().table(), key)?);
                            Ok(())
                        });
                    if let Err(e) = kept {
                        fault = Some(e);
                        return;
                    }
                }
                for fold in &mut folds {
                    if let Err(e) = fold.apply(&envelope) {
                        fault = Some(damaged(path, format!("sequence {}: {e}", envelope.seq)));
                    }
                }
            });
            let stored = match stored {
                Some(reading) => reading
                    .join()
                    .unwrap_or_else(|_| Err(damaged(path, "reading the subject index failed"))),
                None => self.stored_index(index.empty_like()),
            };
            (walker, stored)
        });
        let walker = walker?;
        if let Some(fault) = fault {
            return Err(fault);
        }
        if walker.is_empty() && meta.is_none() {
            return Ok(VerifyReport {
                events: 0,
                head: chain::GENESIS,
                schema_version: SCHEMA_VERSION,
                scope: None,
                views: views
                    .iter()
                    .map(|v| (v.table().name().to_owned(), 0))
                    .collect(),
                archives: Vec::new(),
            });
        }
        let Some((schema_version, scope)) = meta else {
            return Err(damaged(path, "it holds events but no metadata"));
        };
        let events = walker.len();
        let (_, head) = walker
            .finish(self.recorded_head()?)
            .map_err(|chain_break| LogError::Chain {
                path: path.to_owned(),
                chain_break,
            })?;
        self.compare_index(&index, &stored?)?;
        let counts = self.compare_views(views, folds)?;
        let archives = self.check_archives(&archived, walker.gaps(), &scope)?;
        Ok(VerifyReport {
            events,
            head,
            schema_version,
            scope: Some(scope),
            views: counts,
            archives,
        })
    }

    /// Each view rebuilt from the events against its stored table: each table's name and how many
    /// rows it holds, or where the first disagrees. A view the log keeps no table of (a log
    /// read as it is, of an older schema than the view's: another scope's, never migrated from
    /// here) is not kept by it, and not compared.
    fn compare_views(
        &self,
        views: Views,
        folds: Vec<FoldedView>,
    ) -> Result<Vec<(String, usize)>, LogError> {
        let path = self.path.as_path();
        let mut counts = Vec::new();
        for (view, fold) in views.iter().zip(folds) {
            let table = view.table();
            let rebuilt = fold.into_rows();
            let Some(stored) = self.table_rows(table)? else {
                continue;
            };
            let count = rebuilt.len();
            let mut rebuilt = rebuilt.into_iter();
            let mut stored = stored.into_iter();
            let disagreement = loop {
                match (rebuilt.next(), stored.next()) {
                    (None, None) => break None,
                    (Some(a), Some(b)) if a == b => {}
                    (a, b) => break a.or(b).map(|(key, _)| key),
                }
            };
            if let Some(key) = disagreement {
                return Err(LogError::Inconsistent {
                    path: path.to_owned(),
                    detail: format!(
                        "the `{}` projection disagrees with the events at `{key}`",
                        table.name()
                    ),
                });
            }
            counts.push((table.name().to_owned(), count));
        }
        Ok(counts)
    }

    /// The quick check of every command that shows records: the log's last record holds what
    /// its own hash says and is the head the last append recorded. It catches records cut from
    /// the end and a changed last record at the cost of one read; `verify` walks everything.
    pub(crate) fn check_head(&self) -> Result<(), LogError> {
        let recorded = self.recorded_head()?;
        let found = self
            .last()?
            .map_or((0, chain::GENESIS), |r| (r.envelope.seq, r.hash));
        match chain::head_break(recorded, found) {
            None => Ok(()),
            Some(chain_break) => Err(LogError::Chain {
                path: self.path.clone(),
                chain_break,
            }),
        }
    }

    /// The head the log recorded with its last append: `(0, GENESIS)` before the first.
    fn recorded_head(&self) -> Result<(u64, Hash), LogError> {
        let path = self.path.as_path();
        guarded(path, || {
            match open_read_table(path, &self.txn, tables::META)? {
                Some(meta) => recorded_head(path, &meta),
                None => Ok((0, chain::GENESIS)),
            }
        })
    }

    /// The stored subject index as a set hashed with `keys`' keys.
    fn stored_index(&self, mut keys: EntrySet) -> Result<EntrySet, LogError> {
        self.each_entry(tables::SUBJECT_INDEX, |(subject, seq), ()| {
            keys.add(subject, seq);
        })?;
        Ok(keys)
    }

    fn compare_index(&self, rebuilt: &EntrySet, stored: &EntrySet) -> Result<(), LogError> {
        if stored == rebuilt {
            return Ok(());
        }
        Err(LogError::Inconsistent {
            path: self.path.clone(),
            detail: format!(
                "the subject index disagrees with the events ({} entries stored, {} events)",
                stored.count, rebuilt.count
            ),
        })
    }
}

/// The entries of a subject index as a set, in constant memory: how many, and the sum of their
/// hashes under keys drawn at random for this run. The index rebuilt from the events and the
/// stored one are compared this way — equal sets give equal sums; different ones collide with a
/// chance of 2^-64, and no one can aim for it without the keys.
#[derive(Debug)]
struct EntrySet {
    count: u64,
    sum: u64,
    keys: std::hash::RandomState,
}

impl EntrySet {
    fn new() -> Self {
        Self {
            count: 0,
            sum: 0,
            keys: std::hash::RandomState::new(),
        }
    }

    /// An empty set hashed with the same keys.
    fn empty_like(&self) -> Self {
        Self {
            count: 0,
            sum: 0,
            keys: self.keys.clone(),
        }
    }

    fn add(&mut self, subject: &str, seq: u64) {
        use std::hash::BuildHasher;
        self.count += 1;
        self.sum = self.sum.wrapping_add(self.keys.hash_one((subject, seq)));
    }
}

impl PartialEq for EntrySet {
    fn eq(&self, other: &Self) -> bool {
        (self.count, self.sum) == (other.count, other.sum)
    }
}
