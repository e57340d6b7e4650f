//! Archiving: finished soaks' records copied into archive files, made durable, then removed
//! from the live log in the transaction that appends each soak's `soak_archived` event.
//!
//! One pass over the log's records does it all: the soaks' records go to their archives (each
//! checked against its own hash and its link on the way, so that damage is not archived), and
//! the records kept tell the gaps the live log is left with, whose digest the events commit to.
//! The transaction goes through the log's one [`Appender`]: it checks the head, the pass reads
//! and removes records through its tables, and the events are appended by it as any other.

use std::path::{Path, PathBuf};

use redb::{ReadableTable, Table, WriteTransaction};

use super::file::{self, ArchiveWriter};
use crate::event::soak::{Archived, ArchivedRun, ArchivedSoak};
use crate::event::{Event, StoredEnvelope, Subject};
use crate::log::appender::Appender;
use crate::log::chain::{self, ChainBreak, ChainFault, Gap, Hash, RecordsDigest};
use crate::log::codec;
use crate::log::error::LogError;
use crate::log::handle::EventLog;
use crate::log::io::{damaged, guarded, unreadable};

/// A soak to archive: its id, and what the live log keeps of it (the `soaks` view's row and its
/// command's run time, which its records can no longer be folded for).
#[derive(Debug, Clone)]
pub struct ToArchive {
    pub soak_id: String,
    pub soak: ArchivedSoak,
}

/// A soak archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveDone {
    pub soak_id: String,
    /// The archive file.
    pub path: PathBuf,
    /// The sequence of its `soak_archived` event.
    pub seq: u64,
    pub records: u64,
    /// The records' stored bytes, and what the archive file takes.
    pub bytes: u64,
    pub file_bytes: u64,
}

/// One soak's archive as it is written.
struct Plan {
    soak_id: String,
    soak: ArchivedSoak,
    file: String,
    writer: ArchiveWriter,
    runs: Vec<ArchivedRun>,
    /// The last sequence added.
    end: u64,
    digest: RecordsDigest,
    records: u64,
    bytes: u64,
}

impl Plan {
    fn add(&mut self, seq: u64, hash: &Hash, stored: &[u8]) -> std::io::Result<()> {
        self.writer.push(seq, stored)?;
        match self.runs.last_mut() {
            Some(run) if seq == self.end + 1 => run.removed += 1,
            _ => self.runs.push(ArchivedRun {
                kept: seq - self.end - 1,
                removed: 1,
            }),
        }
        self.end = seq;
        self.digest.add(seq, hash);
        self.records += 1;
        self.bytes += stored.len() as u64;
        Ok(())
    }
}

impl EventLog {
    /// Moves every record of each of `soaks` into an archive file beside the log (see
    /// `log::archive`), and appends a `soak_archived` event for each, in one transaction: all
    /// of them or none. The archives are durable before the transaction commits. Soaks with no
    /// records in the live log are left out.
    pub fn archive(&self, soaks: Vec<ToArchive>) -> Result<Vec<ArchiveDone>, LogError> {
        if soaks.is_empty() {
            return Ok(Vec::new());
        }
        guarded(&self.path, || {
            self.with_db(|db| {
                let txn = db.begin_write().map_err(unreadable(&self.path))?;
                let mut unclaimed = Unclaimed::default();
                self.archive_in(&txn, soaks, &mut unclaimed)
                    .and_then(|done| {
                        self.check_still_at_path()?;
                        Ok(done)
                    })
                    .and_then(|done| {
                        // Kept whatever the commit says: a commit that fails may still have
                        // made it durable, and then the archives hold the only copy.
                        unclaimed.claim();
                        txn.commit().map_err(unreadable(&self.path))?;
                        Ok(done)
                    })
            })
        })
    }

    /// Writes the archives, removes their records and appends their events in `txn`; each
    /// archive that takes its name goes into `unclaimed` until the transaction commits.
    fn archive_in(
        &self,
        txn: &WriteTransaction,
        soaks: Vec<ToArchive>,
        unclaimed: &mut Unclaimed,
    ) -> Result<Vec<ArchiveDone>, LogError> {
        let path = self.path.as_path();
        // The archive's events are no samples: nothing is packed against the handle's last.
        let mut appender =
            Appender::open(txn, path, (&self.scope, &*self.clock), self.views, None)?;
        let head = appender.head();
        let wanted = wanted(path, appender.index(), &soaks)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let log_name = path.file_name().unwrap_or_default().to_string_lossy();
        let mut plans = Vec::with_capacity(soaks.len());
        for ToArchive { soak_id, soak } in soaks {
            let file = file::name_for(&log_name, &soak_id);
            let target = dir.join(&file);
            plans.push(Plan {
                writer: ArchiveWriter::create(&target).map_err(write_failed(&target))?,
                soak_id,
                soak,
                file,
                runs: Vec::new(),
                end: 0,
                digest: RecordsDigest::default(),
                records: 0,
                bytes: 0,
            });
        }
        let gaps = copy_out(path, dir, appender.records(), &wanted, &mut plans, head)?;
        let gaps_digest = chain::gaps_digest(&gaps);
        let mut done = Vec::new();
        let mut events = Vec::new();
        for plan in plans {
            if plan.records == 0 {
                continue;
            }
            let target = dir.join(&plan.file);
            plan.writer.finish().map_err(write_failed(&target))?;
            unclaimed.0.push(target.clone());
            done.push(ArchiveDone {
                soak_id: plan.soak_id.clone(),
                file_bytes: std::fs::metadata(&target).map_or(0, |m| m.len()),
                path: target,
                seq: 0,
                records: plan.records,
                bytes: plan.bytes,
            });
            events.push((
                Subject::Soak(plan.soak_id),
                Event::SoakArchived(Box::new(Archived {
                    file: plan.file,
                    soak: plan.soak,
                    runs: plan.runs,
                    records: plan.records,
                    bytes: plan.bytes,
                    records_digest: plan.digest.finish(),
                    gaps_digest,
                })),
            ));
        }
        remove(path, &mut appender, &events)?;
        for ((subject, event), done) in events.into_iter().zip(&mut done) {
            done.seq = appender.push(subject, event)?.seq;
        }
        appender.finish()?;
        Ok(done)
    }
}

