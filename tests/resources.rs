//! Resources judged, not only drawn: the tree's real memory (PSS), a robust trend of it after the
//! warm-up, budgets that fail closed, GPU health and other tenants on the soak's GPUs. Real
//! trainers; the GPUs are the fake nvidia-smi's.

use std::process::Output;

use serde_json::Value;

use crate::common::eventually;
use crate::soak::{Soak, verdict};

const MIB: u64 = 1 << 20;

fn summary(artifact: &Value) -> &Value {
    &artifact["summary"]
}

/// Twenty workers forked from a trainer holding 400 MiB share its pages: summed RSS counts them
/// twenty-one times, the tree's PSS about once.
#[test]
fn forked_workers_sharing_a_buffer_count_once_in_pss_and_many_times_in_rss() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--sample-interval", "0.5"],
        &[
            "--steps",
            "12",
            "--shared-mib",
            "400",
            "--fork-workers",
            "20",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["schema"], "unilab.soak.artifact/4");
    let pss = summary(&artifact)["peak_tree_pss_bytes"].as_u64().unwrap();
    let rss = summary(&artifact)["peak_rss_bytes"].as_u64().unwrap();
    assert!(
        (400 * MIB..600 * MIB).contains(&pss),
        "PSS {} MiB for a 400 MiB buffer",
        pss / MIB
    );
    assert!(rss > 10 * 400 * MIB, "RSS {} MiB", rss / MIB);
    let rows = artifact["samples"].as_array().unwrap();
    assert!(!rows.is_empty(), "{artifact}");
    assert!(rows.iter().all(|r| r.get("tree_pss_bytes").is_some()));
    let shown = soak
        .unilab()
        .args(["soak", "show", "latest"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.lines().any(|l| l
            .strip_prefix("peaks:")
            .is_some_and(|peaks| peaks.trim_start().starts_with("PSS "))),
        "soak show leads with PSS: {shown}"
    );
}

fn failed_for(output: &Output, artifact: &Value, limit: &str) {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let outcome = &artifact["outcome"];
    assert_eq!(outcome["failure_kind"], "resource_limit", "{outcome}");
    assert_eq!(outcome["limit"], limit, "{outcome}");
    assert_eq!(
        artifact["evidence"]["trigger"], "resource_limit",
        "the evidence is captured before the kill"
    );
    assert_eq!(verdict(output)["outcome"]["failure_kind"], "resource_limit");
}

/// A trainer that leaks 5 MiB a second fails `--max-memory-growth 60MiB/min` once a minute has
/// passed after a 3 s warm-up, the reason naming the rate and the 95 % bound on it.
#[test]
fn memory_growth_past_its_budget_fails_once_a_minute_after_the_warmup_has_passed() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[
            "--max-memory-growth",
            "60MiB/min",
            "--warmup",
            "3s",
            "--sample-interval",
            "0.2",
        ],
        &["--steps", "900", "--step-seconds", "0.2", "--grow-mib", "1"],
    );
    failed_for(&output, &artifact, "memory_growth");
    let reason = artifact["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the tree's memory (PSS) grows ")
            && reason.contains(" at 95 % confidence) over the ")
            && reason.ends_with("over the --max-memory-growth limit of 3.5 GiB/h"),
        "{reason}"
    );
    let bound = reason
        .split_once("(at least ")
        .and_then(|(_, rest)| rest.split_once(" GiB/h"))
        .and_then(|(figure, _)| figure.parse::<f64>().ok());
    assert!(
        bound.is_some_and(|gib| gib > 3.5),
        "the bound is over the limit: {reason}"
    );
    let ran = artifact["duration_seconds"].as_f64().unwrap();
    assert!(
        ran < 170.0,
        "failed before the trainer's end, not at it: {ran} s"
    );
    // The minute is the watch's, counted on the samples' clock, which starts before the
    // command does: the command's own run time may be a few milliseconds shorter.
    let decided_at = artifact["samples"]
        .as_array()
        .and_then(|samples| samples.last())
        .and_then(|last| last["elapsed_seconds"].as_f64())
        .unwrap();
    assert!(
        decided_at >= 63.0,
        "not before a minute after the warm-up: decided at {decided_at} s of sampling ({ran} s run)"
    );
    let trend = &summary(&artifact)["memory_trend"];
    assert!(
        trend["bytes_per_hour"].as_f64().unwrap() > 3600.0 * MIB as f64,
        "over the budget's 60 MiB a minute: {trend}"
    );
}

