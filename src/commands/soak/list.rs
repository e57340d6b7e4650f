//! `unilab soak list`: this host's soaks, or a Slurm job's on every host.

use super::{settled, status_text, summary_json};
use crate::cli::soak::{ListArgs, StatusFilter};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::output::{self, Output, human_time};
use crate::paths::StatePaths;
use crate::projection::{SoakState, SoakSummary, Soaks};
use crate::text::foreign;
use crate::time::{Clock, SystemClock, unix_seconds};
use serde_json::Value;

pub(super) fn list(paths: &StatePaths, args: &ListArgs, out: &mut Output) -> Result<Exit, Error> {
    let filter = Filter::new(args, &SystemClock);
    if let Some(job) = &args.job {
        return list_job(paths, job, &filter, out);
    }
    let snapshot = settled(paths, out)?;
    let mut soaks = match &snapshot {
        Some(snapshot) => Soaks::rows(snapshot)?
            .into_iter()
            .map(|soak| crate::soak::ended::as_shown(snapshot, soak))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    soaks.sort_by_key(|s| s.first_seq);
    filter.apply(&mut soaks, |s| s);
    let ran = match &snapshot {
        Some(snapshot) => soaks
            .iter()
            .map(|soak| crate::soak::abandon::ran_seconds(snapshot, soak))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    crate::commands::checked_show(snapshot.as_ref(), || list_soaks(&soaks, &ran, &filter, out))
}

/// Which soaks `soak list` shows: `--status`, `--since` and `--limit`, applied in that order to
/// soaks in the order they started.
struct Filter {
    status: Option<StatusFilter>,
    since_us: Option<i64>,
    limit: Option<usize>,
}

impl Filter {
    fn new(args: &ListArgs, clock: &dyn Clock) -> Self {
        Filter {
            status: args.status,
            since_us: args.since.map(|since| since.at_us(clock.now_us())),
            limit: args.limit,
        }
    }

    fn is_on(&self) -> bool {
        self.status.is_some() || self.since_us.is_some() || self.limit.is_some()
    }

    fn keeps(&self, soak: &SoakSummary) -> bool {
        let status = self.status.is_none_or(|wanted| {
            matches!(
                (wanted, soak.state),
                (StatusFilter::Running, SoakState::Running)
                    | (
                        StatusFilter::Passed,
                        SoakState::Finished(OutcomeStatus::Passed)
                    )
                    | (
                        StatusFilter::Failed,
                        SoakState::Finished(OutcomeStatus::Failed)
                    )
                    | (
                        StatusFilter::Abandoned,
                        SoakState::Finished(OutcomeStatus::Abandoned)
                    )
            )
        });
        status
            && self
                .since_us
                .is_none_or(|since| soak.started_at_us >= since)
    }

    /// Keeps the rows (oldest first) that pass, the newest `limit` of them.
    fn apply<T>(&self, rows: &mut Vec<T>, summary: impl Fn(&T) -> &SoakSummary) {
        rows.retain(|row| self.keeps(summary(row)));
        if let Some(limit) = self.limit {
            rows.drain(..rows.len().saturating_sub(limit));
        }
    }
}

/// The soaks of Slurm job `job` in every host's log under the root, in the order they started,
/// as `job show` reads them ([`crate::commands::job_soaks`]: this host's abandoned soaks
/// settled first, a soak under the host its log is scoped to, and once).
fn list_job(
    paths: &StatePaths,
    job: &str,
    filter: &Filter,
    out: &mut Output,
) -> Result<Exit, Error> {
    let mut soaks = crate::commands::job_soaks(
        paths,
        out,
        &|name| name == job,
        crate::read::job::soaks::Reading::Summaries,
    )?
    .soaks;
    filter.apply(&mut soaks, |s| &s.summary);
    if out.json {
        let rows = soaks.iter().map(|s| {
            let mut row = summary_json(&s.summary);
            row["host"] = s.host.clone().into();
            // Ranks are integers everywhere; what is recorded as one but is not a whole number
            // (`--meta rank=...`) is no rank.
            row["rank"] = s.rank.into();
            row["job"] = job.into();
            row
        });
        out.json_line(&Value::Array(rows.collect()))?;
        return Ok(Exit::Success);
    }
    if soaks.is_empty() {
        out.note(&format!(
            "no soaks of job {job}{} are recorded under `{}`",
            if filter.is_on() {
                " that match the filters"
            } else {
                ""
            },
            paths.root.display()
        ));
        return Ok(Exit::Success);
    }
    let paint = out.paint;
    let rows: Vec<Vec<String>> = soaks
        .iter()
        .map(|s| {
            let mut cells = soak_cells(&s.summary, s.ran_seconds, paint);
            // After the id, where it ran.
            let rank = foreign(&rank_cell(s.rank_text.as_deref())).into_owned();
            cells.splice(1..1, [foreign(&s.host).into_owned(), rank]);
            cells
        })
        .collect();
    let mut header = SOAK_COLUMNS.to_vec();
    header.splice(1..1, ["HOST", "RANK"]);
    for line in output::table(&header, &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

/// A rank as its column shows it: a launcher's rank is a number, but whatever the soak recorded
/// as one (`RANK` set by something else, `--meta rank=...`) is shown cut short, so that one long
/// text does not widen the column of every row.
fn rank_cell(rank: Option<&str>) -> String {
    const SHOWN: usize = 12;
    let Some(rank) = rank else {
        return "-".into();
    };
    match rank.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}…", &rank[..at]),
        None => rank.to_owned(),
    }
}

/// The columns of `soak list`, and the cells of one soak under them.
const SOAK_COLUMNS: [&str; 6] = ["ID", "STATUS", "STARTED", "DURATION", "SAMPLES", "COMMAND"];

fn soak_cells(
    soak: &SoakSummary,
    ran_seconds: Option<f64>,
    paint: crate::style::Palette,
) -> Vec<String> {
    // How long its command ran, or has been running (`42s+`); an abandoned soak's, to its last
    // sample (none recorded, or archived: unknown, as its end is).
    let duration = match (ran_seconds, soak.ended_at_us) {
        (Some(ran), _) => output::duration(ran),
        (None, _) if soak.state == SoakState::Finished(OutcomeStatus::Abandoned) => "-".into(),
        (None, Some(end)) => output::duration((end - soak.started_at_us) as f64 / 1e6),
        (None, None) => format!("{}+", output::age(unix_seconds(soak.started_at_us))),
    };
    vec![
        foreign(&soak.soak_id).into_owned(),
        paint.status(&status_text(soak)),
        human_time(soak.started_at_us).chars().take(19).collect(),
        duration,
        soak.samples.to_string(),
        foreign(&output::shell_command(&crate::redact::mask_argv(
            &soak.command,
        )))
        .into_owned(),
    ]
}

fn list_soaks(
    soaks: &[SoakSummary],
    ran: &[Option<f64>],
    filter: &Filter,
    out: &mut Output,
) -> Result<Exit, Error> {
    if out.json {
        out.json_line(&serde_json::Value::Array(
            soaks.iter().map(summary_json).collect(),
        ))?;
        return Ok(Exit::Success);
    }
    if soaks.is_empty() && filter.is_on() {
        out.note("no recorded soak matches the filters");
        return Ok(Exit::Success);
    }
    if soaks.is_empty() {
        out.note("no soaks recorded; run one with `unilab soak run`");
        return Ok(Exit::Success);
    }
    let paint = out.paint;
    let rows: Vec<Vec<String>> = soaks
        .iter()
        .zip(ran)
        .map(|(soak, ran)| soak_cells(soak, *ran, paint))
        .collect();
    for line in output::table(&SOAK_COLUMNS, &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}
