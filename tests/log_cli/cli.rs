//! The command line itself: hostile inputs refused without a panic, failures under `--json`,
//! usage errors that point at the help, completions (static and dynamic), man pages, help text,
//! colour, and singular counts.

use crate::common::*;
use predicates::prelude::*;
use unilab::{StoredEvent, Subject};

use super::*;

/// Durations too long to compute deadlines with are refused when read (usage error), before
/// anything is done; what a user typed is escaped when unilab repeats it.
#[test]
fn hostile_inputs_are_refused_without_a_panic_or_a_raw_control_byte() {
    let root = root_with_every_kind();
    for (env, args) in [
        (
            None,
            &["mps", "stop", "--all", "--grace", "10000000000000000000"][..],
        ),
        (
            None,
            &[
                "soak",
                "run",
                "--progress-dir",
                "/tmp",
                "--output",
                "/tmp/x.json",
                "--sample-interval",
                "8785h",
                "--",
                "true",
            ],
        ),
        (Some("1e19"), &["mps", "status"]),
        (Some("0"), &["history"]),
    ] {
        let mut cmd = root.unilab();
        if let Some(timeout) = env {
            cmd.env("UNILAB_TOOL_TIMEOUT", timeout);
        }
        cmd.args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "is not a duration of at most 366 days",
            ))
            .stderr(predicate::str::contains("panicked").not());
    }
    // Nothing was stopped or recorded by the refused stop.
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 30 events"));

    for args in [
        &["soak", "show", "\x1b]0;pwn\x07"][..],
        &["mps", "start", "--name", "\x1b]0;pwn\x07"],
        &["mps", "stop", "\x1b[2J"],
    ] {
        let out = root
            .unilab()
            .args(args)
            .assert()
            .failure()
            .get_output()
            .clone();
        assert!(
            !out.stderr.iter().any(|b| *b == 0x1b || *b == 0x07),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    refused(
        root.unilab().args(["soak", "show", "\x1b]0;pwn\x07"]),
        3,
        &["no soak `\\u{1b}]0;pwn\\u{7}` is recorded"],
    );
}

/// Under `--json` a failure is one JSON object on standard error — message, causes, hint and
/// exit code — and standard output stays empty: a script never parses prose.
#[test]
fn failures_under_json_are_one_json_object() {
    let root = root_with_every_kind();
    for (args, code, says) in [
        (
            &["--json", "soak", "show", "nope"][..],
            3,
            "no soak `nope` is recorded",
        ),
        (&["--json", "soak", "bogus"], 2, "unrecognized subcommand"),
        (
            &["--json", "mps", "stop", "--grace", "forever"],
            2,
            "invalid value",
        ),
    ] {
        let out = root
            .unilab()
            .args(args)
            .assert()
            .code(code)
            .get_output()
            .clone();
        assert!(out.stdout.is_empty(), "{args:?}");
        let error: serde_json::Value = serde_json::from_slice(&out.stderr)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(error["exit_code"], code, "{args:?}");
        assert!(
            error["error"].as_str().unwrap().contains(says),
            "{args:?}: {error}"
        );
        assert!(error["hint"].is_string(), "{args:?}: {error}");
        assert!(error["causes"].is_array());
    }
}

/// Usage errors left people guessing: a command given without `--` before it got clap's bare
/// "unexpected argument", under `--json` a missing argument's error stopped at "the following
/// required arguments were not provided:" without naming it, and the hint was always the top
/// level's `--help`. Now the line says where the command goes and which help to read (exit 2).
#[test]
fn usage_errors_say_where_the_command_goes_and_which_help_to_read() {
    let root = TestRoot::new();
    let human = |args: &[&str]| -> String {
        let out = root.unilab().args(args).assert().code(2);
        String::from_utf8(out.get_output().stderr.clone()).unwrap()
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let out = root.unilab().arg("--json").args(args).assert().code(2);
        assert!(out.get_output().stdout.is_empty());
        serde_json::from_slice(&out.get_output().stderr).unwrap()
    };
    let separator = "put `--` before the command to run";

    let text = human(&[
        "soak",
        "run",
        "--progress-dir",
        "p",
        "--output",
        "o",
        "python3",
        "train.py",
    ]);
    assert!(text.contains("unexpected argument 'python3'"), "{text}");
    assert!(
        text.contains(&format!(
            "{separator}: `unilab soak run [OPTIONS] -- CMD [ARGS]...`"
        )),
        "{text}"
    );
    assert!(
        text.contains("For more information, try 'unilab soak run --help'."),
        "{text}"
    );
    let text = human(&["mps", "exec", "python3", "train.py"]);
    assert!(text.contains(separator), "{text}");
    assert!(text.contains("'unilab mps exec --help'"), "{text}");

    // Under --json: the missing argument named, the tip and the subcommand's help in the hint.
    let error = json(&["soak", "run", "--progress-dir", "p", "--output", "o"]);
    assert_eq!(
        error["error"],
        "the following required arguments were not provided: <CMD>..."
    );
    let hint = error["hint"].as_str().unwrap();
    assert!(hint.contains(separator), "{hint}");
    assert!(hint.ends_with("see `unilab soak run --help`"), "{hint}");
    let error = json(&["--root", "soak", "soak", "show"]);
    assert_eq!(
        error["error"],
        "the following required arguments were not provided: <ID>"
    );
    assert_eq!(error["hint"], "see `unilab soak show --help`");

    // No `--` tip where it would mislead: a mistyped flag, a subcommand that runs no command.
    let text = human(&[
        "soak",
        "run",
        "--progress-dir",
        "p",
        "--output",
        "o",
        "--bogus",
        "--",
        "true",
    ]);
    assert!(!text.contains(separator), "{text}");
    let error = json(&["soak", "list", "--stauts", "failed"]);
    let hint = error["hint"].as_str().unwrap();
    assert!(!hint.contains(separator), "{hint}");
    assert!(
        hint.contains("'--status'"),
        "clap's suggestion is kept: {hint}"
    );
    assert!(hint.ends_with("see `unilab soak list --help`"), "{hint}");
}

/// Completions for every shell and the man page come from the command-line definitions: each
/// is non-empty and names every subcommand; the man page leaves out the hidden guard.
#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    let root = TestRoot::new();
    let top = [
        "mps",
        "soak",
        "snapshot",
        "history",
        "log",
        "completions",
        "man",
    ];
    let nested = [
        "start", "stop", "plan", "doctor", "exec", "run", "show", "export", "verify",
    ];
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = root
            .unilab()
            .args(["completions", shell])
            .assert()
            .success();
        let script = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for name in top.iter().chain(&nested) {
            assert!(script.contains(name), "{shell} completes no `{name}`");
        }
    }
    let out = root.unilab().arg("man").assert().success();
    let page = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(page.contains(".TH unilab 1"), "{page}");
    for name in top {
        assert!(page.contains(name), "the man page names no `{name}`");
    }
    assert!(!page.contains("soak-guard"));
    root.unilab().args(["completions", "tcsh"]).assert().code(2);
}

