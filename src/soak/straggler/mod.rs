//! Stragglers: the ranks of a job whose steps are slower than the job's, and why, where their
//! GPUs say (`job show`'s `stragglers`, DESIGN.md's fourth wave).
//!
//! The rule: the job's median step time is the median of its ranks' median step seconds of the
//! `train` phase (the ranks that beat it; at least two); a rank whose median is over
//! [`STRAGGLER_RATIO`] times the job's is a straggler. Its `cause` compares its GPUs with the
//! GPUs of the ranks that keep pace ([`cause`]). Pure: the ranks come in read
//! ([`reading::RankReading`]: their steps by [`steps::RankSteps`], their GPUs by
//! [`gpus::RankGpus`]).

pub(crate) mod cause;
pub(crate) mod gpus;
pub(crate) mod reading;
pub(crate) mod steps;

use serde::Serialize;

use crate::text::step_time;

use gpus::GpuRun;

/// How many times the job's median step time a rank's may be before it is a straggler.
pub(crate) const STRAGGLER_RATIO: f64 = 1.15;

/// A rank as the rule reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepRank<'a> {
    pub rank: Option<u32>,
    pub host: &'a str,
    /// Of the `train` phase; `None` without timed steps.
    pub median_step_seconds: Option<f64>,
    pub gpus: &'a [GpuRun],
}

/// A straggler, as `job show --json` names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Straggler {
    pub rank: Option<u32>,
    pub median_step_seconds: f64,
    /// To the job's median step time, to three decimals.
    pub ratio: f64,
    /// What its GPUs say of it, in one clause; `null` where they do not differ clearly.
    pub cause: Option<String>,
    #[serde(skip)]
    pub host: String,
    #[serde(skip)]
    pub job_median_seconds: f64,
}

impl Straggler {
    /// `rank 2 on n1 straggles: its median step 312ms is 3.06× the job's 102ms; GPU …`.
    pub(crate) fn sentence(&self) -> String {
        let who = match self.rank {
            Some(rank) => format!("rank {rank} on {}", self.host),
            None => format!("a soak on {} without a rank", self.host),
        };
        let cause = self
            .cause
            .as_ref()
            .map_or_else(String::new, |c| format!("; {c}"));
        format!(
            "{who} straggles: its median step {} is {:.2}× the job's {}{cause}",
            step_time(self.median_step_seconds),
            self.ratio,
            step_time(self.job_median_seconds)
        )
    }
}

/// The median of the ranks' median step seconds; `None` with fewer than two ranks timed.
pub(crate) fn job_median(ranks: &[StepRank]) -> Option<f64> {
    let mut medians: Vec<f64> = ranks
        .iter()
        .filter_map(|r| r.median_step_seconds)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .collect();
    if medians.len() < 2 {
        return None;
    }
    medians.sort_by(f64::total_cmp);
    let half = medians.len() / 2;
    Some(if medians.len().is_multiple_of(2) {
        (medians[half - 1] + medians[half]) / 2.0
    } else {
        medians[half]
    })
}

