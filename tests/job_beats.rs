//! A running job whose ranks only beat (their progress directories never change): `job show`
//! takes a beat as progress, as each rank's supervisor does, so the rank that stopped beating
//! is the one whose progress stopped first while the job still runs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const HUNG: u32 = 1;

/// Beats a step of ~0.1 s to `$UNILAB_HEARTBEAT`, `$1` steps, then waits without a beat.
const TRAINER: &str = r#"i=0
while [ "$i" -lt "$1" ]; do
  sleep 0.1
  i=$((i + 1))
  printf '{"step":%d}\n' "$i" >> "$UNILAB_HEARTBEAT"
done
sleep 3600"#;

fn rank_soak(root: &TestRoot, dir: &Path, rank: u32, steps: u32) -> Command {
    let (mut cmd, _) = job_rank_soak(root, dir, "B", rank);
    cmd.args(["--sample-interval", "0.2", "--stale-progress", "1h"])
        .args(["--allow-no-progress", "--py-spy", "off"])
        .args(["--", "sh", "-c", TRAINER, "sh"])
        .arg(steps.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Rank 0 beats for minutes, rank 1 for 20 steps and then hangs: while both still run, `job
/// show` names rank 1 as the rank whose progress stopped first (it said nothing: a running
/// rank's last progress was read from its directory alone).
#[test]
fn a_running_job_of_beating_ranks_names_the_one_that_stopped_beating() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-beats-");
    let mut started = Started::default();
    let pids = [
        started.spawn(&mut rank_soak(&root, dir.path(), 0, 3000)),
        started.spawn(&mut rank_soak(&root, dir.path(), HUNG, 20)),
    ];
    let mut view = Value::Null;
    eventually(
        "job show to see rank 1's progress stop first, by the margin",
        Duration::from_secs(120),
        || {
            std::thread::sleep(Duration::from_millis(250));
            let shown = root
                .unilab()
                .args(["--json", "job", "show", "B"])
                .output()
                .unwrap();
            let Ok(shown) = serde_json::from_slice::<Value>(&shown.stdout) else {
                return false;
            };
            view = shown;
            // A rank behind the other (started later on a loaded host) is no stalled rank:
            // until rank 1 hangs no rank may be named, and then rank 1 only.
            let named = &view["first_stalled"]["rank"];
            assert!(named.is_null() || *named == HUNG, "{view:#}");
            *named == HUNG
        },
    );
    assert_eq!(view["first_stalled"]["rank"], HUNG, "{view:#}");
    // Behind rank 0's step, and stalled: the suspect, first in the verdict.
    assert_eq!(view["suspect"]["rank"], HUNG, "{view:#}");
    assert_eq!(view["suspect"]["why"], "behind_step", "{view:#}");
    assert_eq!(
        view["suspect"]["disagreements"],
        serde_json::json!([]),
        "{view:#}"
    );
    for rank in view["ranks"].as_array().unwrap() {
        assert_eq!(rank["status"], "running", "{view:#}");
    }
    let verdict = view["verdict"].as_str().unwrap_or_default();
    assert!(
        verdict.starts_with(&format!("rank {HUNG} on "))
            && verdict.contains("progress stopped first"),
        "{verdict}"
    );
    for pid in pids {
        assert!(
            started.terminate(pid, Duration::from_secs(120)).is_some(),
            "rank soak {pid} ended on SIGTERM"
        );
    }
}
