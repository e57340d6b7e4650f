//! Whose log is where: under host and uid with private permissions, the state root's precedence,
//! and the logs of another user or host, or that others could have written, read but never written.

use crate::common::*;
use predicates::prelude::*;
use unilab::PROJECTIONS;
use unilab::testing::Error;
use unilab::testing::Exit;
use unilab::{EventLog, LogError};
use unilab::{Scope, Subject};

use super::*;

#[test]
fn a_log_of_another_user_or_host_is_refused_for_writing_and_flagged_for_reading() {
    let root = TestRoot::new();
    let foreign = Scope {
        uid: root.scope().uid + 1,
        host: "another-host".into(),
    };
    EventLog::open(&root.log_path(), foreign.clone(), PROJECTIONS)
        .unwrap()
        .append(Subject::Host, live(1))
        .unwrap();

    let err = EventLog::open(&root.log_path(), root.scope(), PROJECTIONS)
        .err()
        .expect("refused");
    assert!(matches!(&err, LogError::ForeignScope { found, .. } if *found == foreign));
    let err = Error::from(err);
    assert_eq!(err.exit(), Exit::Refused);
    let rendered = err.render(unilab::testing::Palette::PLAIN);
    assert!(rendered.contains("belongs to uid"), "{rendered}");
    assert!(rendered.contains("another-host"), "{rendered}");
    assert!(rendered.contains("hint: "), "{rendered}");

    // Reading is forensics: allowed, with a warning.
    root.unilab()
        .arg("history")
        .assert()
        .success()
        .stdout(predicate::str::contains("daemon_verified_live"))
        .stderr(predicate::str::contains(
            "warning: this log was recorded for uid",
        ));
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stderr(predicate::str::contains("another-host"));
}

#[test]
fn the_log_lives_under_host_and_uid_with_private_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let root = TestRoot::new();
    drop(root.log());
    let paths = root.paths();
    assert_eq!(
        root.log_path(),
        root.root()
            .join(&paths.host)
            .join(paths.uid.to_string())
            .join("events.redb")
    );
    let dir_mode = std::fs::metadata(paths.user_dir())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    let file_mode = std::fs::metadata(root.log_path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert_eq!(file_mode, 0o600);
}

#[test]
fn the_state_root_follows_the_documented_precedence() {
    let root = TestRoot::new();
    let env_root = root.root().join("from-env");
    let xdg = root.root().join("xdg");
    let verbose_path = |cmd: &mut assert_cmd::Command| -> String {
        let out = cmd
            .args(["-v", "log", "verify"])
            .assert()
            .success()
            .get_output()
            .stderr
            .clone();
        String::from_utf8(out).unwrap()
    };
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear()
        .env("HOME", root.root())
        .env("UNILAB_ROOT", &env_root)
        .env("XDG_STATE_HOME", &xdg);
    assert!(verbose_path(&mut cmd).contains(&env_root.display().to_string()));
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear()
        .env("HOME", root.root())
        .env("XDG_STATE_HOME", &xdg);
    assert!(verbose_path(&mut cmd).contains(&xdg.join("unilab").display().to_string()));
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear().env("HOME", root.root());
    assert!(
        verbose_path(&mut cmd).contains(
            &root
                .root()
                .join(".local/state/unilab")
                .display()
                .to_string()
        )
    );
    refused(
        assert_cmd::Command::new(unilab_bin())
            .env_clear()
            .args(["log", "verify"]),
        3,
        &["`HOME` is not set", "hint: pass `--root DIR`"],
    );
}

/// A log that cannot be reached — a state root that is a file, a read-only log, a directory
/// that cannot be read — is a refusal (exit 3) that says so, not "damage" with advice to move
/// intact history aside (exit 5).
#[test]
fn permission_problems_are_refusals_not_damage() {
    let root = root_with_every_kind();
    let file = root.root().join("a-file");
    std::fs::write(&file, "").unwrap();
    let not_damage = |cmd: &mut assert_cmd::Command| {
        cmd.assert()
            .code(3)
            .stderr(predicate::str::contains("move the file aside").not());
    };
    for args in [
        &["soak", "list"][..],
        &["history"],
        &["log", "verify"],
        &["mps", "list"],
        &["mps", "stop", "--all"],
    ] {
        let mut cmd = assert_cmd::Command::new(unilab_bin());
        cmd.env_clear()
            .env("HOME", root.root())
            .arg("--root")
            .arg(&file);
        not_damage(cmd.args(args));
    }
    if is_root() {
        eprintln!("skipped the permission cases: root reads and writes through file modes");
        return;
    }
    let log = root.log_path();
    let dir = log.parent().unwrap().to_owned();
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    mode(&log, 0o400);
    let refused = root
        .unilab()
        .args(["mps", "stop", "--all"])
        .assert()
        .code(3);
    refused.stderr(predicate::str::contains("Permission denied"));
    root.unilab().args(["soak", "list"]).assert().success();
    mode(&log, 0o600);
    mode(&dir, 0o000);
    not_damage(root.unilab().args(["soak", "list"]));
    not_damage(root.unilab().args(["mps", "stop", "--all"]));
    mode(&dir, 0o700);
    root.unilab().args(["log", "verify"]).assert().success();
}

