//! A job's runs on the shared state root: `<job dir>/runs/<run>/`, each holding
//! - `alarm`: the first rank to fail writes it ([`super::alarm`]);
//! - `ranks/<rank>`: each rank's entry, created exclusively when its soak starts (a second soak
//!   of the rank in the run is refused), rewritten whole with `ended_at` when it ends;
//! - `captured/<rank>`: written once by a rank whose evidence is captured once the run is failing
//!   (`captured: false` where it captures nothing, `--on-job-alarm ignore`), with how late it
//!   came after the run's first teardown (`late_by`);
//! - `torn/<rank>`: written by a rank just before it first signals its tree, so that a capture
//!   made after the first teardown can say so.
//!
//! A run is over once it has an alarm or one of its ranks has ended (its entry holds `ended_at`;
//! a rank on this host whose supervisor is gone has ended too, though it could not say so). An
//! arriving rank never joins a run that is over: it opens the next ([`JobDir::join_run`]).
//!
//! Every file is written whole and read bounded, relative to the directories held open
//! ([`super::held`]). What is in `ranks/` or `captured/` but is not what a rank of unilab wrote
//! there — a name that is not a rank, a file that is not an entry, another user's file — is
//! named in a warning and ignored.

use std::collections::BTreeMap;
use std::ffi::OsStr;

use serde::{Deserialize, Serialize};

use super::JobError;
use super::alarm::{self, Alarm};
use super::dir::JobDir;
use super::held::{Held, Unread};
use super::run::{RunChoice, RunId};
use crate::text::foreign;

/// The directory of a job's runs.
pub(crate) const RUNS: &str = "runs";
/// A run's ranks' entries.
pub(crate) const RANKS: &str = "ranks";
/// A run's ranks' capture markers.
pub(crate) const CAPTURED: &str = "captured";
/// A run's ranks' first signals.
pub(crate) const TORN: &str = "torn";
/// The most an entry or a marker may hold: a reader reads no more.
const MAX_ENTRY_BYTES: u64 = 4 * 1024;
/// How many runs of one id, or counted, a rank goes through before it gives up.
const MAX_RUNS: u64 = 100_000;
/// How many times a rank looks again when other ranks keep opening runs under it.
const MAX_TRIES: u32 = 64;

/// A rank's entry in its run (`ranks/<rank>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankEntry {
    pub rank: u32,
    pub host: String,
    pub soak_id: String,
    /// The supervising unilab process, and its start time in clock ticks since boot: with the
    /// host, whether it is still there.
    pub pid: u32,
    pub pid_start_ticks: u64,
    /// When its soak started, Unix seconds.
    pub started_at: f64,
    /// When its soak ended, Unix seconds; `None` while it runs.
    #[serde(default)]
    pub ended_at: Option<f64>,
}

/// A rank's capture marker (`captured/<rank>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CaptureMark {
    pub rank: u32,
    /// Whether it captured evidence (`false`: it was told not to, `--on-job-alarm ignore`).
    pub captured: bool,
    /// When, Unix seconds.
    pub at: f64,
    /// Seconds after the run's first teardown; 0 when before it.
    pub late_by: f64,
}

/// When a rank first signalled its tree (`torn/<rank>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TornMark {
    pub rank: u32,
    /// Unix seconds.
    pub at: f64,
}

/// One run of a job, held open.
#[derive(Debug, Clone)]
pub(crate) struct RunDir {
    pub id: RunId,
    pub(super) held: Held,
}

/// A rank's run, joined: the run, and what was wrong with what other ranks left there.
#[derive(Debug)]
pub(crate) struct Joined {
    pub run: RunDir,
    pub warnings: Vec<String>,
}

/// Whether a run can be joined, and what it holds.
struct Looked {
    over: bool,
    warnings: Vec<String>,
}

