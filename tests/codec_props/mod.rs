//! Property tests: every event kind survives the codec round trip, arbitrary bytes never make
//! a decoder panic, and the chain rejects any single modified, dropped or reordered record.
//!
//! The strategies that generate what the log holds are apart: the parts of events (`parts`) and
//! the events and envelopes made of them (`events`).

mod events;
mod parts;

use events::*;
use parts::*;

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;
use unilab::EVENT_KINDS;
use unilab::testing::chain::{self, ChainWalker, Hash};
use unilab::testing::codec;
use unilab::{Event, Scope, StoredEnvelope, StoredEvent, Subject};

/// Events a chain may hold as they are generated: all but `soak_archived`, whose runs must
/// name records removed from that very chain (`log_archive` tests make real ones), and a packed
/// sample, which only the log's own packing makes (`compact` tests).
fn chained_event() -> impl Strategy<Value = StoredEvent> {
    event().prop_filter("archives and packed samples are the log's to make", |e| {
        !matches!(
            e,
            StoredEvent::SoakArchived(_)
                | StoredEvent::SoakSampledCompactV11(_)
                | StoredEvent::SoakSampledCompact { .. }
        )
    })
}

/// A valid chain of the given events, as `(key, stored bytes)` pairs from sequence 1.
fn build_chain(events: Vec<(Subject, StoredEvent)>) -> Vec<(u64, Vec<u8>)> {
    let mut head: Hash = chain::GENESIS;
    events
        .into_iter()
        .enumerate()
        .map(|(i, (subject, event))| {
            let seq = i as u64 + 1;
            let envelope = StoredEnvelope {
                seq,
                recorded_at_us: 1_764_676_800_000_000 + seq as i64,
                scope: Scope {
                    uid: 1000,
                    host: "node".into(),
                },
                subject,
                event,
            };
            let (stored, hash) = chain::seal(&head, &codec::encode(&envelope).unwrap());
            head = hash;
            (seq, stored)
        })
        .collect()
}

/// Walks a chain against the head its last record claims, as `log verify` walks a log against
/// the head it recorded; the anchor is taken from the unmodified chain.
fn walk(records: &[(u64, Vec<u8>)], anchor: (u64, Hash)) -> Result<(), u64> {
    let mut walker = ChainWalker::default();
    for (key, stored) in records {
        walker.step(*key, stored).map_err(|b| b.seq)?;
    }
    walker.finish(anchor).map(|_| ()).map_err(|b| b.seq)
}

