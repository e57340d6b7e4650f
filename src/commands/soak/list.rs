//! `unilab soak list`: this host's soaks, or a Slurm job's on every host.

use super::{settled, status_text, summary_json};
use crate::cli::{ListArgs, StatusFilter};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::soak::OutcomeStatus;
use crate::event::{Event, Subject};
use crate::log::Snapshot;
use crate::output::{self, Output, human_time};
use crate::paths::StatePaths;
use crate::projection::{SoakState, SoakSummary, Soaks};
use crate::soak::launch::{JOB_KEY, RANK_KEY};
use crate::time::{Clock, SystemClock, unix_seconds};
use serde_json::Value;

pub(super) fn list(paths: &StatePaths, args: &ListArgs, out: &mut Output) -> Result<Exit, Error> {
    let filter = Filter::new(args, &SystemClock);
    if let Some(job) = &args.job {
        return list_job(paths, job, &filter, out);
    }
    let snapshot = settled(paths, out)?;
    let mut soaks = match &snapshot {
        Some(snapshot) => Soaks::rows(snapshot)?,
        None => Vec::new(),
    };
    soaks.sort_by_key(|s| s.first_seq);
    filter.apply(&mut soaks, |s| s);
    let ran = match &snapshot {
        Some(snapshot) => soaks
            .iter()
            .map(|soak| ran_seconds(snapshot, soak))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    crate::commands::checked_show(snapshot.as_ref(), || list_soaks(&soaks, &ran, &filter, out))
}

/// How long a finished soak's command ran, as its verdict recorded it (what `soak show` says it
/// ran): not the time to the verdict's record, which adds the tree's shutdown. An abandoned
/// soak's, to its last sample: when it was found abandoned is only when someone looked.
fn ran_seconds(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Option<f64>, Error> {
    let ran_ms = if soak.state == SoakState::Finished(OutcomeStatus::Abandoned) {
        crate::soak::abandon::last_sample_ms(snapshot, soak)?
    } else {
        crate::soak::archive::run_ms(snapshot, soak)?
    };
    Ok(ran_ms.map(|ms| ms as f64 / 1e3))
}

/// The first event of a soak, its start: in the live log, or in its archive.
fn first_event(snapshot: &Snapshot, soak: &SoakSummary) -> Result<Option<Event>, Error> {
    let mut first = None;
    let subject = Subject::Soak(soak.soak_id.clone());
    snapshot.scan_records(&subject, soak.first_seq, |record| {
        first = Some(record.envelope.event);
        Ok::<_, Error>(false)
    })?;
    Ok(first)
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

/// One rank's soak of a job, on its host.
struct RankSoak {
    /// The host the log it was found in is scoped to.
    host: String,
    /// Whether that log lies in its host's own directory, not a copy under another name.
    at_home: bool,
    rank: Option<String>,
    summary: SoakSummary,
    ran_seconds: Option<f64>,
}

/// The soaks of Slurm job `job` in every host's log under the root, in the order they started.
/// This host's abandoned soaks are settled first; other hosts' logs are only read (whether their
/// supervisors live can be told only there). A soak's host is the one its log is scoped to, not
/// the name of the directory it was found in: a log copied aside (kept for forensics) shows its
/// soaks under their own host, and once — the original's row when both are there.
fn list_job(
    paths: &StatePaths,
    job: &str,
    filter: &Filter,
    out: &mut Output,
) -> Result<Exit, Error> {
    let own = settled(paths, out)?;
    let mut soaks = Vec::new();
    crate::commands::for_every_host_log(paths, out, own, |directory, snapshot| {
        let host = match snapshot.meta()? {
            Some((_, scope)) => scope.host,
            None => directory.to_owned(),
        };
        // A host's soaks are taken whole or not at all: its log may fail half-way.
        let mut found = Vec::new();
        for summary in Soaks::rows(snapshot)? {
            let metadata = match first_event(snapshot, &summary)? {
                Some(Event::SoakStarted { start, .. }) => start.metadata,
                _ => continue,
            };
            if metadata.get(JOB_KEY).map(String::as_str) == Some(job) {
                found.push(RankSoak {
                    at_home: host == directory,
                    host: host.clone(),
                    rank: metadata.get(RANK_KEY).cloned(),
                    ran_seconds: ran_seconds(snapshot, &summary)?,
                    summary,
                });
            }
        }
        soaks.extend(found);
        Ok(())
    })?;
    // One row a soak of a host: its original's, else the copy that got furthest.
    soaks.sort_by(|a, b| {
        (
            &a.host,
            &a.summary.soak_id,
            !a.at_home,
            std::cmp::Reverse(a.summary.last_seq),
        )
            .cmp(&(
                &b.host,
                &b.summary.soak_id,
                !b.at_home,
                std::cmp::Reverse(b.summary.last_seq),
            ))
    });
    soaks.dedup_by(|later, first| {
        later.host == first.host && later.summary.soak_id == first.summary.soak_id
    });
    soaks.sort_by_key(|s| (s.summary.started_at_us, s.host.clone()));
    filter.apply(&mut soaks, |s| &s.summary);
    if out.json {
        let rows = soaks.iter().map(|s| {
            let mut row = summary_json(&s.summary);
            row["host"] = s.host.clone().into();
            // Ranks are integers everywhere; what is recorded as one but is not a whole number
            // (`--meta rank=...`) is no rank.
            row["rank"] = s
                .rank
                .as_deref()
                .and_then(crate::soak::launch::rank_number)
                .into();
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
            cells.splice(1..1, [s.host.clone(), rank_cell(s.rank.as_deref())]);
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
        soak.soak_id.clone(),
        paint.status(&status_text(soak)),
        human_time(soak.started_at_us).chars().take(19).collect(),
        duration,
        soak.samples.to_string(),
        output::shell_command(&soak.command),
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
