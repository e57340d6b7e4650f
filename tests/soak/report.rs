//! The artifact and the HTML report: written even when the end fails, told alike, streamed byte for
//! byte as the whole object renders, and the report rendered in a real browser.

use std::path::PathBuf;

use crate::common::*;
use serde_json::Value;
use unilab::testing::artifact::digest_matches;

use super::*;

/// When the artifact cannot be written at the end after all (its directory went away while the
/// soak ran), the verdict and the soak's id are still printed, and the hint names that id.
#[test]
fn an_artifact_that_fails_at_the_end_still_prints_the_verdict_and_how_to_export_it() {
    let soak = Soak::new();
    let gone = soak.root.root().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let output = gone.join("soak.json");
    let script = format!(
        "rmdir {} && exec python3 {} --progress-dir {} --steps 3 --step-seconds 0.05",
        gone.display(),
        trainer().display(),
        soak.progress().display()
    );
    let failed = soak
        .unilab()
        .args(["soak", "run", "--sample-interval", "0.1", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(&output)
        .args(["--", "sh", "-c", &script])
        .assert()
        .code(3);
    let stdout = String::from_utf8_lossy(&failed.get_output().stdout).into_owned();
    let stderr = String::from_utf8_lossy(&failed.get_output().stderr).into_owned();
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("soak ")?.split_once(" passed: "))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("the verdict: {stdout}\n{stderr}"));
    assert!(!stdout.contains("artifact:"), "{stdout}");
    let hint = format!(
        "hint: once that is fixed, `unilab soak export {id} --output {}` writes it from the log",
        output.display()
    );
    assert!(stderr.contains(&hint), "{stderr}");
    std::fs::create_dir(&gone).unwrap();
    soak.unilab()
        .args(["soak", "export", &id, "--output"])
        .arg(&output)
        .assert()
        .success();
    assert!(digest_matches(&std::fs::read(&output).unwrap()));
}

