//! A robust slope of a series that may run for days, in memory that does not grow with it.
//!
//! The series (milliseconds since spawn, a figure) is kept as at most [`MAX_BUCKETS`] buckets of
//! equal width, each the mean of the points that fell in it; when one more bucket would be
//! needed, the width doubles and neighbours merge. The slope is Theil–Sen's over the buckets'
//! means: the median of the slopes between every two buckets, which a few outlying buckets (a
//! spike, a garbage collection, a checkpoint's buffers) do not move — unlike least squares.

/// The most buckets kept: the slope then takes at most 32,640 pairs.
const MAX_BUCKETS: usize = 256;

/// The width buckets start at; it doubles as the series grows.
const FIRST_WIDTH_MS: u64 = 100;

/// The fewest points, and buckets, after the warm-up that a slope is given for.
const MIN_POINTS: u64 = 10;
const MIN_BUCKETS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    /// Which bucket: it spans `[key × width, (key + 1) × width)`.
    key: u64,
    points: u64,
    sum_at_ms: f64,
    sum_value: f64,
}

impl Bucket {
    fn mean(&self) -> (f64, f64) {
        let n = self.points as f64;
        (self.sum_at_ms / n, self.sum_value / n)
    }

    fn merge(&mut self, other: &Bucket) {
        self.points += other.points;
        self.sum_at_ms += other.sum_at_ms;
        self.sum_value += other.sum_value;
    }
}

/// A series' trend, fed point by point in time order.
#[derive(Debug, Clone)]
pub struct Trend {
    width_ms: u64,
    buckets: Vec<Bucket>,
}

/// A slope, and since when it was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slope {
    /// Units of the series an hour.
    pub per_hour: f64,
    /// Milliseconds since spawn of the first point it was taken from.
    pub since_ms: u64,
    /// The fitted line's value there (Theil–Sen's intercept: the median of what each bucket
    /// leaves once the slope is taken out).
    pub at_since: f64,
}

impl Default for Trend {
    fn default() -> Self {
        Self {
            width_ms: FIRST_WIDTH_MS,
            buckets: Vec::new(),
        }
    }
}

impl Trend {
    /// Adds the point `value` at `at_ms`; points come in time order.
    pub fn add(&mut self, at_ms: u64, value: f64) {
        let key = at_ms / self.width_ms;
        let point = Bucket {
            key,
            points: 1,
            sum_at_ms: at_ms as f64,
            sum_value: value,
        };
        match self.buckets.last_mut() {
            Some(last) if last.key >= key => last.merge(&point),
            _ => self.buckets.push(point),
        }
        while self.buckets.len() > MAX_BUCKETS {
            self.widen();
        }
    }

    /// Doubles the width: each two neighbours of the new width become one bucket.
    fn widen(&mut self) {
        self.width_ms *= 2;
        let mut merged: Vec<Bucket> = Vec::with_capacity(self.buckets.len() / 2 + 1);
        for bucket in &self.buckets {
            let key = bucket.key / 2;
            match merged.last_mut() {
                Some(last) if last.key == key => last.merge(bucket),
                _ => merged.push(Bucket { key, ..*bucket }),
            }
        }
        self.buckets = merged;
    }

    /// Theil–Sen's slope over the buckets that begin at or after `since_ms`; `None` while they
    /// hold fewer than [`MIN_POINTS`] points in [`MIN_BUCKETS`] buckets.
    pub fn slope_since(&self, since_ms: u64) -> Option<Slope> {
        let kept: Vec<(f64, f64)> = self
            .buckets
            .iter()
            .filter(|b| b.key * self.width_ms >= since_ms)
            .map(Bucket::mean)
            .collect();
        let points: u64 = self
            .buckets
            .iter()
            .filter(|b| b.key * self.width_ms >= since_ms)
            .map(|b| b.points)
            .sum();
        if points < MIN_POINTS || kept.len() < MIN_BUCKETS {
            return None;
        }
        let mut slopes: Vec<f64> = Vec::with_capacity(kept.len() * (kept.len() - 1) / 2);
        for (i, (t1, v1)) in kept.iter().enumerate() {
            for (t2, v2) in &kept[i + 1..] {
                if t2 > t1 {
                    slopes.push((v2 - v1) / (t2 - t1));
                }
            }
        }
        let per_ms = median(&mut slopes)?;
        let since_ms = kept.first().map_or(since_ms, |(t, _)| *t as u64);
        let mut residues: Vec<f64> = kept.iter().map(|(t, v)| v - per_ms * t).collect();
        let intercept = median(&mut residues)?;
        Some(Slope {
            per_hour: per_ms * 3_600_000.0,
            since_ms,
            at_since: intercept + per_ms * since_ms as f64,
        })
    }