/// A trainer whose memory moves at random between 1 and 200 MiB around a flat mean failed
/// `--max-memory-growth` 3.5 s into its soak with "grows 742 GiB/h" under `--warmup 3s`: the
/// trend was judged on 10 points in half a second. Judged over at least a minute after the
/// warm-up, and only when the lower bound of the slope is over the budget, it passes — having
/// grown in its first two seconds too, which the warm-up leaves out.
#[test]
fn a_flat_but_noisy_tree_passes_its_memory_growth_budget() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &[
            "--max-memory-growth",
            "200MiB/h",
            "--warmup",
            "3s",
            "--sample-interval",
            "0.2",
        ],
        &[
            "--steps",
            "160",
            "--step-seconds",
            "0.5",
            "--noisy-mib",
            "200",
            "--grow-mib",
            "4",
            "--grow-steps",
            "4",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["outcome"]["status"], "passed");
    let ran = artifact["duration_seconds"].as_f64().unwrap();
    assert!(
        ran > 3.0 + 60.0,
        "the growth was judged: the run outlasted the window after the warm-up ({ran} s)"
    );
    let peaks: Vec<u64> = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["tree_pss_bytes"].as_u64())
        .collect();
    let (low, high) = (peaks.iter().min().unwrap(), peaks.iter().max().unwrap());
    assert!(
        high - low > 100 * MIB,
        "the memory moved by {} MiB",
        (high - low) / MIB
    );
}

/// `--max-memory`: the tree's PSS over the budget fails the soak, naming both figures.
#[test]
fn memory_over_its_budget_fails_the_soak() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(
        &["--max-memory", "200MiB"],
        &["--steps", "100", "--allocate-mib", "400"],
    );
    failed_for(&output, &artifact, "memory");
    let reason = artifact["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("over the --max-memory limit of 200.0 MiB"),
        "{reason}"
    );
}

/// `--max-gpu-memory`: the tree's process the fake nvidia-smi lists with 45,000 MiB on its GPU
/// fails a 40 GiB budget.
#[test]
fn gpu_memory_over_its_budget_fails_the_soak() {
    let soak = Soak::new();
    let apps = soak.root.root().join("apps");
    let mut cmd = soak.unilab();
    cmd.env("FAKE_NVIDIA_SMI_APPS_FILE", &apps);
    let (output, artifact) = soak.run_with(
        cmd,
        &["--max-gpu-memory", "40GiB"],
        &["--steps", "100", "--gpu-memory", "45000"],
    );
    failed_for(&output, &artifact, "gpu_memory");
    let reason = artifact["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("on GPU 0 reached 43.9 GiB, over the --max-gpu-memory limit of 40.0 GiB"),
        "{reason}"
    );
}

/// Budgets are checked before anything runs: a zero or an unreadable size is a usage error,
/// whose message quotes what was typed (`0.4B/h` was refused as `--max-memory-growth 0`).
#[test]
fn a_budget_that_is_zero_or_not_a_size_is_a_usage_error() {
    let soak = Soak::new();
    for (flag, value, said) in [
        ("--max-memory", "0", "`0` would fail every soak"),
        ("--max-memory", "12 parsecs", "is not a size"),
        (
            "--max-memory",
            "0.5B",
            "`0.5B` is not a whole number of bytes",
        ),
        ("--max-memory", "2PiB", "`2PiB` is over 1 PiB"),
        ("--max-memory-growth", "200MiB", "is not a rate"),
        (
            "--max-memory-growth",
            "0.4B/h",
            "`0.4B/h` is not a rate: `0.4B` is not a whole number of bytes",
        ),
        (
            "--max-memory-growth",
            "0B/h",
            "`0B/h` would fail every soak",
        ),
    ] {
        let (output, _) = soak.run(&[flag, value], &["--steps", "2"]);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{flag} {value}: {stderr}");
    }
}

