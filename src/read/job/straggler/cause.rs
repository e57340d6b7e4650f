//! Why a straggler is slow, when its GPUs say so: its GPUs over the run against the other
//! ranks' GPUs pooled, in one clause, or nothing where they do not differ clearly.
//!
//! The rules, first that holds (on the straggler's GPU that differs most):
//! - **Throttled**: a slowdown reason ([`SLOWDOWNS`]) active in a share of its samples at least
//!   [`THROTTLE_POINTS`] percentage points over the others' share, and at least
//!   [`THROTTLE_TIMES`] times it ("GPU 2 (GPU-1111…) throttled for power (sw_power_cap) in
//!   38 % of samples, the other ranks' GPUs in 0 %", with the mean power draw of both where a
//!   power reason is named and both are known);
//! - **Clocked lower**: a mean SM clock at least [`CLOCK_LOWER`] below the others' mean.
//!
//! Each side needs [`MIN_SAMPLES`] samples of the figure compared. Power alone is no cause: a
//! GPU that waits on the others draws less, so a low draw is as much the straggle's effect.

use super::gpus::{GpuRun, SLOWDOWNS};

/// How many percentage points more often a reason must be active on the straggler's GPU.
pub(crate) const THROTTLE_POINTS: f64 = 10.0;
/// How many times as often, at least.
pub(crate) const THROTTLE_TIMES: f64 = 2.0;
/// How much lower (a fraction) its mean SM clock must be.
pub(crate) const CLOCK_LOWER: f64 = 0.10;
/// The fewest samples of a figure on either side to compare it.
pub(crate) const MIN_SAMPLES: u64 = 3;

/// The clause that explains the straggler whose GPUs are `own` by the GPUs of the ranks that
/// keep pace (`others`); `None` where none of the rules holds.
pub(crate) fn cause(own: &[GpuRun], others: &[&GpuRun]) -> Option<String> {
    let mut pool = GpuRun::default();
    for other in others {
        pool.merge(other);
    }
    throttled(own, &pool).or_else(|| clocked_lower(own, &pool))
}

/// The reason active most often beyond the others', on any of `own`.
fn throttled(own: &[GpuRun], pool: &GpuRun) -> Option<String> {
    if pool.masks < MIN_SAMPLES {
        return None;
    }
    let share = |slowed: u64, of: u64| 100.0 * slowed as f64 / of as f64;
    let (gpu, reason, mine, theirs) = own
        .iter()
        .filter(|gpu| gpu.masks >= MIN_SAMPLES)
        .flat_map(|gpu| {
            SLOWDOWNS.iter().enumerate().map(move |(i, reason)| {
                (
                    gpu,
                    reason,
                    share(gpu.slowed[i], gpu.masks),
                    share(pool.slowed[i], pool.masks),
                )
            })
        })
        .filter(|&(_, _, mine, theirs)| {
            mine - theirs >= THROTTLE_POINTS && mine >= THROTTLE_TIMES * theirs
        })
        .max_by(|a, b| (a.2 - a.3).total_cmp(&(b.2 - b.3)))?;
    let (_, name, what) = reason;
    let power = match (gpu.power_watts.value(), pool.power_watts.value()) {
        (Some(mine), Some(theirs))
            if what.ends_with("power")
                && gpu.power_watts.count >= MIN_SAMPLES
                && pool.power_watts.count >= MIN_SAMPLES =>
        {
            format!(", drawing {mine:.0} W on average against their {theirs:.0} W")
        }
        _ => String::new(),
    };
    Some(format!(
        "{} {what} ({name}) in {mine:.0} % of samples, the other ranks' GPUs in {theirs:.0} %{power}",
        label(gpu)
    ))
}