    /// The plain rate of change between the first bucket that begins at or after `since_ms` and
    /// the last, in units an hour: for a series that moves in steps (a directory that grows by a
    /// checkpoint now and then), where a robust slope would see the flats between the steps.
    pub fn change_since(&self, since_ms: u64) -> Option<f64> {
        let first = self
            .buckets
            .iter()
            .find(|b| b.key * self.width_ms >= since_ms)?
            .mean();
        let last = self.buckets.last()?.mean();
        (last.0 > first.0).then(|| (last.1 - first.1) / (last.0 - first.0) * 3_600_000.0)
    }
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mid = values.len() / 2;
    let (_, upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if values.len() % 2 == 1 {
        return Some(upper);
    }
    let lower = values[..mid]
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    Some((lower + upper) / 2.0)
}

/// When growth starts to be judged: `warmup_ms` when given, else a tenth of the run so far and
/// at least five minutes (allocators and caches grow at first, then plateau).
pub(crate) fn warmup_end(warmup_ms: Option<u64>, elapsed_ms: u64) -> u64 {
    warmup_ms.unwrap_or((elapsed_ms / 10).max(DEFAULT_WARMUP_MS))
}

/// The least default warm-up.
const DEFAULT_WARMUP_MS: u64 = 5 * 60 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    #[test]
    fn a_steady_growth_is_its_slope_whatever_the_outliers() {
        let mut trend = Trend::default();
        // 100 MiB/h sampled every 5 s for 10 h, with a spike every 97th sample.
        for i in 0..7200u64 {
            let at = i * 5000;
            let spike = if i % 97 == 0 { 4096.0 * MIB } else { 0.0 };
            trend.add(
                at,
                1024.0 * MIB + 100.0 * MIB * at as f64 / 3_600_000.0 + spike,
            );
        }
        assert!(trend.buckets.len() <= MAX_BUCKETS);
        let slope = trend.slope_since(0).unwrap();
        let per_hour = slope.per_hour / MIB;
        assert!((per_hour - 100.0).abs() < 3.0, "{per_hour} MiB/h");
        let start = slope.at_since / MIB;
        assert!(
            (start - 1024.0).abs() < 8.0,
            "the line starts near 1 GiB: {start} MiB"
        );
    }

    #[test]
    fn growth_then_a_plateau_has_no_slope_after_the_warmup() {
        let mut trend = Trend::default();
        for i in 0..600u64 {
            let at = i * 1000;
            let value = if at < 60_000 {
                at as f64 * MIB
            } else {
                60_000.0 * MIB
            };
            trend.add(at, value);
            if at == 59_000 {
                let growing = trend.slope_since(0).unwrap().per_hour / MIB;
                // 1 MiB/ms of the series' clock: 3.6 million MiB an hour.
                assert!(
                    (growing - 3_600_000.0).abs() < 1.0,
                    "growth at first: {growing}"
                );
            }
        }
        let after = trend.slope_since(120_000).unwrap();
        assert_eq!(after.per_hour, 0.0);
        assert!(after.since_ms >= 120_000);
    }

    #[test]
    fn a_series_that_moves_in_steps_has_its_plain_rate() {
        let mut trend = Trend::default();
        // A checkpoint of 60 MiB every minute, sampled every 5 s, for an hour.
        for i in 0..720u64 {
            let at = i * 5000;
            trend.add(at, (at / 60_000) as f64 * 60.0 * MIB);
        }
        let per_hour = trend.change_since(0).unwrap() / MIB;
        assert!((per_hour - 3600.0).abs() < 150.0, "{per_hour} MiB/h");
        assert_eq!(
            trend.change_since(10_000_000),
            None,
            "nothing after the end"
        );
    }

    #[test]
    fn too_few_points_after_the_warmup_give_no_slope() {
        let mut trend = Trend::default();
        for i in 0..20u64 {
            trend.add(i * 200, i as f64);
        }
        assert!(trend.slope_since(0).is_some());
        assert_eq!(trend.slope_since(3000), None, "only 5 points after 3 s");
        assert_eq!(Trend::default().slope_since(0), None);
    }

    #[test]
    fn the_default_warmup_is_a_tenth_of_the_run_and_at_least_five_minutes() {
        assert_eq!(warmup_end(Some(3000), 10_000_000), 3000);
        assert_eq!(warmup_end(None, 60_000), DEFAULT_WARMUP_MS);
        assert_eq!(warmup_end(None, 100 * 3_600_000), 10 * 3_600_000);
    }

    #[test]
    fn the_median_of_an_even_count_is_between_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut [5.0]), Some(5.0));
        assert_eq!(median(&mut []), None);
    }
}
