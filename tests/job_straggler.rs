//! Stragglers in `job show`: four ranks of a job that beat their steps, one of them slower a
//! step, each on its own GPU of the fake nvidia-smi; the slow one named with its ratio to the
//! job's median step, and its GPU's power cap as the cause when the fake reports one.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const WORLD: u32 = 4;
const SLOW: u32 = 2;
const STEPS: u32 = 30;

/// The UUID of the fake's GPU `index`.
fn uuid(index: u32) -> String {
    format!(
        "GPU-{0}{0}{0}{0}{0}{0}{0}{0}-aaaa-4bbb-8ccc-dddddddddddd",
        index
    )
}

/// A trainer as a shell loop: it lists itself as a compute process on its GPU (the fake's apps
/// file, entries `;`-ended), waits for the file `$4`, then beats `STEPS` steps of ~0.1 s (plus
/// `$3` seconds each) to `$UNILAB_HEARTBEAT`, each with its time. Arguments: GPU UUID, apps
/// file, extra sleep, the file to wait for.
const TRAINER: &str = r#"printf '%s|sh|1024|%s;' "$$" "$1" >> "$2"
while [ ! -e "$4" ]; do sleep 0.05; done
i=0
while [ "$i" -lt STEPS ]; do
  sleep 0.1
  [ "$3" = 0 ] || sleep "$3"
  i=$((i + 1))
  printf '{"step":%d,"phase":"train","t":%s,"loss":%s}\n' "$i" "$(date +%s.%N)" "0.$i" >> "$UNILAB_HEARTBEAT"
done"#;

/// `soak run --job S --rank R` over the trainer of rank `rank`, on GPU `rank`, with `health`
/// as the fake's GPU health; its artifact and standard error in `dir`.
fn rank_soak(root: &TestRoot, dir: &Path, rank: u32, health: &str) -> Command {
    let gpus: Vec<String> = (0..WORLD)
        .map(|i| format!("{}|NVIDIA H100 80GB HBM3|81559|1024|90", uuid(i)))
        .collect();
    let (mut cmd, _) = job_rank_soak(root, dir, "S", rank);
    cmd.env("TZ", "UTC")
        .env("FAKE_NVIDIA_SMI_GPUS", gpus.join(";"))
        .env("FAKE_NVIDIA_SMI_HEALTH", health)
        .env("FAKE_NVIDIA_SMI_APPS_FILE", dir.join("apps"))
        .args(["--sample-interval", "0.2", "--allow-no-progress"])
        .args([
            "--",
            "sh",
            "-c",
            &TRAINER.replace("STEPS", &STEPS.to_string()),
        ])
        .arg("sh")
        .arg(uuid(rank))
        .arg(dir.join("apps"))
        .arg(if rank == SLOW { "0.3" } else { "0" })
        .arg(dir.join("go"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("err-{rank}"))).unwrap());
    cmd
}

/// The four ranks run to their end, each passing, and `job show --json S`. The trainers start
/// stepping once every rank's soak has seen its tree on its GPU (the fake nvidia-smi, a Python
/// process, can take seconds to answer on a loaded machine), so that each rank's steps run
/// while its GPU is watched.
fn straggling_job(root: &TestRoot, health: &str) -> Value {
    let dir = private_tempdir("unilab-straggler-");
    let mut started = Started::default();
    let pids: Vec<u32> = (0..WORLD)
        .map(|rank| started.spawn(&mut rank_soak(root, dir.path(), rank, health)))
        .collect();
    eventually(
        "every rank's soak to see its tree on its GPU",
        Duration::from_secs(120),
        || {
            // Each look is a whole `job show`: a few a second is enough.
            std::thread::sleep(Duration::from_millis(250));
            let shown = root
                .unilab()
                .args(["--json", "job", "show", "S"])
                .output()
                .unwrap();
            serde_json::from_slice::<Value>(&shown.stdout).is_ok_and(|view| {
                view["ranks"].as_array().is_some_and(|ranks| {
                    ranks.len() == WORLD as usize
                        && ranks.iter().all(|r| r["gpu_utilization_mean"].is_number())
                })
            })
        },
    );
    std::fs::write(dir.path().join("go"), b"").unwrap();
    for (rank, pid) in pids.iter().enumerate() {
        let code = started.exit_code(*pid, Duration::from_secs(300));
        let err =
            std::fs::read_to_string(dir.path().join(format!("err-{rank}"))).unwrap_or_default();
        assert_eq!(code, Some(0), "rank {rank}'s soak: {err}");
    }
    let shown = root
        .unilab()
        .args(["--json", "job", "show", "S"])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let ranks = view["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), WORLD as usize, "{view:#}");
    for rank in ranks {
        assert_eq!(rank["last_step"], STEPS, "{view:#}");
        assert!(
            rank["median_step_seconds"].as_f64().unwrap() > 0.0,
            "{view:#}"
        );
    }
    view
}

/// The one straggler of `view`: rank 2, over 1.15× the job's median step.
fn the_straggler(view: &Value) -> &Value {
    let stragglers = view["stragglers"].as_array().unwrap();
    assert_eq!(stragglers.len(), 1, "{view:#}");
    let straggler = &stragglers[0];
    assert_eq!(straggler["rank"], SLOW, "{view:#}");
    assert!(straggler["ratio"].as_f64().unwrap() > 1.15, "{view:#}");
    assert_eq!(
        straggler["median_step_seconds"],
        view["ranks"][SLOW as usize]["median_step_seconds"]
    );
    straggler
}

/// Rank 2 sleeps 0.3 s more a step, on a GPU the fake says is capped for power
/// (`sw_power_cap`) at a lower clock: `job show` names it, the cause says so, the verdict of
/// the job (nothing failed) names it, and so does the text.
#[test]
fn job_show_names_the_slow_rank_and_its_power_cap() {
    let root = TestRoot::new();
    let view = straggling_job(&root, ";;|250.00|1400|0x0000000000000004;");
    let straggler = the_straggler(&view);
    let cause = straggler["cause"]
        .as_str()
        .unwrap_or_else(|| panic!("{view:#}"));
    assert!(
        cause.starts_with("GPU 2 (GPU-22222222…) throttled for power (sw_power_cap) in "),
        "{cause}"
    );
    assert!(cause.contains("the other ranks' GPUs in 0 %"), "{cause}");
    let verdict = view["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(&format!("rank {SLOW} on ")) && verdict.contains("straggles"),
        "{verdict}"
    );

    let table = root.unilab().args(["job", "show", "S"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("STEP TIME"), "{table}");
    assert!(
        table.contains("stragglers (median step over 1.15× the job's"),
        "{table}"
    );
    assert!(table.contains("sw_power_cap"), "{table}");
}

/// The same job with every GPU healthy: rank 2 is still the straggler, with no cause.
#[test]
fn without_a_throttle_the_straggler_has_no_cause() {
    let root = TestRoot::new();
    let view = straggling_job(&root, "");
    assert_eq!(the_straggler(&view)["cause"], Value::Null, "{view:#}");
}
