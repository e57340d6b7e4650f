//! The blake3 hash chain over stored records.
//!
//! A stored record is `prev_hash ‖ hash ‖ body`, where `body` is the encoded [`Envelope`] and
//! `hash = blake3(prev_hash ‖ body)`. The first record's `prev_hash` is [`GENESIS`]. Changing,
//! dropping or reordering any record breaks the chain at that record or the next, and this module
//! names the first sequence where it breaks. redb does not verify page checksums on plain reads;
//! this chain is what makes silent corruption and tampering visible.

use super::codec;
use crate::event::{StoredEnvelope, StoredEvent};

pub(crate) const HASH_LEN: usize = 32;
pub type Hash = [u8; HASH_LEN];

/// The `prev_hash` of sequence 1.
pub const GENESIS: Hash = [0; HASH_LEN];

const HEADER_LEN: usize = 2 * HASH_LEN;

/// A stored record split into its parts, borrowing the stored bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawRecord<'a> {
    pub prev_hash: Hash,
    pub hash: Hash,
    pub body: &'a [u8],
}

pub(crate) fn hash_of(prev_hash: &Hash, body: &[u8]) -> Hash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(prev_hash);
    hasher.update(body);
    *hasher.finalize().as_bytes()
}

/// Builds the stored bytes of a record that follows `prev_hash`.
pub fn seal(prev_hash: &Hash, body: &[u8]) -> (Vec<u8>, Hash) {
    let hash = hash_of(prev_hash, body);
    let mut stored = Vec::with_capacity(HEADER_LEN + body.len());
    stored.extend_from_slice(prev_hash);
    stored.extend_from_slice(&hash);
    stored.extend_from_slice(body);
    (stored, hash)
}

/// Splits stored bytes; `None` when they are too short to hold the two hashes.
pub(crate) fn split(stored: &[u8]) -> Option<RawRecord<'_>> {
    if stored.len() < HEADER_LEN {
        return None;
    }
    let (prev, rest) = stored.split_at(HASH_LEN);
    let (hash, body) = rest.split_at(HASH_LEN);
    Some(RawRecord {
        prev_hash: prev.try_into().ok()?,
        hash: hash.try_into().ok()?,
        body,
    })
}

/// Whether stored bytes hold what their own hash says (`false` too when they cannot hold one):
/// the costly part of checking a record, which a reader may do ahead, on another thread.
pub(crate) fn hash_holds(stored: &[u8]) -> bool {
    split(stored).is_some_and(|raw| hash_of(&raw.prev_hash, raw.body) == raw.hash)
}

/// The hash at the tail of a stored record, without checking it.
pub fn stored_hash(stored: &[u8]) -> Option<Hash> {
    split(stored).map(|r| r.hash)
}

/// Why the chain does not verify at a sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainFault {
    #[error("expected sequence {expected}, found key {found}: a record is missing or out of order")]
    Gap { expected: u64, found: u64 },
    #[error("the record is too short to hold its hashes")]
    Truncated,
    #[error("its previous hash does not match the hash of the record before it")]
    BrokenLink,
    #[error("its contents do not match its hash: the record was modified")]
    HashMismatch,
    #[error("its contents cannot be decoded: {0}")]
    Undecodable(String),
    #[error("it is stored under key {key} but says it is sequence {body}")]
    MisfiledSequence { key: u64, body: u64 },
    #[error("it is missing: the log's recorded head is sequence {head}")]
    MissingTail { head: u64 },
    #[error("the log's recorded head is sequence {head}, but the chain goes on past it")]
    BeyondHead { head: u64 },
    #[error("its hash differs from the log's recorded head")]
    HeadMismatch,
    #[error("it is a `soak_archived` event whose runs of removed sequences do not add up")]
    BadArchivedRuns,
    #[error("two `soak_archived` events say they removed it")]
    ArchivedTwice,
    #[error("a `soak_archived` event says it was moved to an archive, yet it is in the live log")]
    ArchivedYetPresent,
    #[error(
        "the records beside the archived gaps are not those this `soak_archived` event committed to: one of them was changed"
    )]
    GapsMismatch,
}

/// The first place the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sequence {seq}: {fault}")]
pub struct ChainBreak {
    pub seq: u64,
    pub fault: ChainFault,
}

/// A run of sequences missing from the live log, with the hashes on both sides of it: the hash
/// of the record before (`GENESIS` at the log's start) and the previous hash of the record after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
    pub first: u64,
    pub last: u64,
    pub before: Hash,
    pub after: Hash,
}

