//! A soak's GPU samples through the fake nvidia-smi: each GPU named, the tree's memory apart from
//! the host's, and an nvidia-smi that hangs, is missing, exits or floods recorded as a fault while
//! the soak is judged on progress.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

use super::*;

#[test]
fn a_hung_or_missing_nvidia_smi_is_recorded_and_the_soak_is_judged_on_progress() {
    for (variable, value, says) in [
        ("FAKE_NVIDIA_SMI_MODE", "hang", "did not answer within"),
        (
            "UNILAB_NVIDIA_SMI",
            "/nonexistent/nvidia-smi",
            "was not found",
        ),
    ] {
        let soak = Soak::new();
        let mut cmd = soak.unilab();
        cmd.env(variable, value).env("UNILAB_TOOL_TIMEOUT", "0.3");
        let started = Instant::now();
        let (output, artifact) =
            soak.run_with(cmd, &[], &["--steps", "12", "--step-seconds", "0.1"]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{value}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        assert!(
            artifact["summary"]["sampler_errors"].as_u64().unwrap() > 0,
            "{value}"
        );
        let errors: Vec<String> = artifact["samples"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| {
                s["errors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap().to_owned())
            })
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| e.contains(says) || e.contains("has not answered")),
            "{value}: {errors:?}"
        );
        // Nothing is known of the GPUs: null, never a made-up 0, and each such sample says why
        // (the first may precede the first answer).
        for sample in artifact["samples"].as_array().unwrap() {
            assert_eq!(sample["gpus"], Value::Null, "{value}: {sample}");
            assert_eq!(sample["host_gpu_memory_used_mib"], Value::Null);
            assert_eq!(sample["tree_gpu_memory_mib"], Value::Null);
        }
        assert_eq!(artifact["summary"]["peak_tree_gpu_memory_mib"], Value::Null);
        // Sampling kept its schedule: about one sample per 0.2 s of the run.
        let samples = artifact["samples"].as_array().unwrap().len() as f64;
        let expected = artifact["duration_seconds"].as_f64().unwrap() / 0.2;
        assert!(
            samples >= expected - 2.0,
            "{value}: {samples} samples in {expected} intervals"
        );
    }
}

