//! One rank's samples over time as the job's page draws them — the bytes in its progress
//! directory, its tree's PSS and, where it beats, the median step time of the beats since the
//! sample before, at each sample's time since its command was spawned (the
//! sample's own `elapsed_ms`: samples are recorded in batches, so a record's time is when its
//! batch was committed, not when it was taken) — kept bounded as they are read: at most
//! [`MAX_BUCKETS`] buckets of time, each holding the lowest and the highest value of each
//! quantity (with when they were seen), so that a spike is never lost. A bucket spans a fixed
//! time; when a sample falls past the last bucket the buckets' span doubles and neighbours
//! merge, so a week-long soak keeps as many numbers as a minute-long one.

/// The most buckets a rank keeps: two points each, for each quantity.
pub(crate) const MAX_BUCKETS: usize = 512;
/// The span of a bucket at first, in microseconds: the shortest sample interval.
const FIRST_SPAN_US: i64 = 10_000;

/// The lowest and highest of a quantity in a bucket, each with its time (microseconds since
/// the spawn).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Extremes {
    low: Option<(i64, f64)>,
    high: Option<(i64, f64)>,
}

impl Extremes {
    fn add(&mut self, at_us: i64, value: f64) {
        if self.low.is_none_or(|(_, low)| value < low) {
            self.low = Some((at_us, value));
        }
        if self.high.is_none_or(|(_, high)| value > high) {
            self.high = Some((at_us, value));
        }
    }

    fn merge(&mut self, other: Extremes) {
        for (at, value) in other.low.into_iter().chain(other.high) {
            self.add(at, value);
        }
    }

    /// Its points in time order: one when the lowest is the highest.
    fn points(&self) -> impl Iterator<Item = (i64, f64)> {
        let (low, high) = (self.low, self.high);
        let (first, second) = match (low, high) {
            (Some(l), Some(h)) if l.0 > h.0 => (Some(h), Some(l)),
            (Some(l), Some(h)) if l == h => (Some(l), None),
            other => other,
        };
        first.into_iter().chain(second)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    /// Which span of time since the spawn it covers.
    index: i64,
    progress: Extremes,
    pss: Extremes,
    step: Extremes,
}

/// A rank's progress and memory over time, bounded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankSeries {
    /// When the command was spawned (Unix microseconds): what the samples' times count from.
    spawned_at_us: i64,
    span_us: i64,
    buckets: Vec<Bucket>,
    /// How many buckets it may keep (at most [`MAX_BUCKETS`]).
    most: usize,
}

impl Default for RankSeries {
    fn default() -> Self {
        Self {
            spawned_at_us: 0,
            span_us: FIRST_SPAN_US,
            buckets: Vec::new(),
            most: MAX_BUCKETS,
        }
    }
}

/// A quantity of the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quantity {
    /// Bytes in the progress directory.
    Progress,
    /// The tree's PSS, in bytes.
    Pss,
    /// The median step time of the beats a sample saw, in seconds.
    StepSeconds,
}

impl RankSeries {
    /// A sample taken `elapsed_us` after the spawn: the progress directory's bytes, the tree's
    /// PSS where it was read and the median step seconds of its beats where it saw steps.
    /// Samples come in the order taken; one that says it was taken before the one before joins
    /// the last bucket.
    pub(crate) fn add(
        &mut self,
        elapsed_us: i64,
        progress_bytes: u64,
        pss_bytes: Option<u64>,
        step_seconds: Option<f64>,
    ) {
        let at_us = elapsed_us.max(0);
        while at_us / self.span_us >= self.most as i64 {
            self.coarsen();
        }
        let index = (at_us / self.span_us).max(self.buckets.last().map_or(0, |b| b.index));
        if self.buckets.last().is_none_or(|b| b.index != index) {
            self.buckets.push(Bucket {
                index,
                progress: Extremes::default(),
                pss: Extremes::default(),
                step: Extremes::default(),
            });
        }
        if let Some(bucket) = self.buckets.last_mut() {
            bucket.progress.add(at_us, progress_bytes as f64);
            if let Some(pss) = pss_bytes {
                bucket.pss.add(at_us, pss as f64);
            }
            if let Some(step) = step_seconds.filter(|s| s.is_finite()) {
                bucket.step.add(at_us, step);
            }
        }
    }

