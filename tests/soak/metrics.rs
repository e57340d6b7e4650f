//! `soak run --metrics-file`: the file as Prometheus's own tools read it — `promtool check
//! metrics` (Debian's `prometheus`) and a real node_exporter's textfile collector
//! (`prometheus-node-exporter`) serving it on a loopback port — while the soak runs and after
//! its verdict; a file that cannot be written, said once and never failing the soak; and the
//! path checked before anything runs. CI installs both tools; elsewhere a test without them
//! checks the file alone, saying so.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

use super::*;

/// A trainer that beats and makes progress every 0.1 s until the file `$1` exists, then exits
/// with `$3`; its script has quotes, a backslash and a line feed, which the `command` label must
/// carry through the format's escaping.
const TRAINER: &str = r#"# a "quoted" \ comment, then a new line
i=0
while [ ! -e "$1" ]; do
  i=$((i+1))
  printf '{"step": %d, "loss": 0.5, "lr": 3e-4}\n' "$i" >> "$UNILAB_HEARTBEAT"
  date > "$2/p"
  sleep 0.1
done
exit "$3""#;

/// `name` on `PATH`, if this host has it; CI installs it, and there its absence fails the test.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "CI must install {name} (apt-get install {package})"
    );
    if found.is_none() {
        eprintln!("{name} not found (apt-get install {package}): that part of the test is skipped");
    }
    found
}

/// `promtool check metrics` on `text`: it must parse and pass the lint without a word.
fn promtool_accepts(promtool: &Path, text: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {:?} {said}\n{text}",
        out.status
    );
}

/// A node_exporter serving only its textfile collector over `dir`, on a loopback port; stopped
/// (by its pid) when dropped.
struct NodeExporter {
    child: Child,
    port: u16,
}

