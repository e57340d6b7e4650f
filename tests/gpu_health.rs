//! GPU health in the soak's GPU stream: the fake `nvidia-smi` reports the health fields as the
//! real one does, under either driver's spelling of the throttle mask and with fields a driver
//! does not know, and a GPU stream started on it keeps streaming whatever fields its driver
//! refuses. (The health figures themselves are read by crate-private code: its tests against
//! this fake are in `src/gpu/stream.rs`.)

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use unilab::testing::Tool;
use unilab::testing::sampler::GpuStream;

use crate::common::*;

const UUID: &str = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f";
const HEALTH: &str = "temperature.gpu,power.draw,clocks.sm,ecc.errors.uncorrected.volatile.total,retired_pages.pending";

fn smi(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(fixtures_dir().join("nvidia-smi"));
    for variable in [
        "FAKE_NVIDIA_SMI_GPUS",
        "FAKE_NVIDIA_SMI_MODE",
        "FAKE_NVIDIA_SMI_DRIVER",
        "FAKE_NVIDIA_SMI_HEALTH",
        "FAKE_NVIDIA_SMI_HEALTH_FILE",
        "FAKE_NVIDIA_SMI_UNKNOWN_FIELDS",
    ] {
        cmd.env_remove(variable);
    }
    cmd.envs(env.iter().copied()).args(args).output().unwrap()
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn query_gpu(fields: &str) -> [String; 2] {
    [
        format!("--query-gpu={fields}"),
        "--format=csv,noheader,nounits".to_owned(),
    ]
}

/// Asserts that `output` is nvidia-smi's refusal of `field`: the message on standard output,
/// exit code 2.
fn assert_refused(output: &Output, field: &str) {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        text(output).trim(),
        format!("Field \"{field}\" is not a valid field to query.")
    );
}

#[test]
fn the_fake_nvidia_smi_reports_the_mask_under_each_drivers_spelling() {
    let both = query_gpu(&format!(
        "index,{HEALTH},clocks_event_reasons.active,clocks_throttle_reasons.active"
    ));
    let both: Vec<&str> = both.iter().map(String::as_str).collect();
    let out = smi(&[], &both);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out),
        "0, 45, 120.50, 1980, 0, No, 0x0000000000000000, 0x0000000000000000\n",
        "a driver since 535 knows both spellings"
    );

    let old = [("FAKE_NVIDIA_SMI_DRIVER", "old")];
    assert_refused(&smi(&old, &both), "clocks_event_reasons.active");
    let throttle = query_gpu("index,clocks_throttle_reasons.active,driver_version");
    let throttle: Vec<&str> = throttle.iter().map(String::as_str).collect();
    let out = smi(
        &[
            ("FAKE_NVIDIA_SMI_DRIVER", "old"),
            ("FAKE_NVIDIA_SMI_HEALTH", "|||0x0000000000000044"),
        ],
        &throttle,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out), "0, 0x0000000000000044, 525.147.05\n");
}

#[test]
fn the_fake_nvidia_smi_gives_each_gpu_its_health_and_units_unless_asked_not_to() {
    let gpus = format!("{UUID}|NVIDIA H200|143771|0|0;GPU-bbbb2222|NVIDIA H200|143771|0|0");
    let env = [
        ("FAKE_NVIDIA_SMI_GPUS", gpus.as_str()),
        (
            "FAKE_NVIDIA_SMI_HEALTH",
            "83|690.25|1410|0x0000000000000008|2|Yes;[N/A]|[Not Supported]|[Unknown Error]|[N/A]|[N/A]|[N/A]",
        ),
    ];
    let fields = format!("index,{HEALTH},clocks_event_reasons.active");
    let out = smi(
        &env,
        &[
            &format!("--query-gpu={fields}"),
            "--format=csv,noheader,nounits",
        ],
    );
    assert_eq!(
        text(&out),
        "0, 83, 690.25, 1410, 2, Yes, 0x0000000000000008\n\
         1, [N/A], [Not Supported], [Unknown Error], [N/A], [N/A], [N/A]\n"
    );
    let out = smi(
        &env,
        &["--query-gpu=power.draw,clocks.sm", "--format=csv,noheader"],
    );
    assert_eq!(
        text(&out),
        "690.25 W, 1410 MHz\n[Not Supported], [Unknown Error]\n"
    );
}

