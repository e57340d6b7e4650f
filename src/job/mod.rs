//! A job and its ranks: which job a soak belongs to, its run and its rank in it, the job's
//! directory on the state root shared between hosts, and the run's alarm in it.
//!
//! A soak belongs to a job when the user names one with `--job NAME` or, without it, when it
//! runs under Slurm (`SLURM_JOB_ID`). The flag wins over Slurm's variable: whoever types
//! `--job` means it (a batch script run both inside and outside Slurm names its job the same
//! way in both), and a job id the variable holds that cannot name a directory is overcome by
//! naming the job. Its rank is `--rank N`, else `SLURM_PROCID`, else `RANK` — again the flag
//! first — an integer; a soak of a job without one is refused (exit 2). Its run is `--run ID`,
//! else the launcher's, else counted ([`run`]). Outside a job no rank is read: the launchers'
//! variables are not checked for a soak that does not use them.
//!
//! The job's directory is `<root>/jobs/<uid>/<job>/` (0700), checked as the state directories
//! are ([`dir`]) and held open; each run of the job is a directory of it where each rank
//! registers when it starts ([`runs`]). The first rank to fail writes the run's `alarm` whole
//! and exclusively, and the others look for it at a cost of one `fstatat` ([`alarm`]),
//! believing only an alarm of their job and run raised while they ran ([`doubt`]).

use std::ffi::OsString;

use crate::env::EnvVars;

pub(crate) mod alarm;
pub(crate) mod dir;
pub(crate) mod doubt;
pub(crate) mod error;
pub(crate) mod held;
pub(crate) mod id;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod written;

pub(crate) use error::JobError;
pub(crate) use id::JobId;

/// A soak's place in a job: the job, its rank in it, and which of the job's runs it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Membership {
    pub job: JobId,
    pub rank: u32,
    pub run: run::RunChoice,
}

/// What a soak's command line says of its job: `--job`, `--rank`, `--run`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Flags<'a> {
    pub job: Option<&'a JobId>,
    pub rank: Option<u32>,
    pub run: Option<&'a run::RunId>,
}

/// The job `--job` names, else Slurm's (`SLURM_JOB_ID`), the rank `--rank` gives, else
/// `SLURM_PROCID`, else `RANK`, and the run ([`run::choose`]), with `var` standing in for the
/// environment (an empty or blank variable counts as unset). `None` outside a job; `--rank` or
/// `--run` outside a job is refused, and so is a job without a rank.
pub(crate) fn resolve(
    flags: Flags<'_>,
    var_os: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<Membership>, JobError> {
    let Flags {
        job: job_flag,
        rank: rank_flag,
        run: run_flag,
    } = flags;
    let var = |name: &'static str| {
        var_os(name)
            .map(|value| match value.into_string() {
                Ok(text) => Ok(text.trim().to_owned()),
                Err(raw) => Err(raw.to_string_lossy().into_owned()),
            })
            .filter(|value| value.as_ref().map_or(true, |text| !text.is_empty()))
            .map(|value| (value, name))
    };
    let job = match (job_flag, var(EnvVars::SLURM_JOB_ID)) {
        (Some(job), _) => job.clone(),
        (None, Some((value, variable))) => {
            let text = value.map_err(|value| JobError::BadJob {
                value,
                variable,
                why: id::BadJobId::NotPrintable,
            })?;
            JobId::parse(&text).map_err(|why| JobError::BadJob {
                value: text,
                variable,
                why,
            })?
        }
        (None, None) => {
            return match (rank_flag, run_flag) {
                (None, None) => Ok(None),
                _ => Err(JobError::RankWithoutJob),
            };
        }
    };
    let rank = match rank_flag {
        Some(rank) => rank,
        None => match var(EnvVars::SLURM_PROCID).or_else(|| var(EnvVars::RANK)) {
            Some((value, variable)) => parse_rank(value, variable)?,
            None => {
                return Err(JobError::NoRank {
                    job: job.to_string(),
                });
            }
        },
    };
    let run = run::choose(run_flag, &var_os)?;
    Ok(Some(Membership { job, rank, run }))
}

/// A rank as a launcher's variable holds it: a whole number, 0 or more.
fn parse_rank(value: Result<String, String>, variable: &'static str) -> Result<u32, JobError> {
    match value {
        Ok(text) => text.parse::<u32>().map_err(|_| JobError::BadRank {
            value: text,
            variable,
        }),
        Err(value) => Err(JobError::BadRank { value, variable }),
    }
}

