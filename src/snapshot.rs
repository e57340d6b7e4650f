//! `runtime_snapshot`: where a run came from and what it ran on — source, GPU, software and
//! environment provenance — with credentials redacted. Soaks embed it in their artifacts.
//!
//! Everything is read from files and command-line tools (`git`, `nvidia-smi`, `python3`) under
//! the one tool timeout (`UNILAB_TOOL_TIMEOUT`), never from a GPU framework, so it works while a trainer owns the GPU. What cannot be
//! read is `null`, with the reason in `errors`.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::gpu::smi;
use crate::redact::{mask_argument, redact};
use crate::tool::{self, Tool};

/// Variables that describe a training run's setup, by prefix or exact name.
const ENV_PREFIXES: &[&str] = &[
    "CUDA_",
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "OMP_",
    "MKL_",
    "SLURM_",
    "NVIDIA_",
    "HF_",
    "TRANSFORMERS_",
    "WANDB_",
    "XLA_",
    "JAX_",
    "TF_",
    "UNILAB_",
];
const ENV_NAMES: &[&str] = &[
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "CUBLAS_WORKSPACE_CONFIG",
];

fn run(program: &str, args: &[&str], dir: &Path) -> Option<String> {
    let tool = tool::external(program);
    let mut cmd = tool.command();
    cmd.args(args).current_dir(dir);
    let out = tool.run(cmd, b"").ok()?;
    out.status.success().then(|| out.stdout.trim().to_owned())
}

fn source(dir: &Path) -> Value {
    let Some(commit) = run("git", &["rev-parse", "HEAD"], dir) else {
        return json!({ "directory": dir.display().to_string(), "git": null });
    };
    let status = run("git", &["status", "--porcelain"], dir).unwrap_or_default();
    let diff = run("git", &["diff", "HEAD"], dir).unwrap_or_default();
    json!({
        "directory": dir.display().to_string(),
        "git": {
            "commit": commit,
            "branch": run("git", &["rev-parse", "--abbrev-ref", "HEAD"], dir),
            "dirty": !status.is_empty(),
            "diff_blake3": (!diff.is_empty()).then(|| blake3::hash(diff.as_bytes()).to_hex().to_string()),
        }
    })
}

fn gpu(smi_tool: &Tool, errors: &mut Vec<String>) -> Value {
    let gpus = match smi::discover(smi_tool) {
        Ok(gpus) => gpus,
        Err(e) => {
            errors.push(format!("gpu: {e}"));
            return json!({ "driver_version": null, "cuda_version": null, "gpus": [] });
        }
    };
    let (driver, cuda) = smi::versions(smi_tool);
    json!({
        "driver_version": driver,
        "cuda_version": cuda,
        "gpus": gpus.iter().map(|g| json!({ "index": g.index, "uuid": g.uuid, "name": g.name })).collect::<Vec<_>>(),
    })
}

fn first_line_with(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':').or_else(|| l.split_once('=')))
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
}

fn software() -> Value {
    let uname = nix::sys::utsname::uname().ok();
    let memory_bytes = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024);
    let python = run("python3", &["--version"], Path::new("/"))
        .map(|v| v.trim_start_matches("Python ").to_owned());
    json!({
        "unilab": env!("CARGO_PKG_VERSION"),
        "kernel": uname.as_ref().map(|u| u.release().to_string_lossy().into_owned()),
        "machine": uname.as_ref().map(|u| u.machine().to_string_lossy().into_owned()),
        "os": first_line_with("/etc/os-release", "PRETTY_NAME"),
        "cpu": {
            "model": first_line_with("/proc/cpuinfo", "model name"),
            "logical_cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        },
        "memory_bytes": memory_bytes,
        "python": python,
    })
}

/// The environment variables worth keeping: a credential's value redacted, and in every other
/// value what a command line's argument would have masked (a URL's password, a pair's secret).
pub(crate) fn relevant_environment(
    vars: impl Iterator<Item = (String, String)>,
) -> Map<String, Value> {
    vars.filter(|(k, _)| {
        ENV_NAMES.contains(&k.as_str()) || ENV_PREFIXES.iter().any(|p| k.starts_with(p))
    })
    .map(|(k, v)| {
        let value = mask_argument(redact(&k, &v)).into_owned();
        (k, Value::String(value))
    })
    .collect()
}

/// The snapshot of `dir` (its git checkout, if any) on this host.
pub(crate) fn runtime_snapshot(dir: &Path, smi_tool: &Tool) -> Value {
    let mut errors = Vec::new();
    let gpu = gpu(smi_tool, &mut errors);
    json!({
        "source": source(dir),
        "gpu": gpu,
        "software": software(),
        "environment": relevant_environment(std::env::vars()),
        "errors": errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relevant_variables_are_kept_and_credentials_redacted() {
        let vars = [
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("WANDB_API_KEY", "secret-1"),
            ("HF_TOKEN", "secret-2"),
            ("NCCL_DEBUG", "INFO"),
            ("HOME", "/home/u"),
            ("VIRTUAL_ENV", "/venv"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = relevant_environment(vars.into_iter());
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0");
        assert_eq!(env["WANDB_API_KEY"], "[redacted]");
        assert_eq!(env["HF_TOKEN"], "[redacted]");
        assert_eq!(env["VIRTUAL_ENV"], "/venv");
        assert!(!env.contains_key("HOME"));
    }

    /// `unilab snapshot` printed a URL's password from the environment raw
    /// (`HF_ENDPOINT=https://bob:…@host`): only credential-named variables lost their values,
    /// and a soak's snapshot was masked only by the soak's own rule.
    #[test]
    fn a_urls_password_in_the_environment_is_masked() {
        let vars = [
            ("HF_ENDPOINT", "https://bob:pw12345@hub.example/x"),
            ("NCCL_SOCKET_IFNAME", "eth0"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = relevant_environment(vars.into_iter());
        assert_eq!(env["HF_ENDPOINT"], "https://bob:[redacted]@hub.example/x");
        assert_eq!(env["NCCL_SOCKET_IFNAME"], "eth0");
    }
}
