//! What a person reads of a soak's heartbeats, through the real binary: soaks of a trainer that
//! beats (`tests/fixtures/phased_trainer.py`, one JSON line a beat as any language writes it)
//! shown by `soak show` (finished, and while it runs), the report (in headless Chromium at a
//! wide and a narrow window), `soak compare` and `history --soak`; and the frozen schema-10
//! fixture's beaten soak, whose figures are fixed, word for word. Soaks recorded before schema
//! 10 show none of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::soak::Soak;

fn phased_trainer() -> PathBuf {
    fixtures_dir().join("phased_trainer.py")
}

/// `soak run` of the phased trainer with `trainer_args`, sampled every `interval`, its artifact
/// written to `name`.json in the root; it must pass. Its artifact.
fn run_beating(soak: &Soak, name: &str, interval: &str, trainer_args: &[&str]) -> Value {
    let path = soak.root.root().join(format!("{name}.json"));
    let output = soak
        .unilab()
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(&path)
        .args([
            "--sample-interval",
            interval,
            "--shutdown-grace",
            "0.5",
            "--",
        ])
        .arg("python3")
        .arg(phased_trainer())
        .args(trainer_args)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// What `unilab ARGS` prints; it must succeed.
fn printed(soak: &Soak, args: &[&str]) -> String {
    let output = soak.unilab().args(args).output().unwrap();
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

fn printed_json(soak: &Soak, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend(args);
    serde_json::from_str(&printed(soak, &all)).unwrap()
}

/// The line of `text` labelled `label` (`steps:    …`), and where it is.
fn labelled<'a>(text: &'a str, label: &str) -> (usize, &'a str) {
    text.lines()
        .enumerate()
        .find(|(_, line)| line.starts_with(&format!("{label}:")))
        .unwrap_or_else(|| panic!("no `{label}:` line in\n{text}"))
}

/// Train steps with a checkpoint every ten (beaten as it starts, 0.3 s long).
const WITH_CHECKPOINTS: [&str; 6] = [
    "--steps",
    "30",
    "--checkpoint-every",
    "10",
    "--checkpoint-seconds",
    "0.3",
];

/// `soak show` of a soak whose trainer beat: the steps, the other phases and the goodput lead the
/// figures, in the artifact's figures; `--json` carries the summary's steps, heartbeat errors and
/// goodput as the artifact has them, with the steps a second.
#[test]
fn soak_show_leads_with_the_steps_and_carries_what_the_artifact_has() {
    let soak = Soak::new();
    let artifact = run_beating(&soak, "a", "0.2", &WITH_CHECKPOINTS);
    let summary = &artifact["summary"];
    assert_eq!(summary["steps"]["train"]["count"], 30, "{summary}");
    assert_eq!(summary["steps"]["checkpoint"]["count"], 3, "{summary}");
    let id = artifact["soak_id"].as_str().unwrap();

    let shown = printed_json(&soak, &["soak", "show", id]);
    for key in ["steps", "heartbeat_errors", "goodput"] {
        assert_eq!(shown[key], summary[key], "{key}");
    }
    let goodput = &summary["goodput"];
    let productive = goodput["productive_seconds"].as_f64().unwrap();
    // Train steps over productive seconds, to the last bits of a double.
    let rate = shown["steps_per_second"].as_f64().unwrap();
    assert!(
        (rate - 30.0 / productive).abs() <= 1e-9 * rate,
        "{rate} steps/s against 30 / {productive} s"
    );

    let text = printed(&soak, &["soak", "show", id]);
    let (steps_at, steps) = labelled(&text, "steps");
    let (phases_at, phases) = labelled(&text, "phases");
    let (goodput_at, goodput_line) = labelled(&text, "goodput");
    let (started_at, _) = labelled(&text, "started");
    assert!(steps_at < phases_at && phases_at < goodput_at && goodput_at < started_at);
    assert_eq!(
        labelled(&text, "exit").0 + 1,
        steps_at,
        "right after the verdict:\n{text}"
    );
    assert!(
        steps.starts_with("steps:    30 train steps (last 29) at ") && steps.contains("/s; "),
        "{steps}"
    );
    assert!(steps.contains("; step time median "), "{steps}");
    assert!(
        phases.starts_with("phases:   checkpoint: 3 steps, median "),
        "{phases}"
    );
    let fraction = goodput["fraction"].as_f64().unwrap();
    assert!(
        goodput_line.starts_with(&format!("goodput:  {:.1}% productive (", fraction * 100.0)),
        "{goodput_line}"
    );
    // The largest two: the checkpoints', and the startup's (Python's own) when it is longer.
    let badput = &goodput_line[goodput_line.find("; badput: ").expect(goodput_line)..];
    assert!(badput.contains("checkpoint "), "{goodput_line}");
    assert!(
        !text.contains("heartbeat file"),
        "no error to warn of:\n{text}"
    );
}

/// A running soak's `soak show` says its latest beats (step, phase, pace, numbers), from its
/// samples; `--json` under `live.heartbeat`.
#[test]
fn a_running_soak_shows_its_latest_beats() {
    let soak = Soak::new();
    let stop = soak.root.root().join("stop");
    let mut child = soak
        .command()
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.2", "--", "python3"])
        .arg(phased_trainer())
        .args(["--steps", "1", "--until"])
        .arg(&stop)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut live = Value::Null;
    eventually("the running soak's beats", Duration::from_secs(60), || {
        // Before its start is recorded, there is no soak to show.
        let output = soak
            .unilab()
            .args(["--json", "soak", "show", "latest"])
            .output()
            .unwrap();
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        live = shown["live"].clone();
        live["heartbeat"]["step"].is_u64()
    });
    let text = printed(&soak, &["soak", "show", "latest"]);
    std::fs::write(&stop, "").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");

    let beats = &live["heartbeat"];
    assert_eq!(beats["phase"], "train", "{live}");
    assert_eq!(beats["numbers"]["tokens"], 4096.0, "{live}");
    assert!(beats["numbers"]["loss"].is_f64(), "{live}");
    let sampled = beats["sampled_seconds"].as_f64().unwrap();
    assert!(
        sampled <= live["last_sample_seconds"].as_f64().unwrap(),
        "{live}"
    );
    let (_, line) = labelled(&text, "beats");
    assert!(line.starts_with("beats:    step "), "{line}");
    assert!(
        line.contains(" (train)") && line.contains("tokens 4096"),
        "{line}"
    );
    // The finished soak shows its steps instead.
    let text = printed(&soak, &["soak", "show", "latest"]);
    assert!(
        labelled(&text, "steps").1.contains(" train steps "),
        "{text}"
    );
}

/// The widths of the page's zoomable charts, in the order drawn.
fn chart_widths(dom: &str) -> Vec<u32> {
    dom.split("<div class=\"u-wrap\" style=\"width: ")
        .skip(1)
        .map(|rest| rest[..rest.find("px").unwrap()].parse().unwrap())
        .collect()
}

/// The report leads with the steps and draws step time first, then a small chart of each of
/// the trainer's numbers, `loss` first; in Chromium, two of those to a row in a wide window and
/// one in a narrow one, every chart zoomable and no script error. The screenshots are kept.
#[test]
fn the_report_of_a_beaten_soak_draws_step_time_and_the_numbers_in_a_browser() {
    let soak = Soak::new();
    let artifact = run_beating(&soak, "a", "0.2", &WITH_CHECKPOINTS);
    let page = soak.root.root().join("report.html");
    soak.unilab()
        .args([
            "soak",
            "report",
            artifact["soak_id"].as_str().unwrap(),
            "--output",
        ])
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    let glance = &html[..html.find("<h2>Over time</h2>").unwrap()];
    let at = |label: &str| glance.find(&format!("<dt>{label}</dt>")).unwrap();
    assert!(at("ran") < at("steps") && at("steps") < at("phases"));
    assert!(at("phases") < at("goodput") && at("goodput") < at("memory"));
    let ids: Vec<&str> = html
        .split("<section class=\"chart\" id=\"chart-")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    assert_eq!(
        ids[..4],
        ["step_time", "number0", "number1", "number2"],
        "{ids:?}"
    );
    for (id, title) in [
        ("number0", "loss"),
        ("number1", "samples"),
        ("number2", "tokens"),
    ] {
        assert!(
            html.contains(&format!("id=\"chart-{id}\"><h3>{title}</h3>")),
            "{id}"
        );
    }
    assert_eq!(html.matches("<div class=\"small-charts\">").count(), 1);

    let Some(browser) = chromium() else {
        eprintln!("skipped the browser check: no chromium on this host");
        return;
    };
    let shots = screenshot_dir("heartbeat-report-screenshots", soak.root.root());
    for (width, name) in [(1400, "wide"), (700, "narrow")] {
        let shot = shots.join(format!("heartbeat-report-{name}.png"));
        screenshot(&browser, soak.root.root(), &page, (width, 2600), &shot);
        let dom = chromium_dom(&browser, soak.root.root(), &page, width);
        let widths = chart_widths(&dom);
        assert_eq!(
            widths.len(),
            ids.len(),
            "every chart zoomable at {width} px"
        );
        let (wide, small) = (widths[0], widths[1]);
        if width == 1400 {
            assert!(2 * small <= wide && widths[2] == small, "{widths:?}");
        } else {
            assert!(small + 40 >= wide, "one a row at {width} px: {widths:?}");
        }
    }
    eprintln!(
        "screenshots of the beaten soak's report: {}",
        shots.display()
    );
}

/// The figures of a `soak compare --json` by name: (a, b).
fn differences(compared: &Value) -> BTreeMap<String, (Value, Value)> {
    compared["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let name = d["figure"].as_str().unwrap().to_owned();
            (name, (d["a"].clone(), d["b"].clone()))
        })
        .collect()
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() <= b.abs() * 1e-9)
}

