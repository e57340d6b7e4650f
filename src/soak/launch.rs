//! Where a soak runs in a launcher's job — Slurm's job, step and ranks, or torchrun's ranks —
//! recorded with the soak and filled into the placeholders of `--output` and `--report`, so that
//! `srun unilab soak run ... --output 'soak-{rank}.json'` gives each rank its own artifact.

use std::collections::BTreeMap;

use crate::env::EnvVars;

/// This process's place in a job, as its launcher set it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Launch {
    pub job: Option<String>,
    pub step: Option<String>,
    pub rank: Option<String>,
    pub local_rank: Option<String>,
    /// The node Slurm runs this task on (`SLURMD_NODENAME`): the cluster's name for the host.
    pub node: Option<String>,
}

/// The metadata keys a soak records its place under (unless the user's `--meta` sets them).
pub(crate) const JOB_KEY: &str = "job";
pub(crate) const STEP_KEY: &str = "job_step";
pub(crate) const RANK_KEY: &str = "rank";
pub(crate) const LOCAL_RANK_KEY: &str = "local_rank";
pub(crate) const NODE_KEY: &str = "node";
/// The run of its job a soak joined.
pub(crate) const RUN_KEY: &str = "run";

impl Launch {
    /// Slurm's variables, else torchrun's; a variable that is empty counts as unset.
    pub(crate) fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        Self {
            job: var(EnvVars::SLURM_JOB_ID),
            step: var(EnvVars::SLURM_STEP_ID),
            rank: var(EnvVars::SLURM_PROCID).or_else(|| var(EnvVars::RANK)),
            local_rank: var(EnvVars::SLURM_LOCALID).or_else(|| var(EnvVars::LOCAL_RANK)),
            node: var(EnvVars::SLURMD_NODENAME),
        }
    }

    /// This place with the job and rank `membership` names ([`crate::job::resolve`]: `--job`,
    /// else `SLURM_JOB_ID`; `--rank`, else `SLURM_PROCID`, else `RANK`), so that what the soak
    /// records and what `{job}` and `{rank}` stand for are the job's own. Outside a job it is
    /// left as the launcher set it: torchrun's `RANK` still fills `{rank}`.
    pub(crate) fn joined(self, membership: Option<&crate::job::Membership>) -> Self {
        match membership {
            Some(membership) => Self {
                job: Some(membership.job.as_str().to_owned()),
                rank: Some(membership.rank.to_string()),
                ..self
            },
            None => self,
        }
    }

    /// The user's metadata `given` (`--meta`, `--meta-json`) refused where it names a key of
    /// the soak's place that the soak records — its job, run, rank, step or local rank — with
    /// another value: the views key on what is recorded, and a soak must not pass for another
    /// job's rank. An equal value is taken; a key the soak records nothing under is the user's
    /// (`--meta run=nightly` outside a job). `run` is the run of a soak of a job: the one asked
    /// for, or `None` for one counted when the rank joins (which no value can be known to
    /// equal before).
    pub(crate) fn check_given<'a>(
        &self,
        run: Option<Option<&str>>,
        given: impl IntoIterator<Item = (&'a str, String)>,
    ) -> Result<(), crate::job::JobError> {
        for (key, value) in given {
            let (key, recorded) = match key {
                JOB_KEY => (JOB_KEY, self.job.as_deref()),
                RANK_KEY => (RANK_KEY, self.rank.as_deref()),
                STEP_KEY => (STEP_KEY, self.step.as_deref()),
                LOCAL_RANK_KEY => (LOCAL_RANK_KEY, self.local_rank.as_deref()),
                RUN_KEY => match run {
                    Some(run) => {
                        if run != Some(value.as_str()) {
                            return Err(crate::job::JobError::MetaContradicts {
                                key: RUN_KEY,
                                given: value,
                                recorded: run.map(str::to_owned),
                            });
                        }
                        continue;
                    }
                    None => continue,
                },
                _ => continue,
            };
            if recorded.is_some_and(|recorded| recorded != value) {
                return Err(crate::job::JobError::MetaContradicts {
                    key,
                    given: value,
                    recorded: recorded.map(str::to_owned),
                });
            }
        }
        Ok(())
    }

    /// Whether the soak records `key` itself: the user's metadata under it is then dropped for
    /// the soak's own (the same, [`Self::check_given`] has made sure).
    pub(crate) fn records(&self, key: &str, in_job: bool) -> bool {
        match key {
            JOB_KEY => self.job.is_some(),
            RANK_KEY => self.rank.is_some(),
            STEP_KEY => self.step.is_some(),
            LOCAL_RANK_KEY => self.local_rank.is_some(),
            RUN_KEY => in_job,
            _ => false,
        }
    }

    /// What the soak records of its place, under keys the user's own metadata leaves free.
    pub(crate) fn record_into(&self, metadata: &mut BTreeMap<String, String>) {
        for (key, value) in [
            (JOB_KEY, &self.job),
            (STEP_KEY, &self.step),
            (RANK_KEY, &self.rank),
            (LOCAL_RANK_KEY, &self.local_rank),
            (NODE_KEY, &self.node),
        ] {
            if let Some(value) = value {
                metadata
                    .entry(key.to_owned())
                    .or_insert_with(|| value.clone());
            }
        }
    }
}