#[test]
fn gpu_samples_name_each_gpu_and_keep_the_trees_memory_apart_from_the_hosts() {
    let soak = Soak::new();
    let gpu = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f";
    let mut cmd = soak.unilab();
    // Another tenant (pid 1) holds 512 MiB; the trainer lists itself with 300 MiB.
    cmd.env("FAKE_NVIDIA_SMI_APPS", format!("1|init|512|{gpu}"))
        .env("FAKE_NVIDIA_SMI_APPS_FILE", soak.root.root().join("apps"))
        .env(
            "FAKE_NVIDIA_SMI_GPUS",
            format!("{gpu}|NVIDIA H200|143771|2048|55;GPU-11111111-2222-3333-4444-555555555555|NVIDIA H200|143771|[N/A]|0"),
        );
    let (output, artifact) = soak.run_with(
        cmd,
        &[],
        &[
            "--steps",
            "10",
            "--step-seconds",
            "0.1",
            "--gpu-memory",
            "300",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(artifact["schema"], "unilab.soak.artifact/4");
    let summary = &artifact["summary"];
    assert_eq!(summary["peak_host_gpu_memory_used_mib"], 2048);
    assert_eq!(
        summary["peak_tree_gpu_memory_mib"], 300,
        "the tenant's 512 MiB is not ours"
    );
    let samples = artifact["samples"].as_array().unwrap();
    let known: Vec<&Value> = samples.iter().filter(|s| !s["gpus"].is_null()).collect();
    assert!(!known.is_empty(), "{samples:?}");
    for sample in &known {
        let gpus = sample["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0]["uuid"], gpu);
        assert_eq!(gpus[0]["index"], 0);
        assert_eq!(gpus[0]["utilization_percent"], 55);
        assert_eq!(gpus[0]["memory_used_mib"], 2048);
        assert_eq!(gpus[0]["memory_total_mib"], 143771);
        // Unknown is null, not 0.
        assert_eq!(gpus[1]["memory_used_mib"], Value::Null);
        assert_eq!(gpus[1]["tree_memory_mib"], 0);
        assert_eq!(sample["host_gpu_memory_used_mib"], 2048);
    }
    assert!(
        known
            .iter()
            .any(|s| s["gpus"][0]["tree_memory_mib"] == 300 && s["tree_gpu_memory_mib"] == 300),
        "{known:?}"
    );
    // Until nvidia-smi first answers, the GPUs are unknown: null, not zeros, and no error.
    for sample in samples.iter().filter(|s| s["gpus"].is_null()) {
        assert_eq!(sample["host_gpu_memory_used_mib"], Value::Null);
        assert_eq!(sample["tree_gpu_memory_mib"], Value::Null);
    }
    assert_eq!(artifact["runtime"]["gpu"]["gpus"][0]["name"], "NVIDIA H200");
    assert_eq!(artifact["runtime"]["gpu"]["driver_version"], "580.95.05");
    assert_eq!(artifact["runtime"]["gpu"]["cuda_version"], "13.0");
}

#[test]
fn a_hung_nvidia_smi_neither_delays_the_start_nor_outlives_the_soak() {
    let soak = Soak::new();
    let pids = soak.root.root().join("smi-pids");
    let mut cmd = soak.unilab();
    // Longer than the whole soak: a poll is in flight when it ends.
    cmd.env("FAKE_NVIDIA_SMI_MODE", "hang")
        .env("FAKE_NVIDIA_SMI_PIDS", &pids)
        .env("UNILAB_TOOL_TIMEOUT", "20");
    let started = Instant::now();
    let (output, artifact) = soak.run_with(cmd, &[], &["--steps", "6", "--step-seconds", "0.1"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "the runtime snapshot waited {:?} for nvidia-smi",
        started.elapsed()
    );
    let errors = artifact["runtime"]["errors"].to_string();
    assert!(errors.contains("did not answer within 2 s"), "{errors}");
    let pids = std::fs::read_to_string(&pids).unwrap();
    assert!(
        pids.lines().count() >= 2,
        "the snapshot's and the poller's: {pids}"
    );
    for pid in pids.lines() {
        let pid: u64 = pid.parse().unwrap();
        assert!(
            proc_stat(pid).is_none(),
            "nvidia-smi {pid} outlived the soak (or was left unreaped)"
        );
    }
}

/// The GPUs are read from nvidia-smi's loop mode, not a process a sample: a stream that exits
/// or stops printing is a recorded fault, is killed and started again, and the samples after it
/// have GPUs again; no nvidia-smi the soak started outlives it.
#[test]
fn the_gpu_stream_recovers_from_an_exit_and_a_hang_and_leaves_nothing_behind() {
    for (mode, says) in [
        // A second of readings before each failure, so that a loaded machine still sees the
        // GPUs come back between two failures.
        ("exit-after:10", "stream ended"),
        ("hang-after:10", "did not answer within"),
    ] {
        let soak = Soak::new();
        let pids = soak.root.root().join("smi-pids");
        let mut cmd = soak.unilab();
        // Two seconds for each start to answer: the fake is a Python program, slow to start on
        // a loaded machine (one second was not always enough beside a release build).
        cmd.env("FAKE_NVIDIA_SMI_STREAM", mode)
            .env("FAKE_NVIDIA_SMI_PIDS", &pids)
            .env("UNILAB_TOOL_TIMEOUT", "2");
        let (output, artifact) = soak.run_with(
            cmd,
            &["--sample-interval", "0.1"],
            &["--steps", "120", "--step-seconds", "0.1"],
        );
        assert_eq!(output.status.code(), Some(0), "{mode}: {output:?}");
        let samples = artifact["samples"].as_array().unwrap();
        let fault = samples
            .iter()
            .position(|s| {
                s["errors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e.as_str().unwrap().contains(says))
            })
            .unwrap_or_else(|| panic!("{mode}: no fault recorded: {samples:?}"));
        assert!(
            samples[fault..].iter().any(|s| s["gpus"].is_array()),
            "{mode}: the GPUs never came back after sample {fault}"
        );
        let started: Vec<i32> = std::fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert!(started.len() >= 4, "{mode}: restarted: {started:?}");
        for pid in started {
            assert!(
                within(Duration::from_secs(2), || exited(pid)),
                "{mode}: nvidia-smi {pid} outlived the soak"
            );
        }
    }
}

/// An `nvidia-smi` flooding its output grew the supervisor without bound (2.3 GB): the runtime
/// snapshot's query and the loop-mode streams read at most a capped amount (a line, the GPUs and
/// compute processes of one reading); past it the stream is a fault, killed and restarted, and
/// the soak is judged on its progress as with a hung one. Run under a 1 GiB address-space limit.
#[test]
fn an_nvidia_smi_that_floods_its_output_is_a_recorded_fault_not_a_memory_leak() {
    for (mode, says) in [
        ("flood", "printed a line of more than 64 KiB"),
        ("flood-lines", "listed more than 1024 GPUs"),
    ] {
        let soak = Soak::new();
        let mut cmd = soak.command();
        cmd.env("FAKE_NVIDIA_SMI_MODE", mode)
            .env("UNILAB_TOOL_TIMEOUT", "2")
            .args(["--json", "soak", "run", "--sample-interval", "0.2"])
            .args(soak.trainer_soak(&[], &["--steps", "15", "--step-seconds", "0.2"]));
        let output = with_address_space_limit(&cmd, 1 << 30).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{mode}: {output:?}");
        let artifact: Value =
            serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
        let errors: Vec<&str> = artifact["samples"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["errors"].as_array().unwrap())
            .map(|e| e.as_str().unwrap())
            .collect();
        assert!(
            errors.iter().any(|e| e.contains(says)),
            "{mode}: {errors:?}"
        );
        assert!(
            artifact["runtime"]
                .to_string()
                .contains("wrote more than 4 MiB"),
            "{mode}: the snapshot says why it has no GPUs: {}",
            artifact["runtime"]
        );
    }
}
