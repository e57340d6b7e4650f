//! Which GPU a command means: selectors in every form, the visibility mask, multi-GPU modes and MIG
//! refused by `start`, the topology `plan` gives, and `env`/`exec` on any selector of one GPU.

use predicates::prelude::*;
use serde_json::Value;

use super::*;

#[test]
fn two_visible_gpus_need_a_selector() {
    let host = Host::two_gpus();
    refused(
        host.unilab().args(["mps", "start"]),
        3,
        &[
            "2 GPUs are visible, so a selector is needed",
            GPU_A,
            GPU_B,
            "hint: pass one",
        ],
    );
    assert!(
        !host.root.log_path().exists(),
        "a refused start records nothing"
    );
}

#[test]
fn every_selector_form_resolves_through_doctor() {
    let host = Host::two_gpus();
    let selector = |sel: &str, mask: Option<&str>| -> Value {
        let mut cmd = host.unilab();
        if let Some(mask) = mask {
            cmd.env("CUDA_VISIBLE_DEVICES", mask);
        }
        let out = cmd
            .args(["--json", "mps", "doctor", sel])
            .assert()
            .get_output()
            .stdout
            .clone();
        let report: Value = serde_json::from_slice(&out).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "selector")
            .cloned()
            .unwrap()
    };
    assert!(
        selector("1", None)["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_B)
    );
    assert!(
        selector("GPU-1111", None)["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_A)
    );
    // Under a mask, ordinals follow the mask's order.
    assert!(
        selector("0", Some("1,0"))["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_B)
    );
    assert!(
        selector("0", Some(GPU_B))["detail"]
            .as_str()
            .unwrap()
            .contains(GPU_B)
    );
    assert!(
        selector("1", Some("1"))["detail"]
            .as_str()
            .unwrap()
            .contains("GPU 1 is not visible")
    );
    // The mask stops at its first invalid entry.
    assert!(
        selector("1", Some("0,GPU-ffff,1"))["detail"]
            .as_str()
            .unwrap()
            .contains("not visible")
    );
    assert!(
        selector("all", Some(""))["detail"]
            .as_str()
            .unwrap()
            .contains("no GPU is visible")
    );
    assert_eq!(selector("all", Some("0"))["status"], "ok");
    for (sel, mode) in [
        ("0,1", "single_task_multi_gpu"),
        ("each:0,1", "task_per_gpu"),
        ("all", "single_task_multi_gpu"),
    ] {
        let check = selector(sel, None);
        assert_eq!(check["status"], "fail", "{sel}");
        assert!(
            check["detail"].as_str().unwrap().contains(mode),
            "{sel}: {check}"
        );
    }
    assert!(
        selector("GPU-12", None)["detail"]
            .as_str()
            .unwrap()
            .contains("at least 4 hex digits")
    );
    assert!(
        selector("GPU-9999", None)["detail"]
            .as_str()
            .unwrap()
            .contains("no visible GPU matches")
    );

    let mask_check = {
        let report = host.json_with(
            &[("CUDA_VISIBLE_DEVICES", "0,7,1")],
            &["mps", "doctor", "0"],
        );
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "visibility mask")
            .cloned()
            .unwrap()
    };
    assert_eq!(mask_check["status"], "warn");
    assert!(
        mask_check["detail"]
            .as_str()
            .unwrap()
            .contains("stops at `7`")
    );
}

#[test]
fn multi_gpu_modes_and_mig_are_refused_by_start() {
    let host = Host::two_gpus();
    for (sel, mode) in [
        ("0,1", "single_task_multi_gpu"),
        ("each:0,1", "task_per_gpu"),
        ("all", "single_task_multi_gpu"),
    ] {
        refused(
            host.unilab().args(["mps", "start", sel]),
            3,
            &[
                &format!("resolves to {mode}"),
                "only single_gpu can start an MPS daemon",
            ],
        );
    }
    refused(
        host.unilab().args(["mps", "start", "MIG-GPU-1111aaaa/1/0"]),
        3,
        &["is a MIG device"],
    );
    refused(
        host.unilab()
            .env("CUDA_VISIBLE_DEVICES", "MIG-1111aaaa")
            .args(["mps", "start", "0"]),
        3,
        &["names the MIG device"],
    );
    assert!(!host.root.log_path().exists());
}

#[test]
fn plan_gives_the_topology_plan_for_every_selector_form_and_mask() {
    let host = Host::two_gpus();
    // (selector, mask, mode, GPUs in order, whether a daemon can start)
    for (selector, mask, mode, gpus, can_start) in [
        (Some("1"), None, "single_gpu", vec![GPU_B], true),
        (Some("GPU-1111"), None, "single_gpu", vec![GPU_A], true),
        (Some(GPU_B), None, "single_gpu", vec![GPU_B], true),
        // Ordinals follow the mask's order; the mask may name GPUs by UUID.
        (Some("0"), Some("1,0"), "single_gpu", vec![GPU_B], true),
        (Some("0"), Some(GPU_B), "single_gpu", vec![GPU_B], true),
        (None, Some("1"), "single_gpu", vec![GPU_B], true),
        // The mask stops at its first invalid entry, keeping what came before.
        (
            Some("all"),
            Some("0,GPU-ffff,1"),
            "single_gpu",
            vec![GPU_A],
            true,
        ),
        (
            Some("0,1"),
            None,
            "single_task_multi_gpu",
            vec![GPU_A, GPU_B],
            false,
        ),
        (
            Some("1,0"),
            None,
            "single_task_multi_gpu",
            vec![GPU_B, GPU_A],
            false,
        ),
        (
            Some("each:0,1"),
            None,
            "task_per_gpu",
            vec![GPU_A, GPU_B],
            false,
        ),
        (
            Some("all"),
            None,
            "single_task_multi_gpu",
            vec![GPU_A, GPU_B],
            false,
        ),
        (Some("all"), Some("0"), "single_gpu", vec![GPU_A], true),
    ] {
        let (code, plan) = plan(&host, selector, mask);
        let case = format!("{selector:?} under {mask:?}: {plan}");
        assert_eq!(code, 0, "{case}");
        assert_eq!(plan["selector"], selector.unwrap_or(""), "{case}");
        assert_eq!(plan["topology_mode"], mode, "{case}");
        assert_eq!(uuids(&plan), gpus, "{case}");
        assert_eq!(plan["can_start"], can_start, "{case}");
        assert_eq!(plan["cannot_start"].is_null(), can_start, "{case}");
        assert_eq!(
            plan["cuda_visible_devices"],
            mask.map_or(Value::Null, Value::from),
            "{case}"
        );
        if !can_start {
            assert!(
                plan["cannot_start"]
                    .as_str()
                    .unwrap()
                    .contains("only single_gpu can start"),
                "{case}"
            );
        }
    }
    let (_, stopped) = plan(&host, Some("all"), Some("0,GPU-ffff,1"));
    assert_eq!(stopped["mask_stopped_at"]["entry"], "GPU-ffff");

    // No selector with two GPUs: not an error; a single-GPU choice for each, by UUID.
    let (code, ambiguous) = plan(&host, None, None);
    assert_eq!(code, 0);
    assert_eq!(ambiguous["topology_mode"], Value::Null);
    assert_eq!(ambiguous["can_start"], false);
    let choices = ambiguous["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[1]["selector"], GPU_B);
    assert_eq!(choices[1]["topology_mode"], "single_gpu");
    assert_eq!(uuids(&choices[1]), [GPU_B]);

    // Selectors that name no GPU are refused, saying why.
    for (selector, mask, says) in [
        ("1", Some("1"), "GPU 1 is not visible"),
        ("all", Some(""), "no GPU is visible"),
        ("GPU-12", None, "at least 4 hex digits"),
        ("GPU-9999", None, "no visible GPU matches"),
        ("0,0", None, "names GPU"),
        ("MIG-GPU-1111aaaa/1/0", None, "is a MIG device"),
        ("0", Some("MIG-1111aaaa"), "names the MIG device"),
    ] {
        let (code, stderr) = plan(&host, Some(selector), mask);
        assert_eq!(code, 3, "{selector} under {mask:?}");
        assert!(
            stderr.as_str().unwrap().contains(says),
            "{selector}: {stderr}"
        );
    }

    // The text form says the same, and doctor carries the same object under `plan`.
    host.unilab()
        .args(["mps", "plan", "0,1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("mode: single_task_multi_gpu"))
        .stdout(predicate::str::contains(GPU_B))
        .stdout(predicate::str::contains("start: no:"));
    let (_, planned) = plan(&host, Some("GPU-2222"), None);
    assert_eq!(host.json(&["mps", "doctor", "GPU-2222"])["plan"], planned);
    assert!(!host.root.log_path().exists(), "plan records nothing");
}

#[test]
fn env_and_exec_take_any_selector_that_names_one_gpu() {
    let host = Host::two_gpus();
    let b = host.start(&["1"]);
    for selector in ["1", "GPU-2222", GPU_B] {
        let env = host.json(&["mps", "env", "--gpu", selector]);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], GPU_B, "{selector}");
    }
    refused(
        host.unilab().args(["mps", "env", "--gpu", "0"]),
        3,
        &[&format!("no live daemon serves {GPU_A}")],
    );
    refused(
        host.unilab().args(["mps", "env", "--gpu", "0,1"]),
        3,
        &["selects 2 GPUs"],
    );
    host.unilab()
        .args(["mps", "exec", "--gpu", "1", "--", "true"])
        .assert()
        .success();
    host.unilab().args(["mps", "stop"]).assert().success();
    assert!(gone(b["pid"].as_u64().unwrap()));
}
