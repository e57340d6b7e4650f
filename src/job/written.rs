//! The job's alarm as a reader finds it: looked for where the ranks write it, nothing created.

use super::alarm::Alarm;
use super::dir::JobDir;
use super::{JobError, JobId};

/// The alarm of user `uid`'s job `job` under the state root `root`, as written; `None` when no
/// rank raised one (or the job never had a directory). Read as a rank reads it
/// ([`JobDir::check`]), relative to the job's directory opened without following a link: the
/// user's own regular file, bounded, parsed whole.
pub(crate) fn written_alarm(
    root: &std::path::Path,
    uid: u32,
    job: &JobId,
) -> Result<Option<Alarm>, JobError> {
    match JobDir::existing(root, uid, job)? {
        Some(dir) => dir.check(),
        None => Ok(None),
    }
}
