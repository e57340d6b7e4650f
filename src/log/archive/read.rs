//! Reading a soak's records wherever they are: in the live log, or moved to an archive file.

use std::path::{Path, PathBuf};

use super::file::{self, ReadError};
use crate::event::soak::Archived;
use crate::event::{Event, Subject};
use crate::log::ahead::read_ahead;
use crate::log::chain::{self, RecordsDigest};
use crate::log::error::LogError;
use crate::log::pack::Unpacker;
use crate::log::snapshot::{Record, Snapshot, decode_hashed};

impl Snapshot {
    /// Calls `visit` with every record of `subject` from sequence `from` on, in order, until it
    /// returns `false`: the live log's records, as [`scan_subject`](Self::scan_subject) gives
    /// them, and in place of a `soak_archived` event the records it moved to its archive file,
    /// read from there and decoded as the live log's are (each checked against its own hash).
    /// The `soak_archived` event itself is not given: these are the subject's records as they
    /// were recorded. Every reader of a soak's records reads them through here.
    pub fn scan_records<E: From<LogError>>(
        &self,
        subject: &Subject,
        from: u64,
        mut visit: impl FnMut(Record) -> Result<bool, E>,
    ) -> Result<(), E> {
        self.scan_subject(subject, from, |record| match &record.envelope.event {
            Event::SoakArchived(archived) => self.scan_archive(subject, archived, from, &mut visit),
            _ => visit(record),
        })
    }

    /// Where the archive of `archived` is: beside the log.
    pub(crate) fn archive_path(&self, archived: &Archived) -> Result<PathBuf, LogError> {
        if !file::is_plain_name(&archived.file) {
            return Err(LogError::Damaged {
                path: self.path.clone(),
                detail: format!(
                    "a `soak_archived` event names `{}`, which is not a file name",
                    crate::text::foreign(&archived.file)
                ),
            });
        }
        Ok(self
            .path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&archived.file))
    }

    /// Calls `visit` with the records of `subject` that `archived` moved, from sequence `from`
    /// on, read from its archive file, which must hold exactly what the event committed to: in
    /// order, each sequence the event names, of `subject`, as many as it says and with the
    /// digest it recorded (read through even when `visit` stops early). Whether `visit` asked
    /// for more.
    pub(crate) fn scan_archive<E: From<LogError>>(
        &self,
        subject: &Subject,
        archived: &Archived,
        from: u64,
        visit: &mut dyn FnMut(Record) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let last = archived
            .ranges()
            .last()
            .flatten()
            .map_or(0, |(_, last)| last);
        if last < from {
            return Ok(true);
        }
        let path = self.archive_path(archived)?;
        let unlike = |detail: String| LogError::Archive {
            path: path.clone(),
            detail,
        };
        let mut expected = Expected::new(archived);
        let mut digest = RecordsDigest::default();
        let mut records = 0u64;
        let mut visiting = true;
        let mut unpacker = Unpacker::starting(subject);
        read_ahead(
            |give| file::read(&path, give).map_err(|e| read_failed(&path, subject, e)),
            |seq, stored, hash_holds| {
                match expected.next() {
                    Some(want) if want == seq => {}
                    Some(want) => {
                        let detail =
                            format!("it holds sequence {seq} where sequence {want} was archived");
                        return Err(E::from(unlike(detail)));
                    }
                    None => {
                        let detail = format!("it holds sequence {seq}, past the last one archived");
                        return Err(E::from(unlike(detail)));
                    }
                }
                records += 1;
                // Records after `visit` had enough are only counted and digested: an archive is
                // vouched for whole, however much of it is read. Those before `from` are
                // decoded too, as the samples after them are packed against theirs.
                if !visiting {
                    let hash = chain::stored_hash(stored).unwrap_or(chain::GENESIS);
                    digest.add(seq, &hash);
                    return Ok(true);
                }
                let record = decode_hashed(&path, seq, stored, hash_holds)
                    .and_then(|record| unpacker.record(self, record))
                    .map_err(|e| match e {
                        LogError::Chain { chain_break, .. } => unlike(chain_break.to_string()),
                        LogError::Damaged { detail, .. } => unlike(detail),
                        other => other,
                    })?;
                digest.add(seq, &record.hash);
                if record.envelope.subject != *subject {
                    let detail = format!(
                        "sequence {seq} is of `{}`, not of `{subject}`",
                        record.envelope.subject
                    );
                    return Err(E::from(unlike(detail)));
                }
                if seq >= from {
                    visiting = visit(record)?;
                }
                Ok(true)
            },
        )?;
        if records != archived.records || digest.finish() != archived.records_digest {
            return Err(E::from(unlike(format!(
                "it holds {records} records that are not the {} the log committed to: it was changed, or is another log's",
                archived.records
            ))));
        }
        Ok(visiting)
    }
}

/// The archive's error for a read that failed.
fn read_failed(path: &Path, subject: &Subject, error: ReadError) -> LogError {
    match error {
        ReadError::Missing => LogError::ArchiveMissing {
            path: path.to_owned(),
            soak_id: match subject {
                Subject::Soak(id) => id.clone(),
                other => other.to_string(),
            },
        },
        ReadError::Access(source) => LogError::ArchiveAccess {
            path: path.to_owned(),
            source,
        },
        ReadError::NotAFile(what) => LogError::ArchiveNotAFile {
            path: path.to_owned(),
            what,
        },
        other => LogError::Archive {
            path: path.to_owned(),
            detail: other.to_string(),
        },
    }
}

/// The sequences an archive must hold, in order: those its event's runs name.
struct Expected<'a> {
    ranges: Box<dyn Iterator<Item = Option<(u64, u64)>> + 'a>,
    current: Option<(u64, u64)>,
}

impl<'a> Expected<'a> {
    fn new(archived: &'a Archived) -> Self {
        Self {
            ranges: Box::new(archived.ranges()),
            current: None,
        }
    }

    fn next(&mut self) -> Option<u64> {
        loop {
            match self.current {
                Some((first, last)) if first <= last => {
                    self.current = first.checked_add(1).map(|next| (next, last));
                    return Some(first);
                }
                _ => self.current = Some(self.ranges.next()??),
            }
        }
    }
}
