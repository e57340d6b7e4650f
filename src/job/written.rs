//! The job's alarm as a reader finds it: looked for where the ranks write it, nothing created.

use super::alarm::Alarm;
use super::dir::JobDir;
use super::{JobError, JobId};

/// The alarm of the latest run of user `uid`'s job `job` under the state root `root`, as
/// written (of a job whose soaks ran before runs, the alarm in the job's directory itself);
/// `None` when no rank raised one (or the job never had a directory), and what in the job's
/// runs was ignored. Read as a rank reads it ([`crate::job::runs::RunDir::check`]), relative
/// to the directories opened without following a link: the user's own regular file, bounded,
/// parsed whole.
pub(crate) fn written_alarm(
    root: &std::path::Path,
    uid: u32,
    job: &JobId,
) -> Result<(Option<Alarm>, Vec<String>), JobError> {
    let Some(dir) = JobDir::existing(root, uid, job)? else {
        return Ok((None, Vec::new()));
    };
    let (latest, warnings) = dir.latest_run()?;
    let alarm = match latest {
        Some(run) => run.check()?,
        None => dir.alarm_before_runs()?,
    };
    Ok((alarm, warnings))
}
