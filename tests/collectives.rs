//! The collectives named (issue 49): a soak sets PyTorch's flight recorder variables for its
//! command (never over the user's), asks each rank that runs `unilab.watch_collectives()` for
//! its collectives at the capture, and records them in the evidence; a rank that does not
//! watch is named with why. Real soaks of a Python trainer over the fake `torch.distributed` of
//! `tests/fixtures/fake-torch`, whose recorder says: enqueued 8, completed 7, `gloo:all_reduce`
//! #8 pending — as a rank stuck in all-reduce 8 says.

use serde_json::Value;

use crate::common::*;
use crate::soak::Soak;

/// Writes the FR variables it was given to `env.json`, watches (or not), makes progress once,
/// then hangs its main thread as a rank blocked in a collective does.
const TRAINER: &str = r#"
import json, os, sys, threading
names = ["TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT",
         "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
         "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "UNILAB_COLLECTIVES_DIR", "TORCH_WORKER_SERVER_SOCKET"]
progress = sys.argv[1]
with open(os.path.join(progress, "..", "env.json"), "w") as f:
    json.dump({n: os.environ.get(n) for n in names}, f)
if sys.argv[2] == "watch":
    import unilab
    assert unilab.watch_collectives()
if sys.argv[2] == "serve":
    # torch's worker server, as `control_plane.worker_main()` runs it: HTTP on a Unix socket.
    import http.server, socketserver
    import torch._C._distributed_c10d as c10d
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = c10d._dump_fr_trace_json().encode() if self.path.startswith("/handler/fr_trace_json") else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def address_string(self):
            return "unix"
    server = socketserver.UnixStreamServer(os.environ["TORCH_WORKER_SERVER_SOCKET"], Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
if sys.argv[2] in ("pipe", "dumped"):
    # torch's own paths, as ProcessGroupNCCL takes them: a FIFO `<PIPE_FILE><rank>.pipe` whose
    # positive number asks for a dump to `<TEMP_FILE><rank>`; or a dump written on a timeout.
    import torch._C._distributed_c10d as c10d
    rank = os.environ["RANK"]
    def dump(prefix):
        target = os.environ[prefix] + rank
        with open(target + ".tmp", "w") as f:
            f.write(c10d._dump_fr_trace_json())
        os.rename(target + ".tmp", target)
    if sys.argv[2] == "dumped":
        dump("TORCH_FR_DUMP_TEMP_FILE")
    else:
        fifo = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + rank + ".pipe"
        os.mkfifo(fifo)
        def serve():
            while True:
                with open(fifo) as f:
                    asked = f.read().strip()
                if asked and int(asked) > 0:
                    dump("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
        threading.Thread(target=serve, daemon=True).start()
with open(os.path.join(progress, "step-1"), "w") as f:
    f.write("1")
def all_reduce_of_step_8():
    threading.Event().wait()
all_reduce_of_step_8()
"#;

/// A soak of [`TRAINER`] as rank 2 (`watch` or not), failed stale after 2 s: its artifact, and
/// the variables the trainer was given.
fn hung_rank(soak: &Soak, watch: &str, env: &[(&str, &str)]) -> (Value, Value) {
    let runtime = private_tempdir("unilab-runtime-");
    let python_path = format!(
        "{}:{}",
        fixtures_dir().join("fake-torch").display(),
        python_package_dir().display()
    );
    let mut cmd = soak.unilab();
    cmd.env("XDG_RUNTIME_DIR", runtime.path())
        .env("PYTHONPATH", python_path)
        .env("RANK", "2")
        .env("FAKE_TORCH_DIST_RANK", "2");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd
        .args(["soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .args(["--sample-interval", "0.2", "--stale-progress", "2s"])
        .args(["--shutdown-grace", "0.5", "--py-spy", "off", "--"])
        .args(["python3", "-c", TRAINER])
        .arg(soak.progress())
        .arg(watch)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let given: Value =
        serde_json::from_slice(&std::fs::read(soak.progress().join("../env.json")).unwrap())
            .unwrap();
    assert!(
        !runtime
            .path()
            .join("unilab/soaks")
            .read_dir()
            .unwrap()
            .any(|_| true),
        "the runtime directory of the soak is removed"
    );
    (artifact, given)
}

/// The evidence's process of rank 2 (the trainer, not its guard).
fn rank_process(artifact: &Value) -> &Value {
    artifact["evidence"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["collectives"].is_object())
        .unwrap_or_else(|| panic!("no process with collectives: {:#}", artifact["evidence"]))
}

/// The trainer's FR variables point into the soak's runtime directory; the rank watching
/// answers the capture's request with its flight recorder (and its stacks, py-spy being off).
#[test]
fn a_watching_rank_gives_its_collectives_to_the_evidence() {
    let soak = Soak::new();
    let (artifact, given) = hung_rank(&soak, "watch", &[]);
    assert_eq!(artifact["outcome"]["failure_kind"], "stale_progress");
    let dir = given["UNILAB_COLLECTIVES_DIR"].as_str().unwrap();
    let id = artifact["soak_id"].as_str().unwrap();
    assert!(dir.ends_with(&format!("unilab/soaks/{id}/fr")), "{given}");
    assert_eq!(given["TORCH_FR_BUFFER_SIZE"], "2000");
    assert_eq!(given["TORCH_FR_DUMP_ON_TIMEOUT"], "1");
    assert_eq!(given["TORCH_FR_DUMP_TEMP_FILE"], format!("{dir}/rank_"));
    assert_eq!(
        given["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"],
        format!("{dir}/pipe_")
    );
    assert!(given["TORCH_WORKER_SERVER_SOCKET"].is_null(), "{given}");

    let process = rank_process(&artifact);
    assert_eq!(process["rank"], 2);
    let collectives = &process["collectives"];
    assert_eq!(
        collectives["sources"],
        serde_json::json!(["fifo"]),
        "{collectives:#}"
    );
    let group = &collectives["groups"][0];
    assert_eq!(
        (&group["last_enqueued"], &group["last_completed"]),
        (&Value::from(8), &Value::from(7)),
        "{collectives:#}"
    );
    assert_eq!(group["pending"][0]["op"], "gloo:all_reduce");
    assert_eq!(group["pending"][0]["seq"], 8);
    let stack = process["python_stack"].as_str().unwrap_or_default();
    assert!(stack.contains("all_reduce_of_step_8"), "{process:#}");

    // Recorded as set for the command.
    let history = soak
        .unilab()
        .args(["history", "--soak", id, "--json"])
        .output()
        .unwrap();
    let started: Value = String::from_utf8_lossy(&history.stdout)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|event| event["kind"] == "soak_started")
        .unwrap();
    let environment = &started["environment"];
    assert_eq!(
        environment["UNILAB_COLLECTIVES_DIR"], dir,
        "{environment:#}"
    );
    assert_eq!(
        environment["TORCH_FR_BUFFER_SIZE"], "2000",
        "{environment:#}"
    );
}

/// A rank without `unilab.watch_collectives()` is named with why nothing was had; what the
/// user set is theirs (`TORCH_FR_BUFFER_SIZE=0`, the opt-out, is kept).
#[test]
fn a_rank_that_does_not_watch_is_named_and_the_users_variables_are_kept() {
    let soak = Soak::new();
    let (artifact, given) = hung_rank(&soak, "no", &[("TORCH_FR_BUFFER_SIZE", "0")]);
    assert_eq!(given["TORCH_FR_BUFFER_SIZE"], "0");
    assert!(given["UNILAB_COLLECTIVES_DIR"].is_string(), "{given}");
    let collectives = &rank_process(&artifact)["collectives"];
    assert_eq!(collectives["groups"], serde_json::json!([]));
    let missing = collectives["missing"][0].as_str().unwrap();
    assert!(
        missing.contains("no `unilab.watch_collectives()` runs in it"),
        "{collectives:#}"
    );
}

/// Three ranks of a job stuck in all-reduce 8 but rank 2, which never entered it (its recorder
/// says enqueued 7, completed 7): every rank's stack is the same, and `job show` names rank 2
/// by the collective — the suspect's first reason — with the ranks that wait in it; rank 1,
/// which entered it with another size, is named as a mismatch.
#[test]
fn the_rank_that_never_entered_the_collective_is_the_suspect() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-fr-job-");
    let python_path = format!(
        "{}:{}",
        fixtures_dir().join("fake-torch").display(),
        python_package_dir().display()
    );
    let children: Vec<_> = (0..3u32)
        .map(|rank| {
            let (mut cmd, progress) = job_rank_soak(&root, dir.path(), "J", rank);
            cmd.env("PYTHONPATH", &python_path)
                .env("RANK", rank.to_string())
                .env("FAKE_TORCH_DIST_RANK", rank.to_string())
                .env("FAKE_TORCH_FR_ENQUEUED", if rank == 2 { "7" } else { "8" })
                .env("FAKE_TORCH_FR_SIZE", if rank == 1 { "512" } else { "1024" })
                .args(["--run", "r1", "--sample-interval", "0.2"])
                .args(["--stale-progress", "3s", "--shutdown-grace", "0.5"])
                .args(["--py-spy", "off", "--", "python3", "-c", TRAINER])
                .arg(&progress)
                .arg("watch")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
    }
    let shown = root
        .unilab()
        .args(["--json", "job", "show", "J"])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let collective = &view["collective"];
    assert_eq!(
        collective["missing_ranks"],
        serde_json::json!([2]),
        "{view:#}"
    );
    assert_eq!(
        collective["waiting_ranks"],
        serde_json::json!([0, 1]),
        "{view:#}"
    );
    assert_eq!(collective["seq"], 8);
    assert_eq!(collective["op"], "gloo:all_reduce");
    assert_eq!(view["suspect"]["rank"], 2, "{view:#}");
    assert_eq!(view["suspect"]["why"], "collective", "{view:#}");
    let verdict = view["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(
            "rank 2 (its last completed is #7) never entered `gloo:all_reduce` #8 of group 0 (default_pg); ranks 0, 1 wait in it"
        ),
        "{verdict}"
    );
    // Rank 1 entered it with another size than rank 0.
    let mismatches = view["mismatches"].as_array().unwrap();
    assert_eq!(mismatches.len(), 1, "{view:#}");
    assert_eq!(mismatches[0]["kind"], "sizes");
    assert_eq!(mismatches[0]["seq"], 8);
    assert!(
        verdict.contains("collective #8 of group 0 differs in its sizes between ranks"),
        "{verdict}"
    );
}

/// A rank whose trainer serves torch's worker server on the socket the user named
/// (`TORCH_WORKER_SERVER_SOCKET`, which unilab never sets) is asked through it.
#[test]
fn a_rank_serving_torchs_worker_server_is_asked_through_it() {
    let soak = Soak::new();
    let sockets = private_tempdir("unilab-ws-");
    let socket = sockets.path().join("worker.sock");
    let socket = socket.to_str().unwrap();
    let (artifact, given) = hung_rank(&soak, "serve", &[("TORCH_WORKER_SERVER_SOCKET", socket)]);
    assert_eq!(given["TORCH_WORKER_SERVER_SOCKET"], socket);
    let collectives = &rank_process(&artifact)["collectives"];
    assert_eq!(
        collectives["sources"],
        serde_json::json!(["worker_server"]),
        "{collectives:#}"
    );
    assert_eq!(
        collectives["groups"][0]["last_enqueued"], 8,
        "{collectives:#}"
    );
    assert_eq!(
        collectives["missing"],
        serde_json::json!([]),
        "{collectives:#}"
    );
}

/// torch's own ways, as NCCL takes them, read too: the debug-info pipe unilab writes to at the
/// capture (`nccl_pipe`), and a dump torch wrote on a timeout (`dump_file`).
#[test]
fn torchs_pipe_and_its_own_dump_are_read() {
    for (mode, source) in [("pipe", "nccl_pipe"), ("dumped", "dump_file")] {
        let soak = Soak::new();
        let (artifact, _) = hung_rank(&soak, mode, &[]);
        let collectives = &rank_process(&artifact)["collectives"];
        assert_eq!(
            collectives["sources"],
            serde_json::json!([source]),
            "{mode}: {collectives:#}"
        );
        assert_eq!(
            collectives["groups"][0]["last_enqueued"], 8,
            "{collectives:#}"
        );
        assert_eq!(
            collectives["missing"],
            serde_json::json!([]),
            "{collectives:#}"
        );
    }
}