/// A state root others could write to, a directory on the way owned by someone else, or a log
/// others could write: another user could plant a forged log that makes `mps stop` signal a
/// process of the victim's. Refused (exit 3) for reading and writing.
#[test]
fn a_log_others_could_have_written_is_refused() {
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    let untrusted = |root: &TestRoot, args: &[&str], at: &std::path::Path| {
        refused(
            root.unilab().args(args),
            3,
            &[&format!(
                "refusing the event log: `{}` is not safe",
                at.display()
            )],
        );
    };
    // A shared state root that is not sticky.
    let root = root_with_every_kind();
    root.damaged_on_purpose();
    let host_dir = root
        .log_path()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    set_mode(&host_dir, 0o777);
    for args in [
        &["soak", "list"][..],
        &["mps", "stop", "--all"],
        &["log", "verify"],
    ] {
        untrusted(&root, args, &host_dir);
    }
    // Sticky, as /tmp is: others cannot replace what is below it.
    set_mode(&host_dir, 0o1777);
    root.unilab().args(["log", "verify"]).assert().success();
    set_mode(&host_dir, 0o700);
    // A log file others can write to.
    set_mode(&root.log_path(), 0o666);
    untrusted(&root, &["soak", "list"], &root.log_path());
    set_mode(&root.log_path(), 0o600);
    if !is_root() {
        eprintln!("skipped the foreign-owner cases: giving a file away needs root");
        return;
    }
    // A directory on the way, and a symbolic link in the log's place, owned by another user.
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    nix::unistd::chown(&host_dir, nobody, None).unwrap();
    untrusted(&root, &["mps", "stop", "--all"], &host_dir);
    nix::unistd::chown(&host_dir, Some(nix::unistd::getuid()), None).unwrap();
    let real = root.log_path().with_file_name("real.redb");
    std::fs::rename(root.log_path(), &real).unwrap();
    std::os::unix::fs::symlink(&real, root.log_path()).unwrap();
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        &root.log_path(),
        nobody,
        None,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    untrusted(&root, &["soak", "list"], &root.log_path());
}

/// Reading another uid's copied log wrote to it: on a copy left unclean (taken while its writer
/// had it open), `log verify`, `history` and `mps list` repaired the file in place — its hash
/// changed each time — and `soak list`/`show` refused it (exit 3) to record an abandoned soak.
/// A log that is not the caller's own is strictly read-only now: an unclean one is read from a
/// repaired copy, and every command says whose it is.
#[test]
fn a_copied_log_of_another_user_is_read_and_never_written() {
    let root = TestRoot::new();
    let elsewhere = private_tempdir("unilab-elsewhere-");
    let theirs = elsewhere.path().join("events.redb");
    let writer = EventLog::open(
        &theirs,
        Scope {
            uid: 4242,
            host: "their-node".into(),
        },
        PROJECTIONS,
    )
    .unwrap();
    writer.append_all(every_event_kind()).unwrap();
    private_dir_all(root.log_path().parent().unwrap());
    // Copied while its writer has it open: what a writer killed there leaves.
    std::fs::copy(&theirs, root.log_path()).unwrap();
    drop(writer);
    let before = std::fs::read(root.log_path()).unwrap();
    let mut raw = redb::Builder::new();
    raw.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    assert!(
        matches!(
            raw.open_read_only(root.log_path()),
            Err(redb::DatabaseError::RepairAborted)
        ),
        "the copy is unclean"
    );
    for args in [
        &["log", "verify"][..],
        &["history"],
        &["mps", "list"],
        &["soak", "list"],
        &["soak", "show", "latest"],
        &["soak", "list", "--job", "77"],
    ] {
        let out = root.unilab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr)
                .matches("uid 4242 on host `their-node`")
                .count(),
            1,
            "{args:?} says once whose log it is: {out:?}"
        );
        assert!(
            std::fs::read(root.log_path()).unwrap() == before,
            "{args:?} wrote to the copied log"
        );
    }
    let out = root.unilab().args(["history"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("soak_started"),
        "its records are shown: {out:?}"
    );
}
