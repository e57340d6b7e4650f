//! Compact samples in the log: an append packs each soak sample against the soak's previous
//! one ([`Packer`]); every read hands out the whole sample a packed record stands for
//! ([`Unpacker`]), so that no reader, view or check above the log ever sees the packed form.
//! The read is also where every record is upcast (`event::upcast`): what leaves here is a
//! domain [`Envelope`] that keeps the schema of its stored form.
//!
//! A packed sample's base is the record of its soak just before it, which must be a sample of
//! the index it names. The packer keeps the last sample it stored and packs against it only
//! while it is still its soak's last record; every [`STANDALONE_EVERY`]th sample is packed
//! against nothing, so a reader that starts in the middle of a soak walks back over fewer than
//! that many records.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use redb::{ReadableTable, Table};

use super::claim::{MOST_CLAIMED_PER_BYTE, claimed};
use super::codec::{self, MAX_RECORD_BYTES};
use super::error::LogError;
use super::io::{damaged, refused, unreadable};
use super::snapshot::{Record, Snapshot, StoredRecord};
use crate::event::soak::{CompactSample, Measures, ProcessSample, ProgressNoted, STANDALONE_EVERY};
use crate::event::{Envelope, Event, Sample, StoredEnvelope, StoredEvent, Subject};

/// Whether this process stores samples whole, as schema 7 did: for benchmarks that measure
/// what packing saves, never set by unilab itself.
static STORE_WHOLE: AtomicBool = AtomicBool::new(false);

/// Stores this process's samples whole (`true`) or packed (`false`, the default) from now on.
pub fn store_samples_whole(whole: bool) {
    STORE_WHOLE.store(whole, Ordering::Relaxed);
}

/// The form a whole sample is stored in, and so the packed form it goes into and comes back
/// from: schema 6–9's, schema 10–11's, or schema 12's with the progress its supervisor decided.
#[derive(Debug, Clone, Copy)]
enum Form {
    V9,
    V11,
    Noted(Option<ProgressNoted>),
}

impl Form {
    /// `packed` in this form's packed variant.
    fn packed(self, packed: CompactSample) -> StoredEvent {
        match self {
            Form::V9 => StoredEvent::SoakSampledCompactV9(Box::new(packed.into())),
            Form::V11 => StoredEvent::SoakSampledCompactV11(Box::new(packed)),
            Form::Noted(noted) => StoredEvent::SoakSampledCompact {
                packed: Box::new(packed),
                noted,
            },
        }
    }

    /// A whole sample in this form's whole variant.
    fn whole(self, sample: Box<Sample>, measures: Measures) -> StoredEvent {
        match self {
            Form::V9 => StoredEvent::SoakSampledV9 {
                sample,
                measures: Box::new(measures.into()),
            },
            Form::V11 => StoredEvent::SoakSampledV11 {
                sample,
                measures: Box::new(measures),
            },
            Form::Noted(noted) => StoredEvent::SoakSampled {
                sample,
                measures: Box::new(measures),
                noted,
            },
        }
    }
}

/// A sample as the packer keeps it: its soak's subject key and its sequence.
pub(super) struct Stored {
    key: String,
    seq: u64,
    sample: Sample,
    measures: Measures,
}

/// Packs the samples of one append, starting from the last sample this log handle stored.
pub(super) struct Packer {
    last: Option<Stored>,
}

impl Packer {
    pub(super) fn new(last: Option<Stored>) -> Self {
        Self { last }
    }

    /// The sample stored last, for the next append to start from.
    pub(super) fn into_last(self) -> Option<Stored> {
        self.last
    }

    /// Swaps a sample in `envelope` (to be stored under subject key `key`) for its packed
    /// form, runs `store` on the envelope and swaps the whole sample back. `index` is the
    /// subject index, which does not hold `envelope`'s sequence yet: the packer's base is used
    /// only while it is its subject's last record.
    pub(super) fn store<T: AsRef<[u8]>>(
        &mut self,
        path: &Path,
        index: &Table<(&str, u64), ()>,
        key: &str,
        envelope: &mut StoredEnvelope,
        store: impl FnOnce(&StoredEnvelope) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        // A sample of an older form (appended again from an older log) is packed into that
        // schema's packed form, as the unilab that wrote it would have.
        let (sample, measures, form) = match &envelope.event {
            StoredEvent::SoakSampled {
                sample,
                measures,
                noted,
            } => (sample, Cow::Borrowed(&**measures), Form::Noted(*noted)),
            StoredEvent::SoakSampledV11 { sample, measures } => {
                (sample, Cow::Borrowed(&**measures), Form::V11)
            }
            StoredEvent::SoakSampledV9 { sample, measures } => (
                sample,
                Cow::Owned(Measures::from((**measures).clone())),
                Form::V9,
            ),
            _ => return store(envelope),
        };
        if STORE_WHOLE.load(Ordering::Relaxed) {
            return store(envelope);
        }
        let base = match &self.last {
            Some(last)
                if last.key == key
                    && sample.index % STANDALONE_EVERY != 0
                    && last_of(path, index, key)? == Some(last.seq) =>
            {
                Some((&last.sample, &last.measures))
            }
            _ => None,
        };
        let Some(packed) = CompactSample::pack(base, sample, &measures) else {
            return store(envelope);
        };
        let packed = form.packed(packed);
        let whole = std::mem::replace(&mut envelope.event, packed);
        let stored = store(envelope);
        envelope.event = whole;
        let stored = stored?;
        // Every reader is handed the whole sample: it must be one the log could have stored.
        whole_readable(path, envelope, stored.as_ref().len())?;
        Ok(stored)
    }

