//! A robust slope of a series that may run for days, in memory that does not grow with it.
//!
//! The series (milliseconds since spawn, a figure) is kept as at most [`MAX_BUCKETS`] buckets of
//! equal width, each the mean of the points that fell in it; when one more bucket would be
//! needed, the width doubles and neighbours merge. The slope is Theil–Sen's over the buckets'
//! means: the median of the slopes between every two buckets, which a few outlying buckets (a
//! spike, a garbage collection, a checkpoint's buffers) do not move — unlike least squares.
//! Its confidence bound is Sen's, from the ranks of those same slopes ([`Trend::bounded_since`]):
//! a noisy series that does not grow gets a wide interval around a slope that means nothing.

/// The most buckets kept: the slope then takes at most 32,640 pairs.
const MAX_BUCKETS: usize = 256;

/// The width buckets start at; it doubles as the series grows.
const FIRST_WIDTH_MS: u64 = 100;

/// Milliseconds in an hour: slopes are told per hour.
const MS_PER_HOUR: f64 = 3_600_000.0;

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

/// A slope with its lower confidence bound, and how much of the series it was taken from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub slope: Slope,
    /// Units an hour that the slope is at least, at the confidence asked for; `None` where the
    /// buckets are too few to bound it.
    pub lower_per_hour: Option<f64>,
    /// The buckets the fit was taken over (each the mean of its points), and their points.
    pub buckets: usize,
    pub points: u64,
}

/// How sure a one-sided bound is: the share of the normal distribution below `z`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Confidence {
    pub percent: u8,
    z: f64,
}

