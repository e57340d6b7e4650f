//! The job's alarm: `<job dir>/alarm`, one JSON object written by the first rank whose soak
//! trips a failure, for every other rank to see at its next sample.
//!
//! Written whole and exclusively: the alarm is written to a temporary file in the job's
//! directory (`.alarm.*`, 0600, created exclusively under a random name), synced, and then
//! linked to `alarm` with `link(2)`, which fails with `EEXIST` when another rank was first. So a
//! reader finds either no alarm or a whole one (it never looks at the temporary names), and of
//! any number of ranks racing, on one host or on several over NFS, exactly one wins; the others
//! get the winner's alarm back. (Over NFS a retransmitted `link` can answer `EEXIST` for a link
//! it made: the writer then counts the links of its temporary file, as open(2) advises for
//! exclusive creation there.) Every step is taken relative to the job's directory as it was
//! held when checked ([`JobDir`]), no link followed.
//!
//! Looking for it costs one `fstatat` while there is none ([`JobDir::check`]); only once it is
//! there is it opened, read (at most [`MAX_ALARM_BYTES`]) and parsed. What is not a regular
//! file, not the user's own, too large or not an alarm is reported as such, never trusted; an
//! alarm that names another job or a time it cannot have been raised at is doubted
//! ([`crate::job::doubt`]).

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::JobError;
use super::dir::{ALARM, JobDir};
use crate::paths::Distrust;

/// The most an alarm may hold: a reader reads no more.
pub(crate) const MAX_ALARM_BYTES: u64 = 16 * 1024;
/// The most of a reason an alarm keeps: the rest is cut, so that the alarm stays well within
/// [`MAX_ALARM_BYTES`].
pub(crate) const MAX_REASON_BYTES: usize = 4 * 1024;
/// How the temporary files an alarm is written in start: never read as an alarm.
const TEMPORARY: &str = ".alarm.";

/// The alarm as written: which rank of which job tripped, where, why and when (the record's
/// own type: a rank that sees it records it whole).
pub(crate) use crate::event::soak::JobAlarm as Alarm;

impl Alarm {
    /// The alarm of a rank that tripped at `at_us` (Unix microseconds), its reason cut to
    /// [`MAX_REASON_BYTES`].
    pub(crate) fn new(
        job: &super::JobId,
        rank: Option<u32>,
        host: &str,
        soak_id: &str,
        failure_kind: &str,
        reason: &str,
        at_us: i64,
    ) -> Self {
        Self {
            job: job.as_str().to_owned(),
            rank,
            host: host.to_owned(),
            soak_id: soak_id.to_owned(),
            failure_kind: failure_kind.to_owned(),
            reason: cut(reason, MAX_REASON_BYTES),
            at: crate::time::unix_seconds(at_us),
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

/// Who wrote the job's alarm.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Raised {
    /// This rank's alarm is the job's.
    Won,
    /// Another rank was first: its alarm, as it is written.
    Lost(Alarm),
}

impl JobDir {
    /// Writes `alarm` as the job's alarm unless a rank has already written one, and says which
    /// happened.
    pub(crate) fn raise(&self, alarm: &Alarm) -> Result<Raised, JobError> {
        let failed = |source| JobError::WriteAlarm {
            path: self.alarm.clone(),
            source,
        };
        let mut bytes = serde_json::to_vec(alarm).map_err(|e| failed(e.into()))?;
        bytes.push(b'\n');
        if bytes.len() as u64 > MAX_ALARM_BYTES {
            return Err(failed(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!("the alarm is {} bytes, over {MAX_ALARM_BYTES}", bytes.len()),
            )));
        }
        let temporary = Temporary::create(self).map_err(failed)?;
        let mut file = &temporary.file;
        file.write_all(&bytes).map_err(failed)?;
        file.sync_all().map_err(failed)?;
        let dir = &*self.held;
        let won = match rustix::fs::linkat(dir, &temporary.name, dir, ALARM, AtFlags::empty()) {
            Ok(()) => true,
            // Over NFS, the reply to a `link` that was made can be lost and the retried call
            // answer EEXIST: then the temporary file has the alarm as its second name.
            Err(rustix::io::Errno::EXIST) => file.metadata().is_ok_and(|meta| meta.nlink() == 2),
            Err(e) => return Err(failed(e.into())),
        };
        // The alarm holds its bytes under its own name now; a temporary name left behind by a
        // failed removal is never read as an alarm.
        drop(temporary);
        if !won {
            return self.read_existing().map(Raised::Lost);
        }
        // The new name outlives a crash of this host.
        self.held.sync_all().map_err(failed)?;
        Ok(Raised::Won)
    }

    /// The job's alarm if a rank has raised it: one `fstatat` while none has.
    pub(crate) fn check(&self) -> Result<Option<Alarm>, JobError> {
        match rustix::fs::statat(&*self.held, ALARM, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => self.read(&stat).map(Some),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(JobError::ReadAlarm {
                path: self.alarm.clone(),
                source: e.into(),
            }),
        }
    }

    /// The alarm that is there, as `raise` found it.
    fn read_existing(&self) -> Result<Alarm, JobError> {
        let stat =
            rustix::fs::statat(&*self.held, ALARM, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
                JobError::ReadAlarm {
                    path: self.alarm.clone(),
                    source: e.into(),
                }
            })?;
        self.read(&stat)
    }