    /// Keeps `event`, just stored under `key` at `seq`, if it is a sample: the next one of its
    /// soak is packed against it.
    pub(super) fn stored(&mut self, key: String, seq: u64, event: Event) {
        if let Event::SoakSampled {
            sample, measures, ..
        } = event
        {
            self.last = Some(Stored {
                key,
                seq,
                sample: *sample,
                measures: measures.map(|m| *m).unwrap_or_default(),
            });
        }
    }
}

/// Whether `envelope`, a sample stored packed in `stored` bytes, is one the log's reader could
/// decode whole. The whole form claims what the packed one does (at most
/// [`MOST_CLAIMED_PER_BYTE`] a stored byte) and its processes and their PSS beside: when that
/// bound is within the limit, as it is for every ordinary sample, nothing is counted.
fn whole_readable(path: &Path, envelope: &StoredEnvelope, stored: usize) -> Result<(), LogError> {
    let (StoredEvent::SoakSampled { sample, .. }
    | StoredEvent::SoakSampledV11 { sample, .. }
    | StoredEvent::SoakSampledV9 { sample, .. }) = &envelope.event
    else {
        return Ok(());
    };
    let each = most_claimed_by_a_process();
    let processes = sample.processes.iter().map(|p| each + p.name.len());
    let bound = processes.fold(
        stored.saturating_mul(MOST_CLAIMED_PER_BYTE),
        usize::saturating_add,
    );
    if bound <= MAX_RECORD_BYTES {
        return Ok(());
    }
    codec::claims_within_limit(envelope)
        .map_err(|e| refused(path, &envelope.subject, envelope.event.kind(), e))
}

/// The most one process of a whole sample claims beside its name's bytes, with its PSS: every
/// optional field present, a state of four UTF-8 bytes.
fn most_claimed_by_a_process() -> usize {
    let process = ProcessSample {
        pid: 0,
        ppid: 0,
        start_ticks: 0,
        name: String::new(),
        state: char::MAX,
        rss_bytes: 0,
        cpu_ticks: 0,
        reaped_children_cpu_ticks: 0,
        threads: 0,
        open_fds: Some(0),
        read_bytes: Some(0),
        write_bytes: Some(0),
    };
    claimed(&process) + claimed(&Some(0u64))
}

/// The sequence of the last record the subject index holds for `key`.
fn last_of(
    path: &Path,
    index: &Table<(&str, u64), ()>,
    key: &str,
) -> Result<Option<u64>, LogError> {
    let last = index
        .range((key, 0)..=(key, u64::MAX))
        .map_err(unreadable(path))?
        .next_back()
        .transpose()
        .map_err(unreadable(path))?;
    Ok(last.map(|(k, _)| k.value().1))
}

/// Hands a reader that goes forward through the log the whole samples: it keeps, for each
/// subject, the sample its last record was (if it was one), and walks back only for a subject
/// whose earlier records it did not see.
#[derive(Default)]
pub(super) struct Unpacker {
    /// For each subject seen: its last record's sample, `None` when that record was no sample.
    last: HashMap<String, Option<(Sample, Measures)>>,
    key: String,
}

impl Unpacker {
    /// An unpacker for records of `subject` read from where none of its earlier records are:
    /// a sample packed against one before them is damage, never looked for elsewhere.
    pub(super) fn starting(subject: &Subject) -> Self {
        let mut unpacker = Self::default();
        unpacker.last.insert(subject.key(), None);
        unpacker
    }

    /// `record` upcast, with the whole sample in place of a packed one.
    pub(super) fn record(
        &mut self,
        snapshot: &Snapshot,
        record: StoredRecord,
    ) -> Result<Record, LogError> {
        Ok(Record {
            envelope: self.unpack(snapshot, record.envelope)?,
            prev_hash: record.prev_hash,
            hash: record.hash,
        })
    }

