//! A run's alarm: `<run dir>/alarm`, one JSON object written by the first rank whose soak
//! trips a failure, for every other rank of the run to see at its next sample.
//!
//! Written whole and exclusively ([`Held::create`]): of any number of ranks racing, on one host
//! or on several over NFS, exactly one wins; the others get the winner's alarm back. A reader
//! finds either no alarm or a whole one.
//!
//! Looking for it costs one `fstatat` while there is none ([`check`]); only once it is there is
//! it opened, read (at most [`MAX_ALARM_BYTES`]) and parsed. What is not a regular file, not
//! the user's own, too large or not an alarm is reported as such, never trusted; an alarm that
//! names another job or run, or a time it cannot have been raised at, is doubted
//! ([`crate::job::doubt`]).

use serde::{Deserialize, Serialize};

use super::JobError;
use super::dir::JobDir;
use super::held::{Held, Unread};
use crate::event::soak::JobAlarm;
use crate::paths::Distrust;

/// The alarm's name in a run's directory (and, before runs, in the job's).
pub(crate) const ALARM: &str = "alarm";

/// The most an alarm may hold: a reader reads no more.
pub(crate) const MAX_ALARM_BYTES: u64 = 16 * 1024;
/// The most of a reason an alarm keeps: the rest is cut, so that the alarm stays well within
/// [`MAX_ALARM_BYTES`].
pub(crate) const MAX_REASON_BYTES: usize = 4 * 1024;

/// The alarm as written: which rank of which run of which job tripped, where, why and when. A
/// rank that sees it records it ([`Alarm::recorded`]) without the run, which its own start
/// records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Alarm {
    pub job: String,
    /// The run it was raised in; `None` in an alarm that does not say (one an older unilab
    /// wrote in the job's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    pub rank: Option<u32>,
    pub host: String,
    /// The soak of the rank that tripped.
    pub soak_id: String,
    /// As the alarm names it (a newer unilab may name a kind this one does not know).
    pub failure_kind: String,
    pub reason: String,
    /// When that rank tripped, Unix seconds, exactly as the alarm holds it.
    pub at: f64,
}

impl Alarm {
    /// The alarm of a rank of run `run` that tripped at `at_us` (Unix microseconds), its reason
    /// cut to [`MAX_REASON_BYTES`].
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument a field of the alarm, named where it is raised"
    )]
    pub(crate) fn new(
        job: &super::JobId,
        run: Option<&super::run::RunId>,
        rank: Option<u32>,
        host: &str,
        soak_id: &str,
        failure_kind: &str,
        reason: &str,
        at_us: i64,
    ) -> Self {
        Self {
            job: job.as_str().to_owned(),
            run: run.map(|run| run.as_str().to_owned()),
            rank,
            host: host.to_owned(),
            soak_id: soak_id.to_owned(),
            failure_kind: failure_kind.to_owned(),
            reason: cut(reason, MAX_REASON_BYTES),
            at: crate::time::unix_seconds(at_us),
        }
    }

    /// The alarm as a rank's record holds it (`soak_job_alarm_seen`, `outcome.job_alarm`).
    pub(crate) fn recorded(&self) -> JobAlarm {
        JobAlarm {
            job: self.job.clone(),
            rank: self.rank,
            host: self.host.clone(),
            soak_id: self.soak_id.clone(),
            failure_kind: self.failure_kind.clone(),
            reason: self.reason.clone(),
            at: self.at,
        }
    }
}

/// `text`, cut at a character boundary to at most `max` bytes with `…` at the end when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = '…';
    let mut end = max - ellipsis.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

impl JobDir {
    /// The alarm an older unilab wrote in the job's directory itself, before runs: a job's
    /// soaks recorded then form no run.
    pub(crate) fn alarm_before_runs(&self) -> Result<Option<Alarm>, JobError> {
        check(&self.held)
    }
}

/// Who wrote the run's alarm.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Raised {
    /// This rank's alarm is the run's.
    Won,
    /// Another rank was first: its alarm, as it is written.
    Lost(Alarm),
}

/// Writes `alarm` as the alarm of the directory `dir` unless a rank has already written one,
/// and says which happened.
pub(crate) fn raise(dir: &Held, alarm: &Alarm) -> Result<Raised, JobError> {
    let failed = |source| JobError::WriteAlarm {
        path: dir.join(ALARM),
        source,
    };
    let mut bytes = serde_json::to_vec(alarm).map_err(|e| failed(e.into()))?;
    bytes.push(b'\n');
    if bytes.len() as u64 > MAX_ALARM_BYTES {
        return Err(failed(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the alarm is {} bytes, over {MAX_ALARM_BYTES}", bytes.len()),
        )));
    }
    if dir.create(ALARM, &bytes).map_err(failed)? {
        return Ok(Raised::Won);
    }
    match check(dir)? {
        Some(first) => Ok(Raised::Lost(first)),
        None => Err(failed(std::io::Error::other(
            "another rank's alarm was there, then gone",
        ))),
    }
}