/// What the binary offers when the shell asks it to complete `words` (the line typed so far, the
/// word being completed last), as the script of `COMPLETE=bash unilab` asks: its exit code,
/// candidates one a line, and its standard error.
fn shell_asks(
    root: &TestRoot,
    words: &[&str],
    env: &[(&str, &std::path::Path)],
) -> (i32, Vec<String>, String) {
    let mut cmd = assert_cmd::Command::new(unilab_bin());
    cmd.env_clear()
        .env("PATH", path_with_fixtures())
        .env("HOME", root.root())
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_COMPLETE_COMP_TYPE", "9")
        .env("_CLAP_COMPLETE_SPACE", "true")
        .env("_CLAP_IFS", "\n")
        .envs(env.iter().copied())
        .arg("--")
        .args(words);
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Completions offered subcommands and flags only: the soak ids and daemon names a command takes
/// had to be looked up and pasted. The binary now answers the shell's dynamic completion with
/// what the log records, read without writing it, and offers nothing — silently — when the log
/// cannot be read. The static scripts of `unilab completions SHELL` stay as they were.
#[test]
fn dynamic_completion_offers_recorded_soak_ids_and_daemon_names() {
    let root = root_with_every_kind();
    let (_, started) = every_event_kind()
        .into_iter()
        .find(|(_, event)| matches!(event, StoredEvent::DaemonStarted { .. }))
        .unwrap();
    let StoredEvent::DaemonStarted {
        mut record,
        foreground,
        job,
        limits,
    } = started
    else {
        unreachable!()
    };
    record.name = "trainer".into();
    root.log()
        .append_all([(
            Subject::Daemon("trainer".into()),
            StoredEvent::DaemonStarted {
                record,
                foreground,
                job,
                limits,
            },
        )])
        .unwrap();
    let log_before = std::fs::read(root.log_path()).unwrap();
    let root_dir = root.root().to_str().unwrap();

    let (code, offered, stderr) = shell_asks(
        &root,
        &["unilab", "--root", root_dir, "soak", "show", ""],
        &[],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    for id in ["20261202T124210-3f9a", "20261205T100000-f6f6", "latest"] {
        assert!(offered.iter().any(|o| o == id), "{id} not in {offered:?}");
    }
    // By the random part too, as `soak show` takes it.
    let (_, offered, _) = shell_asks(
        &root,
        &["unilab", "--root", root_dir, "soak", "export", "3f"],
        &[],
    );
    assert_eq!(offered, ["20261202T124210-3f9a"]);
    // The state root from the environment, as for any command.
    let (_, offered, _) = shell_asks(
        &root,
        &["unilab", "mps", "stop", ""],
        &[("UNILAB_ROOT", root.root())],
    );
    // The daemon recorded as running, not the one recorded as stopped (beside the flags).
    assert!(offered.iter().any(|o| o == "trainer"), "{offered:?}");
    assert!(!offered.iter().any(|o| o == "gpu-0f8e0c2a"), "{offered:?}");
    let (_, offered, _) = shell_asks(
        &root,
        &["unilab", "--root", root_dir, "history", "--daemon", "tr"],
        &[],
    );
    assert_eq!(offered, ["trainer"]);
    // Subcommands are still completed.
    let (_, offered, _) = shell_asks(&root, &["unilab", "soak", "sh"], &[]);
    assert_eq!(offered, ["show"]);
    assert_eq!(
        std::fs::read(root.log_path()).unwrap(),
        log_before,
        "the log is only read"
    );

    // A log that cannot be read: nothing recorded is offered, and nothing is said.
    let broken = TestRoot::new();
    broken.damaged_on_purpose();
    std::fs::create_dir_all(broken.log_path().parent().unwrap()).unwrap();
    write_private(&broken.log_path(), b"not a log at all");
    let broken_dir = broken.root().to_str().unwrap();
    let (code, offered, stderr) = shell_asks(
        &broken,
        &["unilab", "--root", broken_dir, "soak", "show", ""],
        &[],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(offered.iter().any(|o| o == "latest"), "{offered:?}");
    assert!(
        offered.iter().all(|o| o == "latest" || o.starts_with("--")),
        "{offered:?}"
    );

    // The script a shell sources to turn it on.
    let out = assert_cmd::Command::new(unilab_bin())
        .env("COMPLETE", "bash")
        .assert()
        .success();
    let script = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(script.contains("complete -o nospace"), "{script}");
    assert!(script.contains("COMPLETE=\"bash\""), "{script}");
}

/// The subcommands `unilab ARGS --help` lists, without `help`.
fn listed_subcommands(root: &TestRoot, args: &[&str]) -> Vec<String> {
    let out = root.unilab().args(args).arg("--help").assert().success();
    let help = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        // A command's line starts two spaces in; its wrapped description, further.
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The pages a roff page refers to, `unilab-soak(1)` → `unilab-soak`.
fn page_references(roff: &str) -> Vec<String> {
    let text = roff
        .replace("\\-", "-")
        .replace("\\fB", "")
        .replace("\\fR", "");
    text.match_indices("(1)")
        .map(|(at, _)| {
            let before = &text[..at];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(0, |i| i + 1);
            before[start..].to_owned()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// `unilab man` documented the top level only, whose SUBCOMMANDS section names `unilab-soak(1)`,
/// `unilab-help(1)` and others that existed nowhere. `man --dir` writes a page for every command
/// `--help` lists, at every depth, and every page named in any page is one of them.
#[test]
fn man_writes_a_page_for_every_subcommand_and_names_only_those() {
    let root = TestRoot::new();
    let dir = root.root().join("share/man/man1");
    let out = root
        .unilab()
        .args(["man", "--dir"])
        .arg(&dir)
        .assert()
        .success();
    let printed = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    let mut listed: Vec<String> = printed
        .lines()
        .map(|line| line.rsplit('/').next().unwrap().to_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, pages, "stdout names the pages written");

    // One page for each command `--help` lists, the groups' subcommands too.
    let mut expected = vec!["unilab.1".to_owned()];
    for top in listed_subcommands(&root, &[]) {
        expected.push(format!("unilab-{top}.1"));
        for nested in listed_subcommands(&root, &[&top]) {
            expected.push(format!("unilab-{top}-{nested}.1"));
        }
    }
    expected.sort();
    assert_eq!(pages, expected);
    for nested in [
        "unilab-soak-run.1",
        "unilab-mps-start.1",
        "unilab-log-verify.1",
    ] {
        assert!(pages.iter().any(|page| page == nested), "no {nested}");
    }

    let mut referenced = std::collections::BTreeSet::new();
    for page in &pages {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap();
        let name = page.trim_end_matches(".1");
        assert!(roff.contains(&format!(".TH {name} 1")), "{page}: {roff}");
        for reference in page_references(&roff) {
            assert!(
                pages.contains(&format!("{reference}.1")),
                "{page} names `{reference}(1)`, which is not written"
            );
            if reference != name {
                referenced.insert(reference);
            }
        }
        if page != "unilab.1" {
            assert!(roff.contains(".SH \"SEE ALSO\""), "{page}: {roff}");
        }
    }
    // Each page is named by another: a subcommand's by its parent, the top one by SEE ALSO.
    assert_eq!(referenced.len(), pages.len(), "{referenced:?}");

    // Without `--dir`, the top-level page on standard output, as written.
    let out = root.unilab().arg("man").assert().success();
    assert_eq!(
        out.get_output().stdout,
        std::fs::read(dir.join("unilab.1")).unwrap()
    );
    // A directory that cannot be made is refused with its path.
    let file = root.root().join("a-file");
    std::fs::write(&file, "").unwrap();
    refused(
        root.unilab().args(["man", "--dir"]).arg(&file),
        3,
        &[&file.display().to_string()],
    );
}

/// The ANSI colour sequences in `text`.
fn colour_codes(text: &str) -> usize {
    text.matches("\x1b[").count()
}

/// Colour is used where it is asked for and a terminal takes it, and nowhere else: statuses in
/// tables (whose columns stay aligned), unilab's errors and clap's, in one palette.
#[test]
fn colour_follows_the_flag_the_terminal_and_no_color() {
    let root = root_with_every_kind();
    let list = |args: &[&str]| {
        let out = root
            .unilab()
            .args(args)
            .args(["soak", "list"])
            .assert()
            .success();
        String::from_utf8(out.get_output().stdout.clone()).unwrap()
    };
    let plain = list(&[]);
    assert_eq!(colour_codes(&plain), 0, "a pipe gets no colour: {plain}");
    assert_eq!(colour_codes(&list(&["--color", "never"])), 0);
    let coloured = list(&["--color=always"]);
    assert!(
        coloured.contains("\x1b[1m\x1b[31mfailed (stale_progress)\x1b[0m"),
        "{coloured:?}"
    );
    // Without its colour codes, the coloured table is the plain one: the codes take no columns.
    let stripped = coloured
        .replace("\x1b[1m\x1b[31m", "")
        .replace("\x1b[0m", "");
    assert_eq!(stripped, plain);

    // On a terminal: colour unless `never`, `NO_COLOR` or a dumb terminal; `always` wins.
    let on_terminal = |env: &[(&str, &str)], args: &[&str]| {
        let args = args.iter().copied().chain(["soak", "list"]);
        let (code, screen) = on_a_terminal(&root, env, args);
        assert_eq!(code, Some(0), "{screen}");
        colour_codes(&screen)
    };
    assert!(on_terminal(&[], &[]) > 0);
    assert_eq!(on_terminal(&[], &["--color", "never"]), 0);
    assert_eq!(on_terminal(&[("NO_COLOR", "1")], &[]), 0);
    assert_eq!(on_terminal(&[("TERM", "dumb")], &[]), 0);
    assert!(on_terminal(&[("NO_COLOR", "1")], &["--color", "always"]) > 0);

    // Errors: unilab's and clap's `error:` in the same red; none under `never`.
    for args in [&["soak", "show", "nope"][..], &["soak", "lst"]] {
        let failed = |colour: &str| {
            let out = root.unilab().arg(colour).args(args).assert().failure();
            String::from_utf8(out.get_output().stderr.clone()).unwrap()
        };
        let red = failed("--color=always");
        assert!(
            red.starts_with("\x1b[1m\x1b[31merror:\x1b[0m "),
            "{args:?}: {red:?}"
        );
        let plain = failed("--color=never");
        assert!(
            plain.starts_with("error: ") && colour_codes(&plain) == 0,
            "{plain:?}"
        );
    }
}

/// Counts read as English: one of a thing is not "1 things".
#[test]
fn counts_of_one_are_singular() {
    let root = TestRoot::new();
    root.log().append(Subject::Host, live(1)).unwrap();
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 1 event, "));
    let root = root_with_every_kind();
    let show = root
        .unilab()
        .args(["soak", "show", "20261202T124210-3f9a"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&show.get_output().stdout).into_owned();
    assert!(
        !text.contains(" 1 files") && !text.contains(" 1 samples"),
        "{text}"
    );
}

/// `--help` says what a newcomer needs: the environment, durations, ids, exit codes, and
/// examples for the main commands.
#[test]
fn help_names_the_environment_the_exit_codes_and_gives_examples() {
    let root = TestRoot::new();
    let help = |args: &[&str]| {
        String::from_utf8(
            root.unilab()
                .args(args)
                .arg("--help")
                .assert()
                .success()
                .get_output()
                .stdout
                .clone(),
        )
        .unwrap()
    };
    let top = help(&[]);
    for needed in [
        "UNILAB_ROOT",
        "UNILAB_NVIDIA_SMI",
        "UNILAB_MPS_CONTROL",
        "UNILAB_TOOL_TIMEOUT",
        "1h30m",
        "latest",
        "Exit codes",
        "127 not found",
    ] {
        assert!(top.contains(needed), "`unilab --help` lacks {needed}");
    }
    for args in [&["soak", "run"][..], &["mps", "start"], &["history"]] {
        assert!(help(args).contains("Examples:"), "{args:?}");
    }
}

/// The internal subcommands (`__soak-guard`, `__leash`) leaked to users: clap's "did you mean"
/// offered `__soak-guard` for `unilab sok list`, and the static completion scripts offered
/// `__soak-guard __leash` beside `soak`. Hidden subcommands are never suggested or completed.
#[test]
fn hidden_subcommands_are_never_suggested_or_completed() {
    let root = TestRoot::new();
    let hidden = ["soak-guard", "leash"];
    let out = root.unilab().args(["sok", "list"]).assert().code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(
        stderr.contains("'soak'"),
        "the real one is suggested: {stderr}"
    );
    for name in hidden {
        assert!(!stderr.contains(name), "`sok` suggests {name}: {stderr}");
    }
    let out = root.unilab().args(["--json", "leas"]).assert().code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(!stderr.contains("leash"), "{stderr}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = root
            .unilab()
            .args(["completions", shell])
            .assert()
            .success();
        let script = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        for name in hidden {
            assert!(!script.contains(name), "{shell} completes {name}");
        }
    }
    for words in [&["unilab", "__"][..], &["unilab", "help", ""]] {
        let (_, offered, _) = shell_asks(&root, words, &[]);
        if words[1] == "help" {
            assert!(offered.iter().any(|o| o == "soak"), "{offered:?}");
        }
        assert!(
            offered
                .iter()
                .all(|o| hidden.iter().all(|h| !o.contains(h))),
            "{words:?}: {offered:?}"
        );
    }
}

/// `soak run -h` listed `--root`, `--json`, `--quiet`, `--verbose` and `--color` among the
/// soak's own flags, interleaved with them. The global flags have a heading of their own, after
/// the command's options, in `-h` and `--help` alike.
#[test]
fn global_flags_have_a_heading_of_their_own_in_a_subcommands_help() {
    let root = TestRoot::new();
    for flag in ["-h", "--help"] {
        for args in [&["soak", "run"][..], &["mps", "stop"], &[]] {
            let out = root.unilab().args(args).arg(flag).assert().success();
            let help = String::from_utf8(out.get_output().stdout.clone()).unwrap();
            let global = help
                .find("\nGlobal options:\n")
                .unwrap_or_else(|| panic!("{args:?} {flag}: no heading: {help}"));
            let (own, rest) = help.split_at(global);
            for name in ["--root", "--json", "--quiet", "--verbose", "--color"] {
                assert!(!own.contains(name), "{args:?} {flag}: {name} among its own");
                assert!(
                    rest.contains(name),
                    "{args:?} {flag}: {name} not under the heading"
                );
            }
        }
    }
    let out = root.unilab().args(["soak", "run", "-h"]).assert().success();
    let help = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let options = help.find("\nOptions:\n").unwrap();
    assert!(help[options..].contains("--sample-interval"), "{help}");
}
