//! The archive files as readers and `log archive` meet them on disk: something other than a
//! file in an archive's place, an archive this user may not read, an archive whose writing fails
//! part-way, and what `log archive --finished-before` says of soaks archived before.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::log_archive::root_with_v1_archived;
use crate::log_archive::{V1_SOAK, V4_SOAK, archive_of, json_of, root_with_every_kind};
use crate::soak::Soak;
use predicates::prelude::*;
use unilab::{EventLog, PROJECTIONS, Scope, Subject};

/// Every command that reads an archived soak's records ([`V1_SOAK`] archived, [`V4_SOAK`] not).
const READERS: [&[&str]; 6] = [
    &["log", "verify"],
    &["soak", "export", V1_SOAK],
    &["soak", "show", V1_SOAK],
    &["soak", "report", V1_SOAK],
    &["soak", "compare", V1_SOAK, V4_SOAK],
    &["history", "--soak", V1_SOAK],
];

/// How long a reader may take before the test calls it hung: generous, as the machine is loaded.
const HUNG: Duration = Duration::from_secs(60);

/// A named pipe put in place of an archive made every reader block in `open`, forever, waiting
/// for a writer that never came. Each one now ends at once with exit 5, naming the path and
/// saying it is not a regular file.
#[test]
fn a_fifo_in_place_of_an_archive_is_refused_by_every_reader_without_hanging() {
    let root = root_with_v1_archived();
    let file = archive_of(&root, V1_SOAK);
    let aside = file.with_extension("aside");
    std::fs::rename(&file, &aside).unwrap();
    nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for args in READERS {
        refused(
            root.unilab().args(args).timeout(HUNG),
            5,
            &[
                &format!("the archive `{}` is not a regular file", file.display()),
                "a named pipe",
            ],
        );
    }
    std::fs::remove_file(&file).unwrap();
    std::fs::rename(&aside, &file).unwrap();
    root.unilab().args(["log", "verify"]).assert().success();
}

/// A directory in an archive's place is no archive either, and is said to be so rather than
/// "changed, cut short or replaced".
#[test]
fn a_directory_in_place_of_an_archive_is_not_a_regular_file() {
    let root = root_with_v1_archived();
    let file = archive_of(&root, V1_SOAK);
    let aside = file.with_extension("aside");
    std::fs::rename(&file, &aside).unwrap();
    private_dir_all(&file);
    refused(
        root.unilab()
            .args(["soak", "export", V1_SOAK])
            .timeout(HUNG),
        5,
        &["is not a regular file: it is a directory"],
    );
    std::fs::remove_dir(&file).unwrap();
    std::fs::rename(&aside, &file).unwrap();
    root.unilab().args(["log", "verify"]).assert().success();
}

/// Who reads in [`an_archive_this_user_cannot_read_is_a_permission_problem_not_damage`]: this
/// user; or, for a test run as root (whom file modes do not stop), `nobody`, whose state root
/// it is, each command run through `runuser`.
struct Reader {
    root: TestRoot,
    nobody: Option<nix::unistd::User>,
}

impl Reader {
    /// `None` (saying why) where root has no `nobody` to run as.
    fn new() -> Option<Self> {
        let root = TestRoot::new();
        if !is_root() {
            return Some(Self { root, nobody: None });
        }
        let Ok(Some(nobody)) = nix::unistd::User::from_name("nobody") else {
            eprintln!("skipped: root has no user `nobody` to read as");
            return None;
        };
        let runs = std::process::Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(unilab_bin())
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        if !runs {
            eprintln!(
                "skipped: `runuser -u nobody` cannot run `{}` (run scripts/test-unprivileged.sh)",
                unilab_bin().display()
            );
            return None;
        }
        Some(Self {
            root,
            nobody: Some(nobody),
        })
    }

    fn scope(&self) -> Scope {
        match &self.nobody {
            Some(user) => Scope {
                uid: user.uid.as_raw(),
                host: self.root.scope().host,
            },
            None => self.root.scope(),
        }
    }

    fn log_path(&self) -> PathBuf {
        let scope = self.scope();
        self.root
            .root()
            .join(&scope.host)
            .join(scope.uid.to_string())
            .join("events.redb")
    }