/// The alarm of the directory `dir` if a rank has raised it: one `fstatat` while none has.
pub(crate) fn check(dir: &Held) -> Result<Option<Alarm>, JobError> {
    let path = dir.join(ALARM);
    let malformed = |why: String| JobError::MalformedAlarm {
        path: path.clone(),
        why,
    };
    let bytes = match dir.read(ALARM, MAX_ALARM_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(Unread::NotYours { owner }) => {
            return Err(JobError::UntrustedAlarm {
                path: path.clone(),
                reason: Distrust::NotYours {
                    owner,
                    uid: dir.uid,
                },
            });
        }
        Err(Unread::Io(source)) => return Err(JobError::ReadAlarm { path, source }),
        Err(why) => return Err(malformed(why.to_string())),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| malformed(format!("not its JSON object ({e})")))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::job::JobId;
    use crate::job::dir::JobDir;
    use crate::job::run::RunId;
    use crate::job::runs::RunDir;
    use crate::testing::files::private_tempdir as private_root;

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    /// Run `r1` of job `4242` under `root`, made or found.
    fn job_dir(root: &Path) -> RunDir {
        JobDir::ensure(root, uid(), &JobId::parse("4242").unwrap())
            .unwrap()
            .made_run(&RunId::parse("r1").unwrap())
            .unwrap()
    }

    fn alarm_of(rank: u32) -> Alarm {
        Alarm::new(
            &JobId::parse("4242").unwrap(),
            Some(&RunId::parse("r1").unwrap()),
            Some(rank),
            &format!("n{}", rank / 4),
            &format!("20261201T100000-{rank:04x}"),
            "stale_progress",
            &format!("rank {rank}: no progress for 2m00s"),
            1_796_479_200_250_000 + i64::from(rank),
        )
    }

    /// The names in the run's directory, in order.
    fn names(dir: &RunDir) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_first_alarm_is_written_whole_and_read_back_as_json() {
        let root = private_root();
        let dir = job_dir(root.path());
        assert_eq!(dir.check().unwrap(), None);
        let alarm = alarm_of(5);
        assert_eq!(dir.raise(&alarm).unwrap(), Raised::Won);
        assert_eq!(dir.check().unwrap(), Some(alarm.clone()));
        assert_eq!(names(&dir), ["alarm"]);
        let text = std::fs::read_to_string(dir.path().join(ALARM)).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"job":"4242","run":"r1","rank":5,"host":"n1","soak_id":"20261201T100000-0005","#,
                r#""failure_kind":"stale_progress","reason":"rank 5: no progress for 2m00s","#,
                r#""at":1796479200.250005}"#,
                "\n"
            )
        );
        let meta = std::fs::metadata(dir.path().join(ALARM)).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600);
        // A second rank loses, and learns who won.
        assert_eq!(dir.raise(&alarm_of(2)).unwrap(), Raised::Lost(alarm));
        assert_eq!(names(&dir), ["alarm"]);
    }

    #[test]
    fn a_rank_without_a_rank_writes_null_and_a_long_reason_is_cut() {
        let root = private_root();
        let dir = job_dir(root.path());
        let mut alarm = alarm_of(0);
        alarm.rank = None;
        let long = "é".repeat(MAX_REASON_BYTES);
        let cut_alarm = Alarm::new(
            &JobId::parse("4242").unwrap(),
            None,
            None,
            "n0",
            "x",
            "stale_progress",
            &long,
            0,
        );
        assert!(cut_alarm.reason.len() <= MAX_REASON_BYTES);
        assert!(cut_alarm.reason.ends_with('…'));
        assert_eq!(dir.raise(&cut_alarm).unwrap(), Raised::Won);
        let read = dir.check().unwrap().unwrap();
        assert_eq!(read.rank, None);
        assert_eq!(read.reason, cut_alarm.reason);
        assert!(
            std::fs::read_to_string(dir.path().join(ALARM))
                .unwrap()
                .contains(r#""rank":null"#)
        );
    }

    /// Eight ranks trip at once, again and again: each time exactly one alarm is written, every
    /// loser gets the winner's alarm back, no temporary file is left, and a reader looking all
    /// the while never finds half an alarm.
    #[test]
    fn ranks_racing_to_raise_the_alarm_leave_exactly_one_and_every_loser_sees_it() {
        const RANKS: u32 = 8;
        for _round in 0..20 {
            let root = private_root();
            let dir = Arc::new(job_dir(root.path()));
            let start = Arc::new(Barrier::new(RANKS as usize + 1));
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let reader = {
                let (dir, start, done) = (dir.clone(), start.clone(), done.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut seen = None;
                    while !done.load(std::sync::atomic::Ordering::SeqCst) || seen.is_none() {
                        if let Some(alarm) = dir.check().expect("never half an alarm") {
                            seen = Some(alarm);
                        }
                    }
                    seen
                })
            };
            let ranks: Vec<_> = (0..RANKS)
                .map(|rank| {
                    let (dir, start) = (dir.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        (rank, dir.raise(&alarm_of(rank)).unwrap())
                    })
                })
                .collect();
            let outcomes: Vec<(u32, Raised)> =
                ranks.into_iter().map(|rank| rank.join().unwrap()).collect();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let seen = reader.join().unwrap().unwrap();
            let winners: Vec<u32> = outcomes
                .iter()
                .filter(|(_, raised)| *raised == Raised::Won)
                .map(|(rank, _)| *rank)
                .collect();
            assert_eq!(winners.len(), 1, "{outcomes:?}");
            let winner = alarm_of(winners[0]);
            for (rank, raised) in &outcomes {
                if *rank != winners[0] {
                    assert_eq!(*raised, Raised::Lost(winner.clone()), "rank {rank}");
                }
            }
            assert_eq!(seen, winner);
            assert_eq!(dir.check().unwrap(), Some(winner));
            assert_eq!(names(&dir), ["alarm"]);
        }
    }

    /// Ranks are processes: eight copies of this test binary, started together, each raise the
    /// alarm of one job directory. One wins; each of the others gets its alarm back.
    #[test]
    fn rank_processes_racing_to_raise_the_alarm_leave_exactly_one() {
        const CHILD: &str = "UNILAB_TEST_JOB_RACE";
        const RANKS: u32 = 8;
        let name = "job::alarm::tests::rank_processes_racing_to_raise_the_alarm_leave_exactly_one";
        if let Some(work) = std::env::var_os(CHILD) {
            let work = Path::new(&work);
            let rank: u32 = std::env::var("UNILAB_TEST_JOB_RANK")
                .unwrap()
                .parse()
                .unwrap();
            let go = work.join("go");
            assert!(
                crate::time::poll_until(
                    std::time::Duration::from_secs(60),
                    std::time::Duration::from_millis(1),
                    || go.exists()
                ),
                "never told to go"
            );
            let raised = match job_dir(&work.join("state")).raise(&alarm_of(rank)).unwrap() {
                Raised::Won => "won".to_owned(),
                Raised::Lost(alarm) => format!("lost to {}", alarm.rank.unwrap()),
            };
            std::fs::write(work.join(format!("rank-{rank}")), raised).unwrap();
            return;
        }
        let work = private_root();
        let children: Vec<_> = (0..RANKS)
            .map(|rank| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", name, "--test-threads=1", "--quiet"])
                    .env(CHILD, work.path())
                    .env("UNILAB_TEST_JOB_RANK", rank.to_string())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::fs::write(work.path().join("go"), b"").unwrap();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let said: Vec<String> = (0..RANKS)
            .map(|rank| std::fs::read_to_string(work.path().join(format!("rank-{rank}"))).unwrap())
            .collect();
        let winners: Vec<u32> = (0..RANKS)
            .filter(|rank| said[*rank as usize] == "won")
            .collect();
        assert_eq!(winners.len(), 1, "{said:?}");
        let lost = format!("lost to {}", winners[0]);
        assert!(said.iter().all(|s| s == "won" || *s == lost), "{said:?}");
        let dir = job_dir(&work.path().join("state"));
        assert_eq!(dir.check().unwrap(), Some(alarm_of(winners[0])));
        assert_eq!(names(&dir), ["alarm"]);
    }

    /// A writer that died between writing its temporary file and linking it leaves half an
    /// alarm under a temporary name: no reader takes it for the alarm, and the next rank to
    /// trip still writes the job's alarm.
    #[test]
    fn a_half_written_temporary_file_is_never_seen_as_the_alarm() {
        let root = private_root();
        let dir = job_dir(root.path());
        std::fs::write(
            dir.path().join(".alarm.dead12.tmp"),
            br#"{"job":"4242","rank":3,"ho"#,
        )
        .unwrap();
        assert_eq!(dir.check().unwrap(), None);
        assert_eq!(dir.raise(&alarm_of(1)).unwrap(), Raised::Won);
        assert_eq!(dir.check().unwrap(), Some(alarm_of(1)));
    }

    /// What is at `alarm` but is not one unilab wrote is reported, never a panic and never
    /// trusted: half a file, a huge one, a link, a FIFO (which a plain open would wait on
    /// forever), a file of another user.
    #[test]
    fn a_malformed_oversized_or_foreign_alarm_is_reported_not_trusted() {
        let root = private_root();
        let dir = job_dir(root.path());
        let path = dir.path().join(ALARM);
        let reported = |dir: &RunDir| dir.check().unwrap_err().to_string();
        std::fs::write(&path, br#"{"job":"4242","rank":3,"ho"#).unwrap();
        let err = reported(&dir);
        assert!(
            err.contains("is not an alarm: not its JSON object"),
            "{err}"
        );
        // A rank that loses to it says so, rather than claiming the alarm.
        assert!(matches!(
            dir.raise(&alarm_of(1)),
            Err(JobError::MalformedAlarm { .. })
        ));
        std::fs::write(&path, vec![b' '; MAX_ALARM_BYTES as usize + 1]).unwrap();
        let err = reported(&dir);
        assert!(err.contains("16385 bytes, over 16384"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let elsewhere = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &path).unwrap();
        assert!(reported(&dir).contains("not a regular file"));
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(reported(&dir).contains("not a regular file"));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"{}").unwrap();
        let err = reported(&dir);
        assert!(err.contains("missing field"), "{err}");
        let other = RunDir {
            held: Held {
                uid: uid() + 1,
                ..dir.held.clone()
            },
            ..dir.clone()
        };
        let err = other.check().unwrap_err();
        assert!(matches!(err, JobError::UntrustedAlarm { .. }), "{err:?}");
        assert!(
            crate::diagnostic::Hint::hint(&err)
                .unwrap()
                .contains("remove")
        );
    }

    /// JSON has no number that is not finite: an alarm whose `at` is written out of range
    /// (`1e400`) or as a word is no alarm at all, never an infinite time.
    #[test]
    fn an_alarm_whose_time_is_out_of_range_or_a_word_is_not_read_as_one() {
        let root = private_root();
        let dir = job_dir(root.path());
        for at in ["1e400", "-1e400", r#""NaN""#, r#""inf""#] {
            std::fs::write(
                dir.path().join(ALARM),
                format!(
                    r#"{{"job":"4242","rank":1,"host":"n0","soak_id":"x","failure_kind":"stale_progress","reason":"r","at":{at}}}"#
                ),
            )
            .unwrap();
            match dir.check() {
                Err(JobError::MalformedAlarm { .. }) => {}
                other => panic!("`at` {at}: {other:?}"),
            }
        }
    }

    /// Under umask 002 (a group-writable default) the job's directories are still 0700 and
    /// the alarm 0600: their modes are set, not left to the umask. The umask is the process's,
    /// so the work is done by a copy of this test binary that runs this test alone.
    #[test]
    fn under_umask_002_the_job_directory_is_0700_and_the_alarm_0600() {
        const CHILD: &str = "UNILAB_TEST_JOB_UMASK_ROOT";
        if let Some(root) = std::env::var_os(CHILD) {
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o002));
            assert_eq!(
                job_dir(Path::new(&root)).raise(&alarm_of(0)).unwrap(),
                Raised::Won
            );
            return;
        }
        let root = private_root();
        let state = root.path().join("state");
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "job::alarm::tests::under_umask_002_the_job_directory_is_0700_and_the_alarm_0600",
                "--test-threads=1",
                "--quiet",
            ])
            .env(CHILD, &state)
            .output()
            .unwrap();
        assert!(
            child.status.success(),
            "{}{}",
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr)
        );
        let dir = job_dir(&state);
        let mode = |path: &Path| std::fs::symlink_metadata(path).unwrap().mode() & 0o7777;
        for level in [
            state.clone(),
            state.join("jobs"),
            state.join("jobs").join(uid().to_string()),
            state.join("jobs").join(uid().to_string()).join("4242"),
            state
                .join("jobs")
                .join(uid().to_string())
                .join("4242")
                .join("runs"),
            dir.path().to_owned(),
        ] {
            assert_eq!(mode(&level), 0o700, "{}", level.display());
        }
        assert_eq!(mode(&dir.path().join(ALARM)), 0o600);
        assert_eq!(dir.check().unwrap(), Some(alarm_of(0)));
    }
}
