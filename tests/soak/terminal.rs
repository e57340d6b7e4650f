//! A soak on a terminal: the status line (what it shows, never spliced into the command's output,
//! none on a dumb terminal) and no control sequence from outside reaching the screen.

use crate::common::*;

use super::*;

/// `soak run` of the trainer on a pseudo-terminal, with `TERM=term`: what the terminal
/// received.
fn soak_on_a_terminal(soak: &Soak, term: &str, trainer_args: &[&str]) -> String {
    soak_on_a_terminal_with(soak, &[("TERM", term)], &[], trainer_args)
}

/// `soak run` of the trainer on a pseudo-terminal with `env` and the soak's `options`: what the
/// terminal received.
fn soak_on_a_terminal_with(
    soak: &Soak,
    env: &[(&str, &str)],
    options: &[&str],
    trainer_args: &[&str],
) -> String {
    let mut args: Vec<std::ffi::OsString> =
        vec!["soak".into(), "run".into(), "--progress-dir".into()];
    args.push(soak.progress().into());
    args.extend(["--output".into(), soak.artifact_path().into()]);
    args.extend(["--sample-interval", "0.05"].map(Into::into));
    args.extend(options.iter().map(Into::into));
    args.extend(["--".into(), "python3".into(), trainer().into()]);
    args.extend(["--progress-dir".into(), soak.progress().into()]);
    args.extend(trainer_args.iter().map(Into::into));
    let mut env = env.to_vec();
    env.push(("UNILAB_TOOL_TIMEOUT", "2"));
    let (code, screen) = on_a_terminal(&soak.root, &env, args);
    assert_eq!(code, Some(0), "{screen}");
    screen
}

/// The status lines a terminal was shown: what follows each clearing of the line.
fn status_lines(screen: &str) -> Vec<&str> {
    screen
        .split("\r\x1b[2K")
        .filter_map(|piece| piece.lines().next())
        .filter(|line| line.starts_with("soak ") && line.contains("samples, progress"))
        .collect()
}

/// The status line said `GPU 0 MiB` on a host where nvidia-smi is missing (unknown is not
/// zero), and neither the tree's CPU use nor how long before the stale limit fails the soak.
#[test]
fn the_status_line_shows_cpu_the_stale_countdown_and_no_gpu_memory_it_cannot_know() {
    let soak = Soak::new();
    let missing = soak.root.root().join("no-nvidia-smi");
    let missing = missing.to_str().unwrap();
    let screen = soak_on_a_terminal_with(
        &soak,
        &[("UNILAB_NVIDIA_SMI", missing)],
        &["--stale-progress", "10m"],
        &["--steps", "40", "--step-seconds", "0.05"],
    );
    let lines = status_lines(&screen);
    assert!(!lines.is_empty(), "no status line: {screen:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.ends_with("GPU –") && !l.contains("GPU 0")),
        "{lines:#?}"
    );
    let cpu_percent = |line: &str| {
        line.split_once(", CPU ").is_some_and(|(_, rest)| {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with("%, ")
        })
    };
    assert!(lines.iter().any(|l| cpu_percent(l)), "{lines:#?}");
    // Under the 10 minutes of `--stale-progress` since the last change.
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" ago, stale in 9m ") || l.contains(" ago, stale in 10m")),
        "{lines:#?}"
    );
}

#[test]
fn the_status_line_never_splices_into_the_commands_output() {
    let soak = Soak::new();
    let screen = soak_on_a_terminal(&soak, "xterm", &["--steps", "30", "--step-seconds", "0.03"]);
    assert!(
        screen.contains("samples, progress"),
        "a status line: {screen:?}"
    );
    let steps: Vec<usize> = screen.match_indices("step ").map(|(at, _)| at).collect();
    assert_eq!(steps.len(), 30, "{screen:?}");
    for at in steps {
        let before = &screen[..at];
        assert!(
            before.is_empty() || before.ends_with('\n') || before.ends_with("\r\x1b[2K"),
            "a line of the command starts mid-line: {:?}",
            &screen[at.saturating_sub(60)..at + 20]
        );
    }
    // The status line itself starts on a cleared line. Only the status lines are looked at: a
    // warning before the soak (a small disk, at this interval) says "this soak" mid-line.
    let status_starts = screen.match_indices("soak ").filter(|(at, _)| {
        let line = screen[*at..].lines().next().unwrap_or_default();
        line.contains("samples, progress")
    });
    for (at, _) in status_starts {
        let before = &screen[..at];
        assert!(
            before.ends_with("\r\x1b[2K") || before.ends_with('\n'),
            "{:?}",
            &screen[at.saturating_sub(40)..at + 10]
        );
    }
}

#[test]
fn no_status_line_on_a_dumb_terminal() {
    let soak = Soak::new();
    let screen = soak_on_a_terminal(&soak, "dumb", &["--steps", "10", "--step-seconds", "0.03"]);
    assert!(screen.contains("step 10/10"), "{screen:?}");
    assert!(!screen.contains("\x1b["), "{screen:?}");
    assert!(!screen.contains("samples, progress"), "{screen:?}");
}

/// Raw control sequences reached the terminal from `soak list`, `soak show` (the command and
/// its output tails), `history` and `soak list --job` (host directory names): clear-screen, a
/// window title, an OSC 52 clipboard write. Everything printed that came from outside unilab is
/// escaped now; and a newline in `SLURM_JOB_ID` no longer forges a line in an error.
#[test]
fn control_sequences_from_outside_never_reach_the_terminal() {
    let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{1b}]52;c;aGk=\u{7}";
    let soak = Soak::new();
    let mut cmd = soak.unilab();
    cmd.envs([("SLURM_JOB_ID", "77"), ("SLURM_PROCID", "0")])
        .args(["soak", "run", "--sample-interval", "0.1", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--", "sh", "-c"])
        .arg(format!(
            "printf '{evil}\\n'; printf '{evil}\\n' >&2; \"$0\" \"$@\""
        ))
        .arg("python3")
        .arg(trainer())
        .arg("--progress-dir")
        .arg(soak.progress())
        .args(["--steps", "3", "--step-seconds", "0.05"])
        .assert()
        .success();
    // Another host's log under a directory whose name carries the sequences.
    let uid = nix::unistd::getuid().as_raw().to_string();
    let here = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let other = soak.root.root().join(format!("node{evil}")).join(&uid);
    private_dir_all(&other);
    std::fs::copy(
        soak.root.root().join(&here).join(&uid).join("events.redb"),
        other.join("events.redb"),
    )
    .unwrap();
    for args in [
        &["soak", "list"][..],
        &["soak", "show", "latest"],
        &["history"],
        &["history", "--soak", "latest"],
        &["soak", "list", "--job", "77"],
    ] {
        let out = soak.unilab().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert!(
                !text.contains('\u{1b}') && !text.contains('\u{7}'),
                "{args:?}: a raw control character on {stream}: {text:?}"
            );
        }
        assert!(
            stdout.contains("\\u{1b}]52;c;aGk=\\u{7}") || args[0] == "history" && args.len() == 1,
            "{args:?}: the sequence is shown escaped: {stdout}"
        );
    }
    let out = soak
        .unilab()
        .env("SLURM_JOB_ID", "5\nerror: forged")
        .args(["mps", "start"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("5\\nerror: forged"), "{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("error: forged")),
        "{stderr}"
    );
}
