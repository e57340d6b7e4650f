//! A host without `nvidia-smi` on `PATH`: a CPU-only machine, the first place a new user tries
//! unilab. `soak run` says once, at the start, that the GPU columns will be empty; the report
//! draws the absent tool as a note, not as a run of sampler errors; `soak compare` prints `-`
//! for the GPU figures it cannot know.

use crate::common::*;

use super::*;

/// `PATH` without the fakes and without any directory that holds an `nvidia-smi`, led by
/// `locked`, a directory this user may not search (unless root), as another user's home on
/// `PATH` is: the search for a program fails with "permission denied" rather than "not found".
fn path_without_nvidia_smi(locked: &std::path::Path) -> std::ffi::OsString {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(locked).unwrap();
    std::fs::set_permissions(locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path)
        .filter(|dir| *dir != fixtures_dir() && !dir.join("nvidia-smi").exists());
    std::env::join_paths(std::iter::once(locked.to_owned()).chain(dirs)).expect("a PATH")
}

/// A passing soak of the example trainer with no `nvidia-smi` to find: its standard error.
fn soak_without_nvidia_smi(soak: &Soak) -> String {
    soak_without_nvidia_smi_given(soak, &[])
}

/// [`soak_without_nvidia_smi`], `soak run` given `options`.
fn soak_without_nvidia_smi_given(soak: &Soak, options: &[&str]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let locked = soak.root.root().join("locked");
    let mut cmd = soak.unilab();
    cmd.env("PATH", path_without_nvidia_smi(&locked));
    let trainer = ["--steps", "12", "--step-seconds", "0.1"];
    let (output, artifact) = soak.run_with(cmd, options, &trainer);
    // Searchable again, for the test root's removal.
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(artifact["outcome"]["status"], "passed");
    stderr
}

/// Every passing soak on a host without nvidia-smi had its report shaded as sampler errors from
/// end to end, and `soak run` never said on the terminal that there would be no GPU data.
#[test]
fn without_nvidia_smi_soak_run_says_so_once_and_the_report_notes_it_without_error_bands() {
    let soak = Soak::new();
    let stderr = soak_without_nvidia_smi(&soak);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("no GPU tool"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    for part in [
        "`nvidia-smi`",
        "`PATH`",
        "GPU columns will be empty",
        "`UNILAB_NVIDIA_SMI`",
    ] {
        assert!(said[0].contains(part), "{part}: {stderr}");
    }
    let artifact = soak.artifact_path();
    let recorded = std::fs::read(&artifact).unwrap();
    let html = soak
        .unilab()
        .args(["soak", "report", "latest"])
        .output()
        .unwrap()
        .stdout;
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("no GPU tool"), "{html}");
    assert!(html.contains("class=\"note\""), "a note");
    assert_eq!(html.matches("class=\"band\"").count(), 0, "no error band");
    assert!(!html.contains("sampler errors"), "no sampler errors said");
    assert!(!html.contains("<ul class=\"errors\">"), "no error list");
    // The page is drawn from the record, which is as it was.
    assert_eq!(std::fs::read(&artifact).unwrap(), recorded);
}

/// `soak compare` printed `GPU throttled 0.0s 0.0s` for two soaks that had no GPU data.
#[test]
fn soak_compare_of_two_soaks_without_gpu_data_prints_a_dash_for_every_gpu_figure() {
    let soak = Soak::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        soak_without_nvidia_smi(&soak);
        let artifact: serde_json::Value =
            serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
        ids.push(artifact["soak_id"].as_str().unwrap().to_owned());
    }
    let output = soak
        .unilab()
        .args(["soak", "compare", &ids[0], &ids[1]])
        .output()
        .unwrap();
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    for figure in ["peak GPU memory", "GPU utilisation", "GPU throttled"] {
        let line = table
            .lines()
            .find(|l| l.starts_with(figure))
            .unwrap_or_else(|| panic!("{figure}: {table}"));
        let cells: Vec<&str> = line[figure.len()..].split_whitespace().collect();
        assert_eq!(cells, ["-", "-"], "{table}");
    }
    let json = soak
        .unilab()
        .args(["--json", "soak", "compare", &ids[0], &ids[1]])
        .output()
        .unwrap()
        .stdout;
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let throttled = json["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["figure"] == "GPU throttled")
        .unwrap();
    assert_eq!(throttled["a"], serde_json::Value::Null, "{throttled}");
    assert_eq!(throttled["b"], serde_json::Value::Null, "{throttled}");
}

/// The value of the series `name{soak="…"}` in the metrics file `text`.
fn series<'t>(text: &'t str, name: &str) -> &'t str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}{{soak=\"")))
        .and_then(|rest| rest.split_once("} "))
        .unwrap_or_else(|| panic!("no {name}: {text}"))
        .1
}

/// The samples' errors of the artifact at `path`, and its soak's id.
fn sampled_errors(path: &std::path::Path) -> (String, Vec<String>) {
    let artifact: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let errors = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["errors"].as_array().unwrap().clone())
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    (artifact["soak_id"].as_str().unwrap().to_owned(), errors)
}

/// On a host without nvidia-smi every sample recorded "`nvidia-smi` was not found": the metrics
/// file counted a sampler error a sample (`unilab_soak_sampler_errors_total` climbing, which an
/// alert on sampler errors pages for) and `history` said "1 sampler error" on every line. The
/// absent tool is said once, at the start; no sample errs for it, and the file says there is
/// no tool (`unilab_soak_gpu_tool_present 0`).
#[test]
fn without_nvidia_smi_no_sample_errs_and_the_metrics_file_counts_no_sampler_error() {
    let soak = Soak::new();
    let metrics = soak.root.root().join("unilab.prom");
    let metrics_arg = metrics.display().to_string();
    let stderr = soak_without_nvidia_smi_given(&soak, &["--metrics-file", &metrics_arg]);
    assert_eq!(stderr.matches("no GPU tool").count(), 1, "{stderr}");
    let (soak_id, errors) = sampled_errors(&soak.artifact_path());
    assert!(errors.is_empty(), "{errors:?}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert_eq!(series(&text, "unilab_soak_sampler_errors_total"), "0");
    assert_eq!(series(&text, "unilab_soak_gpu_tool_present"), "0");
    let history = soak
        .unilab()
        .args(["history", "--soak", &soak_id])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(history.contains("soak_sampled"), "{history}");
    assert!(!history.contains("sampler error"), "{history}");
}

/// A GPU tool that is there but fails (no driver) is still a sampler error, counted as such.
#[test]
fn a_gpu_tool_that_is_there_and_fails_is_still_a_sampler_error() {
    let soak = Soak::new();
    let metrics = soak.root.root().join("unilab.prom");
    let mut cmd = soak.unilab();
    cmd.env("FAKE_NVIDIA_SMI_MODE", "no-driver");
    let metrics_arg = metrics.display().to_string();
    let (output, _) = soak.run_with(
        cmd,
        &["--metrics-file", &metrics_arg],
        &["--steps", "20", "--step-seconds", "0.1"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("no GPU tool"), "{stderr}");
    let (_, errors) = sampled_errors(&soak.artifact_path());
    assert!(!errors.is_empty(), "the failures are recorded");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert_ne!(series(&text, "unilab_soak_sampler_errors_total"), "0");
    assert_eq!(series(&text, "unilab_soak_gpu_tool_present"), "1");
}
