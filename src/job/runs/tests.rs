//! A job's runs, on a real directory: which run a rank joins, what it refuses, what it ignores.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use super::*;
use crate::diagnostic::{Boundary, Exit};
use crate::job::JobId;
use crate::testing::files::private_tempdir;

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

fn job(root: &Path) -> JobDir {
    JobDir::ensure(root, uid(), &JobId::parse("J").unwrap()).unwrap()
}

fn entry(rank: u32) -> RankEntry {
    RankEntry {
        rank,
        host: "n0".into(),
        soak_id: format!("soak-{rank}"),
        pid: 4000 + rank,
        pid_start_ticks: 77,
        started_at: 1_800_000_000.0 + f64::from(rank),
        ended_at: None,
    }
}

/// No rank's supervisor is known to be gone.
fn alive(_: &RankEntry) -> bool {
    false
}

fn counted() -> RunChoice {
    RunChoice::Counted
}

fn named(id: &str) -> RunChoice {
    RunChoice::Named(RunId::parse(id).unwrap())
}

fn joined(dir: &JobDir, choice: &RunChoice, rank: u32) -> RunDir {
    dir.join_run(choice, &entry(rank), &alive).unwrap().run
}

/// A `--job NAME` used again after its run ended merged both runs' ranks and verdicts. The
/// ranks arriving together share one run; once a rank of it has ended (or its alarm is
/// raised), the next arrival opens the next run, and the ranks after it join that one.
#[test]
fn a_counted_job_opens_its_next_run_once_the_last_is_over() {
    let root = private_tempdir();
    let dir = job(root.path());
    let first = joined(&dir, &counted(), 0);
    assert_eq!(first.id.as_str(), "1");
    assert_eq!(joined(&dir, &counted(), 1).id.as_str(), "1");
    let (ranks, warnings) = first.ranks();
    assert_eq!(ranks, [entry(0), entry(1)]);
    assert!(warnings.is_empty(), "{warnings:?}");

    first.end(&entry(1), 1_800_000_100.0).unwrap();
    let (ranks, _) = first.ranks();
    assert_eq!(ranks[1].ended_at, Some(1_800_000_100.0));
    let second = joined(&dir, &counted(), 0);
    assert_eq!(
        second.id.as_str(),
        "2",
        "the rank already finished is the sign"
    );
    assert_eq!(joined(&dir, &counted(), 1).id.as_str(), "2");
    assert_eq!(
        first.ranks().0.len(),
        2,
        "the first run keeps its own ranks"
    );

    let alarm = alarm::Alarm::new(
        &JobId::parse("J").unwrap(),
        Some(&second.id),
        Some(0),
        "n0",
        "soak-0",
        "stale_progress",
        "stalled",
        1_800_000_200_000_000,
    );
    second.raise(&alarm).unwrap();
    let third = joined(&dir, &counted(), 0);
    assert_eq!(third.id.as_str(), "3", "a run with an alarm is over");
    let (latest, _) = dir.latest_run().unwrap();
    assert_eq!(latest.unwrap().id.as_str(), "3");
}

/// A launcher's run (Slurm's step, torchrun's run) is joined as named; once it is over a rank
/// arriving under the same id — torchrun started again with one `--rdzv-id` — opens the next
/// of it, `<id>.2`.
#[test]
fn a_named_run_that_is_over_is_followed_by_the_next_of_its_id() {
    let root = private_tempdir();
    let dir = job(root.path());
    let step = joined(&dir, &named("s0.r0"), 0);
    assert_eq!(step.id.as_str(), "s0.r0");
    assert_eq!(joined(&dir, &named("s1.r0"), 0).id.as_str(), "s1.r0");
    assert_eq!(joined(&dir, &named("s0.r0"), 1).id.as_str(), "s0.r0");
    step.end(&entry(0), 1_800_000_100.0).unwrap();
    assert_eq!(joined(&dir, &named("s0.r0"), 0).id.as_str(), "s0.r0.2");
    assert_eq!(joined(&dir, &named("s0.r0"), 1).id.as_str(), "s0.r0.2");
}

/// Two soaks claiming the same rank of a run were both taken. The second is refused (exit 3),
/// naming the soak that holds the rank, and the first's entry is left as it was.
#[test]
fn a_rank_taken_in_the_run_is_refused() {
    let root = private_tempdir();
    let dir = job(root.path());
    let run = joined(&dir, &counted(), 3);
    let mut again = entry(3);
    again.soak_id = "soak-again".into();
    let err = dir.join_run(&counted(), &again, &alive).unwrap_err();
    assert!(
        matches!(&err, JobError::DuplicateRank { rank: 3, run, .. } if run == "1"),
        "{err:?}"
    );
    assert_eq!(err.exit(), Exit::Refused);
    assert_eq!(
        err.to_string(),
        "rank 3 of run `1` is taken already, by soak soak-3 on n0"
    );
    assert_eq!(run.ranks().0, [entry(3)]);
}

/// A rank on this host whose supervisor is gone (killed, so it never wrote `ended_at`) has
/// ended: its run is over, and the same rank started again opens the next run rather than
/// being refused for ever.
#[test]
fn a_rank_whose_supervisor_is_gone_has_ended_its_run() {
    let root = private_tempdir();
    let dir = job(root.path());
    joined(&dir, &counted(), 0);
    let gone = |other: &RankEntry| other.pid == entry(0).pid;
    let next = dir.join_run(&counted(), &entry(0), &gone).unwrap().run;
    assert_eq!(next.id.as_str(), "2");
}