/// The digest a `soak_archived` event keeps of the gaps the live log was left with (see
/// [`crate::event::soak::Archived::gaps_digest`]).
pub(crate) fn gaps_digest<'g>(gaps: impl IntoIterator<Item = &'g Gap>) -> Hash {
    let mut hasher = blake3::Hasher::new();
    for gap in gaps {
        hasher.update(&gap.first.to_le_bytes());
        hasher.update(&gap.last.to_le_bytes());
        hasher.update(&gap.before);
        hasher.update(&gap.after);
    }
    *hasher.finalize().as_bytes()
}

/// The digest a `soak_archived` event keeps of the records it removed: each one's sequence and
/// hash, in order (see [`crate::event::soak::Archived::records_digest`]).
#[derive(Default)]
pub(crate) struct RecordsDigest {
    hasher: blake3::Hasher,
}

impl RecordsDigest {
    pub(crate) fn add(&mut self, seq: u64, hash: &Hash) {
        self.hasher.update(&seq.to_le_bytes());
        self.hasher.update(hash);
    }

    pub(crate) fn finish(&self) -> Hash {
        *self.hasher.finalize().as_bytes()
    }
}

/// Walks a chain in key order. Feed it every `(key, stored bytes)` pair from sequence 1 on; it
/// decodes each body and checks the link to the previous record, the record's own hash, and
/// that the body's sequence is its key.
///
/// Sequences may be missing where a `soak_archived` event moved records to an archive file: the
/// walker notes each gap with the hashes on both sides and the runs each such event says it
/// removed, and [`finish`](Self::finish) checks that the gaps are exactly those runs and that the
/// last such event committed to these gaps and hashes. The event follows its gap in the chain,
/// so nothing is decided before the end.
#[derive(Debug)]
pub struct ChainWalker {
    next_seq: u64,
    head: Hash,
    records: u64,
    gaps: Vec<Gap>,
    /// The ranges each `soak_archived` event says it removed.
    archived: Vec<(u64, u64)>,
    /// The sequence and gaps digest of the last `soak_archived` event.
    last_archive: Option<(u64, Hash)>,
}

impl Default for ChainWalker {
    fn default() -> Self {
        Self {
            next_seq: 1,
            head: GENESIS,
            records: 0,
            gaps: Vec::new(),
            archived: Vec::new(),
            last_archive: None,
        }
    }
}

impl ChainWalker {
    /// Checks the next record and returns its decoded envelope.
    pub fn step(&mut self, key: u64, stored: &[u8]) -> Result<StoredEnvelope, ChainBreak> {
        self.step_hashed(key, stored, hash_holds(stored))
    }

    /// [`step`](Self::step) for a record whose own hash was checked ahead: `hash_holds` is what
    /// [`hash_holds`] said of it. The faults are found in the same order.
    pub(crate) fn step_hashed(
        &mut self,
        key: u64,
        stored: &[u8],
        hash_holds: bool,
    ) -> Result<StoredEnvelope, ChainBreak> {
        let expected = self.next_seq;
        if key < expected {
            return Err(ChainBreak {
                seq: expected,
                fault: ChainFault::Gap {
                    expected,
                    found: key,
                },
            });
        }
        let fail = |fault| ChainBreak { seq: key, fault };
        let raw = split(stored).ok_or(fail(ChainFault::Truncated))?;
        if key == expected && raw.prev_hash != self.head {
            return Err(fail(ChainFault::BrokenLink));
        }
        if !hash_holds {
            return Err(fail(ChainFault::HashMismatch));
        }
        let envelope: StoredEnvelope =
            codec::decode(raw.body).map_err(|e| fail(ChainFault::Undecodable(e.to_string())))?;
        if envelope.seq != key {
            return Err(fail(ChainFault::MisfiledSequence {
                key,
                body: envelope.seq,
            }));
        }
        if let StoredEvent::SoakArchived(archived) = &envelope.event {
            for range in archived.ranges() {
                self.archived
                    .push(range.ok_or(fail(ChainFault::BadArchivedRuns))?);
            }
            self.last_archive = Some((key, archived.gaps_digest));
        }
        // Whether the gap was meant is told at the end; its two sides are kept for that.
        if key > expected {
            self.gaps.push(Gap {
                first: expected,
                last: key - 1,
                before: self.head,
                after: raw.prev_hash,
            });
        }
        self.head = raw.hash;
        self.next_seq = key + 1;
        self.records += 1;
        Ok(envelope)
    }

