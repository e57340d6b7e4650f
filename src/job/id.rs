//! A job's name, as it becomes one component of a path shared between hosts.

use std::fmt;

/// The longest job name, in bytes: a Slurm job id is a few digits, a `--job` name a few words.
pub(crate) const MAX_JOB_BYTES: usize = 128;

/// A job's name, checked to be one safe component of a path: printable ASCII without `/` or
/// whitespace, not `.` or `..`, not starting with `.` (hidden) or `-` (read as an option), at
/// most [`MAX_JOB_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct JobId(String);

/// Why a text cannot name a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadJobId {
    Empty,
    TooLong,
    Dots,
    Slash,
    Hidden,
    Dash,
    NotPrintable,
}

impl BadJobId {
    pub(crate) fn why(self) -> &'static str {
        match self {
            BadJobId::Empty => "is empty",
            BadJobId::TooLong => "is longer than 128 bytes",
            BadJobId::Dots => "would name the directory itself or the one above",
            BadJobId::Slash => "holds `/`, which would put the job's directory elsewhere",
            BadJobId::Hidden => "starts with `.`, which would hide the job's directory",
            BadJobId::Dash => "starts with `-`, which commands would read as an option",
            BadJobId::NotPrintable => {
                "holds a space, a control character or a character outside ASCII"
            }
        }
    }
}

impl JobId {
    pub(crate) fn parse(text: &str) -> Result<Self, BadJobId> {
        let bad = if text.is_empty() {
            Some(BadJobId::Empty)
        } else if text.len() > MAX_JOB_BYTES {
            Some(BadJobId::TooLong)
        } else if text == "." || text == ".." {
            Some(BadJobId::Dots)
        } else if text.contains('/') {
            Some(BadJobId::Slash)
        } else if !text.bytes().all(|b| b.is_ascii_graphic()) {
            Some(BadJobId::NotPrintable)
        } else if text.starts_with('.') {
            Some(BadJobId::Hidden)
        } else if text.starts_with('-') {
            Some(BadJobId::Dash)
        } else {
            None
        };
        match bad {
            Some(why) => Err(why),
            None => Ok(Self(text.to_owned())),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A job's name as the command line gives it (`soak run --job`, `job show JOB`): a bad one is a
/// usage error (exit 2) that says what a name may hold.
pub(crate) fn job_flag(text: &str) -> Result<JobId, String> {
    JobId::parse(text).map_err(|why| {
        format!(
            "it {}; name the job with up to {MAX_JOB_BYTES} letters, digits and punctuation other than `/`: `--job llama-run3`",
            why.why()
        )
    })
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_is_one_safe_path_component() {
        for good in [
            "1234",
            "1234_7",
            "llama-70b.run3",
            "a",
            "x@y:z=1,2+3",
            "a..b",
        ] {
            assert_eq!(JobId::parse(good).unwrap().as_str(), good);
        }
        let long = "x".repeat(MAX_JOB_BYTES + 1);
        for (bad, why) in [
            ("", BadJobId::Empty),
            (".", BadJobId::Dots),
            ("..", BadJobId::Dots),
            ("../x", BadJobId::Slash),
            ("a/b", BadJobId::Slash),
            ("/", BadJobId::Slash),
            ("a\0b", BadJobId::NotPrintable),
            ("a\nb", BadJobId::NotPrintable),
            ("a b", BadJobId::NotPrintable),
            (" 12", BadJobId::NotPrintable),
            ("run\u{202e}3", BadJobId::NotPrintable),
            ("ü", BadJobId::NotPrintable),
            (".hidden", BadJobId::Hidden),
            ("-x", BadJobId::Dash),
            (long.as_str(), BadJobId::TooLong),
        ] {
            assert_eq!(JobId::parse(bad), Err(why), "{bad:?}");
        }
        JobId::parse(&"x".repeat(MAX_JOB_BYTES)).unwrap();
    }
}