/// `report:` went to standard error with the path as typed while `artifact:` went to standard
/// output, absolute: both are what the run produced, on standard output, absolute.
#[test]
fn the_artifact_and_the_report_are_told_alike() {
    let soak = Soak::new();
    let done = soak
        .unilab()
        .current_dir(soak.root.root())
        .args([
            "soak",
            "run",
            "--allow-no-progress",
            "--sample-interval",
            "0.1",
        ])
        .arg("--progress-dir")
        .arg(soak.progress())
        .args(["--output", "a.json", "--report", "r.html", "--", "true"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&done.get_output().stdout).into_owned();
    let root = soak.root.root().display().to_string();
    assert!(
        stdout.contains(&format!(
            "\nartifact: {root}/a.json\nreport: {root}/r.html\n"
        )),
        "{stdout}"
    );
    assert!(soak.root.root().join("r.html").is_file());

    let json = soak
        .unilab()
        .current_dir(soak.root.root())
        .args(["--json", "soak", "run", "--allow-no-progress", "--force"])
        .args(["--sample-interval", "0.1", "--progress-dir"])
        .arg(soak.progress())
        .args(["--output", "a.json", "--report", "r.html", "--", "true"])
        .assert()
        .success();
    let told: Value = serde_json::from_slice(&json.get_output().stdout).unwrap();
    assert_eq!(told["artifact"], format!("{root}/a.json"));
    assert_eq!(told["report"], format!("{root}/r.html"));
}

/// The report of a real failed soak (stale progress, two fake GPUs, one used by the trainer):
/// self-contained, its charts present, and — in headless Chromium — it loads without console
/// errors; the screenshot is kept in the target directory.
#[test]
fn the_report_of_a_failed_soak_renders_in_a_browser() {
    let soak = Soak::new();
    let apps = soak.root.root().join("apps");
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env(
                "FAKE_NVIDIA_SMI_GPUS",
                "GPU-1111aaaa-0000-4000-8000-000000000001|NVIDIA H200|143771|20000|37;\
                 GPU-2222bbbb-0000-4000-8000-000000000002|NVIDIA H200|143771|1000|5",
            )
            .env("FAKE_NVIDIA_SMI_APPS_FILE", &apps);
            cmd
        },
        &["--stale-progress", "1.5s"],
        &[
            "--steps",
            "40",
            "--step-seconds",
            "0.1",
            "--hang-after",
            "8",
            "--gpu-memory",
            "3000",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let report = soak.root.root().join("report.html");
    soak.unilab()
        .args(["soak", "report", "latest", "--output"])
        .arg(&report)
        .assert()
        .success();
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.matches("<svg").count() >= 6, "every chart is drawn");
    assert!(html.contains("stale_progress"));
    assert!(
        html.contains(artifact["digest"].as_str().unwrap()),
        "tied to the artifact"
    );
    // The timeline shows a run of samples by its first and last, not line by line.
    let samples = artifact["summary"]["samples"].as_u64().unwrap();
    assert!(samples > 3, "{samples} samples");
    assert_eq!(html.matches("soak_sampled").count(), 2, "{html}");
    assert!(html.contains(&format!("{} more samples", samples - 2)));
    // One file: nothing loaded from elsewhere (the chart library is inline).
    for external in ["<link", " src=", "url(", "@import", "href=\"http"] {
        assert!(!html.contains(external), "the page loads `{external}`");
    }
    let Some(browser) = chromium() else {
        eprintln!("skipped the browser check: no chromium on this host");
        return;
    };
    // The page as a reader without script sees it: the static charts.
    let without_script = soak.root.root().join("report-static.html");
    std::fs::write(&without_script, strip_scripts(&html)).unwrap();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for width in [1400, 700] {
        for (page, name) in [(&report, "zoomable"), (&without_script, "static")] {
            let shot = shots.join(format!("failed-soak-{name}-{width}.png"));
            let png = screenshot(&browser, soak.root.root(), page, (width, 2400), &shot);
            assert!(
                png.len() > 20_000,
                "{name} at {width} px: {} bytes",
                png.len()
            );
        }
        // With script every chart is the zoomable one.
        let dom = chromium_dom(&browser, soak.root.root(), &report, width);
        let sections = dom.matches("<section class=\"chart\"").count();
        assert!(sections >= 6, "{sections} charts");
        assert_eq!(
            dom.matches("class=\"uplot").count(),
            sections,
            "at {width} px"
        );
        assert!(dom.contains("class=\"zoomable\""), "at {width} px");
        // Without it the static ones are there, one an SVG.
        let dom = chromium_dom(&browser, soak.root.root(), &without_script, width);
        assert_eq!(dom.matches("<svg class=\"chart\"").count(), sections);
        assert!(!dom.contains("class=\"uplot"));
    }
    eprintln!("screenshots of the report: {}", shots.display());
}

/// A soak on a host whose driver does not answer: every sample has a sampler error. The report
/// says the error once, shades the runs of erring samples instead of a line a sample, keeps the
/// progress and verdict markers, and leaves the GPU charts out.
#[test]
fn the_report_of_a_soak_without_gpu_data_says_the_error_once() {
    let soak = Soak::new();
    let (output, artifact) = soak.run_with(
        {
            let mut cmd = soak.unilab();
            cmd.env("FAKE_NVIDIA_SMI_MODE", "no-driver");
            cmd
        },
        &["--sample-interval", "0.1"],
        &["--steps", "20", "--step-seconds", "0.1"],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let erred = artifact["summary"]["sampler_errors"].as_u64().unwrap();
    let samples = artifact["summary"]["samples"].as_u64().unwrap();
    assert!(erred >= 5, "{erred} of {samples} samples erred");
    let html = soak
        .unilab()
        .args(["soak", "report", "latest"])
        .output()
        .unwrap()
        .stdout;
    let html = String::from_utf8(html).unwrap();
    let message = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|s| s["errors"][0].as_str())
        .unwrap()
        .to_owned();
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    assert_eq!(html.matches(&escaped).count(), 1, "{message} said once");
    assert!(html.contains("no GPU data"));
    assert!(!html.contains("GPU utilisation"));
    let charts = html.matches("<svg class=\"chart\"").count();
    assert!(charts >= 4);
    // Shaded runs, not a line a sample; the three markers on each chart.
    let bands = html.matches("class=\"band\"").count();
    assert!(
        bands >= charts && bands <= 3 * charts,
        "{bands} bands on {charts} charts"
    );
    assert_eq!(html.matches("class=\"marker\"").count(), 3 * charts);
}