    /// Whether `envelope` is handed on as it is, with nothing to remember or forget: most
    /// records are no sample, and one that is none has nothing to forget while no sample of a
    /// soak is remembered, or when it is not of a soak.
    fn passes(&self, envelope: &StoredEnvelope) -> bool {
        !matches!(
            envelope.event,
            StoredEvent::SoakSampled { .. }
                | StoredEvent::SoakSampledV11 { .. }
                | StoredEvent::SoakSampledV9 { .. }
                | StoredEvent::SoakSampledCompact { .. }
                | StoredEvent::SoakSampledCompactV11(_)
                | StoredEvent::SoakSampledCompactV9(_)
        ) && (self.last.is_empty() || !matches!(envelope.subject, Subject::Soak(_)))
    }

    /// `envelope` upcast, with the whole sample in place of a packed one.
    pub(super) fn unpack(
        &mut self,
        snapshot: &Snapshot,
        envelope: StoredEnvelope,
    ) -> Result<Envelope, LogError> {
        let path = snapshot.path.as_path();
        if self.passes(&envelope) {
            return upcast(path, envelope);
        }
        // Only a soak's samples are remembered: one of another subject, which unilab never
        // records, is unpacked by walking back.
        if !matches!(envelope.subject, Subject::Soak(_)) {
            return unpack_alone(snapshot, envelope);
        }
        envelope.subject.key_into(&mut self.key);
        let packed = matches!(
            envelope.event,
            StoredEvent::SoakSampledCompact { .. }
                | StoredEvent::SoakSampledCompactV11(_)
                | StoredEvent::SoakSampledCompactV9(_)
        );
        let envelope = match (&envelope.event, self.last.get(self.key.as_str())) {
            (_, Some(seen)) if packed => {
                let base = seen.as_ref().map(|(s, m)| (s, m));
                unpacked(path, envelope, base)?
            }
            (_, None) if packed => whole_alone(snapshot, envelope)?,
            (
                StoredEvent::SoakSampled { .. }
                | StoredEvent::SoakSampledV11 { .. }
                | StoredEvent::SoakSampledV9 { .. },
                _,
            ) => envelope,
            (_, seen) => {
                // Only a subject with samples is worth remembering.
                if seen.is_some() {
                    self.last.insert(self.key.clone(), None);
                }
                return upcast(path, envelope);
            }
        };
        if let Some(kept) = whole_of(&envelope.event) {
            let kept = Some(kept);
            match self.last.get_mut(self.key.as_str()) {
                Some(seen) => *seen = kept,
                None => {
                    self.last.insert(self.key.clone(), kept);
                }
            }
        }
        upcast(path, envelope)
    }
}

/// `envelope`, whole, as readers see it.
pub(super) fn upcast(path: &Path, envelope: StoredEnvelope) -> Result<Envelope, LogError> {
    let seq = envelope.seq;
    envelope.upcast().ok_or_else(|| {
        damaged(
            path,
            format!("sequence {seq}: a packed sample reached a reader"),
        )
    })
}

/// `envelope` upcast, with the whole sample in place of a packed one, reading back along its
/// subject for the samples it was packed against: for a reader that reads one record, or goes
/// backwards.
pub(super) fn unpack_alone(
    snapshot: &Snapshot,
    envelope: StoredEnvelope,
) -> Result<Envelope, LogError> {
    upcast(&snapshot.path, whole_alone(snapshot, envelope)?)
}

/// [`unpack_alone`] before the upcast.
fn whole_alone(snapshot: &Snapshot, envelope: StoredEnvelope) -> Result<StoredEnvelope, LogError> {
    let wanted = match &envelope.event {
        StoredEvent::SoakSampledCompact { packed, .. } => packed.base,
        StoredEvent::SoakSampledCompactV11(packed) => packed.base,
        StoredEvent::SoakSampledCompactV9(packed) => packed.base,
        _ => return Ok(envelope),
    };
    let path = snapshot.path.as_path();
    // The packed samples back to one packed against nothing or stored whole, newest first.
    let mut chain = Vec::new();
    let mut base = None;
    let mut wanted = wanted;
    if wanted.is_some() {
        snapshot.scan_subject_back_raw(&envelope.subject, envelope.seq - 1, |record| {
            let seq = record.envelope.seq;
            if let Some(whole) = whole_of(&record.envelope.event) {
                base = Some(whole);
                return Ok(false);
            }
            // A sample packed against a record that is none: unpacking says so below.
            let Ok((packed, _)) = packed_of(record.envelope.event) else {
                return Ok(false);
            };
            wanted = packed.base;
            chain.push((seq, packed));
            Ok(wanted.is_some())
        })?;
    }
    for (seq, packed) in chain.into_iter().rev() {
        let index = packed.sample.index;
        base = Some(
            packed
                .unpack(base.as_ref().map(|(s, m)| (s, m)))
                .map_err(|e| unpack_failed(path, seq, index, &e))?,
        );
    }
    unpacked(path, envelope, base.as_ref().map(|(s, m)| (s, m)))
}

