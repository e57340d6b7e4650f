//! A sample's beats packed against the previous sample's (schema 10): a trainer beats the same
//! phase and the same numbers sample after sample, so what the previous sample said of them is
//! left out. Encoded with bincode's standard configuration, as the log encodes records, the
//! beats of one sample take at most 64 bytes with up to four numbers, at any beat rate (see the
//! tests).

use serde::{Deserialize, Serialize};

use crate::event::soak::SampleBeats;

/// A sample's beats ([`SampleBeats`]) with what the previous sample's beats already said left
/// out: its phase, and its numbers' keys where they are the same keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackedBeats {
    pub beats: u32,
    pub step: Option<u64>,
    /// `None`: the previous sample's phase.
    pub phase: Option<Option<String>>,
    pub step_seconds_min: Option<f32>,
    pub step_seconds_median: Option<f32>,
    pub step_seconds_max: Option<f32>,
    /// The numbers' keys in order; `None`: the previous sample's keys.
    pub keys: Option<Vec<String>>,
    /// The numbers' values, in the keys' order.
    pub values: Vec<f64>,
}

impl PackedBeats {
    /// `beats` packed against `base`, the previous sample's beats.
    pub(super) fn pack(base: Option<&SampleBeats>, beats: &SampleBeats) -> Self {
        let same_keys = base.is_some_and(|base| base.numbers.keys().eq(beats.numbers.keys()));
        let same_phase = base.is_some_and(|base| base.phase == beats.phase);
        PackedBeats {
            beats: beats.beats,
            step: beats.step,
            phase: (!same_phase).then(|| beats.phase.clone()),
            step_seconds_min: beats.step_seconds_min,
            step_seconds_median: beats.step_seconds_median,
            step_seconds_max: beats.step_seconds_max,
            keys: (!same_keys).then(|| beats.numbers.keys().cloned().collect()),
            values: beats.numbers.values().copied().collect(),
        }
    }

    /// The beats this stands for, given `base`, the previous sample's beats; `None` for what
    /// [`PackedBeats::pack`] cannot have written.
    pub(super) fn unpack(self, base: Option<&SampleBeats>) -> Option<SampleBeats> {
        let phase = match self.phase {
            Some(phase) => phase,
            None => base?.phase.clone(),
        };
        let keys: Vec<String> = match self.keys {
            Some(keys) => keys,
            None => base?.numbers.keys().cloned().collect(),
        };
        let in_order = keys.windows(2).all(|pair| pair[0] < pair[1]);
        if keys.len() != self.values.len() || !in_order {
            return None;
        }
        Some(SampleBeats {
            beats: self.beats,
            step: self.step,
            phase,
            step_seconds_min: self.step_seconds_min,
            step_seconds_median: self.step_seconds_median,
            step_seconds_max: self.step_seconds_max,
            numbers: keys.into_iter().zip(self.values).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The beats of a sample of `beats` beats at step 1,000,000 and more, of `phase`, with
    /// `numbers`.
    fn sample(beats: u32, phase: &str, numbers: &[(&str, f64)]) -> SampleBeats {
        SampleBeats {
            beats,
            step: Some(1_000_000 + u64::from(beats)),
            phase: Some(phase.to_owned()),
            step_seconds_min: Some(0.098),
            step_seconds_median: Some(0.1),
            step_seconds_max: Some(0.31),
            numbers: numbers.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
        }
    }

    fn round_trip(base: Option<&SampleBeats>, beats: &SampleBeats) -> PackedBeats {
        let packed = PackedBeats::pack(base, beats);
        assert_eq!(packed.clone().unpack(base).as_ref(), Some(beats));
        packed
    }

    #[test]
    fn what_the_previous_sample_said_is_left_out_and_read_back() {
        let loss = [("loss", 0.25)];
        let before = sample(10, "train", &loss);
        let same = round_trip(Some(&before), &sample(12, "train", &[("loss", 0.5)]));
        assert_eq!((same.phase, same.keys), (None, None));
        let eval = round_trip(
            Some(&before),
            &sample(3, "eval", &[("acc", 0.9), ("loss", 0.5)]),
        );
        assert_eq!(eval.phase, Some(Some("eval".to_owned())));
        assert_eq!(eval.keys, Some(vec!["acc".to_owned(), "loss".to_owned()]));
        // Against nothing (the soak's first sample, or one after a sample without beats).
        let alone = round_trip(None, &before);
        assert!(alone.phase.is_some() && alone.keys.is_some());
    }

    #[test]
    fn packed_beats_that_cannot_have_been_written_are_refused() {
        let before = sample(10, "train", &[("loss", 0.25)]);
        let packed = PackedBeats::pack(Some(&before), &sample(10, "train", &[("loss", 0.5)]));
        assert_eq!(
            packed.clone().unpack(None),
            None,
            "left out, with nothing to read it from"
        );
        let wrong = PackedBeats {
            values: vec![1.0, 2.0],
            ..packed.clone()
        };
        assert_eq!(wrong.unpack(Some(&before)), None, "two values for one key");
        let unsorted = PackedBeats {
            keys: Some(vec!["z".into(), "a".into()]),
            values: vec![1.0, 2.0],
            ..packed
        };
        assert_eq!(unsorted.unpack(Some(&before)), None);
    }

    fn encoded_len(packed: &Option<PackedBeats>) -> usize {
        bincode::serde::encode_to_vec(packed, bincode::config::standard())
            .unwrap()
            .len()
    }

    /// The log's budget for the beats is 64 bytes a sample, at any beat rate: with up to four
    /// numbers (`loss`, `lr`, `samples`, `tokens`), packed against a sample that beat the same.
    #[test]
    fn a_samples_beats_take_at_most_64_bytes_at_any_beat_rate() {
        let all = [
            ("loss", 0.25),
            ("lr", 3e-4),
            ("samples", 256.0),
            ("tokens", 1.6e7),
        ];
        let mut sizes = BTreeMap::new();
        for numbers in 1..=4 {
            for beats in [1, 1_000, 100_000] {
                let base = sample(beats, "train", &all[..numbers]);
                let next = sample(beats, "train", &all[..numbers]);
                let packed = Some(PackedBeats::pack(Some(&base), &next));
                sizes.insert((numbers, beats), encoded_len(&packed));
            }
        }
        assert!(sizes.values().all(|&len| len <= 64), "{sizes:?}");
        // Each number beyond the first costs its value's 8 bytes.
        assert_eq!(sizes[&(1, 1_000)], 36, "{sizes:?}");
        assert_eq!(sizes[&(4, 100_000)], 62, "{sizes:?}");
        // Against nothing, the phase and the keys are written: what one whole sample in 64
        // costs more.
        let alone = Some(PackedBeats::pack(None, &sample(1_000, "train", &all)));
        assert_eq!(encoded_len(&alone), 91);
        assert_eq!(encoded_len(&None), 1, "a sample without beats");
    }
}