/// A soak's part in its job while it runs: its place, the job's directory, the run it joined
/// and its entry there, and what it does when another rank raises the run's alarm.
#[derive(Debug, Clone)]
pub(crate) struct JobRun {
    pub member: Membership,
    pub dir: dir::JobDir,
    pub run: runs::RunDir,
    /// This rank's entry in the run, as registered.
    pub entry: runs::RankEntry,
    pub on_alarm: crate::event::soak::OnJobAlarm,
    /// When the rank joined its run (Unix seconds), just before the soak started: an alarm
    /// that says it was raised earlier is not this run's ([`doubt`]).
    pub joined_at: f64,
    /// What other ranks left in the run that is not theirs, each to be said once.
    pub warnings: Vec<String>,
}

impl JobRun {
    /// Joins the job `member` names — its directory under `root` made or checked — and its run
    /// ([`dir::JobDir::join_run`]: an open one, never one that is over), registering the soak
    /// `soak_id` of this process on `host` as its rank. A rank taken in the run is refused.
    pub(crate) fn join(
        root: &std::path::Path,
        uid: u32,
        member: Membership,
        on_alarm: crate::event::soak::OnJobAlarm,
        (soak_id, host): (&str, &str),
    ) -> Result<Self, JobError> {
        use crate::process::{ProcSource, SystemProc};
        let dir = dir::JobDir::ensure(root, uid, &member.job)?;
        let joined_at = crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond());
        let proc = SystemProc::default();
        let pid = std::process::id();
        let entry = runs::RankEntry {
            rank: member.rank,
            host: host.to_owned(),
            soak_id: soak_id.to_owned(),
            pid,
            pid_start_ticks: proc.stat(pid).map_or(0, |stat| stat.start_ticks),
            started_at: joined_at,
            ended_at: None,
        };
        let gone = |other: &runs::RankEntry| supervisor_gone(&proc, uid, host, other);
        let joined = dir.join_run(&member.run, &entry, &gone)?;
        Ok(Self {
            member,
            dir,
            run: joined.run,
            entry,
            on_alarm,
            joined_at,
            warnings: joined.warnings,
        })
    }

    /// Marks this rank's soak ended in its run: the run is over for ranks arriving later.
    pub(crate) fn end(&self) -> Result<(), JobError> {
        let now = crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond());
        self.run.end(&self.entry, now)
    }

    /// Whether the rank of `other`'s entry is known to have ended without saying so: its
    /// supervisor ran on this host (`host`) and is no longer there (pid and start time).
    pub(crate) fn gone(&self, host: &str, other: &runs::RankEntry) -> bool {
        supervisor_gone(
            &crate::process::SystemProc::default(),
            self.dir.held.uid,
            host,
            other,
        )
    }
}