/// A rank as the soak recorded it, as a number: `None` for what is recorded as one but is not
/// a whole number (`--meta rank=...`). Ranks are integers everywhere.
pub(crate) fn rank_number(recorded: &str) -> Option<u32> {
    recorded.trim().parse().ok()
}

/// What fills a path's placeholders.
pub(crate) struct Placeholders<'a> {
    pub launch: &'a Launch,
    pub host: &'a str,
    pub soak_id: &'a str,
}

impl Placeholders<'_> {
    /// `template` with `{rank}`, `{local_rank}`, `{host}`, `{job}` and `{soak_id}` filled in
    /// (`{{` and `}}` for braces). An unknown placeholder, or one this process has no value for
    /// (`{rank}` outside a job), is an error: ranks must not overwrite each other's files. So is
    /// a value that would not stay one part of one file name ([`unsafe_in_a_name`]): a launcher's
    /// variable must not move the file elsewhere or break its name.
    pub(crate) fn fill(&self, template: &str) -> Result<String, PlaceholderError> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(at) = rest.find(['{', '}']) {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if tail.starts_with("{{") || tail.starts_with("}}") {
                out.push_str(&tail[..1]);
                rest = &tail[2..];
                continue;
            }
            let Some(close) = tail.find('}').filter(|_| tail.starts_with('{')) else {
                return Err(PlaceholderError::UnmatchedBrace(template.to_owned()));
            };
            let name = &tail[1..close];
            let (value, from) = self.value(name)?;
            if let Some(why) = unsafe_in_a_name(&value) {
                return Err(PlaceholderError::Unsafe {
                    name: name.to_owned(),
                    value,
                    from,
                    why,
                });
            }
            out.push_str(&value);
            rest = &tail[close + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value of placeholder `name`, and where it comes from.
    fn value(&self, name: &str) -> Result<(String, &'static str), PlaceholderError> {
        let launch = self.launch;
        let (value, from) = match name {
            "host" => return Ok((self.host.to_owned(), "the host's name")),
            "soak_id" => return Ok((self.soak_id.to_owned(), "the soak's id")),
            "job" => (&launch.job, "--job or SLURM_JOB_ID"),
            "rank" => (&launch.rank, "--rank, SLURM_PROCID or RANK"),
            "local_rank" => (&launch.local_rank, "SLURM_LOCALID or LOCAL_RANK"),
            other => return Err(PlaceholderError::Unknown(other.to_owned())),
        };
        match value {
            Some(value) => Ok((value.clone(), from)),
            None => Err(PlaceholderError::Unset {
                name: name.to_owned(),
                from,
            }),
        }
    }
}

/// What makes `value` unfit to be part of a file name, if anything: a `/` or a `..` would
/// place the file elsewhere than its template says (`SLURM_PROCID=../x`), and a control
/// character (a newline, NUL) would end up in the name. Refused rather than replaced: a value
/// made safe by replacing characters could name another rank's file.
fn unsafe_in_a_name(value: &str) -> Option<&'static str> {
    if value.chars().any(char::is_control) {
        Some("holds a control character")
    } else if value.contains('/') {
        Some("holds `/` and would put the file in another directory")
    } else if value.contains("..") {
        Some("holds `..`, which could name the directory above")
    } else {
        None
    }
}

/// Why a path template cannot be filled in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    #[error("`{0}` has an unmatched brace (write `}}}}` for one)")]
    UnmatchedBrace(String),
    #[error(
        "`{{{0}}}` is not a placeholder; use {{rank}}, {{local_rank}}, {{host}}, {{job}} or {{soak_id}}"
    )]
    Unknown(String),
    #[error("`{{{name}}}` has no value here: {from} is not set")]
    Unset { name: String, from: &'static str },
    /// What the environment gave a placeholder cannot be part of a file name: a refusal (the
    /// template is right), not a usage error.
    #[error("`{{{name}}}` stands for `{}` here ({from}), which {why}", shown(.value))]
    Unsafe {
        name: String,
        value: String,
        from: &'static str,
        why: &'static str,
    },
}

