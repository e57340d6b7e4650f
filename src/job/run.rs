//! A run of a job, by its id: which run a rank belongs to, as the flag or its launcher names it.
//!
//! A job is run more than once — Slurm's steps and requeues, torchrun's restarts, a `--job NAME`
//! used again — and each run is one directory of the job's, `runs/<run>/`. The id, the first
//! that applies: `--run ID`; under Slurm `s<SLURM_STEP_ID>.r<SLURM_RESTART_COUNT or 0>`; under
//! torchrun `<TORCHELASTIC_RUN_ID>.r<TORCHELASTIC_RESTART_COUNT or 0>` unless the id is `none`
//! (torchrun's default); else a counter, `1`, `2`, … taken where the ranks meet
//! ([`super::runs`]). An id obeys a job name's rules ([`JobId`]): one safe component of a path.

use std::ffi::OsString;
use std::fmt;

use super::JobError;
use super::id::{BadJobId, JobId};
use crate::env::EnvVars;

/// A run's id: one safe component of a path, as a job's name is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RunId(String);

impl RunId {
    pub(crate) fn parse(text: &str) -> Result<Self, BadJobId> {
        JobId::parse(text).map(|id| Self(id.as_str().to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The `n`th run of this id, counted from 1: the id itself, then `<id>.2`, `<id>.3`, …: a
    /// run of a launcher's id that is over is followed by the next of the same id.
    pub(crate) fn nth(&self, n: u64) -> Option<Self> {
        match n {
            0 => None,
            1 => Some(self.clone()),
            n => Self::parse(&format!("{}.{n}", self.0)).ok(),
        }
    }

    /// The run `n` of a job whose runs are counted.
    pub(crate) fn counted(n: u64) -> Self {
        Self(n.to_string())
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A run's id as the command line gives it (`soak run --run`): a bad one is a usage error
/// (exit 2) that says what an id may hold.
pub(crate) fn run_flag(text: &str) -> Result<RunId, String> {
    RunId::parse(text).map_err(|why| {
        format!(
            "it {}; name the run with up to {} letters, digits and punctuation other than `/`: `--run retry2`",
            why.why(),
            super::id::MAX_JOB_BYTES
        )
    })
}

/// Which run a rank belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunChoice {
    /// The run of this id (`--run`, Slurm's step, torchrun's run), or the next of it when it is
    /// over.
    Named(RunId),
    /// The job's open run, else the next number.
    Counted,
}

/// The run `--run` names, else Slurm's step and restart, else torchrun's run and restart, else
/// a counted one; `var` stands in for the environment (an empty or blank variable counts as
/// unset). A launcher's value that cannot make an id is refused (exit 3) with the variable
/// that held it.
pub(crate) fn choose(
    run_flag: Option<&RunId>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<RunChoice, JobError> {
    if let Some(run) = run_flag {
        return Ok(RunChoice::Named(run.clone()));
    }
    let var = |name: &'static str| -> Option<Result<String, JobError>> {
        let value = var(name)?;
        let text = match value.into_string() {
            Ok(text) => text.trim().to_owned(),
            Err(raw) => {
                return Some(Err(JobError::BadRun {
                    value: raw.to_string_lossy().into_owned(),
                    variable: name,
                    why: BadJobId::NotPrintable.why().to_owned(),
                }));
            }
        };
        (!text.is_empty()).then_some(Ok(text))
    };
    let count = |name: &'static str| -> Result<u64, JobError> {
        match var(name).transpose()? {
            None => Ok(0),
            Some(text) => text.parse::<u64>().map_err(|_| JobError::BadRun {
                value: text,
                variable: name,
                why: "is not a whole number".to_owned(),
            }),
        }
    };
    let named = |text: String, variable: &'static str| {
        RunId::parse(&text)
            .map(RunChoice::Named)
            .map_err(|why| JobError::BadRun {
                value: text,
                variable,
                why: format!("would make a run id that {}", why.why()),
            })
    };
    if let Some(step) = var(EnvVars::SLURM_STEP_ID).transpose()? {
        let restarts = count(EnvVars::SLURM_RESTART_COUNT)?;
        return named(format!("s{step}.r{restarts}"), EnvVars::SLURM_STEP_ID);
    }
    if let Some(run) = var(EnvVars::TORCHELASTIC_RUN_ID).transpose()?
        && run != "none"
    {
        let restarts = count(EnvVars::TORCHELASTIC_RESTART_COUNT)?;
        return named(format!("{run}.r{restarts}"), EnvVars::TORCHELASTIC_RUN_ID);
    }
    Ok(RunChoice::Counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::{Boundary, Exit};
    use crate::testing::files::fake_env as env;

    fn named(text: &str) -> RunChoice {
        RunChoice::Named(RunId::parse(text).unwrap())
    }

    #[test]
    fn the_flag_then_slurm_then_torchrun_then_a_count_names_the_run() {
        let flag = RunId::parse("retry2").unwrap();
        let slurm = env(&[
            ("SLURM_STEP_ID", "3"),
            ("SLURM_RESTART_COUNT", "1"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ]);
        assert_eq!(choose(Some(&flag), &slurm).unwrap(), named("retry2"));
        assert_eq!(choose(None, &slurm).unwrap(), named("s3.r1"));
        let first = env(&[("SLURM_STEP_ID", " 0 "), ("SLURM_RESTART_COUNT", "")]);
        assert_eq!(choose(None, first).unwrap(), named("s0.r0"));
        let torchrun = env(&[
            ("TORCHELASTIC_RUN_ID", "f3a9"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ]);
        assert_eq!(choose(None, torchrun).unwrap(), named("f3a9.r2"));
        let standalone = env(&[("TORCHELASTIC_RUN_ID", "f3a9")]);
        assert_eq!(choose(None, standalone).unwrap(), named("f3a9.r0"));
        let none = env(&[
            ("TORCHELASTIC_RUN_ID", "none"),
            ("TORCHELASTIC_RESTART_COUNT", "0"),
        ]);
        assert_eq!(choose(None, none).unwrap(), RunChoice::Counted);
        assert_eq!(choose(None, env(&[])).unwrap(), RunChoice::Counted);
    }

    #[test]
    fn a_launchers_value_that_makes_no_run_id_is_refused_with_its_variable() {
        for (vars, variable) in [
            (vec![("SLURM_STEP_ID", "a/b")], "SLURM_STEP_ID"),
            (
                vec![("SLURM_STEP_ID", "0"), ("SLURM_RESTART_COUNT", "x")],
                "SLURM_RESTART_COUNT",
            ),
            (vec![("TORCHELASTIC_RUN_ID", "a b")], "TORCHELASTIC_RUN_ID"),
            (
                vec![
                    ("TORCHELASTIC_RUN_ID", "r"),
                    ("TORCHELASTIC_RESTART_COUNT", "-1"),
                ],
                "TORCHELASTIC_RESTART_COUNT",
            ),
        ] {
            let err = choose(None, env(&vars)).unwrap_err();
            assert!(
                matches!(&err, JobError::BadRun { variable: v, .. } if *v == variable),
                "{err:?}"
            );
            assert_eq!(err.exit(), Exit::Refused);
            assert!(err.to_string().contains(variable), "{err}");
        }
        // `--run` overrides what the launcher set.
        let flag = RunId::parse("mine").unwrap();
        let broken = env(&[("SLURM_STEP_ID", "a/b")]);
        assert_eq!(choose(Some(&flag), broken).unwrap(), named("mine"));
    }

    #[test]
    fn a_runs_nth_follows_it_and_a_bad_flag_says_what_an_id_holds() {
        let run = RunId::parse("s0.r0").unwrap();
        assert_eq!(run.nth(1).unwrap().as_str(), "s0.r0");
        assert_eq!(run.nth(2).unwrap().as_str(), "s0.r0.2");
        assert_eq!(run.nth(0), None);
        assert_eq!(RunId::counted(7).as_str(), "7");
        assert!(run_flag("../x").unwrap_err().contains("`--run retry2`"));
        assert!(run_flag(".hidden").is_err());
        assert!(run_flag("a b").is_err());
        assert_eq!(run_flag("r-1.b").unwrap().as_str(), "r-1.b");
        let long = format!("{}.2", "x".repeat(super::super::id::MAX_JOB_BYTES));
        assert!(RunId::parse(&long).is_err());
    }
}