impl JobDir {
    /// Joins the run `choice` names — the run of that id, or the next of it when it is over;
    /// a counted job's newest run when it is open, else the next number — and registers `entry`
    /// in it, exclusively. `gone` says of another rank's entry whether its supervisor is known
    /// to be gone (on this host, no longer running): such a rank has ended. A rank already
    /// registered in the run is refused.
    pub(crate) fn join_run(
        &self,
        choice: &RunChoice,
        entry: &RankEntry,
        gone: &dyn Fn(&RankEntry) -> bool,
    ) -> Result<Joined, JobError> {
        let runs = self.runs(true)?.ok_or_else(|| JobError::Directory {
            path: self.held.join(RUNS),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        let mut warnings = Vec::new();
        let run = match choice {
            RunChoice::Named(id) => join_named(&runs, id, gone, &mut warnings)?,
            RunChoice::Counted => join_counted(&runs, gone, &mut warnings)?,
        };
        run.register(entry)?;
        Ok(Joined { run, warnings })
    }

    /// The run `id`, made when missing, nothing registered in it.
    #[cfg(test)]
    pub(crate) fn made_run(&self, id: &RunId) -> Result<RunDir, JobError> {
        let runs = self.runs(true)?.ok_or_else(|| JobError::Directory {
            path: self.held.join(RUNS),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        make_or_open(&runs, id).map(|(run, _)| run)
    }

    /// `runs/`, held: made when `create`; `None` when missing and not to be made.
    fn runs(&self, create: bool) -> Result<Option<Held>, JobError> {
        self.held.subdir(RUNS, create)
    }

    /// The job's runs, each held, and what in `runs/` is not a run (named in the warnings).
    pub(crate) fn existing_runs(&self) -> Result<(Vec<RunDir>, Vec<String>), JobError> {
        let Some(runs) = self.runs(false)? else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut found = Vec::new();
        let mut warnings = Vec::new();
        for name in names(&runs)? {
            let Some(id) = name.to_str().and_then(|text| RunId::parse(text).ok()) else {
                warnings.push(ignored(&runs, &name, "it is not a run's name"));
                continue;
            };
            match runs.subdir(id.as_str(), false) {
                Ok(Some(held)) => found.push(RunDir { id, held }),
                Ok(None) => {}
                Err(e) => warnings.push(format!("{e}; ignored")),
            }
        }
        Ok((found, warnings))
    }

    /// The job's latest run: the one whose first rank started last (a run no rank registered
    /// in comes before every other; of runs that started at once, the last listed); `None`
    /// when the job has no run.
    pub(crate) fn latest_run(&self) -> Result<(Option<RunDir>, Vec<String>), JobError> {
        let (runs, mut warnings) = self.existing_runs()?;
        let mut latest: Option<(Option<f64>, RunDir)> = None;
        for run in runs {
            let (ranks, said) = run.ranks();
            warnings.extend(said);
            let started = ranks.iter().map(|r| r.started_at).min_by(f64::total_cmp);
            let later = match &latest {
                None => true,
                Some((best, _)) => match (started, best) {
                    (Some(a), Some(b)) => a >= *b,
                    (Some(_), None) => true,
                    (None, _) => false,
                },
            };
            if later {
                latest = Some((started, run));
            }
        }
        Ok((latest.map(|(_, run)| run), warnings))
    }
}

/// The run of `id`, or the first of its followers (`<id>.2`, …) that is not over: made when
/// missing.
fn join_named(
    runs: &Held,
    id: &RunId,
    gone: &dyn Fn(&RankEntry) -> bool,
    warnings: &mut Vec<String>,
) -> Result<RunDir, JobError> {
    for n in 1..=MAX_RUNS {
        let Some(candidate) = id.nth(n) else { break };
        let (run, made) = make_or_open(runs, &candidate)?;
        if made {
            return Ok(run);
        }
        let looked = run.look(gone);
        if !looked.over {
            warnings.extend(looked.warnings);
            return Ok(run);
        }
    }
    Err(no_run(runs, id.as_str()))
}

/// A counted job's newest run when it is open, else the next number, made exclusively: of the
/// ranks arriving at once, one makes it and the others join it.
fn join_counted(
    runs: &Held,
    gone: &dyn Fn(&RankEntry) -> bool,
    warnings: &mut Vec<String>,
) -> Result<RunDir, JobError> {
    for _ in 0..MAX_TRIES {
        let newest = names(runs)?
            .iter()
            .filter_map(|name| counted_number(name))
            .max()
            .unwrap_or(0);
        if newest > 0 {
            let id = RunId::counted(newest);
            if let Some(held) = runs.subdir(id.as_str(), false)? {
                let run = RunDir { id, held };
                let looked = run.look(gone);
                if !looked.over {
                    warnings.extend(looked.warnings);
                    return Ok(run);
                }
            }
        }
        if newest >= MAX_RUNS {
            break;
        }
        let (run, made) = make_or_open(runs, &RunId::counted(newest + 1))?;
        if made {
            return Ok(run);
        }
        // Another rank made it first: it is looked at afresh.
    }
    Err(no_run(runs, "1"))
}

/// The number of a counted run's name: digits without a leading zero.
fn counted_number(name: &OsStr) -> Option<u64> {
    let text = name.to_str()?;
    let number: u64 = text.parse().ok()?;
    (number > 0 && number.to_string() == text).then_some(number)
}

/// The run `id` of `runs`, made exclusively when missing: whether this rank made it.
fn make_or_open(runs: &Held, id: &RunId) -> Result<(RunDir, bool), JobError> {
    let made = runs.make_dir(id.as_str())?;
    // Opened as any other rank opens it: 0700 made exactly, checked.
    let held = runs
        .open_dir(id.as_str(), made)?
        .ok_or_else(|| JobError::Directory {
            path: runs.join(id.as_str()),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
    Ok((
        RunDir {
            id: id.clone(),
            held,
        },
        made,
    ))
}

fn no_run(runs: &Held, id: &str) -> JobError {
    JobError::Directory {
        path: runs.join(id),
        source: std::io::Error::other(format!(
            "no run could be opened after {MAX_RUNS} runs of the job"
        )),
    }
}

/// The names in `held`, or the error of listing them.
fn names(held: &Held) -> Result<Vec<std::ffi::OsString>, JobError> {
    held.names().map_err(|source| JobError::Directory {
        path: held.path().to_owned(),
        source,
    })
}

/// A warning that `name` in `dir` is ignored, and why.
fn ignored(dir: &Held, name: &OsStr, why: &str) -> String {
    format!(
        "`{}` in `{}` is ignored: {why}",
        foreign(&name.to_string_lossy()),
        dir.path().display()
    )
}

impl RunDir {
    /// Where the run is.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &std::path::Path {
        self.held.path()
    }

    /// The run's alarm if a rank has raised it: one `fstatat` while none has.
    pub(crate) fn check(&self) -> Result<Option<Alarm>, JobError> {
        alarm::check(&self.held)
    }

    /// Raises the run's alarm: see [`alarm::raise`].
    pub(crate) fn raise(&self, alarm: &Alarm) -> Result<alarm::Raised, JobError> {
        alarm::raise(&self.held, alarm)
    }

    /// Where the run's alarm is, for messages.
    pub(crate) fn alarm_path(&self) -> std::path::PathBuf {
        self.held.join(alarm::ALARM)
    }

    /// Whether the run is over, and what was ignored on the way.
    fn look(&self, gone: &dyn Fn(&RankEntry) -> bool) -> Looked {
        if self.held.stat(alarm::ALARM).ok().flatten().is_some() {
            return Looked {
                over: true,
                warnings: Vec::new(),
            };
        }
        let (ranks, warnings) = self.ranks();
        let over = ranks.iter().any(|r| r.ended_at.is_some() || gone(r));
        Looked { over, warnings }
    }

    /// `entry` as the run's entry of its rank, created exclusively: a rank already there is
    /// refused, naming the soak that holds it.
    fn register(&self, entry: &RankEntry) -> Result<(), JobError> {
        let ranks = self.subdir(RANKS, true)?;
        let name = entry.rank.to_string();
        let path = ranks.join(&name);
        let bytes = json_line(entry);
        let won = ranks
            .create(&name, &bytes)
            .map_err(|source| JobError::WriteEntry {
                path: path.clone(),
                source,
            })?;
        if won {
            return Ok(());
        }
        let holder = read_json::<RankEntry>(&ranks, &name).ok().flatten();
        Err(JobError::DuplicateRank {
            rank: entry.rank,
            run: self.id.to_string(),
            path,
            holder: holder.map(|h| format!("soak {} on {}", foreign(&h.soak_id), foreign(&h.host))),
        })
    }

    /// Rewrites this rank's entry with `ended_at`: its run is over for ranks arriving later.
    pub(crate) fn end(&self, entry: &RankEntry, ended_at: f64) -> Result<(), JobError> {
        let ranks = self.subdir(RANKS, true)?;
        let name = entry.rank.to_string();
        let ended = RankEntry {
            ended_at: Some(ended_at),
            ..entry.clone()
        };
        ranks
            .replace(&name, &json_line(&ended))
            .map_err(|source| JobError::WriteEntry {
                path: ranks.join(&name),
                source,
            })
    }

    /// The ranks registered in the run, by rank, and what in `ranks/` was ignored.
    pub(crate) fn ranks(&self) -> (Vec<RankEntry>, Vec<String>) {
        let (entries, warnings) = self.marks::<RankEntry>(
            RANKS,
            |e| e.rank,
            |e| e.started_at.is_finite() && e.ended_at.is_none_or(f64::is_finite),
        );
        (entries.into_values().collect(), warnings)
    }

    /// The ranks' capture markers, by rank, and what in `captured/` was ignored.
    pub(crate) fn captures(&self) -> (BTreeMap<u32, CaptureMark>, Vec<String>) {
        self.marks::<CaptureMark>(
            CAPTURED,
            |m| m.rank,
            |m| m.at.is_finite() && m.late_by.is_finite() && m.late_by >= 0.0,
        )
    }

    /// When the run's first teardown began (Unix seconds), if one has.
    pub(crate) fn first_torn(&self) -> Option<f64> {
        let (torn, _) = self.marks::<TornMark>(TORN, |m| m.rank, |m| m.at.is_finite());
        torn.values().map(|m| m.at).min_by(f64::total_cmp)
    }

    /// Marks `rank` captured (or not: `captured` false) at `at`, unless it is marked already:
    /// the marker written, `None` when one was there. Its `late_by` is how long after the run's
    /// first teardown it came.
    pub(crate) fn mark_captured(
        &self,
        rank: u32,
        captured: bool,
        at: f64,
    ) -> Result<Option<CaptureMark>, JobError> {
        let late_by = self.first_torn().map_or(0.0, |torn| (at - torn).max(0.0));
        let mark = CaptureMark {
            rank,
            captured,
            at,
            late_by,
        };
        let dir = self.subdir(CAPTURED, true)?;
        let name = rank.to_string();
        let failed = |source| JobError::WriteEntry {
            path: dir.join(&name),
            source,
        };
        let written = dir.create(&name, &json_line(&mark)).map_err(failed)?;
        Ok(written.then_some(mark))
    }

    /// Marks `rank`'s first signal to its tree at `at`, unless it is marked already.
    pub(crate) fn mark_torn(&self, rank: u32, at: f64) -> Result<(), JobError> {
        let dir = self.subdir(TORN, true)?;
        let name = rank.to_string();
        dir.create(&name, &json_line(&TornMark { rank, at }))
            .map(|_| ())
            .map_err(|source| JobError::WriteEntry {
                path: dir.join(&name),
                source,
            })
    }

    fn subdir(&self, name: &str, create: bool) -> Result<Held, JobError> {
        self.held
            .subdir(name, create)?
            .ok_or_else(|| JobError::Directory {
                path: self.held.join(name),
                source: std::io::ErrorKind::NotFound.into(),
            })
    }

    /// Every file of `dir` that is a rank's (`T`, `rank_of` saying whose, `sane` whether its
    /// numbers are), by rank; what is not, named in the warnings.
    fn marks<T: for<'de> Deserialize<'de>>(
        &self,
        dir: &str,
        rank_of: impl Fn(&T) -> u32,
        sane: impl Fn(&T) -> bool,
    ) -> (BTreeMap<u32, T>, Vec<String>) {
        let mut found = BTreeMap::new();
        let mut warnings = Vec::new();
        let held = match self.held.subdir(dir, false) {
            Ok(Some(held)) => held,
            Ok(None) => return (found, warnings),
            Err(e) => {
                warnings.push(format!("{e}; ignored"));
                return (found, warnings);
            }
        };
        let listed = match held.names() {
            Ok(names) => names,
            Err(e) => {
                warnings.push(format!("cannot list `{}`: {e}", held.path().display()));
                return (found, warnings);
            }
        };
        for name in listed {
            let Some(rank) = name.to_str().and_then(rank_name) else {
                warnings.push(ignored(&held, &name, "it is not a rank"));
                continue;
            };
            let text = rank.to_string();
            match read_json::<T>(&held, &text) {
                Ok(Some(mark)) if rank_of(&mark) == rank && sane(&mark) => {
                    found.insert(rank, mark);
                }
                Ok(Some(_)) => warnings.push(ignored(
                    &held,
                    &name,
                    "what it holds is not this rank's, or not a time",
                )),
                Ok(None) => {}
                Err(why) => warnings.push(ignored(&held, &name, &why)),
            }
        }
        (found, warnings)
    }
}

/// A rank as a file is named after it: digits without a leading zero.
fn rank_name(text: &str) -> Option<u32> {
    let rank: u32 = text.parse().ok()?;
    (rank.to_string() == text).then_some(rank)
}

/// `value` as one line of JSON.
fn json_line<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The file `name` of `dir` as a `T`, read bounded; why not, said.
fn read_json<T: for<'de> Deserialize<'de>>(dir: &Held, name: &str) -> Result<Option<T>, String> {
    match dir.read(name, MAX_ENTRY_BYTES) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("not what a rank writes there ({e})")),
        Ok(None) => Ok(None),
        Err(Unread::Io(e)) => Err(format!("cannot read it: {e}")),
        Err(why) => Err(why.to_string()),
    }
}

#[cfg(test)]
mod tests;