impl PlaceholderError {
    /// Whether the template is right and what it was filled with is refused.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self, PlaceholderError::Unsafe { .. })
    }
}

/// A placeholder's value as a message shows it: on one line, and cut short past 64 characters
/// (a variable may hold kilobytes).
fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    let text = crate::text::foreign(value);
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], value.len()),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(vars: &[(&str, &str)]) -> Launch {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Launch::from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn slurm_comes_first_then_torchrun() {
        let slurm = launch(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURMD_NODENAME", "gpu-node-07"),
            ("RANK", "9"),
        ]);
        assert_eq!(slurm.rank.as_deref(), Some("3"));
        assert_eq!(slurm.node.as_deref(), Some("gpu-node-07"));
        assert_eq!(slurm.job.as_deref(), Some("42"));
        let torchrun = launch(&[("RANK", "9"), ("LOCAL_RANK", "2"), ("SLURM_PROCID", " ")]);
        assert_eq!(torchrun.rank.as_deref(), Some("9"));
        assert_eq!(torchrun.local_rank.as_deref(), Some("2"));
        assert_eq!(torchrun.job, None);
    }

    #[test]
    fn placeholders_are_filled_or_refused() {
        let launch = launch(&[("SLURM_JOB_ID", "42"), ("SLURM_PROCID", "3")]);
        let fill = |t: &str| {
            Placeholders {
                launch: &launch,
                host: "n1",
                soak_id: "20261203T101010-ab12",
            }
            .fill(t)
        };
        assert_eq!(
            fill("soak-{job}-{rank}@{host}.json").unwrap(),
            "soak-42-3@n1.json"
        );
        assert_eq!(fill("{soak_id}.json").unwrap(), "20261203T101010-ab12.json");
        assert_eq!(fill("a{{b}}.json").unwrap(), "a{b}.json");
        assert_eq!(fill("plain.json").unwrap(), "plain.json");
        let said = |t| fill(t).unwrap_err().to_string();
        assert_eq!(
            said("{local_rank}"),
            "`{local_rank}` has no value here: SLURM_LOCALID or LOCAL_RANK is not set"
        );
        assert_eq!(
            said("{node}"),
            "`{node}` is not a placeholder; use {rank}, {local_rank}, {host}, {job} or {soak_id}"
        );
        assert_eq!(
            said("{rank"),
            "`{rank` has an unmatched brace (write `}}` for one)"
        );
        assert!(said("rank}").contains("unmatched"));
    }

    #[test]
    fn a_value_that_would_not_stay_one_part_of_a_name_is_refused() {
        let said = |job: &str, template: &str| {
            let launch = launch(&[("SLURM_JOB_ID", job), ("SLURM_PROCID", "0")]);
            Placeholders {
                launch: &launch,
                host: "n1",
                soak_id: "20261203T101010-ab12",
            }
            .fill(template)
            .map_err(|e| (e.is_refusal(), e.to_string()))
        };
        assert_eq!(
            said("../x", "soak-{job}.json"),
            Err((
                true,
                "`{job}` stands for `../x` here (--job or SLURM_JOB_ID), which holds `/` and would put the file in another directory".into()
            ))
        );
        assert_eq!(
            said("a\nb", "{job}"),
            Err((
                true,
                "`{job}` stands for `a\\nb` here (--job or SLURM_JOB_ID), which holds a control character"
                    .into()
            ))
        );
        assert!(
            said("..", "x/{job}/y")
                .unwrap_err()
                .1
                .contains("holds `..`")
        );
        assert!(said("a\u{0}b", "{job}").unwrap_err().0);
        let long = said(&"7/".repeat(5000), "{job}").unwrap_err().1;
        assert!(
            long.len() < 200 && long.contains("… (10000 bytes)"),
            "{long}"
        );
        assert_eq!(said("12_3.a", "{job}-{rank}").unwrap(), "12_3.a-0");
        // The template's own `..` and `/` are the user's to write.
        assert_eq!(said("5", "../{job}/x").unwrap(), "../5/x");
    }

    #[test]
    fn the_users_metadata_wins() {
        let launch = launch(&[("SLURM_JOB_ID", "42"), ("SLURM_PROCID", "3")]);
        let mut metadata = BTreeMap::from([("rank".to_owned(), "mine".to_owned())]);
        launch.record_into(&mut metadata);
        assert_eq!(metadata["rank"], "mine");
        assert_eq!(metadata["job"], "42");
        assert!(!metadata.contains_key("job_step"));
    }
}