/// `1PiB` was refused while the refusal said "at most 1 PiB" (`1024TiB` was taken): the largest
/// size the message names is taken, in its own unit.
#[test]
fn the_largest_budget_the_message_names_is_taken() {
    let soak = Soak::new();
    let (output, artifact) = soak.run(&["--max-memory", "1PiB"], &["--steps", "2"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["parameters"]["max_memory_bytes"], 1u64 << 50);
}

/// `soak compare` of two real soaks: the one that leaks is B; its memory and verdict differ, and
/// the figures that changed most come first, in the table and in `--json`.
#[test]
fn compare_puts_two_soaks_side_by_side_with_what_changed_most_first() {
    let soak = Soak::new();
    let (first, _) = soak.run(&[], &["--steps", "8"]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let a = verdict(&first)["soak_id"].as_str().unwrap().to_owned();
    let (second, _) = soak.run(
        &["--max-memory", "100MiB"],
        &["--steps", "60", "--grow-mib", "8"],
    );
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let b = verdict(&second)["soak_id"].as_str().unwrap().to_owned();

    let json = soak
        .unilab()
        .args(["--json", "soak", "compare", &a, &b])
        .output()
        .unwrap();
    assert!(json.status.success(), "{json:?}");
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["a"]["soak_id"], a.as_str());
    assert_eq!(json["b"]["status"], "failed (resource_limit)");
    assert_eq!(json["verdict_differs"], true);
    let differences = json["differences"].as_array().unwrap();
    let changes: Vec<f64> = differences
        .iter()
        .map(|d| d["change_percent"].as_f64().map_or(-1.0, f64::abs))
        .collect();
    assert!(
        changes.windows(2).all(|w| w[0] >= w[1]),
        "largest change first: {changes:?}"
    );
    let pss = differences
        .iter()
        .find(|d| d["figure"] == "peak memory (PSS)")
        .unwrap();
    assert!(
        pss["b"].as_f64().unwrap() > 100.0 * MIB as f64 && pss["a"].as_f64() < pss["b"].as_f64(),
        "{pss}"
    );

    let human = soak
        .unilab()
        .args(["soak", "compare", &a, &b])
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    let lines: Vec<&str> = human.lines().collect();
    assert!(lines[0].contains("B against A"), "{human}");
    let verdict_line = lines.iter().find(|l| l.starts_with("verdict")).unwrap();
    assert!(
        verdict_line.contains("passed") && verdict_line.contains("failed (resource_limit)"),
        "{human}"
    );
    assert!(verdict_line.trim_end().ends_with("differs"), "{human}");

    let missing = soak
        .unilab()
        .args(["soak", "compare", &a, "nosuch"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
}

/// GPU health from the fake's scripted sequence — a GPU that heats up, throttles and counts two
/// uncorrected ECC errors halfway — and another user's process on the soak's GPU: the samples
/// carry them, the summary sums them up, and `soak show` warns of the ECC errors and the sharing.
#[test]
fn gpu_health_and_another_tenant_are_recorded_summed_up_and_warned_of() {
    let soak = Soak::new();
    let health = soak.root.root().join("health");
    let write_health = |line: &str| {
        let next = soak.root.root().join("health.next");
        std::fs::write(&next, line).unwrap();
        std::fs::rename(&next, &health).unwrap();
    };
    write_health("60|200.00|1980|0x0000000000000000|0|No");
    let gpu = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f";
    let child = soak
        .command()
        .env("FAKE_NVIDIA_SMI_HEALTH_FILE", &health)
        .env("FAKE_NVIDIA_SMI_APPS", format!("7777|python3|40960|{gpu}"))
        .args(["--json", "soak", "run"])
        .args(soak.trainer_soak(
            &["--sample-interval", "0.2"],
            &["--steps", "24", "--step-seconds", "0.25"],
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        "a first checkpoint",
        std::time::Duration::from_secs(60),
        || std::fs::read_dir(soak.progress()).is_ok_and(|mut d| d.next().is_some()),
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    write_health("85|300.00|1500|0x0000000000000040|2|No");
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "GPU 0 ({gpu}) is already in use by 1 process not of this soak (40960 MiB)"
        )),
        "warned as the command started: {stderr}"
    );
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let rows = artifact["samples"].as_array().unwrap();
    let hot = rows
        .iter()
        .filter_map(|r| r["gpus"].as_array().and_then(|g| g.first()))
        .find(|g| g["temperature_c"] == 85)
        .unwrap_or_else(|| panic!("no sample saw 85 °C: {:?}", rows.last()));
    assert_eq!(
        hot["throttle_reasons"],
        serde_json::json!(["hw_thermal_slowdown"])
    );
    assert_eq!(hot["power_w"], 300.0);
    assert_eq!(hot["other_processes"][0]["pid"], 7777);
    let health = &summary(&artifact)["gpu_health"][0];
    assert_eq!(health["uuid"], gpu);
    assert_eq!(health["max_temperature_c"], 85);
    assert_eq!(health["ecc_uncorrected_increase"], 2);
    assert!(health["energy_joules"].as_f64().unwrap() > 0.0, "{health}");
    assert!(
        health["seconds_throttled"]["hw_thermal_slowdown"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{health}"
    );
    let shared = &summary(&artifact)["contention"][0];
    assert!(shared["seconds_shared"].as_f64().unwrap() > 0.0, "{shared}");
    assert_eq!(shared["peak_other_memory_mib"], 40960);

    let shown = soak
        .unilab()
        .args(["soak", "show", "latest"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    for said in [
        "2 uncorrected ECC errors during the soak",
        "was shared with other processes (up to 40.0 GiB)",
        "up to 85 °C",
        "throttled: hw_thermal_slowdown",
    ] {
        assert!(shown.contains(said), "{said:?} in:\n{shown}");
    }
}