    /// When the command was spawned (Unix microseconds), once it is known.
    pub(crate) fn spawned_at(&mut self, at_us: i64) {
        self.spawned_at_us = at_us;
    }

    /// Keeps at most `most` buckets (at least 8) from now on, merging what it holds to fit: a
    /// page of many ranks gives each fewer.
    pub(crate) fn limit(&mut self, most: usize) {
        self.most = most.clamp(8, MAX_BUCKETS);
        while self
            .buckets
            .last()
            .is_some_and(|b| b.index >= self.most as i64)
        {
            self.coarsen();
        }
    }

    /// Each bucket's span doubled: neighbours merge.
    fn coarsen(&mut self) {
        self.span_us = self.span_us.saturating_mul(2);
        let mut merged: Vec<Bucket> = Vec::with_capacity(self.buckets.len() / 2 + 1);
        for mut bucket in self.buckets.drain(..) {
            bucket.index /= 2;
            match merged.last_mut() {
                Some(last) if last.index == bucket.index => {
                    last.progress.merge(bucket.progress);
                    last.pss.merge(bucket.pss);
                    last.step.merge(bucket.step);
                }
                _ => merged.push(bucket),
            }
        }
        self.buckets = merged;
    }

    /// The points of a quantity in time order, as (Unix microseconds, value): at most two a
    /// bucket.
    pub(crate) fn points(&self, quantity: Quantity) -> Vec<(i64, f64)> {
        self.buckets
            .iter()
            .flat_map(|b| match quantity {
                Quantity::Progress => b.progress.points(),
                Quantity::Pss => b.pss.points(),
                Quantity::StepSeconds => b.step.points(),
            })
            .map(|(at, v)| (self.spawned_at_us.saturating_add(at), v))
            .collect()
    }

    /// How many buckets it holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_week_of_samples_stays_within_its_buckets_and_keeps_its_spike() {
        let mut series = RankSeries::default();
        let start = 1_796_479_200_000_000_i64;
        series.spawned_at(start);
        // A sample every 10 s for a week; one PSS spike in the middle.
        let samples = 7 * 24 * 360;
        for i in 0..samples {
            let pss = if i == samples / 2 { 9_000 } else { 1_000 };
            let step = (i % 360 == 0).then_some(0.25 + (i % 7) as f64);
            series.add(i * 10_000_000, i as u64, Some(pss), step);
        }
        assert!(series.len() <= MAX_BUCKETS, "{}", series.len());
        assert!(series.len() > MAX_BUCKETS / 4, "{}", series.len());
        let pss = series.points(Quantity::Pss);
        assert!(pss.iter().any(|(_, v)| *v == 9_000.0), "the spike is kept");
        assert!(pss.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
        let progress = series.points(Quantity::Progress);
        assert_eq!(progress.first(), Some(&(start, 0.0)));
        assert_eq!(
            progress.last().map(|p| p.1),
            Some((samples - 1) as f64),
            "the last value is kept"
        );
        let steps = series.points(Quantity::StepSeconds);
        assert!(
            steps.iter().any(|(_, v)| *v == 6.25),
            "the slowest step is kept"
        );
        assert!(steps.iter().any(|(_, v)| *v == 0.25), "and the fastest");
    }

    #[test]
    fn a_limit_merges_what_is_held() {
        let mut series = RankSeries::default();
        for i in 0..1000 {
            series.add(i * 1_000_000, i as u64, None, None);
        }
        series.limit(16);
        assert!(series.len() <= 16, "{}", series.len());
        assert!(series.points(Quantity::Pss).is_empty(), "no PSS read");
        assert!(series.points(Quantity::StepSeconds).is_empty(), "no beats");
        series.add(5000 * 1_000_000, 5000, None, None);
        assert!(series.len() <= 16, "{}", series.len());
    }

    #[test]
    fn a_sample_out_of_order_joins_the_last_bucket() {
        let mut series = RankSeries::default();
        series.add(10_000_000, 1, Some(1), Some(0.1));
        series.add(20_000_000, 2, Some(2), None);
        series.add(5_000_000, 3, Some(3), Some(0.3));
        assert_eq!(series.points(Quantity::Progress).len(), 3);
        assert_eq!(series.points(Quantity::StepSeconds).len(), 2);
        assert!(series.len() <= 2);
    }
}
