//! Quantiles of step seconds in memory that does not grow with the steps: a log-bucketed
//! histogram (DDSketch's mapping, without its collapsing, as the range is fixed).
//!
//! Bucket `i >= 1` holds the values in `(MIN_SECONDS × γ^(i-1), MIN_SECONDS × γ^i]`, with
//! `γ = (1 + α) / (1 − α)` and `α` = [`RELATIVE_ERROR`]; it is read as
//! `MIN_SECONDS × γ^i × 2 / (γ + 1)`, which is within `α` of every value in it, relatively.
//! So a quantile read from the sketch is within 1 % of the same quantile of the values
//! themselves (nearest rank: the `⌈q·n⌉`-th smallest). Values under [`MIN_SECONDS`] (a
//! microsecond) are counted apart and read as zero; values over [`MAX_SECONDS`] (a year and a
//! day) are read as it. The range holds at most 1,556 buckets, and only those holding a value
//! are kept: a few kilobytes for steps that vary tenfold, at most some 40 KB.

use std::collections::BTreeMap;

/// The relative error of a quantile read from a sketch.
pub(crate) const RELATIVE_ERROR: f64 = 0.01;
/// The smallest value told apart from zero, in seconds.
pub(crate) const MIN_SECONDS: f64 = 1e-6;
/// The largest value told apart, in seconds: `crate::duration::MAX_DURATION`.
pub(crate) const MAX_SECONDS: f64 = 366.0 * 86_400.0;

const GAMMA: f64 = (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR);

/// A sketch of values `>= 0` (seconds).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Sketch {
    /// Values under [`MIN_SECONDS`].
    small: u64,
    buckets: BTreeMap<u16, u64>,
    count: u64,
}

impl Sketch {
    /// Counts `seconds` (a negative or non-finite value is not counted).
    pub(crate) fn add(&mut self, seconds: f64) {
        self.add_times(seconds, 1);
    }

    /// Counts `seconds` `times` times, as `times` calls of [`Sketch::add`] would: a value
    /// that stands for several (a sample's median step for its beats).
    pub(crate) fn add_times(&mut self, seconds: f64, times: u64) {
        if !(seconds >= 0.0 && seconds.is_finite()) || times == 0 {
            return;
        }
        self.count = self.count.saturating_add(times);
        if seconds < MIN_SECONDS {
            self.small = self.small.saturating_add(times);
            return;
        }
        let kept = self
            .buckets
            .entry(bucket(seconds.min(MAX_SECONDS)))
            .or_default();
        *kept = kept.saturating_add(times);
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// How many buckets hold a value (what the sketch's memory grows with, up to 1,556).
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The `q`-quantile (`0 <= q <= 1`, nearest rank), within [`RELATIVE_ERROR`]; `None` with
    /// no value.
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        if rank <= self.small {
            return Some(0.0);
        }
        let mut seen = self.small;
        for (&index, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Some(value(index));
            }
        }
        self.buckets
            .last_key_value()
            .map(|(&index, _)| value(index))
    }
}

fn bucket(seconds: f64) -> u16 {
    let index = ((seconds / MIN_SECONDS).ln() / GAMMA.ln()).ceil();
    // Within u16 for every value up to MAX_SECONDS (1,556 buckets), so the cast is exact.
    index.clamp(0.0, f64::from(u16::MAX)) as u16
}

fn value(index: u16) -> f64 {
    MIN_SECONDS * GAMMA.powi(i32::from(index)) * 2.0 / (GAMMA + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest-rank quantile of `values`.
    fn exact(values: &mut [f64], q: f64) -> f64 {
        values.sort_by(f64::total_cmp);
        let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
        values[rank - 1]
    }

    #[test]
    fn the_range_fits_its_buckets() {
        assert_eq!(bucket(MIN_SECONDS), 0);
        assert!(bucket(MAX_SECONDS) < 1600, "{}", bucket(MAX_SECONDS));
        let mut s = Sketch::default();
        s.add(1e12);
        assert!((s.quantile(1.0).unwrap() / MAX_SECONDS - 1.0).abs() <= RELATIVE_ERROR);
    }

    /// A value counted `n` times reads as `n` calls of `add` would.
    #[test]
    fn a_value_counted_several_times_weighs_as_many() {
        let (mut once, mut weighed) = (Sketch::default(), Sketch::default());
        for (value, times) in [(0.1, 30), (0.3, 8), (0.0, 2), (2.0, 1)] {
            for _ in 0..times {
                once.add(value);
            }
            weighed.add_times(value, times);
        }
        weighed.add_times(5.0, 0);
        weighed.add_times(f64::NAN, 4);
        assert_eq!(weighed, once);
        assert!((weighed.quantile(0.5).unwrap() / 0.1 - 1.0).abs() <= RELATIVE_ERROR);
    }

    #[test]
    fn small_negative_and_absent_values() {
        let mut s = Sketch::default();
        assert_eq!(s.quantile(0.5), None);
        for v in [-1.0, f64::NAN, f64::INFINITY] {
            s.add(v);
        }
        assert_eq!(s.count(), 0);
        s.add(0.0);
        s.add(1e-9);
        s.add(2.0);
        assert_eq!(s.quantile(0.5), Some(0.0));
        assert!((s.quantile(0.99).unwrap() - 2.0).abs() <= 2.0 * RELATIVE_ERROR);
    }

    #[test]
    fn a_million_steps_keep_few_buckets() {
        let mut s = Sketch::default();
        for i in 0..1_000_000u32 {
            // Steps of 0.1 s to 1 s.
            s.add(0.1 + f64::from(i % 1000) * 0.0009);
        }
        assert_eq!(s.count(), 1_000_000);
        assert!(s.buckets.len() < 130, "{}", s.buckets.len());
        let median = s.quantile(0.5).unwrap();
        assert!((median / 0.5491 - 1.0).abs() <= RELATIVE_ERROR, "{median}");
    }

    proptest::proptest! {
        #[test]
        fn every_quantile_is_within_the_stated_relative_error(
            mut values in proptest::collection::vec(
                proptest::prop_oneof![1e-6f64..1e-3, 1e-3f64..10.0, 10.0f64..1e7],
                1..400,
            ),
            q in 0.0f64..=1.0,
        ) {
            let mut s = Sketch::default();
            for &v in &values {
                s.add(v);
            }
            let truth = exact(&mut values, q);
            let read = s.quantile(q).unwrap();
            // (and a hair for the floating point of the bucket's bounds)
            proptest::prop_assert!(
                (read - truth).abs() <= truth * (RELATIVE_ERROR + 1e-12),
                "q {} read {} truth {}", q, read, truth
            );
        }
    }
}