fn anchor_of(records: &[(u64, Vec<u8>)]) -> (u64, Hash) {
    records
        .last()
        .map(|(k, v)| (*k, chain::stored_hash(v).unwrap()))
        .unwrap_or((0, chain::GENESIS))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_envelope_round_trips(envelope in envelope()) {
        let bytes = codec::encode(&envelope).unwrap();
        let back: StoredEnvelope = codec::decode(&bytes).unwrap();
        // f64 NaN is not equal to itself; compare the encodings instead.
        prop_assert_eq!(codec::encode(&back).unwrap(), bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in vec(any::<u8>(), 0..512)) {
        let _ = codec::decode::<StoredEnvelope>(&bytes);
        let _ = ChainWalker::default().step(1, &bytes);
    }

    /// A valid encoding with a byte changed, cut short or run on: decoded or refused, never a
    /// panic, never an allocation of what a corrupted length claims.
    #[test]
    fn a_corrupted_encoding_never_panics_a_decoder(
        envelope in envelope(),
        offset in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        tail in vec(any::<u8>(), 0..64),
    ) {
        let bytes = codec::encode(&envelope).unwrap();
        let mut flipped = bytes.clone();
        let at = offset.index(flipped.len());
        flipped[at] ^= flip;
        let _ = codec::decode::<StoredEnvelope>(&flipped);
        let _ = codec::decode::<StoredEnvelope>(&bytes[..cut.index(bytes.len())]);
        let mut longer = bytes.clone();
        longer.extend_from_slice(&tail);
        let _ = codec::decode::<StoredEnvelope>(&longer);
        // A length field set to its largest: refused, not allocated.
        let mut huge = bytes;
        for b in huge.iter_mut().skip(at).take(8) {
            *b = 0xff;
        }
        let _ = codec::decode::<StoredEnvelope>(&huge);
    }

    #[test]
    fn a_modified_byte_breaks_the_chain_at_its_record(
        events in vec((subject(), chained_event()), 1..12),
        pick in any::<prop::sample::Index>(),
        offset in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut records = build_chain(events);
        let anchor = anchor_of(&records);
        prop_assert_eq!(walk(&records, anchor), Ok(()));
        let i = pick.index(records.len());
        let at = offset.index(records[i].1.len());
        records[i].1[at] ^= flip;
        prop_assert_eq!(walk(&records, anchor), Err(i as u64 + 1));
    }

    #[test]
    fn a_dropped_record_breaks_the_chain_at_its_place(
        events in vec((subject(), chained_event()), 1..12),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut records = build_chain(events);
        let anchor = anchor_of(&records);
        let i = pick.index(records.len());
        records.remove(i);
        prop_assert_eq!(walk(&records, anchor), Err(i as u64 + 1));
    }

    #[test]
    fn swapped_records_break_the_chain_at_the_first(
        events in vec((subject(), chained_event()), 2..12),
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
    ) {
        let mut records = build_chain(events);
        let anchor = anchor_of(&records);
        let (i, j) = (a.index(records.len()), b.index(records.len()));
        prop_assume!(i != j && records[i].1 != records[j].1);
        // Swap the stored values, keeping the keys: the records trade places.
        let (lo, hi) = (i.min(j), i.max(j));
        let moved = std::mem::take(&mut records[lo].1);
        records[lo].1 = std::mem::replace(&mut records[hi].1, moved);
        prop_assert_eq!(walk(&records, anchor), Err(lo as u64 + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A megabyte of noise: a decoder reads it without panicking or running away.
    #[test]
    fn a_large_input_never_panics_a_decoder(bytes in vec(any::<u8>(), 0..(1 << 20))) {
        let _ = codec::decode::<StoredEnvelope>(&bytes);
        let _ = ChainWalker::default().step(1, &bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The log refuses a record by what its decode would claim (`codec::claimed`), counted
    /// without decoding: that count is exactly where the decoder's limit stops it. Each
    /// envelope, its host made as long as takes it to the limit, decodes; a byte more, and it
    /// does not.
    #[test]
    fn what_an_envelope_claims_is_where_the_decoder_stops(mut envelope in envelope()) {
        let claims = codec::claimed(&envelope);
        prop_assume!(claims <= codec::MAX_RECORD_BYTES);
        envelope.scope.host.push_str(&"h".repeat(codec::MAX_RECORD_BYTES - claims));
        prop_assert_eq!(codec::claimed(&envelope), codec::MAX_RECORD_BYTES);
        let bytes = codec::encode(&envelope).unwrap();
        prop_assert!(codec::decode::<StoredEnvelope>(&bytes).is_ok());
        envelope.scope.host.push('h');
        let bytes = codec::encode(&envelope).unwrap();
        let refused = codec::decode::<StoredEnvelope>(&bytes).err().map(|e| e.to_string());
        prop_assert_eq!(
            refused.as_deref(),
            Some("cannot decode a log record: LimitExceeded")
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The budgets of a sample, the evidence and a verdict bite only beyond them: built within
    /// them, a record is what it was given, so what was recorded before reads the same.
    #[test]
    fn a_record_within_its_budgets_is_built_as_it_was(event in event()) {
        let built = match event.clone() {
            StoredEvent::SoakSampled { sample, measures, noted } => {
                Event::sampled(*sample, *measures, noted).into()
            }
            StoredEvent::SoakEvidenceCaptured(evidence) => Event::evidence_captured(*evidence).into(),
            StoredEvent::SoakFinished { end, findings, limit } => {
                Event::finished((*end).into(), *findings, limit).into()
            }
            other => other,
        };
        prop_assert_eq!(codec::encode(&built).unwrap(), codec::encode(&event).unwrap());
    }
}

#[test]
fn the_strategy_covers_every_kind() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeMap::new();
    for _ in 0..2_000 {
        let event = event().new_tree(&mut runner).unwrap().current();
        *seen.entry(event.kind()).or_insert(0) += 1;
    }
    for kind in EVENT_KINDS {
        assert!(seen.contains_key(kind), "no {kind} generated");
    }
}
