//! Daemon names: the default one a GPU gets, a Slurm job's scope, and what a name may be.

use super::error::MpsError;

/// `gpu-` and the first 8 hex digits of the UUID: stable whatever the mask. Under a Slurm job,
/// `job<ID>-` first: each job's daemons are its own.
pub(crate) fn default_name(uuid: &str, job: Option<&str>) -> String {
    let hex: String = uuid
        .trim_start_matches("GPU-")
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(8)
        .collect();
    scoped_name(&format!("gpu-{}", hex.to_ascii_lowercase()), job)
}

/// What a job-scoped daemon name starts with: `job<ID>-`.
const JOB_PREFIX: &str = "job";

/// What a Slurm job id is made of here: letters, digits and `_`, at least one.
fn is_job_id(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A name as given, in a job's scope: `job<ID>-` first under a job (unless it has it already).
/// Naming only: which job a daemon belongs to is recorded with it, never read from its name.
pub(crate) fn scoped_name(name: &str, job: Option<&str>) -> String {
    match job {
        Some(job) if !name.starts_with(&format!("{JOB_PREFIX}{job}-")) => {
            format!("{JOB_PREFIX}{job}-{name}")
        }
        _ => name.to_owned(),
    }
}

/// A Slurm job id that can scope daemon names and lock files.
pub(crate) fn validate_job(job: &str) -> Result<(), MpsError> {
    if job.len() <= 32 && is_job_id(job) {
        Ok(())
    } else {
        Err(MpsError::BadJob(job.to_owned()))
    }
}

pub(crate) fn validate_name(name: &str) -> Result<(), MpsError> {
    let valid = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(MpsError::BadName(name.to_owned()))
    }
}

/// A daemon's name as `mps start --name` gives it: a bad one is a usage error (exit 2), with
/// what a name may be.
pub(crate) fn name_flag(text: &str) -> Result<String, String> {
    validate_name(text).map(|()| text.to_owned()).map_err(|e| {
        use crate::diagnostic::Hint;
        format!("{e}; {}", e.hint().unwrap_or_default())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_come_from_the_uuid() {
        assert_eq!(
            default_name("GPU-0F8E0C2A-5b5e-4c47-9d0a-1a2b3c4d5e6f", None),
            "gpu-0f8e0c2a"
        );
        validate_name(&default_name("GPU-0f8e0c2a-5b5e", None)).unwrap();
    }

    #[test]
    fn names_are_validated() {
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65), "..", "ü"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for good in ["gpu-0f8e0c2a", "train_1", "a.b-c"] {
            validate_name(good).unwrap();
        }
    }
}
