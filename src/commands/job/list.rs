//! `unilab job list`: the jobs whose ranks' soaks are recorded under the state root, from every
//! host's log: each with its ranks, hosts, how its soaks stand, and when it started and ended.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::commands::job_soaks;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::output::{self, Output};
use crate::paths::StatePaths;
use crate::projection::SoakState;
use crate::read::job::soaks::{JobSoak, Reading};
use crate::text::foreign;
use crate::time::unix_seconds;

/// One job, as `job list` shows it.
#[derive(Debug, Serialize)]
struct JobLine {
    job: String,
    /// The ranks seen, sorted (soaks without a rank are counted in `soaks`).
    ranks: Vec<u32>,
    hosts: Vec<String>,
    soaks: usize,
    /// How many of its soaks are in each state (`running`, `passed`, `failed`, `abandoned`).
    status: BTreeMap<&'static str, usize>,
    started_at: f64,
    /// When its last soak ended; `null` while one runs.
    ended_at: Option<f64>,
}

pub(super) fn list(paths: &StatePaths, out: &mut Output) -> Result<Exit, Error> {
    let soaks = job_soaks(paths, out, &|_| true, Reading::Summaries)?.soaks;
    let mut jobs: BTreeMap<&str, Vec<&JobSoak>> = BTreeMap::new();
    for soak in &soaks {
        jobs.entry(soak.job.as_str()).or_default().push(soak);
    }
    let mut lines: Vec<JobLine> = jobs
        .into_iter()
        .map(|(job, soaks)| line(job, &soaks))
        .collect();
    lines.sort_by(|a, b| {
        a.started_at
            .total_cmp(&b.started_at)
            .then(a.job.cmp(&b.job))
    });
    if out.json {
        out.json_line(&serde_json::to_value(&lines).map_err(|e| Error::Internal(e.to_string()))?)?;
        return Ok(Exit::Success);
    }
    if lines.is_empty() {
        out.note(&format!(
            "no soaks of a job are recorded under `{}`; `unilab soak run --job NAME` makes one",
            paths.root.display()
        ));
        return Ok(Exit::Success);
    }
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            vec![
                foreign(&l.job).into_owned(),
                ranks_text(&l.ranks, l.soaks),
                foreign(&l.hosts.join(",")).into_owned(),
                l.status
                    .iter()
                    .map(|(state, n)| format!("{n} {state}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                crate::text::human_time((l.started_at * 1e6) as i64)
                    .chars()
                    .take(19)
                    .collect(),
            ]
        })
        .collect();
    for line in output::table(&["JOB", "RANKS", "HOSTS", "STATUS", "STARTED"], &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

fn line(job: &str, soaks: &[&JobSoak]) -> JobLine {
    let ranks: BTreeSet<u32> = soaks.iter().filter_map(|s| s.rank).collect();
    let hosts: BTreeSet<&str> = soaks.iter().map(|s| s.host.as_str()).collect();
    let mut status = BTreeMap::new();
    for soak in soaks {
        *status.entry(soak.summary.state.as_str()).or_insert(0) += 1;
    }
    let running = soaks.iter().any(|s| s.summary.state == SoakState::Running);
    JobLine {
        job: job.to_owned(),
        ranks: ranks.into_iter().collect(),
        hosts: hosts.into_iter().map(str::to_owned).collect(),
        soaks: soaks.len(),
        status,
        started_at: soaks
            .iter()
            .map(|s| unix_seconds(s.summary.started_at_us))
            .fold(f64::INFINITY, f64::min),
        ended_at: if running {
            None
        } else {
            soaks
                .iter()
                .filter_map(|s| s.summary.ended_at_us.map(unix_seconds))
                .reduce(f64::max)
        },
    }
}

/// `4 (0-3)`: how many soaks, and the ranks among them.
fn ranks_text(ranks: &[u32], soaks: usize) -> String {
    match (ranks.first(), ranks.last()) {
        (Some(first), Some(last)) if ranks.len() == soaks => {
            if first == last {
                format!("{soaks} ({first})")
            } else if (last - first) as usize + 1 == ranks.len() {
                format!("{soaks} ({first}-{last})")
            } else {
                format!("{soaks} ({} ranks)", ranks.len())
            }
        }
        _ => format!("{soaks} ({} ranks)", ranks.len()),
    }
}