/// `envelope` with the whole sample its packed one stands for against `base`.
fn unpacked(
    path: &Path,
    envelope: StoredEnvelope,
    base: Option<(&Sample, &Measures)>,
) -> Result<StoredEnvelope, LogError> {
    let event = match packed_of(envelope.event) {
        Ok((packed, form)) => {
            let index = packed.sample.index;
            let (sample, measures) = packed
                .unpack(base)
                .map_err(|e| unpack_failed(path, envelope.seq, index, &e))?;
            form.whole(Box::new(sample), measures)
        }
        Err(other) => *other,
    };
    Ok(StoredEnvelope { event, ..envelope })
}

/// A packed sample in the current packing, and the form it was stored in; any other event
/// handed back.
fn packed_of(event: StoredEvent) -> Result<(Box<CompactSample>, Form), Box<StoredEvent>> {
    match event {
        StoredEvent::SoakSampledCompact { packed, noted } => Ok((packed, Form::Noted(noted))),
        StoredEvent::SoakSampledCompactV11(packed) => Ok((packed, Form::V11)),
        StoredEvent::SoakSampledCompactV9(packed) => Ok((Box::new((*packed).into()), Form::V9)),
        other => Err(Box::new(other)),
    }
}

/// A whole sample of a form that measures (schema 6 on) and its measures in the current form:
/// what the next packed sample of its soak is packed against.
fn whole_of(event: &StoredEvent) -> Option<(Sample, Measures)> {
    match event {
        StoredEvent::SoakSampled {
            sample, measures, ..
        }
        | StoredEvent::SoakSampledV11 { sample, measures } => {
            Some((sample.as_ref().clone(), measures.as_ref().clone()))
        }
        StoredEvent::SoakSampledV9 { sample, measures } => {
            Some((sample.as_ref().clone(), measures.as_ref().clone().into()))
        }
        _ => None,
    }
}

fn unpack_failed(
    path: &Path,
    seq: u64,
    index: u64,
    error: &crate::event::soak::UnpackError,
) -> LogError {
    damaged(
        path,
        format!("sequence {seq}: sample {index} cannot be unpacked: {error}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::a_tree;
    use crate::event::{Scope, Subject};

    /// The bound that spares an ordinary sample the count is never below what the whole sample
    /// claims: whatever its processes' names and optional fields, with or without their PSS.
    #[test]
    fn the_bound_on_a_whole_sample_is_never_below_what_it_claims() {
        for (n, name, pss) in [
            (0, "", false),
            (3, "python3", true),
            (500, "pt_data_worker", true),
        ] {
            let mut processes = a_tree(n);
            for (i, p) in processes.iter_mut().enumerate() {
                p.name = name.repeat(i % 3);
                p.state = if i % 2 == 0 { 'S' } else { char::MAX };
                (p.open_fds, p.read_bytes, p.write_bytes) = (Some(1), Some(u64::MAX), Some(2));
            }
            let sample = Sample {
                index: 1,
                elapsed_ms: 0,
                after_exit: false,
                processes,
                reaped_cpu_ticks: 0,
                gpus: None,
                progress: crate::event::soak::ProgressSignature::default(),
                sampler_cost_us: 0,
                errors: Vec::new(),
            };
            let measures = Measures {
                pss_bytes: if pss {
                    vec![Some(u64::MAX); n]
                } else {
                    Vec::new()
                },
                ..Measures::default()
            };
            let packed = CompactSample::pack(None, &sample, &measures).unwrap();
            let mut envelope = StoredEnvelope {
                seq: 1,
                recorded_at_us: 0,
                scope: Scope {
                    uid: 0,
                    host: "h".into(),
                },
                subject: Subject::Soak("s".into()),
                event: Form::Noted(None).packed(packed),
            };
            let stored = codec::encode(&envelope).unwrap().len();
            envelope.event = Form::Noted(None).whole(Box::new(sample), measures);
            let StoredEvent::SoakSampled { sample, .. } = &envelope.event else {
                unreachable!()
            };
            let bound = stored * MOST_CLAIMED_PER_BYTE
                + sample
                    .processes
                    .iter()
                    .map(|p| most_claimed_by_a_process() + p.name.len())
                    .sum::<usize>();
            assert!(claimed(&envelope) <= bound, "{n} processes");
        }
        assert_eq!(most_claimed_by_a_process(), 88, "79 a process, 9 its PSS");
    }
}