/// The GPU of `own` whose mean SM clock is lowest against the others', if low enough.
fn clocked_lower(own: &[GpuRun], pool: &GpuRun) -> Option<String> {
    if pool.sm_clock_mhz.count < MIN_SAMPLES {
        return None;
    }
    let theirs = pool.sm_clock_mhz.value().filter(|c| *c > 0.0)?;
    let (gpu, mine) = own
        .iter()
        .filter(|gpu| gpu.sm_clock_mhz.count >= MIN_SAMPLES)
        .filter_map(|gpu| Some((gpu, gpu.sm_clock_mhz.value()?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    (mine <= theirs * (1.0 - CLOCK_LOWER)).then(|| {
        format!(
            "{} ran its SM clock at {mine:.0} MHz on average, {:.0} % below the other ranks' GPUs \
({theirs:.0} MHz)",
            label(gpu),
            100.0 * (1.0 - mine / theirs)
        )
    })
}

/// `GPU 2 (GPU-1111aaaa…)`: its index on its host and enough of its UUID to tell it.
fn label(gpu: &GpuRun) -> String {
    let short: String = gpu.uuid.chars().take(12).collect();
    let more = if gpu.uuid.chars().count() > 12 {
        "…"
    } else {
        ""
    };
    format!("GPU {} ({short}{more})", gpu.index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::job::straggler::gpus::Mean;

    /// A GPU read `samples` times, `slowed` of them with `sw_power_cap`, at `clock` MHz and
    /// `watts`.
    fn run(index: u32, samples: u64, slowed: u64, clock: f64, watts: f64) -> GpuRun {
        let n = samples as f64;
        GpuRun {
            index,
            uuid: format!("GPU-{index}{index}{index}{index}aaaa-bbbb"),
            masks: samples,
            slowed: [slowed, 0, 0, 0, 0],
            sm_clock_mhz: Mean {
                sum: clock * n,
                count: samples,
            },
            power_watts: Mean {
                sum: watts * n,
                count: samples,
            },
        }
    }

    /// Rank 2's GPU capped for power in 38 % of its samples, the others' never: the cause names
    /// the GPU, the reason and both shares, and the power drawn.
    #[test]
    fn a_power_cap_the_others_do_not_have_is_the_cause() {
        let own = [run(2, 50, 19, 1400.0, 300.0)];
        let others = [run(0, 50, 0, 1980.0, 350.0), run(1, 50, 0, 1980.0, 350.0)];
        assert_eq!(
            cause(&own, &others.iter().collect::<Vec<_>>()).as_deref(),
            Some(
                "GPU 2 (GPU-2222aaaa…) throttled for power (sw_power_cap) in 38 % of samples, \
the other ranks' GPUs in 0 %, drawing 300 W on average against their 350 W"
            )
        );
    }

    /// The margins: 10 points more is needed, and twice as often; a reason the others have as
    /// often is no cause, nor is one seen in too few samples.
    #[test]
    fn a_throttle_must_differ_clearly() {
        let cause_of = |own: GpuRun, other: GpuRun| cause(&[own], &[&other]);
        let with = |slowed| run(2, 100, slowed, 1980.0, 300.0);
        let other = |slowed| run(0, 100, slowed, 1980.0, 300.0);
        assert!(cause_of(with(10), other(0)).is_some());
        assert_eq!(cause_of(with(9), other(0)), None, "under 10 points");
        assert_eq!(cause_of(with(35), other(20)), None, "not twice as often");
        assert!(cause_of(with(40), other(20)).is_some());
        assert_eq!(cause_of(with(50), other(50)), None);
        assert_eq!(
            cause_of(run(2, 2, 2, 1980.0, 300.0), other(0)),
            None,
            "its GPU read twice only"
        );
        assert_eq!(
            cause_of(with(50), run(0, 2, 0, 1980.0, 300.0)),
            None,
            "the others read twice only"
        );
        assert_eq!(cause(&[with(50)], &[]), None, "nothing to compare with");
    }

    /// A thermal reason is named as heat, without power figures; of two GPUs of the
    /// straggler, the one that differs most speaks.
    #[test]
    fn the_gpu_that_differs_most_is_named() {
        let mut hot = run(3, 20, 0, 1980.0, 300.0);
        hot.slowed = [0, 0, 0, 0, 15];
        let capped = run(2, 20, 4, 1980.0, 300.0);
        let other = run(0, 20, 0, 1980.0, 300.0);
        assert_eq!(
            cause(&[capped, hot], &[&other]).as_deref(),
            Some(
                "GPU 3 (GPU-3333aaaa…) throttled for heat (hw_thermal_slowdown) in 75 % of \
samples, the other ranks' GPUs in 0 %"
            )
        );
    }

    /// With no reason active, an SM clock 10 % under the others' is the cause; 9 % is not.
    #[test]
    fn a_lower_clock_is_the_cause_when_no_reason_is() {
        let other = run(0, 10, 0, 2000.0, 300.0);
        assert_eq!(
            cause(&[run(1, 10, 0, 1500.0, 250.0)], &[&other]).as_deref(),
            Some(
                "GPU 1 (GPU-1111aaaa…) ran its SM clock at 1500 MHz on average, 25 % below the \
other ranks' GPUs (2000 MHz)"
            )
        );
        assert!(cause(&[run(1, 10, 0, 1800.0, 250.0)], &[&other]).is_some());
        assert_eq!(cause(&[run(1, 10, 0, 1820.0, 250.0)], &[&other]), None);
        // Power alone explains nothing.
        assert_eq!(cause(&[run(1, 10, 0, 2000.0, 100.0)], &[&other]), None);
        assert_eq!(cause(&[], &[&other]), None);
    }
}