impl NodeExporter {
    fn start(program: &Path, dir: &Path, log: &Path) -> Self {
        // A free port, found by binding it, may be taken before node_exporter binds it: then
        // it exits, and another is tried.
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let mut child = Command::new(program)
                .args(["--collector.disable-defaults", "--collector.textfile"])
                .arg(format!("--collector.textfile.directory={}", dir.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .expect("node_exporter starts");
            let mut exporter = None;
            let up = within(Duration::from_secs(60), || {
                if child.try_wait().unwrap().is_some() {
                    return true;
                }
                exporter = get(port);
                exporter.is_some()
            });
            assert!(up, "node_exporter never answered");
            if exporter.is_some() {
                return NodeExporter { child, port };
            }
        }
        panic!(
            "node_exporter could not listen: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// What it serves now.
    fn metrics(&self) -> String {
        get(self.port).expect("node_exporter answers")
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` on the loopback `port`: the body of a 200 answer.
fn get(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
}

/// The value of `label` in the first line of `text` that starts with `series{`, unescaped as
/// the format's parsers read it.
pub(super) fn label_value(text: &str, series: &str, label: &str) -> Option<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{series}{{")))?;
    let start = line.find(&format!("{label}=\""))? + label.len() + 2;
    let mut value = String::new();
    let mut chars = line[start..].chars();
    loop {
        match chars.next()? {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                c => value.push(c),
            },
            c => value.push(c),
        }
    }
}

/// Whether `text` has the series `series{soak="id"}` (its only label) at `value`.
pub(super) fn has(text: &str, series: &str, soak: &str, value: &str) -> bool {
    text.lines()
        .any(|l| l == format!("{series}{{soak=\"{soak}\"}} {value}"))
}

/// A soak of [`TRAINER`], exiting with `exit` once `stop` exists, spawned with its metrics file
/// at `metrics` and `env`; standard output and error piped.
pub(super) fn spawn_trainer(
    soak: &Soak,
    metrics: &Path,
    stop: &Path,
    exit: u8,
    env: &[(&str, &str)],
) -> Child {
    let mut cmd = soak.command();
    cmd.envs(env.iter().copied())
        .env("UNILAB_TOOL_TIMEOUT", "5")
        .args(["--json", "soak", "run", "--progress-dir"])
        .arg(soak.progress())
        .arg("--output")
        .arg(soak.artifact_path())
        .arg("--metrics-file")
        .arg(metrics)
        .args(["--sample-interval", "0.2", "--shutdown-grace", "0.5", "--"])
        .args(trainer_argv(soak, stop, exit))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("unilab starts")
}

fn trainer_argv(soak: &Soak, stop: &Path, exit: u8) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        TRAINER.into(),
        "trainer".into(),
        stop.display().to_string(),
        soak.progress().display().to_string(),
        exit.to_string(),
    ]
}

/// Its standard error, read as it comes.
pub(super) fn stderr_of(child: &mut Child) -> Arc<Mutex<String>> {
    let said = Arc::new(Mutex::new(String::new()));
    let mut stderr = child.stderr.take().unwrap();
    let into = Arc::clone(&said);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = stderr.read(&mut buffer) {
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    });
    said
}

/// Waits for the soak's end: its verdict, as `--json` prints it.
pub(super) fn verdict(mut child: Child) -> Value {
    eventually("the soak's end", Duration::from_secs(120), || {
        child.try_wait().unwrap().is_some()
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn node_exporter_serves_the_soak_while_it_runs_and_its_verdict_after() {
    let soak = Soak::new();
    let textfiles = soak.root.root().join("textfiles");
    private_dir_all(&textfiles);
    let stop = soak.root.root().join("stop");
    let exporter = tool("prometheus-node-exporter", "prometheus-node-exporter").map(|program| {
        NodeExporter::start(
            &program,
            &textfiles,
            &soak.root.root().join("node_exporter.log"),
        )
    });
    let promtool = tool("promtool", "prometheus");
    // Each soak its own file: the placeholder is filled as `--output`'s are.
    let child = spawn_trainer(
        &soak,
        &textfiles.join("unilab-{soak_id}.prom"),
        &stop,
        0,
        &[],
    );
    let file = || {
        std::fs::read_dir(&textfiles)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "prom"))
    };
    let served = || match &exporter {
        Some(exporter) => exporter.metrics(),
        None => file()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_default(),
    };
    // While it runs: the tree, its steps and the trainer's numbers, under one soak id.
    let mut live = String::new();
    eventually(
        "the running soak's series",
        Duration::from_secs(120),
        || {
            live = served();
            live.contains("unilab_soak_step_seconds_count{") && live.contains("name=\"loss\"")
        },
    );
    let soak_id = label_value(&live, "unilab_soak_running", "soak").expect("a soak label");
    assert!(has(&live, "unilab_soak_running", &soak_id, "1"), "{live}");
    let file = file().expect("the metrics file");
    assert_eq!(
        file.file_name().unwrap().to_str().unwrap(),
        format!("unilab-{soak_id}.prom")
    );
    for series in [
        "unilab_soak_tree_rss_bytes",
        "unilab_soak_processes",
        "unilab_soak_step",
    ] {
        assert!(
            live.contains(&format!("{series}{{soak=\"{soak_id}\"}} ")),
            "{series}: {live}"
        );
    }
    assert!(!live.contains("unilab_soak_passed"), "{live}");
    // The command line, quotes, backslash and line feed, read back by node_exporter's parser
    // (or this test's) as it was run.
    let argv = trainer_argv(&soak, &stop, 0);
    assert_eq!(
        label_value(&live, "unilab_soak_info", "command").as_deref(),
        Some(
            shlex::try_join(argv.iter().map(String::as_str))
                .unwrap()
                .as_str()
        )
    );
    if let Some(promtool) = &promtool {
        promtool_accepts(promtool, &std::fs::read_to_string(&file).unwrap());
    }
    if exporter.is_some() {
        assert!(live.contains("node_textfile_scrape_error 0"), "{live}");
    }
    // After the verdict: passed, no longer running, still served.
    std::fs::write(&stop, "").unwrap();
    let verdict = verdict(child);
    assert_eq!(verdict["soak_id"], soak_id.as_str());
    assert_eq!(verdict["outcome"]["status"], "passed", "{verdict}");
    let after = served();
    assert!(has(&after, "unilab_soak_passed", &soak_id, "1"), "{after}");
    assert!(has(&after, "unilab_soak_running", &soak_id, "0"), "{after}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.ends_with("# EOF\n"));
    if let Some(promtool) = &promtool {
        promtool_accepts(promtool, &text);
    }
    // Nothing left beside it: every temporary file was renamed or removed.
    assert_eq!(std::fs::read_dir(&textfiles).unwrap().count(), 1);
}

#[test]
fn gpu_series_and_a_failed_verdict_pass_promtool() {
    let soak = Soak::new();
    let metrics = soak.root.root().join("unilab.prom");
    let stop = soak.root.root().join("stop");
    let promtool = tool("promtool", "prometheus");
    // Held to its power cap, and something NVML does not name yet.
    let health = [("FAKE_NVIDIA_SMI_HEALTH", "61|312.45||0x0000000000001004")];
    let child = spawn_trainer(&soak, &metrics, &stop, 3, &health);
    let mut live = String::new();
    eventually("the GPU's series", Duration::from_secs(120), || {
        live = std::fs::read_to_string(&metrics).unwrap_or_default();
        live.contains("unilab_gpu_throttled{")
    });
    let gpu = "gpu=\"GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f\"";
    for (series, value) in [
        ("unilab_gpu_temperature_celsius", "61"),
        ("unilab_gpu_power_watts", "312.45"),
        ("unilab_gpu_throttled", "1"),
    ] {
        let line = live
            .lines()
            .find(|l| l.starts_with(&format!("{series}{{")) && l.contains(gpu))
            .unwrap_or_else(|| panic!("no {series}: {live}"));
        if series == "unilab_gpu_throttled" {
            // The first reason NVML names, and the bit it does not, as they are.
            assert!(line.contains("reason=\"gpu_idle\"} 0"), "{line}");
            assert!(
                live.contains(&format!("{gpu},reason=\"sw_power_cap\"}} 1")),
                "{live}"
            );
            assert!(
                live.contains(&format!("{gpu},reason=\"0x1000\"}} 1")),
                "{live}"
            );
        } else {
            assert!(line.ends_with(&format!(" {value}")), "{line}");
        }
    }
    if let Some(promtool) = &promtool {
        promtool_accepts(promtool, &live);
    }
    std::fs::write(&stop, "").unwrap();
    let verdict = verdict(child);
    assert_eq!(verdict["outcome"]["status"], "failed", "{verdict}");
    let soak_id = verdict["soak_id"].as_str().unwrap();
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(has(&text, "unilab_soak_passed", soak_id, "0"), "{text}");
    assert!(has(&text, "unilab_soak_running", soak_id, "0"), "{text}");
    assert!(
        !text.contains("unilab_gpu_"),
        "the GPUs are no longer the soak's: {text}"
    );
    if let Some(promtool) = &promtool {
        promtool_accepts(promtool, &text);
    }
}

/// The metrics file's directory removed while the soak runs: every write fails from then on,
/// which is said once on the terminal and once in the samples' errors, and the soak passes;
/// the directory back, the file is written again.
#[test]
fn a_metrics_file_that_cannot_be_written_is_said_once_and_the_soak_goes_on() {
    let soak = Soak::new();
    let dir = soak.root.root().join("textfiles");
    private_dir_all(&dir);
    let metrics = dir.join("unilab.prom");
    let stop = soak.root.root().join("stop");
    let mut child = spawn_trainer(&soak, &metrics, &stop, 0, &[]);
    let stderr = stderr_of(&mut child);
    eventually("the metrics file", Duration::from_secs(120), || {
        metrics.exists()
    });
    // A temporary file made meanwhile may make one try fail (the directory is not empty).
    eventually("the directory removed", Duration::from_secs(60), || {
        std::fs::remove_dir_all(&dir).is_ok()
    });
    let says = "cannot write the metrics file";
    eventually("the failure said", Duration::from_secs(120), || {
        stderr.lock().unwrap().contains(says)
    });
    // More samples fail meanwhile (how many depends on the machine's load).
    std::thread::sleep(Duration::from_secs(1));
    private_dir_all(&dir);
    eventually("the file written again", Duration::from_secs(120), || {
        metrics.exists()
    });
    std::fs::write(&stop, "").unwrap();
    let verdict = verdict(child);
    assert_eq!(verdict["outcome"]["status"], "passed", "{verdict}");
    let said = stderr.lock().unwrap().clone();
    assert_eq!(said.matches(says).count(), 1, "{said}");
    assert!(said.contains("No such file or directory"), "{said}");
    let artifact: Value =
        serde_json::from_slice(&std::fs::read(soak.artifact_path()).unwrap()).unwrap();
    let recorded = artifact["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["errors"].as_array().unwrap())
        .filter(|e| e.as_str().unwrap().contains(says))
        .count();
    assert_eq!(recorded, 1, "{artifact}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(text.contains("unilab_soak_passed{"), "{text}");
    assert!(text.contains("unilab_soak_sampler_errors_total{"));
}

/// `--metrics-file` is checked as `--output` is, before anything runs: an existing file needs
/// `--force`, and nothing but a regular file is replaced, even with it.
#[test]
fn the_metrics_path_is_checked_before_the_soak_starts() {
    let soak = Soak::new();
    let ran = soak.root.root().join("ran");
    let existing = soak.root.root().join("old.prom");
    std::fs::write(&existing, "# old\n").unwrap();
    let link = soak.root.root().join("link.prom");
    std::os::unix::fs::symlink(&existing, &link).unwrap();
    let run = |metrics: &Path, force: bool| {
        let mut cmd = soak.unilab();
        cmd.args(["soak", "run", "--progress-dir"])
            .arg(soak.progress())
            .arg("--output")
            .arg(soak.artifact_path())
            .arg("--metrics-file")
            .arg(metrics);
        if force {
            cmd.arg("--force");
        }
        cmd.args([
            "--allow-no-progress",
            "--sample-interval",
            "0.1",
            "--",
            "touch",
        ])
        .arg(&ran)
        .output()
        .unwrap()
    };
    for (metrics, force, says) in [
        (existing.clone(), false, "already exists"),
        (link.clone(), true, "is not a regular file"),
        (
            soak.root.root().join("missing/unilab.prom"),
            false,
            "cannot write the metrics file",
        ),
    ] {
        let out = run(&metrics, force);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}: {stderr}",
            metrics.display()
        );
        assert!(stderr.contains(says), "{}: {stderr}", metrics.display());
        assert!(!ran.exists(), "{}: the command ran", metrics.display());
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "# old\n");
    let out = run(&existing, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ran.exists());
    let text = std::fs::read_to_string(&existing).unwrap();
    assert!(text.contains("unilab_soak_passed{"), "{text}");
}

/// A symbolic link at `--metrics-file` (or `--report`) was refused as "writing the artifact
/// would replace it": the artifact's own words, for a file that was not the artifact. The
/// refusal names the file it is about, and the artifact nowhere.
#[test]
fn a_link_at_the_metrics_file_is_refused_in_the_metrics_files_name_not_the_artifacts() {
    let soak = Soak::new();
    let existing = soak.root.root().join("old.prom");
    std::fs::write(&existing, "# old\n").unwrap();
    let link = soak.root.root().join("link.prom");
    std::os::unix::fs::symlink(&existing, &link).unwrap();
    for (flag, named) in [("--metrics-file", "metrics file"), ("--report", "report")] {
        let stderr = refused(
            soak.unilab()
                .args([
                    "soak",
                    "run",
                    "--allow-no-progress",
                    "--force",
                    "--progress-dir",
                ])
                .arg(soak.progress())
                .arg("--output")
                .arg(soak.artifact_path())
                .arg(flag)
                .arg(&link)
                .args(["--", "true"]),
            3,
            &[
                &format!("cannot write the {named} `{}`", link.display()),
                "is not a regular file",
            ],
        );
        assert!(!stderr.contains("artifact"), "{flag}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "# old\n");
}