/// Archives written by a run whose transaction has not committed: no event claims them, and
/// they are removed if it fails before its commit.
#[derive(Default)]
struct Unclaimed(Vec<PathBuf>);

impl Unclaimed {
    /// The transaction is committing: what it archived stays.
    fn claim(mut self) {
        self.0.clear();
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn write_failed(path: &Path) -> impl Fn(std::io::Error) -> LogError + '_ {
    move |source| LogError::ArchiveWrite {
        path: path.to_owned(),
        source,
    }
}

/// Every sequence of the soaks, in order, each with the index of its soak in `soaks`.
fn wanted(
    path: &Path,
    index: &Table<(&str, u64), ()>,
    soaks: &[ToArchive],
) -> Result<Vec<(u64, usize)>, LogError> {
    let mut wanted = Vec::new();
    for (i, soak) in soaks.iter().enumerate() {
        let key = Subject::Soak(soak.soak_id.clone()).key();
        for entry in index
            .range((key.as_str(), 0)..=(key.as_str(), u64::MAX))
            .map_err(unreadable(path))?
        {
            wanted.push((entry.map_err(unreadable(path))?.0.value().1, i));
        }
    }
    wanted.sort_unstable();
    Ok(wanted)
}

/// One pass over the records: each wanted one (checked against its own hash and its link to
/// the record before) into its soak's archive; the gaps the kept ones will have between them,
/// up to `head`, returned.
fn copy_out(
    path: &Path,
    dir: &Path,
    records: &Table<u64, &[u8]>,
    wanted: &[(u64, usize)],
    plans: &mut [Plan],
    (head, head_hash): (u64, Hash),
) -> Result<Vec<Gap>, LogError> {
    let broken = |seq, fault| LogError::Chain {
        path: path.to_owned(),
        chain_break: ChainBreak { seq, fault },
    };
    let mut wanted = wanted.iter().peekable();
    let mut previous: Option<(u64, Hash)> = None;
    let mut kept = (0, chain::GENESIS);
    let mut gaps = Vec::new();
    for entry in records.iter().map_err(unreadable(path))? {
        let (key, stored) = entry.map_err(unreadable(path))?;
        let (key, stored) = (key.value(), stored.value());
        let raw = chain::split(stored).ok_or_else(|| broken(key, ChainFault::Truncated))?;
        match wanted.peek() {
            Some(&&(seq, soak)) if seq == key => {
                wanted.next();
                if !chain::hash_holds(stored) {
                    return Err(broken(key, ChainFault::HashMismatch));
                }
                if previous.is_some_and(|(p, hash)| p + 1 == key && hash != raw.prev_hash) {
                    return Err(broken(key, ChainFault::BrokenLink));
                }
                // The archive's reader decodes what the log's does: a record it could not (which
                // only an older unilab could have written) is damage, never archived.
                if let Err(e) = codec::decodes_as::<StoredEnvelope>(raw.body) {
                    return Err(broken(key, ChainFault::Undecodable(e.to_string())));
                }
                let plan = &mut plans[soak];
                plan.add(key, &raw.hash, stored)
                    .map_err(write_failed(&dir.join(&plan.file)))?;
            }
            Some(&&(seq, _)) if seq < key => return Err(missing(path, seq)),
            _ => {
                if key > kept.0 + 1 {
                    gaps.push(Gap {
                        first: kept.0 + 1,
                        last: key - 1,
                        before: kept.1,
                        after: raw.prev_hash,
                    });
                }
                kept = (key, raw.hash);
            }
        }
        previous = Some((key, raw.hash));
    }
    if let Some(&(seq, _)) = wanted.next() {
        return Err(missing(path, seq));
    }
    // The events appended next follow the head.
    if head > kept.0 {
        gaps.push(Gap {
            first: kept.0 + 1,
            last: head,
            before: kept.1,
            after: head_hash,
        });
    }
    Ok(gaps)
}

fn missing(path: &Path, seq: u64) -> LogError {
    damaged(
        path,
        format!("the subject index names record {seq}, which is missing"),
    )
}

/// Removes the archived records and their subject's index entries.
fn remove(
    path: &Path,
    appender: &mut Appender,
    events: &[(Subject, Event)],
) -> Result<(), LogError> {
    for (subject, event) in events {
        let Event::SoakArchived(archived) = event else {
            continue;
        };
        for range in archived.ranges() {
            let (first, last) =
                range.ok_or_else(|| damaged(path, "the runs of an archive do not add up"))?;
            appender
                .records()
                .retain_in(first..=last, |_, _| false)
                .map_err(unreadable(path))?;
        }
        let key = subject.key();
        appender
            .index()
            .retain_in((key.as_str(), 0)..=(key.as_str(), u64::MAX), |_, _| false)
            .map_err(unreadable(path))?;
    }
    Ok(())
}