impl Confidence {
    /// 95 %: the slope is under its lower bound one time in twenty.
    pub const NINETY_FIVE: Confidence = Confidence {
        percent: 95,
        z: 1.644_853_626_951_472_2,
    };
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
        self.fit_since(since_ms, None).map(|fit| fit.slope)
    }

    /// [`Trend::slope_since`] with its one-sided lower confidence bound at `confidence`, Sen's,
    /// widened where the noise lingers from one bucket to the next (a PSS read again only every
    /// few samples, a batch that lasts several) so that it does not pass for many independent
    /// points.
    pub fn bounded_since(&self, since_ms: u64, confidence: Confidence) -> Option<Fit> {
        self.fit_since(since_ms, Some(confidence))
    }

    fn fit_since(&self, since_ms: u64, confidence: Option<Confidence>) -> Option<Fit> {
        let after = || {
            self.buckets
                .iter()
                .filter(move |b| b.key * self.width_ms >= since_ms)
        };
        let kept: Vec<(f64, f64)> = after().map(Bucket::mean).collect();
        let points: u64 = after().map(|b| b.points).sum();
        if points < MIN_POINTS || kept.len() < MIN_BUCKETS {
            return None;
        }
        let mut slopes = pair_slopes(&kept);
        let per_ms = median(&mut slopes)?;
        let mut residues: Vec<f64> = kept.iter().map(|(t, v)| v - per_ms * t).collect();
        let intercept = median(&mut residues)?;
        let lower_per_ms = confidence.and_then(|confidence| {
            let residues: Vec<f64> = kept
                .iter()
                .map(|(t, v)| v - per_ms * t - intercept)
                .collect();
            let inflation = variance_inflation(&residues);
            sen_lower_bound(&mut slopes, kept.len(), confidence, inflation)
        });
        let since_ms = kept.first().map_or(since_ms, |(t, _)| *t as u64);
        Some(Fit {
            slope: Slope {
                per_hour: per_ms * MS_PER_HOUR,
                since_ms,
                at_since: intercept + per_ms * since_ms as f64,
            },
            lower_per_hour: lower_per_ms.map(|per_ms| per_ms * MS_PER_HOUR),
            buckets: kept.len(),
            points,
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
        (last.0 > first.0).then(|| (last.1 - first.1) / (last.0 - first.0) * MS_PER_HOUR)
    }
}

/// The slope between every two of `points` (in time order), in units a millisecond.
fn pair_slopes(points: &[(f64, f64)]) -> Vec<f64> {
    let mut slopes: Vec<f64> = Vec::with_capacity(points.len() * (points.len() - 1) / 2);
    for (i, (t1, v1)) in points.iter().enumerate() {
        for (t2, v2) in &points[i + 1..] {
            if t2 > t1 {
                slopes.push((v2 - v1) / (t2 - t1));
            }
        }
    }
    slopes
}

/// Sen's (1968) lower confidence bound of Theil–Sen's slope over `n` points, from its pair
/// `slopes` in any order: the one of rank (N − z·σ) / 2, rounded, of the N in increasing order,
/// σ² being the variance of Kendall's S under no trend, n(n−1)(2n+5)/18, times `inflation` —
/// the rule of Gilbert (1987) §16.5 and of `scipy.stats.theilslopes` where `inflation` is 1.
/// Ties are not corrected for: their correction would narrow the interval, so leaving it out
/// keeps the bound on the safe side. `None` where that rank is below the first: too few points
/// to bound the slope at all.
fn sen_lower_bound(
    slopes: &mut [f64],
    n: usize,
    confidence: Confidence,
    inflation: f64,
) -> Option<f64> {
    let n = n as f64;
    let sigma = (n * (n - 1.0) * (2.0 * n + 5.0) / 18.0 * inflation).sqrt();
    let rank = ((slopes.len() as f64 - confidence.z * sigma) / 2.0).round();
    if !(rank >= 1.0 && rank <= slopes.len() as f64) {
        return None;
    }
    let index = rank as usize - 1;
    Some(*slopes.select_nth_unstable_by(index, f64::total_cmp).1)
}

/// How much more Kendall's S varies over points whose noise lingers from one to the next than
/// over independent ones: n/n* = 1 + 2 Σₖ (1 − k/n) ρᵏ, ρ being the lag-one autocorrelation of
/// the `residues` (in time order) and ρᵏ that of lag k as in a first-order autoregression —
/// the correction of Yue and Wang (2004). ρ is estimated as (n·r₁ + 1) / (n − 4), which takes
/// out the bias of the plain r₁ over few points (it reads low). A negative ρ would narrow the
/// interval; it is taken as none, and ρ is held under 0.99 so that the factor stays finite.
fn variance_inflation(residues: &[f64]) -> f64 {
    let n = residues.len();
    if n < 3 {
        return 1.0;
    }
    let mean = residues.iter().sum::<f64>() / n as f64;
    let spread: f64 = residues.iter().map(|r| (r - mean) * (r - mean)).sum();
    if spread.is_nan() || spread <= 0.0 {
        return 1.0;
    }
    let lagged: f64 = residues
        .windows(2)
        .map(|w| (w[0] - mean) * (w[1] - mean))
        .sum();
    let n_f = n as f64;
    let rho = if n > 4 {
        ((n_f * lagged / spread + 1.0) / (n_f - 4.0)).clamp(0.0, 0.99)
    } else {
        (lagged / spread).clamp(0.0, 0.99)
    };
    let mut power = 1.0;
    let mut sum = 0.0;
    for k in 1..n {
        power *= rho;
        sum += (1.0 - k as f64 / n as f64) * power;
    }
    1.0 + 2.0 * sum
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

    /// A trend of `values`, one a second.
    fn each_second(values: &[f64]) -> Trend {
        let mut trend = Trend::default();
        for (i, value) in values.iter().enumerate() {
            trend.add(i as u64 * 1000, *value);
        }
        trend
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// Theil–Sen's slope of `values`, one a second, and Sen's 95 % lower bound, per second and
    /// not widened for lingering noise: what `scipy.stats.theilslopes` gives.
    fn sen(values: &[f64]) -> (f64, f64) {
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64, *v))
            .collect();
        let mut slopes = pair_slopes(&points);
        let slope = median(&mut slopes).unwrap();
        let lower = sen_lower_bound(&mut slopes, points.len(), Confidence::NINETY_FIVE, 1.0);
        (slope, lower.unwrap())
    }

    /// Known values: `scipy.stats.theilslopes(v, t, alpha=0.90)` gives the slope and, as the low
    /// end of its two-sided 90 % interval, the one-sided 95 % lower bound.
    #[test]
    fn theil_sen_and_its_lower_bound_are_scipys_on_a_small_series() {
        let values = [3.1, 2.0, 5.7, 4.2, 6.9, 5.1, 8.4, 7.7, 9.0, 11.6, 9.8, 12.5];
        let (slope, lower) = sen(&values);
        assert!(close(slope, 0.860_606_060_606_060_6), "{slope}");
        // (66 − 1.645 × 14.58) / 2 = 21.0: the 21st of the 66 pair slopes.
        assert!(close(lower, 0.657_142_857_142_857_1), "{lower}");
        let fit = each_second(&values)
            .bounded_since(0, Confidence::NINETY_FIVE)
            .unwrap();
        assert_eq!((fit.buckets, fit.points), (12, 12));
        assert!(close(fit.slope.per_hour, slope * 3600.0), "{fit:?}");
    }

    /// Known values: 40 draws between 1 and 200 (numpy's `default_rng(7)`), a second apart, whose
    /// slope scipy puts at −0.00158 a millisecond with −0.00288 as its 95 % lower bound; the
    /// trend's bound, widened for their slight lag-one correlation, is lower still.
    #[test]
    fn a_flat_noisy_series_has_a_lower_bound_under_zero() {
        let values = [
            125.394, 179.546, 155.361, 45.816, 60.733, 174.837, 2.048, 164.424, 159.617, 94.119,
            61.303, 56.407, 51.719, 89.57, 101.405, 111.146, 199.105, 158.74, 124.814, 197.803,
            43.846, 32.882, 122.895, 9.744, 8.1, 103.463, 93.775, 183.516, 126.216, 103.309,
            99.878, 50.255, 3.347, 39.288, 138.714, 40.921, 74.538, 1.743, 166.179, 31.738,
        ];
        let (slope, lower) = sen(&values);
        assert!(close(slope / 1000.0, -0.001_577_636_363_636_363), "{slope}");
        assert!(
            close(lower / 1000.0, -0.002_877_124_999_999_999_5),
            "{lower}"
        );
        let fit = each_second(&values)
            .bounded_since(0, Confidence::NINETY_FIVE)
            .unwrap();
        assert!(close(fit.slope.per_hour, slope * 3600.0), "{fit:?}");
        let widened = fit.lower_per_hour.unwrap();
        assert!(
            widened < lower * 3600.0,
            "{widened} under {}",
            lower * 3600.0
        );
    }

    /// Residues that linger two points at a time, `1 1 −1 −1 …`: a lag-one correlation of 1/8,
    /// 1/2 once its bias at eight points is taken out, hence 1 + 2 Σₖ (1 − k/8) 2⁻ᵏ.
    #[test]
    fn lingering_residues_widen_the_interval_and_alternating_ones_do_not() {
        let lingering = [1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0];
        assert_eq!(variance_inflation(&lingering), 2.501_953_125);
        let alternating = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0];
        assert_eq!(variance_inflation(&alternating), 1.0);
        assert_eq!(variance_inflation(&[3.0; 10]), 1.0, "no spread");
        let stuck: Vec<f64> = (0..100).map(|i| if i < 50 { 1.0 } else { -1.0 }).collect();
        assert!(variance_inflation(&stuck).is_finite());
    }

    #[test]
    fn the_bound_is_the_slope_of_a_line_and_none_for_too_few_buckets() {
        let line: Vec<f64> = (0..30).map(|i| 5.0 + 2.0 * i as f64).collect();
        let fit = each_second(&line)
            .bounded_since(0, Confidence::NINETY_FIVE)
            .unwrap();
        assert_eq!(fit.slope.per_hour, 7200.0);
        assert_eq!(fit.lower_per_hour, Some(7200.0), "every pair agrees");
        assert_eq!(
            fit.slope,
            each_second(&line).slope_since(0).unwrap(),
            "the same slope as the summary's"
        );
        // Five points: (10 − 1.645 × 4.08) / 2 = 1.6, the 2nd slope; fewer have no bound.
        let mut slopes = vec![3.0, 1.0, 4.0, 1.5, 9.0, 2.0, 6.0, 5.0, 3.5, 8.0];
        assert_eq!(
            sen_lower_bound(&mut slopes, 5, Confidence::NINETY_FIVE, 1.0),
            Some(1.5)
        );
        let mut slopes = vec![1.0, 2.0, 3.0];
        assert_eq!(
            sen_lower_bound(&mut slopes, 3, Confidence::NINETY_FIVE, 1.0),
            None
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_between_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut [5.0]), Some(5.0));
        assert_eq!(median(&mut []), None);
    }
}