/// What is in `ranks/` or `captured/` but is not a rank's — a name that is no rank, a file
/// that is not an entry, one too large, one that names another rank, a link, a FIFO — is
/// named in a warning and ignored: it neither ends the run nor counts as a rank.
#[test]
fn malformed_or_foreign_entries_are_named_and_ignored() {
    let root = private_tempdir();
    let dir = job(root.path());
    let run = joined(&dir, &counted(), 0);
    let ranks = root
        .path()
        .join("jobs")
        .join(uid().to_string())
        .join("J/runs/1/ranks");
    let mut ended = entry(1);
    ended.ended_at = Some(1.0);
    let other_rank = serde_json::to_vec(&ended).unwrap();
    std::fs::write(ranks.join("2"), &other_rank).unwrap();
    std::fs::write(ranks.join("007"), b"{}").unwrap();
    std::fs::write(ranks.join("five"), b"{}").unwrap();
    std::fs::write(ranks.join("3"), b"{\"rank\":3").unwrap();
    std::fs::write(ranks.join("4"), vec![b' '; 5000]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ranks.join("5")).unwrap();
    nix::unistd::mkfifo(&ranks.join("6"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(ranks.join(".1.x.tmp"), b"half").unwrap();
    let (found, warnings) = run.ranks();
    assert_eq!(found, [entry(0)]);
    let said = warnings.join("\n");
    for name in ["`2`", "`007`", "`five`", "`3`", "`4`", "`5`", "`6`"] {
        assert!(said.contains(name), "{name} in:\n{said}");
    }
    assert!(!said.contains(".1.x.tmp"), "{said}");
    assert!(said.contains("not a regular file"), "{said}");
    assert!(said.contains("5000 bytes, over 4096"), "{said}");
    assert_eq!(warnings.len(), 7, "{said}");
    // The entry that names rank 1 with `ended_at` does not end the run.
    let again = dir.join_run(&counted(), &entry(1), &alive).unwrap();
    assert_eq!(again.run.id.as_str(), "1");
    assert_eq!(again.warnings.len(), 7, "said to the rank that joins");
    let captured = ranks.with_file_name("captured");
    // As unilab makes it, whatever the umask: a group-writable one is refused (as it says).
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&captured)
        .unwrap();
    std::fs::write(captured.join("x"), b"{}").unwrap();
    let (marks, warnings) = run.captures();
    assert!(marks.is_empty());
    assert!(warnings[0].contains("`x`"), "{warnings:?}");
}

/// A capture made after the run's first teardown says how late it came; one before, 0; a
/// rank's first mark stays.
#[test]
fn a_capture_after_the_first_teardown_says_how_late_it_came() {
    let root = private_tempdir();
    let dir = job(root.path());
    let run = joined(&dir, &counted(), 0);
    let early = run.mark_captured(0, true, 100.0).unwrap().unwrap();
    assert_eq!(early.late_by, 0.0);
    run.mark_torn(0, 101.0).unwrap();
    run.mark_torn(0, 150.0).unwrap();
    assert_eq!(run.first_torn(), Some(101.0), "the first teardown stays");
    let late = run.mark_captured(1, true, 103.5).unwrap().unwrap();
    assert_eq!(late.late_by, 2.5);
    let ignored = run.mark_captured(2, false, 100.5).unwrap().unwrap();
    assert_eq!((ignored.captured, ignored.late_by), (false, 0.0));
    assert_eq!(run.mark_captured(0, true, 200.0).unwrap(), None);
    let (marks, warnings) = run.captures();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(marks.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(marks[&0], early);
    let text = std::fs::read_to_string(run.path().join(CAPTURED).join("1")).unwrap();
    assert_eq!(
        text,
        "{\"rank\":1,\"captured\":true,\"at\":103.5,\"late_by\":2.5}\n"
    );
}

/// Ranks racing to open a counted job's first run, as processes do at a job's start: all of
/// them end up in one run.
#[test]
fn ranks_arriving_at_once_share_one_run() {
    let root = private_tempdir();
    let dir = std::sync::Arc::new(job(root.path()));
    let start = std::sync::Arc::new(std::sync::Barrier::new(8));
    let ranks: Vec<_> = (0..8)
        .map(|rank| {
            let (dir, start) = (dir.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                joined(&dir, &counted(), rank).id
            })
        })
        .collect();
    let ids: Vec<RunId> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(ids.iter().all(|id| id.as_str() == "1"), "{ids:?}");
    let (runs, _) = dir.existing_runs().unwrap();
    assert_eq!(runs.len(), 1);
}

/// The run's directories are 0700 and its files 0600, as the job's are.
#[test]
fn a_runs_directories_and_files_are_the_users_alone() {
    let root = private_tempdir();
    let dir = job(root.path());
    let run = joined(&dir, &counted(), 0);
    run.mark_captured(0, true, 1.0).unwrap();
    run.mark_torn(0, 2.0).unwrap();
    let mode = |path: &Path| std::fs::symlink_metadata(path).unwrap().mode() & 0o7777;
    let at = run.path();
    for level in [
        at.parent().unwrap(),
        at,
        &at.join(RANKS),
        &at.join(CAPTURED),
        &at.join(TORN),
    ] {
        assert_eq!(mode(level), 0o700, "{}", level.display());
    }
    for file in [RANKS, CAPTURED, TORN] {
        assert_eq!(mode(&at.join(file).join("0")), 0o600, "{file}");
    }
}