    /// `unilab`, as the reader, with the environment [`TestRoot::unilab`] gives.
    fn unilab(&self) -> assert_cmd::Command {
        let Some(_) = &self.nobody else {
            return self.root.unilab();
        };
        let mut cmd = assert_cmd::Command::new("runuser");
        cmd.env_clear()
            .env("PATH", path_with_fixtures())
            .env("HOME", self.root.root())
            .env("LANG", "C.UTF-8")
            .env("TZ", "UTC")
            .args(["-u", "nobody", "--"])
            .arg(unilab_bin())
            .arg("--root")
            .arg(self.root.root());
        cmd
    }

    /// Gives `path`, and everything below it, to the reader.
    fn give(&self, path: &Path) {
        let Some(user) = &self.nobody else {
            return;
        };
        nix::unistd::chown(path, Some(user.uid), Some(user.gid)).unwrap();
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                self.give(&entry.unwrap().path());
            }
        }
    }
}

/// Readable by root alone, or by no one, an intact archive was called damaged ("changed, cut
/// short or replaced", exit 5): the error of its `open` was taken for damage. It is a
/// permission problem, exit 3 with a hint to check the permissions, as for the log itself; and
/// once readable again, the archive verifies.
#[test]
fn an_archive_this_user_cannot_read_is_a_permission_problem_not_damage() {
    let Some(reader) = Reader::new() else {
        return;
    };
    let log_path = reader.log_path();
    private_dir_all(log_path.parent().unwrap());
    let clock = SteppingClock::boxed(1_764_676_800_000_000, 1_000_000);
    let log = EventLog::open_with_clock(&log_path, reader.scope(), PROJECTIONS, clock).unwrap();
    log.append_all(every_event_kind()).unwrap();
    drop(log);
    reader.give(reader.root.root());
    reader
        .unilab()
        .args(["log", "archive", "--soak", V1_SOAK])
        .assert()
        .success();
    let file = log_path.with_file_name(format!("events.soak-{V1_SOAK}.zst"));
    assert!(file.is_file(), "archived to {}", file.display());
    let mode = |mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let refused = |why: &str| {
        for args in READERS {
            let assert = reader.unilab().args(args).timeout(HUNG).assert();
            let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
            assert
                .code(3)
                .stderr(predicate::str::contains(format!(
                    "cannot open the archive `{}`",
                    file.display()
                )))
                .stderr(predicate::str::contains("Permission denied"))
                .stderr(predicate::str::contains("hint: check the permissions"));
            assert!(
                !stderr.contains("changed, cut short or replaced"),
                "{why}: `{}` calls it damaged:\n{stderr}",
                args.join(" ")
            );
        }
    };
    mode(0o000);
    refused("mode 000");
    mode(0o600);
    if reader.nobody.is_some() {
        // Owned by root, as a copy made by root would be.
        nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
        refused("owned by root");
        reader.give(&file);
    } else {
        eprintln!("skipped the root-owned case: giving a file away needs root");
    }
    reader
        .unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("archives: 1 archive checked"));
}

/// The soaks of [`every_event_kind`] that finished, in the order of their first record.
fn finished_soaks() -> Vec<String> {
    let mut first_seen: Vec<String> = Vec::new();
    let mut finished = Vec::new();
    for (subject, event) in every_event_kind() {
        let Subject::Soak(id) = subject else {
            continue;
        };
        if !first_seen.contains(&id) {
            first_seen.push(id.clone());
        }
        if event.kind() == "soak_finished" {
            finished.push(id);
        }
    }
    first_seen.retain(|id| finished.contains(id));
    first_seen
}

/// What is in the log's directory: every name but the log's own.
fn beside_the_log(root: &TestRoot) -> Vec<String> {
    let log = root.log_path();
    let mut names: Vec<String> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "events.redb")
        .collect();
    names.sort();
    names
}