/// Whether the supervisor of `entry` ran on `host` (this one) and is gone: no process has its
/// pid and start time, as user `uid`.
fn supervisor_gone(
    proc: &dyn crate::process::ProcSource,
    uid: u32,
    host: &str,
    entry: &runs::RankEntry,
) -> bool {
    use crate::process::{Liveness, ProcessIdentity, liveness};
    entry.host == host
        && liveness(
            proc,
            ProcessIdentity {
                pid: entry.pid,
                start_ticks: entry.pid_start_ticks,
            },
            uid,
        ) != Liveness::Live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::files::fake_env as env;

    fn job(name: &str) -> JobId {
        JobId::parse(name).unwrap()
    }

    fn membership(job_name: &str, rank: u32) -> Option<Membership> {
        Some(Membership {
            job: job(job_name),
            rank,
            run: run::RunChoice::Counted,
        })
    }

    fn flags<'a>(job: Option<&'a JobId>, rank: Option<u32>) -> Flags<'a> {
        Flags {
            job,
            rank,
            run: None,
        }
    }

    #[test]
    fn slurm_names_the_job_and_its_rank_then_torchrun_gives_the_rank() {
        let slurm = env(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "3"),
            ("RANK", "9"),
        ]);
        assert_eq!(
            resolve(flags(None, None), slurm).unwrap(),
            membership("4242", 3)
        );
        let torchrun = env(&[
            ("SLURM_JOB_ID", " 4242 "),
            ("SLURM_PROCID", " "),
            ("RANK", "9"),
        ]);
        assert_eq!(
            resolve(flags(None, None), torchrun).unwrap(),
            membership("4242", 9)
        );
        // A job's soak needs a rank: without one, it is the usage error it is.
        let no_rank = env(&[("SLURM_JOB_ID", "4242")]);
        let err = resolve(flags(None, None), no_rank).unwrap_err();
        assert!(matches!(err, JobError::NoRank { .. }), "{err:?}");
        assert_eq!(
            crate::diagnostic::Boundary::exit(&err),
            crate::diagnostic::Exit::Usage
        );
        assert!(
            crate::diagnostic::Hint::hint(&err)
                .unwrap()
                .contains("--rank N")
        );
        // Slurm's step and restart count name the run.
        let step = env(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_ID", "2"),
            ("SLURM_RESTART_COUNT", "1"),
        ]);
        assert_eq!(
            resolve(flags(None, None), step).unwrap().unwrap().run,
            run::RunChoice::Named(run::RunId::parse("s2.r1").unwrap())
        );
    }

    #[test]
    fn the_flags_win_over_the_launchers_variables() {
        let slurm = env(&[("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "3")]);
        let named = job("llama");
        assert_eq!(
            resolve(flags(Some(&named), None), &slurm).unwrap(),
            membership("llama", 3)
        );
        assert_eq!(
            resolve(flags(Some(&named), Some(5)), &slurm).unwrap(),
            membership("llama", 5)
        );
        // A variable the flag overrides is not read, so it cannot be in the way.
        let broken = env(&[("SLURM_JOB_ID", "../x"), ("SLURM_PROCID", "two")]);
        assert_eq!(
            resolve(flags(Some(&named), Some(2)), broken).unwrap(),
            membership("llama", 2)
        );
    }

    #[test]
    fn outside_a_job_no_rank_is_read_and_rank_alone_is_refused() {
        let torchrun = env(&[("RANK", "not a number"), ("SLURM_JOB_ID", "")]);
        assert_eq!(resolve(flags(None, None), torchrun).unwrap(), None);
        let err = resolve(flags(None, Some(1)), env(&[("RANK", "1")])).unwrap_err();
        assert!(matches!(err, JobError::RankWithoutJob));
        let run = run::RunId::parse("r").unwrap();
        let alone = Flags {
            run: Some(&run),
            ..Flags::default()
        };
        let err = resolve(alone, env(&[])).unwrap_err();
        assert!(matches!(err, JobError::RankWithoutJob));
        assert_eq!(
            crate::diagnostic::Boundary::exit(&err),
            crate::diagnostic::Exit::Usage
        );
        assert!(
            crate::diagnostic::Hint::hint(&err)
                .unwrap()
                .contains("--job NAME")
        );
    }

    #[test]
    fn a_job_or_rank_a_launcher_set_badly_is_refused_with_where_it_came_from() {
        use crate::diagnostic::{Boundary, Exit, Hint};
        let err = resolve(flags(None, None), env(&[("SLURM_JOB_ID", "../x")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`../x` (from `SLURM_JOB_ID`) cannot name a job: it holds `/`, which would put the job's directory elsewhere"
        );
        assert_eq!(err.exit(), Exit::Refused);
        assert!(err.hint().unwrap().contains("`--job NAME`"), "{err:?}");
        for (vars, shown) in [
            (
                vec![("SLURM_JOB_ID", "7"), ("SLURM_PROCID", "-1")],
                "`-1` (from `SLURM_PROCID`)",
            ),
            (
                vec![("SLURM_JOB_ID", "7"), ("RANK", "2.5")],
                "`2.5` (from `RANK`)",
            ),
            (
                vec![("SLURM_JOB_ID", "7"), ("RANK", "99999999999")],
                "`99999999999` (from `RANK`)",
            ),
        ] {
            let err = resolve(flags(None, None), env(&vars)).unwrap_err();
            assert!(matches!(err, JobError::BadRank { .. }), "{err:?}");
            assert!(err.to_string().starts_with(shown), "{err}");
            assert!(err.to_string().contains("whole number"), "{err}");
            assert!(err.hint().unwrap().contains("`--rank N`"), "{err:?}");
        }
        let err = resolve(flags(None, None), env(&[("SLURM_JOB_ID", "a\nb")])).unwrap_err();
        assert!(err.to_string().starts_with("`a\\nb`"), "{err}");
    }

    #[test]
    fn a_variable_that_is_not_text_is_refused_not_mangled() {
        use std::os::unix::ffi::OsStringExt;
        let var = |name: &str| match name {
            "SLURM_JOB_ID" => Some(OsString::from_vec(b"12\xff".to_vec())),
            _ => None,
        };
        let err = resolve(flags(None, None), var).unwrap_err();
        assert!(matches!(err, JobError::BadJob { .. }), "{err:?}");
    }
}
