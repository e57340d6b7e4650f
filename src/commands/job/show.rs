//! `unilab job show JOB`: the verdict first (the suspect and why, then what the others were
//! doing, then who tripped first: see [`JobView`]), then every rank's soak of the job, from
//! every host's log under the state root, side by side, then its stragglers.

use std::collections::BTreeMap;

use crate::commands::job_soaks;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::job::{JobError, JobId};
use crate::output::{self, Output};
use crate::paths::StatePaths;
use crate::read::job::series::RankSeries;
use crate::read::job::soaks::Reading;
use crate::read::job::straggler::{STRAGGLER_RATIO, Straggler};
use crate::read::job::{JobView, RankRow};
use crate::text::{foreign, step_time};
use crate::view::report::job::SeriesKey;

pub(super) fn show(paths: &StatePaths, job: &JobId, out: &mut Output) -> Result<Exit, Error> {
    let view = read_view(paths, job, out, Reading::Rows)?.view;
    if out.json {
        out.json_line(&serde_json::to_value(&view).map_err(|e| Error::Internal(e.to_string()))?)?;
        return Ok(Exit::Success);
    }
    for line in &view.verdict_lines {
        // The alarm's fields, the ranks' hosts and phases are other processes' text.
        out.line(&foreign(line))?;
    }
    let paint = out.paint;
    let rows: Vec<Vec<String>> = view.ranks.iter().map(|r| cells(r, paint)).collect();
    for line in output::table(
        &[
            "RANK",
            "HOST",
            "STATUS",
            "LAST PROGRESS",
            "STEP",
            "PHASE",
            "STEP TIME",
            "PEAK PSS",
            "GPU",
            "SIGNATURE",
        ],
        &rows,
    ) {
        out.line(&line)?;
    }
    if let Some(first) = view.stragglers.first() {
        out.line(&format!(
            "stragglers (median step over {STRAGGLER_RATIO}× the job's {}):",
            step_time(first.job_median_seconds)
        ))?;
        for straggler in &view.stragglers {
            out.line(&format!("  {}", straggler_line(straggler)))?;
        }
    }
    Ok(Exit::Success)
}

/// A job as read from every host's log: its view, its ranks' series by host and soak (when
/// `reading` asked for them) and the warnings about host logs that could not be read.
pub(super) struct ReadJob {
    pub view: JobView,
    pub series: BTreeMap<SeriesKey, RankSeries>,
    pub warnings: Vec<String>,
}

/// The view of `job` from every host's log; a job no log records is refused (exit 3).
pub(super) fn read_view(
    paths: &StatePaths,
    job: &JobId,
    out: &Output,
    reading: Reading,
) -> Result<ReadJob, Error> {
    let read = job_soaks(paths, out, &|name| name == job.as_str(), reading)?;
    if read.soaks.is_empty() {
        return Err(JobError::NoSuchJob {
            job: job.to_string(),
            root: paths.root.clone(),
        }
        .into());
    }
    // The alarm (the latest run's) is the view's to show, not its to need: one that cannot be
    // read is said, and so is what in the job's runs is not a run's.
    let mut warnings = read.warnings;
    let alarm = match crate::job::written::written_alarm(&paths.root, paths.uid, job) {
        Ok((alarm, ignored)) => {
            for warning in ignored {
                out.warn(&warning);
                warnings.push(warning);
            }
            alarm
        }
        Err(e) => {
            let warning = crate::error::Error::from(e).chain_text();
            out.warn(&warning);
            warnings.push(warning);
            None
        }
    };
    let mut series = BTreeMap::new();
    let mut rows = Vec::new();
    for soak in read.soaks {
        if let Some(kept) = soak.series {
            series.insert((soak.host.clone(), soak.summary.soak_id.clone()), kept);
        }
        rows.extend(soak.row);
    }
    Ok(ReadJob {
        view: JobView::of(job.as_str(), rows, alarm),
        series,
        warnings,
    })
}

/// One rank under the columns of `job show`.
fn cells(row: &RankRow, paint: crate::style::Palette) -> Vec<String> {
    let status = match row.failure_kind {
        Some(kind) => format!("{} ({})", row.status, kind.as_str()),
        None => row.status.clone(),
    };
    vec![
        row.rank.map_or_else(|| "-".into(), |r| r.to_string()),
        foreign(&row.host).into_owned(),
        paint.status(&status),
        row.last_progress_at.map_or_else(
            || "-".into(),
            |at| {
                crate::text::human_time((at * 1e6) as i64)
                    .chars()
                    .skip(11)
                    .take(8)
                    .collect()
            },
        ),
        row.last_step.map_or_else(|| "-".into(), |s| s.to_string()),
        foreign(row.last_phase.as_deref().unwrap_or("-")).into_owned(),
        row.median_step_seconds
            .map_or_else(|| "-".into(), step_time),
        row.peak_tree_pss_bytes
            .map_or_else(|| "-".into(), crate::text::bytes),
        row.gpu_utilization_mean
            .map_or_else(|| "-".into(), |u| format!("{u:.0}%")),
        foreign(row.signature.as_deref().unwrap_or("-")).into_owned(),
    ]
}

/// `rank 2 on n1: 312ms a step, 3.06×; GPU 2 (…) throttled …`, for the terminal.
fn straggler_line(straggler: &Straggler) -> String {
    let who = match straggler.rank {
        Some(rank) => format!("rank {rank} on {}", straggler.host),
        None => format!("a soak on {} without a rank", straggler.host),
    };
    let cause = straggler.cause.as_deref().map_or_else(
        || "; no GPU difference explains it".to_owned(),
        |c| format!("; {c}"),
    );
    foreign(&format!(
        "{who}: {} a step, {:.2}×{cause}",
        step_time(straggler.median_step_seconds),
        straggler.ratio
    ))
    .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::job::straggler::cause::{CLOCK_LOWER, THROTTLE_POINTS, THROTTLE_TIMES};
    use crate::read::job::suspect::{STALL_SAMPLES, STALL_STEPS};

    /// `job show --help` states the rule with the figures the code uses.
    #[test]
    fn the_help_says_the_rule() {
        let mut command = <crate::cli::Cli as clap::CommandFactory>::command();
        let help = command
            .find_subcommand_mut("job")
            .and_then(|job| job.find_subcommand_mut("show"))
            .map(|show| show.render_long_help().to_string())
            .unwrap();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for figure in [
            format!("over {STRAGGLER_RATIO}× the job's"),
            format!(
                "max({STALL_STEPS} × its median step or progress interval, {STALL_SAMPLES} sample \
intervals)"
            ),
            "(odd_stack)".into(),
            "(other_phase)".into(),
            "(behind_step)".into(),
            "(first_stalled)".into(),
            format!("at least {} points more", THROTTLE_POINTS),
            format!("twice as often ({}×)", THROTTLE_TIMES),
            format!("at least {} % lower", 100.0 * CLOCK_LOWER),
        ] {
            assert!(help.contains(&figure), "{figure:?} in {help}");
        }
    }
}
