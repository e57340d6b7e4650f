//! Two soaks started at one moment with one `--metrics-file`: exactly one of them takes the file.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::common::*;

use super::*;

/// How many pairs are started: on the unfixed binary every pair (or nearly) ran both soaks.
const PAIRS: usize = 10;

/// A command that leaves the file `$1` when it starts, then runs until the file `$2` exists.
const WAITER: &str = r#"touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done"#;

/// `soak run` of [`WAITER`] with `--metrics-file metrics`, its artifact at `output`, its runtime
/// directory under `runtime`: spawned, standard error piped.
fn spawn_waiter(
    soak: &Soak,
    (metrics, output, runtime): (&Path, &Path, &Path),
    (started, stop): (&Path, &Path),
    flags: &[&str],
) -> Child {
    soak.command()
        .env("UNILAB_TOOL_TIMEOUT", "5")
        .env("XDG_RUNTIME_DIR", runtime)
        .args(["soak", "run", "--allow-no-progress", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(output)
        .arg("--metrics-file")
        .arg(metrics)
        .args(["--sample-interval", "0.1", "--shutdown-grace", "0.5"])
        .args(flags)
        .arg("--")
        .args(["sh", "-c", WAITER, "waiter"])
        .arg(started)
        .arg(stop)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unilab starts")
}

/// Its standard error, read to its end by a thread of its own.
fn stderr_of(child: &mut Child) -> JoinHandle<String> {
    let mut stderr = child.stderr.take().expect("piped");
    std::thread::spawn(move || {
        let mut said = Vec::new();
        let _ = stderr.read_to_end(&mut said);
        String::from_utf8_lossy(&said).into_owned()
    })
}

/// Two soaks started together with one `--metrics-file` both passed the start-up check (the
/// file was not there yet, or said its soak had ended) and then took turns rewriting it: an
/// alert read one soak's figures, then the other's, under two soak ids. The check and the
/// soak's writes are under a claim on the file held for the soak's life, so exactly one of the
/// two runs; the other is refused as the sequential case refuses a running soak's file (exit 3,
/// naming that soak), its command never started; under `--force` both run, as before. Nothing is left beside the file, nor in the
/// runtime directory once both are done.
#[test]
fn of_two_soaks_started_together_with_one_metrics_file_exactly_one_takes_it() {
    let soak = Soak::new();
    let runtime = soak.root.root().join("run");
    private_dir_all(&runtime);
    for pair in 0..PAIRS {
        let dir = soak.root.root().join(format!("textfiles-{pair}"));
        private_dir_all(&dir);
        let metrics = dir.join("unilab.prom");
        let stop = soak.root.root().join(format!("stop-{pair}"));
        let at = |what: &str, side: &str| soak.root.root().join(format!("{what}-{pair}-{side}"));
        let (started_a, started_b) = (at("started", "a"), at("started", "b"));
        let (output_a, output_b) = (at("artifact", "a"), at("artifact", "b"));
        // Back to back: each is past its `exec` when `spawn` returns, so both start up together.
        let mut a = spawn_waiter(
            &soak,
            (&metrics, &output_a, &runtime),
            (&started_a, &stop),
            &[],
        );
        let mut b = spawn_waiter(
            &soak,
            (&metrics, &output_b, &runtime),
            (&started_b, &stop),
            &[],
        );
        let (said_a, said_b) = (stderr_of(&mut a), stderr_of(&mut b));
        // Until one of them is refused, or both commands run.
        eventually(
            "one soak refused or both running",
            Duration::from_secs(120),
            || {
                a.try_wait().unwrap().is_some()
                    || b.try_wait().unwrap().is_some()
                    || (started_a.exists() && started_b.exists())
            },
        );
        std::fs::write(&stop, "").unwrap();
        let mut ended = [(&mut a, said_a, &started_a), (&mut b, said_b, &started_b)].map(
            |(child, said, started)| {
                let mut code = None;
                eventually("the soak's end", Duration::from_secs(120), || {
                    code = child.try_wait().unwrap().map(|status| status.code());
                    code.is_some()
                });
                (code.flatten(), said.join().unwrap(), started.exists())
            },
        );
        ended.sort_by_key(|(code, _, _)| *code);
        let [
            (won, won_said, won_started),
            (lost, lost_said, lost_started),
        ] = ended;
        assert_eq!(
            (won, lost),
            (Some(0), Some(3)),
            "pair {pair}: one soak runs, the other is refused\nfirst: {won_said}\nsecond: {lost_said}"
        );
        assert!(
            won_started && !lost_started,
            "pair {pair}: the refused soak's command ran"
        );
        for part in [
            "is the metrics file of soak `",
            "which may still be running",
            "--force",
        ] {
            assert!(lost_said.contains(part), "pair {pair}: {part}: {lost_said}");
        }
        let text = std::fs::read_to_string(&metrics).unwrap();
        assert!(text.contains("unilab_soak_running{soak=\""), "{text}");
        let beside: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(
            beside,
            ["unilab.prom"],
            "pair {pair}: nothing beside the file"
        );
    }
    // Under `--force` both run, as before there were claims.
    let metrics = soak.root.root().join("forced.prom");
    let stop = soak.root.root().join("stop-forced");
    let at = |side: &str| soak.root.root().join(format!("forced-{side}"));
    let mut forced = ["a", "b"].map(|side| {
        let mut child = spawn_waiter(
            &soak,
            (&metrics, &at(&format!("{side}.json")), &runtime),
            (&at(side), &stop),
            &["--force"],
        );
        let said = stderr_of(&mut child);
        (child, said)
    });
    eventually(
        "both forced soaks running",
        Duration::from_secs(120),
        || at("a").exists() && at("b").exists(),
    );
    std::fs::write(&stop, "").unwrap();
    for (child, _) in &mut forced {
        let status = child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
    for (_, said) in forced {
        said.join().unwrap();
    }
    let claims = runtime.join("unilab/claims");
    let left: Vec<_> = std::fs::read_dir(&claims)
        .into_iter()
        .flatten()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "claims left behind: {left:?}");
}