    /// How many records were accepted.
    pub fn len(&self) -> u64 {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The gaps met so far, in order.
    pub(crate) fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// Ends the walk, checking that the chain ends exactly at `anchor`, the `(sequence, hash)`
    /// the log recorded as its head (`(0, GENESIS)` for an empty log), and that every gap is
    /// what `soak_archived` events account for. Returns the head.
    pub fn finish(&self, anchor: (u64, Hash)) -> Result<(u64, Hash), ChainBreak> {
        let (head, head_hash) = anchor;
        let last = self.next_seq - 1;
        if let Some(chain_break) = head_break(anchor, (last, self.head)) {
            return Err(chain_break);
        }
        self.check_gaps()?;
        Ok((head, head_hash))
    }

    /// Every gap is exactly a union of archived runs (and no run covers a record still here),
    /// and the last `soak_archived` event committed to the gaps as they are.
    fn check_gaps(&self) -> Result<(), ChainBreak> {
        let mut archived = self.archived.clone();
        archived.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(archived.len());
        for (first, last) in archived {
            match merged.last_mut() {
                Some((_, end)) if first <= *end => {
                    return Err(ChainBreak {
                        seq: first,
                        fault: ChainFault::ArchivedTwice,
                    });
                }
                Some((_, end)) if first == *end + 1 => *end = last,
                _ => merged.push((first, last)),
            }
        }
        let mut runs = merged.iter();
        for gap in &self.gaps {
            let run = runs.next();
            if run == Some(&(gap.first, gap.last)) {
                continue;
            }
            return Err(match run {
                Some(&(first, last))
                    if first < gap.first || (first == gap.first && last > gap.last) =>
                {
                    // The run reaches a record still in the log.
                    let seq = if first < gap.first {
                        first
                    } else {
                        gap.last + 1
                    };
                    ChainBreak {
                        seq,
                        fault: ChainFault::ArchivedYetPresent,
                    }
                }
                Some(&(first, last)) if first == gap.first => ChainBreak {
                    seq: last + 1,
                    fault: ChainFault::Gap {
                        expected: last + 1,
                        found: gap.last + 1,
                    },
                },
                _ => ChainBreak {
                    seq: gap.first,
                    fault: ChainFault::Gap {
                        expected: gap.first,
                        found: gap.last + 1,
                    },
                },
            });
        }
        if let Some(&(first, _)) = runs.next() {
            return Err(ChainBreak {
                seq: first,
                fault: ChainFault::ArchivedYetPresent,
            });
        }
        match self.last_archive {
            Some((seq, digest)) if digest != gaps_digest(&self.gaps) => Err(ChainBreak {
                seq,
                fault: ChainFault::GapsMismatch,
            }),
            _ => Ok(()),
        }
    }
}

/// How the last record `found` (its sequence and hash; `(0, GENESIS)` for none) disagrees with
/// the head the last append `recorded`, if it does.
pub(crate) fn head_break(recorded: (u64, Hash), found: (u64, Hash)) -> Option<ChainBreak> {
    let (head, head_hash) = recorded;
    let (last, last_hash) = found;
    if last < head {
        Some(ChainBreak {
            seq: last + 1,
            fault: ChainFault::MissingTail { head },
        })
    } else if last > head {
        Some(ChainBreak {
            seq: head + 1,
            fault: ChainFault::BeyondHead { head },
        })
    } else if last_hash != head_hash {
        Some(ChainBreak {
            seq: head,
            fault: ChainFault::HeadMismatch,
        })
    } else {
        None
    }
}

pub(crate) fn to_hex(hash: &Hash) -> String {
    blake3::Hash::from_bytes(*hash).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::{Archived, ArchivedRun, ArchivedSoak, OutcomeStatus};
    use crate::event::{Scope, Subject};
    use crate::process::ProcessIdentity;

    const SOMEONE: ProcessIdentity = ProcessIdentity {
        pid: 1,
        start_ticks: 1,
    };

    fn archived(runs: &[(u64, u64)], gaps_digest: Hash) -> StoredEvent {
        StoredEvent::SoakArchived(Box::new(Archived {
            file: "f.zst".into(),
            soak: ArchivedSoak {
                command: Vec::new(),
                output: String::new(),
                supervisor: SOMEONE,
                started_at_us: 0,
                ended_at_us: Some(1),
                status: OutcomeStatus::Passed,
                failure_kind: None,
                reason: None,
                samples: 0,
                first_seq: 2,
                last_seq: 3,
                artifact_digest: None,
                run_ms: None,
            },
            runs: runs
                .iter()
                .map(|&(kept, removed)| ArchivedRun { kept, removed })
                .collect(),
            records: 0,
            bytes: 0,
            records_digest: [0; 32],
            gaps_digest,
        }))
    }

    /// Records 1 to 4 sealed in a chain, 2 and 3 then removed, and `last` sealed after them as
    /// record 5: what the walk says.
    fn walk_with_gap(
        last: impl FnOnce(&[Gap]) -> Vec<StoredEvent>,
    ) -> Result<(u64, Hash), ChainBreak> {
        let mut head = GENESIS;
        let mut stored = Vec::new();
        let seal_next = |seq: u64, event: StoredEvent, head: &mut Hash| {
            let envelope = StoredEnvelope {
                seq,
                recorded_at_us: 0,
                scope: Scope {
                    uid: 1,
                    host: "h".into(),
                },
                subject: Subject::Host,
                event,
            };
            let (bytes, hash) = seal(head, &codec::encode(&envelope).unwrap());
            *head = hash;
            (seq, bytes, hash)
        };
        for seq in 1..=4 {
            let live = StoredEvent::DaemonVerifiedLive { process: SOMEONE };
            stored.push(seal_next(seq, live, &mut head));
        }
        let gap = Gap {
            first: 2,
            last: 3,
            before: stored[0].2,
            after: stored[2].2,
        };
        stored.drain(1..3);
        for (i, event) in last(&[gap]).into_iter().enumerate() {
            stored.push(seal_next(5 + i as u64, event, &mut head));
        }
        let mut walker = ChainWalker::default();
        for (seq, bytes, _) in &stored {
            walker.step(*seq, bytes)?;
        }
        let (last, _, hash) = stored.last().unwrap();
        walker.finish((*last, *hash))
    }

    #[test]
    fn a_gap_is_accounted_for_only_by_the_archive_that_made_it() {
        let right = |gaps: &[Gap]| vec![archived(&[(1, 2)], gaps_digest(gaps))];
        assert!(walk_with_gap(right).is_ok());
        let fault = |made: fn(&[Gap]) -> Vec<StoredEvent>| walk_with_gap(made).unwrap_err();
        assert_eq!(
            fault(|_| Vec::new()),
            ChainBreak {
                seq: 2,
                fault: ChainFault::Gap {
                    expected: 2,
                    found: 4
                }
            },
            "no archive"
        );
        assert_eq!(
            fault(|gaps| vec![archived(&[(1, 1)], gaps_digest(gaps))]),
            ChainBreak {
                seq: 3,
                fault: ChainFault::Gap {
                    expected: 3,
                    found: 4
                }
            },
            "an archive of part of the gap"
        );
        assert_eq!(
            fault(|gaps| vec![archived(&[(1, 3)], gaps_digest(gaps))]).fault,
            ChainFault::ArchivedYetPresent,
            "an archive of a record still there"
        );
        assert_eq!(
            fault(|gaps| vec![
                archived(&[(1, 2)], gaps_digest(gaps)),
                archived(&[(2, 1)], gaps_digest(gaps))
            ])
            .fault,
            ChainFault::ArchivedTwice,
        );
        assert_eq!(
            fault(|_| vec![archived(&[(1, 2)], [7; 32])]),
            ChainBreak {
                seq: 5,
                fault: ChainFault::GapsMismatch
            },
            "other hashes beside the gap"
        );
        assert_eq!(
            fault(|gaps| vec![archived(&[(1, 0)], gaps_digest(gaps))]).fault,
            ChainFault::BadArchivedRuns,
        );
    }

    #[test]
    fn the_head_must_be_the_last_record() {
        let a = hash_of(&GENESIS, b"a");
        let b = hash_of(&a, b"b");
        assert_eq!(head_break((2, b), (2, b)), None);
        assert_eq!(head_break((0, GENESIS), (0, GENESIS)), None);
        assert_eq!(
            head_break((2, b), (1, a)),
            Some(ChainBreak {
                seq: 2,
                fault: ChainFault::MissingTail { head: 2 }
            })
        );
        assert_eq!(
            head_break((1, a), (2, b)),
            Some(ChainBreak {
                seq: 2,
                fault: ChainFault::BeyondHead { head: 1 }
            })
        );
        assert_eq!(
            head_break((2, b), (2, a)),
            Some(ChainBreak {
                seq: 2,
                fault: ChainFault::HeadMismatch
            })
        );
    }
}
