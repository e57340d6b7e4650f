//! A job and its ranks: which job a soak belongs to, its rank in it, the job's directory on the
//! state root shared between hosts, and the job's alarm in it.
//!
//! A soak belongs to a job when the user names one with `--job NAME` or, without it, when it
//! runs under Slurm (`SLURM_JOB_ID`). The flag wins over Slurm's variable: whoever types
//! `--job` means it (a batch script run both inside and outside Slurm names its job the same
//! way in both), and a job id the variable holds that cannot name a directory is overcome by
//! naming the job. Its rank is `--rank N`, else `SLURM_PROCID`, else `RANK` — again the flag
//! first — an integer, or `null` when none is given. Outside a job no rank is read: the
//! launchers' variables are not checked for a soak that does not use them.
//!
//! The job's directory is `<root>/jobs/<uid>/<job>/` (0700), checked as the state directories
//! are ([`dir`]) and held open; the first rank to fail writes `alarm` in it whole and
//! exclusively, and the others look for it at a cost of one `fstatat` ([`alarm`]), believing
//! only an alarm of their job raised while they ran ([`doubt`]).

use std::ffi::OsString;

use crate::env::EnvVars;

pub(crate) mod alarm;
pub(crate) mod dir;
pub(crate) mod doubt;
pub(crate) mod error;
pub(crate) mod id;
pub(crate) mod written;

pub(crate) use error::JobError;
pub(crate) use id::JobId;

/// A soak's place in a job: the job, and its rank in it when one is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Membership {
    pub job: JobId,
    pub rank: Option<u32>,
}

/// The job `--job` names, else Slurm's (`SLURM_JOB_ID`), and the rank `--rank` gives, else
/// `SLURM_PROCID`, else `RANK`, with `var` standing in for the environment (an empty or blank
/// variable counts as unset). `None` outside a job; `--rank` outside a job is refused.
pub(crate) fn resolve(
    job_flag: Option<&JobId>,
    rank_flag: Option<u32>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<Membership>, JobError> {
    let var = |name: &'static str| {
        var(name)
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
            return match rank_flag {
                Some(_) => Err(JobError::RankWithoutJob),
                None => Ok(None),
            };
        }
    };
    let rank = match rank_flag {
        Some(rank) => Some(rank),
        None => match var(EnvVars::SLURM_PROCID).or_else(|| var(EnvVars::RANK)) {
            Some((value, variable)) => Some(parse_rank(value, variable)?),
            None => None,
        },
    };
    Ok(Some(Membership { job, rank }))
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

/// A soak's part in its job while it runs: its place, the job's directory, and what it does
/// when another rank raises the job's alarm.
#[derive(Debug, Clone)]
pub(crate) struct JobRun {
    pub member: Membership,
    pub dir: dir::JobDir,
    pub on_alarm: crate::event::soak::OnJobAlarm,
    /// When the job's directory was found without an alarm (Unix seconds), just before the
    /// soak started: an alarm that says it was raised earlier is not this run's
    /// ([`doubt`]).
    pub joined_at: f64,
}

impl JobRun {
    /// Joins the job `member` names: its directory under `root` made or checked, and refused
    /// when the job already has an alarm — one left by an earlier run of the same `--job` name
    /// would go off at once in every rank (Slurm's job ids are never reused).
    pub(crate) fn join(
        root: &std::path::Path,
        uid: u32,
        member: Membership,
        on_alarm: crate::event::soak::OnJobAlarm,
    ) -> Result<Self, JobError> {
        let dir = dir::JobDir::ensure(root, uid, &member.job)?;
        let joined_at = crate::time::unix_seconds(jiff::Timestamp::now().as_microsecond());
        if let Some(alarm) = dir.check()? {
            return Err(JobError::AlarmBefore {
                path: dir.alarm.clone(),
                alarm: Box::new(alarm),
            });
        }
        Ok(Self {
            member,
            dir,
            on_alarm,
            joined_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::files::fake_env as env;

    fn job(name: &str) -> JobId {
        JobId::parse(name).unwrap()
    }

    fn membership(job_name: &str, rank: Option<u32>) -> Option<Membership> {
        Some(Membership {
            job: job(job_name),
            rank,
        })
    }

    #[test]
    fn slurm_names_the_job_and_its_rank_then_torchrun_gives_the_rank() {
        let slurm = env(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "3"),
            ("RANK", "9"),
        ]);
        assert_eq!(
            resolve(None, None, slurm).unwrap(),
            membership("4242", Some(3))
        );
        let torchrun = env(&[
            ("SLURM_JOB_ID", " 4242 "),
            ("SLURM_PROCID", " "),
            ("RANK", "9"),
        ]);
        assert_eq!(
            resolve(None, None, torchrun).unwrap(),
            membership("4242", Some(9))
        );
        let no_rank = env(&[("SLURM_JOB_ID", "4242")]);
        assert_eq!(
            resolve(None, None, no_rank).unwrap(),
            membership("4242", None)
        );
    }

    #[test]
    fn the_flags_win_over_the_launchers_variables() {
        let slurm = env(&[("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "3")]);
        let named = job("llama");
        assert_eq!(
            resolve(Some(&named), None, &slurm).unwrap(),
            membership("llama", Some(3))
        );
        assert_eq!(
            resolve(Some(&named), Some(5), &slurm).unwrap(),
            membership("llama", Some(5))
        );
        // A variable the flag overrides is not read, so it cannot be in the way.
        let broken = env(&[("SLURM_JOB_ID", "../x"), ("SLURM_PROCID", "two")]);
        assert_eq!(
            resolve(Some(&named), Some(2), broken).unwrap(),
            membership("llama", Some(2))
        );
    }

    #[test]
    fn outside_a_job_no_rank_is_read_and_rank_alone_is_refused() {
        let torchrun = env(&[("RANK", "not a number"), ("SLURM_JOB_ID", "")]);
        assert_eq!(resolve(None, None, torchrun).unwrap(), None);
        let err = resolve(None, Some(1), env(&[("RANK", "1")])).unwrap_err();
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
        let err = resolve(None, None, env(&[("SLURM_JOB_ID", "../x")])).unwrap_err();
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
            let err = resolve(None, None, env(&vars)).unwrap_err();
            assert!(matches!(err, JobError::BadRank { .. }), "{err:?}");
            assert!(err.to_string().starts_with(shown), "{err}");
            assert!(err.to_string().contains("whole number"), "{err}");
            assert!(err.hint().unwrap().contains("`--rank N`"), "{err:?}");
        }
        let err = resolve(None, None, env(&[("SLURM_JOB_ID", "a\nb")])).unwrap_err();
        assert!(err.to_string().starts_with("`a\\nb`"), "{err}");
    }

    #[test]
    fn a_variable_that_is_not_text_is_refused_not_mangled() {
        use std::os::unix::ffi::OsStringExt;
        let var = |name: &str| match name {
            "SLURM_JOB_ID" => Some(OsString::from_vec(b"12\xff".to_vec())),
            _ => None,
        };
        let err = resolve(None, None, var).unwrap_err();
        assert!(matches!(err, JobError::BadJob { .. }), "{err:?}");
    }
}