/// The stragglers among `ranks`, in their order.
pub(crate) fn stragglers(ranks: &[StepRank]) -> Vec<Straggler> {
    let Some(job) = job_median(ranks).filter(|m| *m > 0.0) else {
        return Vec::new();
    };
    let ratio_of = |rank: &StepRank| {
        rank.median_step_seconds
            .filter(|s| s.is_finite())
            .map(|s| s / job)
    };
    let slow = |rank: &StepRank| ratio_of(rank).is_some_and(|r| r > STRAGGLER_RATIO);
    let keeping_pace: Vec<&GpuRun> = ranks
        .iter()
        .filter(|r| ratio_of(r).is_some() && !slow(r))
        .flat_map(|r| r.gpus)
        .collect();
    ranks
        .iter()
        .filter(|r| slow(r))
        .filter_map(|rank| {
            Some(Straggler {
                rank: rank.rank,
                median_step_seconds: rank.median_step_seconds?,
                ratio: (ratio_of(rank)? * 1000.0).round() / 1000.0,
                cause: cause::cause(rank.gpus, &keeping_pace),
                host: rank.host.to_owned(),
                job_median_seconds: job,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::straggler::gpus::Mean;

    fn rank(rank: u32, median: Option<f64>) -> StepRank<'static> {
        StepRank {
            rank: Some(rank),
            host: "n1",
            median_step_seconds: median,
            gpus: &[],
        }
    }

    /// Four ranks, one 3× slower: it alone is named, with its ratio to the median of the
    /// four; one just over 1.15× is named too, one at 1.15× is not.
    #[test]
    fn a_rank_over_the_ratio_of_the_jobs_median_straggles() {
        let ranks = [
            rank(0, Some(0.1)),
            rank(1, Some(0.1)),
            rank(2, Some(0.3)),
            rank(3, Some(0.1)),
            rank(4, None),
        ];
        assert_eq!(job_median(&ranks), Some(0.1));
        let found = stragglers(&ranks);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].rank, found[0].ratio, found[0].cause.as_deref()),
            (Some(2), 3.0, None)
        );
        assert_eq!(
            found[0].sentence(),
            "rank 2 on n1 straggles: its median step 300ms is 3.00× the job's 100ms"
        );
        let json = serde_json::to_value(&found[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"rank": 2, "median_step_seconds": 0.3, "ratio": 3.0, "cause": null})
        );

        let edge = [rank(0, Some(1.0)), rank(1, Some(1.0)), rank(2, Some(1.15))];
        assert!(stragglers(&edge).is_empty());
        let over = [rank(0, Some(1.0)), rank(1, Some(1.0)), rank(2, Some(1.151))];
        assert_eq!(stragglers(&over)[0].ratio, 1.151);
    }

    /// The job's median of an even number of ranks lies between the middle two; fewer than two
    /// ranks timed, or steps of no time, make no stragglers.
    #[test]
    fn too_few_ranks_or_no_time_make_no_stragglers() {
        let two = [rank(0, Some(0.1)), rank(1, Some(0.3))];
        assert_eq!(job_median(&two), Some(0.2));
        assert_eq!(stragglers(&two)[0].ratio, 1.5);
        assert!(stragglers(&[rank(0, Some(0.1)), rank(1, None)]).is_empty());
        assert!(stragglers(&[rank(0, Some(0.0)), rank(1, Some(0.0))]).is_empty());
        assert!(stragglers(&[]).is_empty());
        let odd = [
            rank(0, Some(f64::NAN)),
            rank(1, Some(0.1)),
            rank(2, Some(0.1)),
        ];
        assert!(stragglers(&odd).is_empty());
    }

    /// The cause compares the straggler's GPUs with those of the ranks that keep pace, not with
    /// another straggler's: two ranks on one capped GPU are both explained by it.
    #[test]
    fn the_cause_compares_with_the_ranks_that_keep_pace() {
        let gpu = |index: u32, capped: u64| GpuRun {
            index,
            uuid: format!("GPU-{index}"),
            masks: 10,
            slowed: [capped, 0, 0, 0, 0],
            sm_clock_mhz: Mean::default(),
            power_watts: Mean::default(),
        };
        fn with(r: u32, median: f64, gpus: &[GpuRun]) -> StepRank<'_> {
            StepRank {
                gpus,
                ..rank(r, Some(median))
            }
        }
        let (fast, capped) = ([gpu(0, 0)], [gpu(1, 8)]);
        let ranks = [
            with(0, 0.1, &fast),
            with(1, 0.1, &fast),
            with(2, 0.3, &capped),
            with(3, 0.3, &capped),
            with(4, 0.1, &fast),
        ];
        let found = stragglers(&ranks);
        assert_eq!(found.len(), 2);
        for straggler in &found {
            assert_eq!(
                straggler.cause.as_deref(),
                Some(
                    "GPU 1 (GPU-1) throttled for power (sw_power_cap) in 80 % of samples, the \
other ranks' GPUs in 0 %"
                )
            );
        }
    }
}