/// `soak compare` of two beaten soaks puts the `train` step time, the steps a second, the
/// throughput of the `tokens` and `samples` beaten (4096 and 8 a step: that times the steps a
/// second) and the goodput side by side, each as `soak show` has it; against a soak whose
/// trainer did not beat those are unknown on its side, and two such soaks compare as before.
#[test]
fn soak_compare_puts_step_time_throughput_and_goodput_side_by_side() {
    let soak = Soak::new();
    let a = run_beating(&soak, "a", "0.2", &["--steps", "20"]);
    let b = run_beating(&soak, "b", "0.2", &WITH_CHECKPOINTS);
    let (plain, _) = soak.run(&[], &["--steps", "3", "--step-seconds", "0.1"]);
    let plain = crate::soak::verdict(&plain)["soak_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = [&a, &b].map(|artifact| artifact["soak_id"].as_str().unwrap().to_owned());
    let shown = ids
        .clone()
        .map(|id| printed_json(&soak, &["soak", "show", &id]));

    let compared = differences(&printed_json(&soak, &["soak", "compare", &ids[0], &ids[1]]));
    for (side, shown) in [0, 1].into_iter().zip(&shown) {
        let of = |figure: &str| {
            let (a, b) = &compared[figure];
            if side == 0 { a.clone() } else { b.clone() }
        };
        let train = &shown["steps"]["train"];
        assert_eq!(of("step time (median)"), train["median_seconds"]);
        assert_eq!(of("step time (p99)"), train["p99_seconds"]);
        let rate = shown["steps_per_second"].as_f64().unwrap();
        assert_eq!(of("steps/s").as_f64(), Some(rate));
        assert!(
            close(&of("tokens/s"), 4096.0 * rate),
            "{:?}",
            of("tokens/s")
        );
        assert!(close(&of("samples/s"), 8.0 * rate), "{:?}", of("samples/s"));
        let fraction = shown["goodput"]["fraction"].as_f64().unwrap();
        assert!(
            close(&of("goodput"), fraction * 100.0),
            "{:?}",
            of("goodput")
        );
    }
    let table = printed(&soak, &["soak", "compare", &ids[0], &ids[1]]);
    for row in [
        "step time (median)",
        "step time (p99)",
        "steps/s",
        "tokens/s",
        "goodput",
    ] {
        assert!(table.lines().any(|l| l.starts_with(row)), "{row}:\n{table}");
    }

    let against_plain = differences(&printed_json(&soak, &["soak", "compare", &ids[0], &plain]));
    let (known, unknown) = &against_plain["tokens/s"];
    assert!(known.is_f64() && unknown.is_null(), "{against_plain:?}");
    assert!(against_plain["step time (median)"].1.is_null());

    let unbeaten = differences(&printed_json(&soak, &["soak", "compare", &plain, &plain]));
    for figure in [
        "step time (median)",
        "steps/s",
        "tokens/s",
        "samples/s",
        "goodput",
    ] {
        assert!(!unbeaten.contains_key(figure), "{figure}: {unbeaten:?}");
    }
}

/// `history --soak` says under a sample where its beats' phase changed — the first 20 times;
/// a trainer flipping phase at nearly every sample gets one more line, before the soak's end,
/// with how many more changes there were (as many as the samples' phases in `--json` show).
#[test]
fn history_says_where_the_phase_changed_and_no_more_than_twenty_times() {
    let soak = Soak::new();
    let artifact = run_beating(
        &soak,
        "flip",
        "0.1",
        &["--flip-seconds", "0.1", "--for-seconds", "6"],
    );
    let id = artifact["soak_id"].as_str().unwrap();
    let records: Vec<Value> = printed(&soak, &["--json", "history", "--soak", id])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let phases: Vec<&str> = records
        .iter()
        .filter(|r| r["kind"] == "soak_sampled")
        .filter_map(|r| r["measures"]["heartbeat"]["phase"].as_str())
        .collect();
    // The first beaten sample's phase counts: it is where the beats began.
    let changes = 1 + phases.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        changes > 20,
        "the trainer flips its phase every 0.1 s, as the samples come: only {changes} \
         changes in {} samples",
        phases.len()
    );

    let text = printed(&soak, &["history", "--soak", id]);
    let lines: Vec<&str> = text.lines().collect();
    let shown = lines
        .iter()
        .filter(|l| l.starts_with("        phase "))
        .count();
    assert_eq!(shown, 20, "{text}");
    let left_out = format!(
        "        … {} more phase changes left out (the first 20 are shown)",
        changes - 20
    );
    let at = lines.iter().position(|l| *l == left_out).expect(&left_out);
    assert!(lines[at + 1].contains(" soak_finished "), "{text}");
    let first = lines
        .iter()
        .find(|l| l.starts_with("        phase "))
        .unwrap();
    assert!(
        first.starts_with(&format!("        phase {} at step ", phases[0])),
        "{first}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l.contains(" soak_sampled "))
            .any(|l| l.contains(" beats to step ")),
        "{text}"
    );
}