/// An archive run that failed part-way (the last soak's archive could not take its name, after
/// the others had taken theirs) left its `.writing` file until the next run, and the others'
/// archives with no event to claim them. Nothing of it is left now; the log is as it was, and
/// the same run archives everything once the way is clear.
#[test]
fn an_archive_run_that_fails_part_way_leaves_no_files_behind() {
    let root = root_with_every_kind(1_000_000);
    let soaks = finished_soaks();
    assert!(soaks.len() > 1, "{soaks:?}");
    let last = archive_of(&root, soaks.last().unwrap());
    // A directory that is not empty: no rename replaces it.
    private_dir_all(&last.join("in-the-way"));
    let before = beside_the_log(&root);
    let history = root
        .unilab()
        .args(["--json", "history"])
        .output()
        .unwrap()
        .stdout;
    refused(
        root.unilab()
            .args(["log", "archive", "--finished-before", "1d"]),
        3,
        &[&format!("cannot write the archive `{}`", last.display())],
    );
    assert_eq!(
        beside_the_log(&root),
        before,
        "what the failed run wrote is gone"
    );
    root.unilab().args(["log", "verify"]).assert().success();
    let after = root.unilab().args(["--json", "history"]).output().unwrap();
    assert_eq!(after.stdout, history, "the log is as it was");

    std::fs::remove_dir_all(&last).unwrap();
    let done = json_of(&root, &["log", "archive", "--finished-before", "1d"]);
    let mut ids: Vec<&str> = done["archived"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["soak_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want: Vec<&str> = soaks.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(ids, want, "{done}");
    assert!(
        !beside_the_log(&root)
            .iter()
            .any(|n| n.ends_with(".writing")),
        "{:?}",
        beside_the_log(&root)
    );
    root.unilab().args(["log", "verify"]).assert().success();
}

/// A root whose log holds [`every_event_kind`], recorded in December 2025, then a soak run now
/// (its id returned).
fn old_soaks_and_one_now() -> (Soak, String) {
    let soak = Soak::new();
    let root = &soak.root;
    let clock = SteppingClock::boxed(1_764_676_800_000_000, 1_000_000);
    let log =
        EventLog::open_with_clock(&root.log_path(), root.scope(), PROJECTIONS, clock).unwrap();
    log.append_all(every_event_kind()).unwrap();
    drop(log);
    let (output, artifact) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let recent = artifact["soak_id"].as_str().unwrap().to_owned();
    (soak, recent)
}

/// Run again and again (in a loop, by cron), `--finished-before` said "archived already" once
/// for every soak archived on an earlier run: a line each, every run, drowning what was archived
/// just now. It says how many as one line; each soak archived now keeps its own line.
#[test]
fn finished_before_counts_the_soaks_archived_already_in_one_line() {
    let (soak, recent) = old_soaks_and_one_now();
    let root = &soak.root;
    let old = finished_soaks();
    assert!(old.len() > 1, "{old:?}");
    root.unilab()
        .args(["log", "archive", "--finished-before", "1d"])
        .assert()
        .success();
    let again = root
        .unilab()
        .args(["log", "archive", "--finished-before", "1d"])
        .assert()
        .success()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&again.stderr).into_owned();
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [format!(
            "no soak to archive: {} that finished before then were archived already",
            count(old.len(), "soak")
        )],
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&again.stdout), "");

    // The soak of today is archived now, and says so in a line of its own.
    let now = root
        .unilab()
        .args(["log", "archive", "--finished-before", "0s"])
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&now.stdout);
    let archived: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("archived soak "))
        .collect();
    assert_eq!(archived.len(), 1, "{stdout}");
    assert!(
        archived[0].starts_with(&format!("archived soak {recent}: ")),
        "{stdout}"
    );
    assert_eq!(
        String::from_utf8_lossy(&now.stderr)
            .lines()
            .collect::<Vec<_>>(),
        [format!(
            "{} that finished before then were archived already",
            count(old.len(), "soak")
        )]
    );

    // Named by `--soak`, a soak archived already is still named, with its file.
    root.unilab()
        .args(["log", "archive", "--soak", &old[0]])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "soak {} is archived already, in `events.soak-{}.zst`",
            old[0], old[0]
        )));
    root.unilab().args(["log", "verify"]).assert().success();
}

fn count(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `--finished-before 9999-12-31` was refused as "neither a duration nor a date": that day's
/// midnight lies past the last instant the time library represents. Any valid date is taken; one
/// in the future selects every finished soak.
#[test]
fn a_date_far_in_the_future_selects_every_finished_soak() {
    let (soak, recent) = old_soaks_and_one_now();
    let root = &soak.root;
    let done = json_of(root, &["log", "archive", "--finished-before", "9999-12-31"]);
    let mut archived: Vec<&str> = done["archived"]
        .as_array()
        .unwrap_or_else(|| panic!("{done}"))
        .iter()
        .map(|a| a["soak_id"].as_str().unwrap())
        .collect();
    archived.sort();
    let mut all: Vec<String> = finished_soaks();
    all.push(recent);
    all.sort();
    assert_eq!(archived, all, "{done}");
    root.unilab()
        .args([
            "log",
            "archive",
            "--finished-before",
            "9999-12-31T23:59:59Z",
        ])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "no soak to archive: {} that finished before then were archived already",
            count(all.len(), "soak")
        )));
    root.unilab().args(["log", "verify"]).assert().success();
}