#[test]
fn the_fake_nvidia_smi_refuses_the_fields_it_is_told_it_does_not_know() {
    let unknown = [("FAKE_NVIDIA_SMI_UNKNOWN_FIELDS", "power.draw, gpu_name")];
    let query = query_gpu(&format!("index,{HEALTH}"));
    let query: Vec<&str> = query.iter().map(String::as_str).collect();
    assert_refused(&smi(&unknown, &query), "power.draw");
    // In loop mode too: it exits at once rather than print rows without the field.
    let mut looping = query.clone();
    looping.extend(["-lms", "50"]);
    assert_refused(&smi(&unknown, &looping), "power.draw");
    assert_refused(
        &smi(
            &unknown,
            &["--query-compute-apps=pid,gpu_name", "--format=csv,noheader"],
        ),
        "gpu_name",
    );
    let out = smi(
        &unknown,
        &["--query-gpu=index,temperature.gpu", "--format=csv,noheader"],
    );
    assert_eq!(text(&out), "0, 45\n");
}

/// Replaces `path` at once, so that the fake never reads half of it.
fn replace(path: &Path, text: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, text).unwrap();
    std::fs::rename(&new, path).unwrap();
}

#[test]
fn the_fake_nvidia_smi_reads_its_health_file_anew_at_each_iteration() {
    let dir = private_tempdir("unilab-health-");
    let file = dir.path().join("health");
    replace(&file, "50|||0x0000000000000001");
    let mut looping = Command::new(fixtures_dir().join("nvidia-smi"))
        .env_remove("FAKE_NVIDIA_SMI_GPUS")
        .env_remove("FAKE_NVIDIA_SMI_HEALTH")
        .env("FAKE_NVIDIA_SMI_HEALTH_FILE", &file)
        .args([
            "--query-gpu=temperature.gpu,clocks_event_reasons.active",
            "--format=csv,noheader,nounits",
            "-lms",
            "50",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(looping.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert_eq!(first, "50, 0x0000000000000001");
    replace(&file, "91|||0x0000000000000040");
    // A line or two printed before the change may still be in the pipe.
    let changed = lines
        .by_ref()
        .take(100)
        .map(Result::unwrap)
        .find(|line| line != &first);
    looping.kill().unwrap();
    looping.wait().unwrap();
    assert_eq!(changed.as_deref(), Some("91, 0x0000000000000040"));
}

/// The fake run with `env` set: a wrapper script in `dir`, written by a child process so that
/// no thread of this test binary holds it open for writing while another one runs it
/// (`ETXTBSY`).
fn fake_with(dir: &Path, env: &[(&str, &str)]) -> PathBuf {
    let mut script = String::from("#!/bin/sh\n");
    for (name, value) in env {
        script.push_str(&format!("export {name}='{value}'\n"));
    }
    script.push_str(&format!(
        "exec '{}' \"$@\"\n",
        fixtures_dir().join("nvidia-smi").display()
    ));
    let path = dir.join("nvidia-smi");
    let mut writer = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(&path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    writer
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(writer.wait().unwrap().success());
    path
}

/// A stream whose driver refuses health fields — the new spelling of the mask (an old driver),
/// the old one too, and others — still gives every reading, with no error: what it refuses is
/// left out of its query, never a fault.
#[test]
fn a_gpu_stream_streams_on_whatever_health_fields_its_driver_refuses() {
    for unknown in [
        "",
        "clocks_throttle_reasons.active",
        "temperature.gpu,power.draw,clocks.sm,clocks_throttle_reasons.active,\
         ecc.errors.uncorrected.volatile.total,retired_pages.pending",
    ] {
        let dir = private_tempdir("unilab-health-");
        let fake = fake_with(
            dir.path(),
            &[
                ("FAKE_NVIDIA_SMI_DRIVER", "old"),
                ("FAKE_NVIDIA_SMI_UNKNOWN_FIELDS", unknown),
                (
                    "FAKE_NVIDIA_SMI_GPUS",
                    &format!("{UUID}|NVIDIA H200|143771|2048|37"),
                ),
            ],
        );
        let stream = GpuStream::start(
            Tool::new(fake.as_os_str(), Duration::from_secs(10)),
            Duration::from_millis(100),
            None,
        );
        let mut last = None;
        let streaming = within(Duration::from_secs(30), || {
            let reading = stream.reading(&[]);
            let done = reading.0.is_some();
            last = Some(reading);
            done
        });
        let (gpus, error) = last.unwrap();
        assert!(streaming, "{unknown:?}: no reading: {error:?}");
        let gpus = gpus.unwrap();
        assert_eq!(gpus.len(), 1, "{unknown:?}");
        assert_eq!(gpus[0].uuid, UUID);
        assert_eq!(gpus[0].memory_used_mib, Some(2048), "{unknown:?}");
        assert_eq!(gpus[0].utilization_percent, Some(37), "{unknown:?}");
        assert_eq!(error, None, "{unknown:?}");
    }
}