    /// The alarm whose `fstatat` gave `stat`: a regular file of the user's, read to at most
    /// [`MAX_ALARM_BYTES`].
    fn read(&self, stat: &rustix::fs::Stat) -> Result<Alarm, JobError> {
        let malformed = |why: String| JobError::MalformedAlarm {
            path: self.alarm.clone(),
            why,
        };
        let read_failed = |source| JobError::ReadAlarm {
            path: self.alarm.clone(),
            source,
        };
        // Nothing else is opened: a device or a FIFO is not an alarm.
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(malformed("it is not a regular file".into()));
        }
        // Not followed, and not waited on should it have become a FIFO since the `fstatat`.
        let opened = rustix::fs::openat(
            &*self.held,
            ALARM,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let file = match opened {
            Ok(fd) => File::from(fd),
            Err(rustix::io::Errno::LOOP) => {
                return Err(malformed("it is not a regular file".into()));
            }
            Err(e) => return Err(read_failed(e.into())),
        };
        // What was opened, checked: it may have been replaced since the `fstatat`.
        let meta = file.metadata().map_err(read_failed)?;
        if !meta.file_type().is_file() {
            return Err(malformed("it is not a regular file".into()));
        }
        if meta.uid() != self.uid {
            return Err(JobError::UntrustedAlarm {
                path: self.alarm.clone(),
                reason: Distrust::NotYours {
                    owner: meta.uid(),
                    uid: self.uid,
                },
            });
        }
        let too_large = |len: u64| malformed(format!("it is {len} bytes, over {MAX_ALARM_BYTES}"));
        if meta.len() > MAX_ALARM_BYTES {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::new();
        file.take(MAX_ALARM_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_failed)?;
        if bytes.len() as u64 > MAX_ALARM_BYTES {
            return Err(too_large(bytes.len() as u64));
        }
        serde_json::from_slice(&bytes).map_err(|e| malformed(format!("not its JSON object ({e})")))
    }
}

/// A temporary file of the job's directory (`.alarm.<random>.tmp`, 0600), created exclusively
/// relative to the held directory; its name is removed when it is dropped.
struct Temporary<'a> {
    dir: &'a JobDir,
    name: String,
    file: File,
}

impl<'a> Temporary<'a> {
    fn create(dir: &'a JobDir) -> std::io::Result<Self> {
        // A name no other writer picks; should one have all the same, another is drawn.
        let mut tries = 0;
        loop {
            let name = format!("{TEMPORARY}{}.tmp", random_hex());
            let created: rustix::io::Result<OwnedFd> = rustix::fs::openat(
                &*dir.held,
                name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            );
            match created {
                Ok(fd) => {
                    let temporary = Self {
                        dir,
                        name,
                        file: File::from(fd),
                    };
                    // Exactly 0600, whatever the umask took from the mode.
                    rustix::fs::fchmod(&temporary.file, Mode::from_raw_mode(0o600))?;
                    return Ok(temporary);
                }
                Err(rustix::io::Errno::EXIST) if tries < 8 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for Temporary<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&*self.dir.held, self.name.as_str(), AtFlags::empty());
    }
}

/// Sixteen hex digits no two writers are likely to draw alike: this process, this thread, the
/// time to the nanosecond and a count, hashed.
fn random_hex() -> String {
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(format!("{:?}", std::thread::current().id()).as_bytes());
    hasher.update(&jiff::Timestamp::now().as_nanosecond().to_le_bytes());
    hasher.update(
        &DRAWN
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    hasher.finalize().to_hex()[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::job::JobId;
    use crate::job::dir::ALARM;
    use crate::testing::files::private_tempdir as private_root;

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    fn job_dir(root: &Path) -> JobDir {
        JobDir::ensure(root, uid(), &JobId::parse("4242").unwrap()).unwrap()
    }

    fn alarm_of(rank: u32) -> Alarm {
        Alarm::new(
            &JobId::parse("4242").unwrap(),
            Some(rank),
            &format!("n{}", rank / 4),
            &format!("20261201T100000-{rank:04x}"),
            "stale_progress",
            &format!("rank {rank}: no progress for 2m00s"),
            1_796_479_200_250_000 + i64::from(rank),
        )
    }

    /// The names in the job's directory, in order.
    fn names(dir: &JobDir) -> Vec<String> {
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
                r#"{"job":"4242","rank":5,"host":"n1","soak_id":"20261201T100000-0005","#,
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
        let reported = |dir: &JobDir| dir.check().unwrap_err().to_string();
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
        let other = JobDir {
            uid: uid() + 1,
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
            dir.path().to_owned(),
        ] {
            assert_eq!(mode(&level), 0o700, "{}", level.display());
        }
        assert_eq!(mode(&dir.path().join(ALARM)), 0o600);
        assert_eq!(dir.check().unwrap(), Some(alarm_of(0)));
    }
}