/// The streamed artifact (one scan, rows spooled, the object composed around them) is byte for
/// byte the rendering of the whole object at once, for a large soak whose samples vary (GPUs
/// unread, errors, a sample after the exit) and interleave with another soak's, for a soak
/// still running, and for schema 1's frozen form.
#[test]
fn the_streamed_artifact_is_the_whole_objects_rendering_byte_for_byte() {
    use unilab::testing::artifact;
    use unilab::{StoredEvent, Subject};
    let root = TestRoot::new();
    let log = root.log();
    let events = every_event_kind();
    let started = |id: &str| {
        let (_, start) = events
            .iter()
            .find(|(_, e)| matches!(e, StoredEvent::SoakStartedV4(_)))
            .unwrap()
            .clone();
        let StoredEvent::SoakStartedV4(mut start) = start else {
            unreachable!()
        };
        start.soak_id = id.into();
        (Subject::Soak(id.into()), StoredEvent::SoakStartedV4(start))
    };
    log.append_all(events.clone()).unwrap();
    log.append_all([started("big"), started("running")])
        .unwrap();
    for batch in 0..6u64 {
        let mut records = Vec::new();
        for i in batch * 500..(batch + 1) * 500 {
            let mut s = sample(i, 1 + (i % 7) as u32);
            if i % 5 == 0 {
                s.gpus = None;
            }
            if i % 3 != 0 {
                s.errors.clear();
            }
            s.after_exit = i == 2_999;
            records.push((
                Subject::Soak("big".into()),
                StoredEvent::SoakSampledV5(Box::new(s)),
            ));
            if i % 4 == 0 {
                let other = sample(i, 2);
                records.push((
                    Subject::Soak("running".into()),
                    StoredEvent::SoakSampledV5(Box::new(other)),
                ));
            }
        }
        log.append_all(records).unwrap();
    }
    let (_, end) = events
        .iter()
        .rfind(|(_, e)| matches!(e, StoredEvent::SoakFinishedV4(_)))
        .unwrap()
        .clone();
    log.append(Subject::Soak("big".into()), end).unwrap();

    let snapshot = log.snapshot().unwrap();
    for id in [
        "big",
        "running",
        "20261202T124210-3f9a",
        "20261202T130000-5b7c",
    ] {
        let records = artifact::collect(&snapshot, id).unwrap().unwrap();
        let (whole, digest) = artifact::render(&records);
        let mut streamed = Vec::new();
        let written = artifact::write(&snapshot, id, &mut streamed).unwrap();
        assert_eq!(written.digest, digest, "{id}");
        assert_eq!(written.bytes, streamed.len() as u64, "{id}");
        if streamed != whole {
            let at = streamed
                .iter()
                .zip(&whole)
                .take_while(|(a, b)| a == b)
                .count();
            panic!(
                "{id}: differs at byte {at}: {:?} against {:?}",
                String::from_utf8_lossy(
                    &streamed[at.saturating_sub(80)..(at + 80).min(streamed.len())]
                ),
                String::from_utf8_lossy(&whole[at.saturating_sub(80)..(at + 80).min(whole.len())]),
            );
        }
        assert!(digest_matches(&streamed), "{id}");
    }
    let unknown = artifact::write(&snapshot, "nope", &mut Vec::new());
    assert!(matches!(unknown, Err(artifact::StreamError::NoSuchSoak(_))));
}
