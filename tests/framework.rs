//! `mps doctor --python`: the framework's view of the GPUs (a stand-in torch on `PYTHONPATH`)
//! checked against unilab's — the same GPUs in the same order, or a failed check that says why
//! and what to set.

use crate::common::*;
use serde_json::Value;

const TWO_GPUS: &str = "GPU-1111aaaa-0000-4000-8000-000000000001|NVIDIA H200|143771|20000|37;\
                        GPU-2222bbbb-0000-4000-8000-000000000002|NVIDIA H200|143771|1000|5";

/// `mps doctor 0 --python python3 --json` with the stand-in torch seeing `uuids`: its exit code
/// and its `framework` check.
fn doctor_with_torch(uuids: &str) -> (Option<i32>, Value) {
    let root = TestRoot::new();
    let output = root
        .unilab()
        .env("FAKE_NVIDIA_SMI_GPUS", TWO_GPUS)
        .env("PYTHONPATH", fixtures_dir().join("fake-torch"))
        .env("FAKE_TORCH_UUIDS", uuids)
        .args(["--json", "mps", "doctor", "0", "--python", "python3"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "framework")
        .cloned()
        .expect("a framework check");
    (output.status.code(), check)
}

#[test]
fn a_framework_that_sees_unilabs_gpus_in_its_order_passes() {
    let (code, check) = doctor_with_torch(
        "GPU-1111aaaa-0000-4000-8000-000000000001,GPU-2222bbbb-0000-4000-8000-000000000002",
    );
    assert_eq!(code, Some(0), "{check}");
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("torch 2.5.0+fake")
    );
}

#[test]
fn a_framework_that_numbers_the_gpus_otherwise_fails_with_the_order_to_set() {
    let (code, check) = doctor_with_torch(
        "GPU-2222bbbb-0000-4000-8000-000000000002,GPU-1111aaaa-0000-4000-8000-000000000001",
    );
    assert_eq!(code, Some(3), "{check}");
    assert_eq!(check["status"], "fail");
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains("CUDA_DEVICE_ORDER=PCI_BUS_ID")
    );
    let (code, check) = doctor_with_torch("");
    assert_eq!(code, Some(3));
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("sees no CUDA device"),
        "{check}"
    );
}

#[test]
fn a_python_without_torch_is_a_failed_check_not_a_crash() {
    let root = TestRoot::new();
    // A torch that does not import, whatever this host has installed.
    let broken = root.root().join("broken");
    std::fs::create_dir_all(broken.join("torch")).unwrap();
    std::fs::write(
        broken.join("torch/__init__.py"),
        "raise ModuleNotFoundError(\"No module named 'torch'\")\n",
    )
    .unwrap();
    let output = root
        .unilab()
        .args(["--json", "mps", "doctor", "0", "--python", "python3"])
        .env("PYTHONPATH", &broken)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "framework")
        .unwrap();
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("No module named 'torch'"),
        "{check}"
    );
}