/// The frozen fixture of schema `version` installed as `root`'s log (`UNILAB_TEST_MIGRATIONS`
/// names the copy CI runs from).
fn install_fixture(version: u32, root: &TestRoot) {
    let dir = std::env::var_os("UNILAB_TEST_MIGRATIONS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"))
        .join(format!("fixtures/v{version}"));
    let log = root.log_path();
    let into = log.parent().unwrap();
    private_dir_all(into);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name == "events.redb" || name.ends_with(".zst") {
            copy_log(&dir.join(&name), &into.join(&name));
        }
    }
}

/// The soak of the schema-10 fixture whose trainer beat.
const BEATEN_IN_FIXTURE: &str = "20261208T100000-b10b";
/// A soak of the same fixture recorded before schema 10 (in schema 8's forms).
const PACKED_IN_FIXTURE: &str = "20261206T080000-c8c8";

/// The frozen schema-10 soak whose trainer beat (a checkpoint, an eval, a sample without beats,
/// lines that were not beats) reads word for word; every soak of the fixture recorded before
/// schema 10 shows, reports and compares without a word of steps.
#[test]
fn the_frozen_beaten_soak_reads_word_for_word_and_older_soaks_without_steps() {
    let root = TestRoot::new();
    install_fixture(10, &root);
    let run = |args: &[&str]| {
        let output = root.unilab().args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let show = run(&["soak", "show", BEATEN_IN_FIXTURE]);
    let history = run(&["history", "--soak", BEATEN_IN_FIXTURE]);
    let compare = run(&["soak", "compare", PACKED_IN_FIXTURE, BEATEN_IN_FIXTURE]);
    insta::assert_snapshot!("soak_show_of_the_frozen_beaten_soak", show);
    insta::assert_snapshot!("history_of_the_frozen_beaten_soak", history);
    insta::assert_snapshot!("compare_with_the_frozen_beaten_soak", compare);

    let soaks: Value = serde_json::from_str(&run(&["--json", "soak", "list"])).unwrap();
    let older: Vec<&str> = soaks
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["soak_id"].as_str().unwrap())
        .filter(|id| *id != BEATEN_IN_FIXTURE)
        .collect();
    assert!(older.len() >= 6, "{older:?}");
    for id in &older {
        let shown: Value = serde_json::from_str(&run(&["--json", "soak", "show", id])).unwrap();
        for key in ["steps", "heartbeat_errors", "goodput", "steps_per_second"] {
            assert!(shown.get(key).is_none(), "{id}: {key}");
        }
        let text = run(&["soak", "show", id]);
        for label in ["steps:", "phases:", "goodput:"] {
            assert!(!text.contains(label), "{id}: {text}");
        }
        let page = run(&["soak", "report", id]);
        for drawn in [
            "chart-step_time",
            "<dt>steps</dt>",
            "\"small\":true",
            "\"band\":{",
        ] {
            assert!(!page.contains(drawn), "{id}: {drawn}");
        }
        let history = run(&["history", "--soak", id]);
        assert!(!history.contains("        phase ") && !history.contains(" beats to step "));
    }
    let compared = run(&["soak", "compare", older[0], older[1]]);
    for figure in ["step time", "steps/s", "goodput"] {
        assert!(!compared.contains(figure), "{compared}");
    }
}
