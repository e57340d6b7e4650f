//! The GPUs as a stream: one long-lived `nvidia-smi` in loop mode for the GPUs' memory,
//! utilisation and health and one for their compute processes, each read line by line on its own
//! thread — no process spawned a sample. On big multi-GPU hosts a one-shot `nvidia-smi` can take
//! seconds where its loop mode answers in a fraction of that.
//!
//! The GPU stream asks for what the driver knows. Before it starts, one query (not a loop, under
//! the tool timeout) probes every field; each field nvidia-smi refuses (`Field "x" is not a valid
//! field to query.`) is asked again under its older name (`clocks_throttle_reasons.active`
//! before driver 535) or dropped, a bounded number of times, and the rows are read by the
//! positions of the fields accepted. A field the driver does not know never breaks the stream.
//! A probe that fails otherwise (no driver, a hang, a flood) leaves the base fields — memory and
//! utilisation, as before health was asked for — and the next start probes again.
//!
//! The GPU stream is the heartbeat: it prints one line a GPU every interval, so no line within
//! an interval and the tool timeout is a fault. A stream that faults or exits is killed (its
//! process group, SIGKILL), reaped and started again after a back-off (1 s, doubling, at most
//! 60 s); the fault is what the next samples record. The compute-process stream prints nothing
//! while no process uses a GPU, so it has no heartbeat of its own: a process counts as on a GPU
//! while its line was printed within the last two intervals — the soak's own processes and other
//! tenants alike. Dropping the stream stops both tools (and a probe under way) and reaps them:
//! none outlives the soak.
//!
//! Here the stream and the loop that restarts it; beside it `fields` (what a row holds),
//! `probe` (which fields the driver knows), `rows` (the rows as they come) and `child` (the
//! `nvidia-smi` processes and their watch).

mod child;
mod fields;
mod probe;
mod rows;

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::child::{Running, StreamLaunch, stopped, watch};
use self::fields::Fields;
use self::probe::{Probed, settle_fields};
use self::rows::{StreamState, assemble};
use crate::event::soak::{GpuHealth, GpuSample};
use crate::tool::Tool;
use crate::trace::{STEPS, detail};

/// The query of the compute-process stream.
const APPS_QUERY: &str = "--query-compute-apps=pid,used_gpu_memory,gpu_uuid";

/// Back-off after a fault: from the first to the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// Both streams, supervised by a thread of their own.
pub struct GpuStream {
    state: Arc<Mutex<StreamState>>,
    /// Dropping it wakes the supervising thread, which then stops both tools.
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    interval: Duration,
    /// How long without a reading before that is itself the error: two intervals and a timeout.
    patience: Duration,
    started: Instant,
    /// When a reading was last asked for, and when this process came back after not running
    /// for longer than the patience (SIGSTOP, starved of CPU) and for how long: the streams'
    /// silence meanwhile was this process's, not nvidia-smi's.
    asked: Mutex<Asked>,
}

#[derive(Debug, Default)]
struct Asked {
    last: Option<Instant>,
    resumed: Option<(Instant, Duration)>,
}

impl GpuStream {
    /// Starts `smi` in loop mode, printing every `interval`, once a probe settled its fields.
    /// With `leash` (the unilab binary), each `nvidia-smi` runs under `unilab __leash`, which
    /// kills it should this process die without stopping it (a SIGKILL): a stream, unlike a
    /// one-shot query, never ends by itself.
    pub fn start(smi: Tool, interval: Duration, leash: Option<PathBuf>) -> Self {
        let state = Arc::new(Mutex::new(StreamState::default()));
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = {
            let state = Arc::clone(&state);
            let smi = smi.clone();
            let launch = StreamLaunch { smi, leash };
            std::thread::spawn(move || supervise(&launch, interval, &state, &stopped))
        };
        Self {
            state,
            stop: Some(stop),
            thread: Some(thread),
            interval,
            patience: interval * 2 + smi.timeout,
            started: Instant::now(),
            asked: Mutex::new(Asked::default()),
        }
    }

    /// The latest reading, with its compute processes narrowed to `pids`; `None` while none is
    /// known — before the first reading (no error: it is on its way), after a fault, or when
    /// none completed for too long (with the error saying so).
    pub fn reading(&self, pids: &[u32]) -> (Option<Vec<GpuSample>>, Option<String>) {
        let (gpus, _, error) = self.reading_with_health(pids);
        (gpus, error)
    }

    /// [`GpuStream::reading`], with each GPU's health beside it in the same order (`None`
    /// exactly when the reading is): its figures (`None` where the driver does not report one)
    /// and the compute processes on it that are not among `pids`, under the same rule as the
    /// tree's — listed within the last two intervals.
    pub(crate) fn reading_with_health(
        &self,
        pids: &[u32],
    ) -> (
        Option<Vec<GpuSample>>,
        Option<Vec<GpuHealth>>,
        Option<String>,
    ) {
        let resumed = self.away();
        let Ok(mut state) = self.state.lock() else {
            return (None, None, Some("the GPU stream's state is lost".into()));
        };
        let since = state.gpus.as_ref().map_or(self.started, |(at, _)| *at);
        if since.elapsed() > self.patience {
            // Stale because this process did not run (its readers have lines to catch up on),
            // not because nvidia-smi fell silent: said as such for a patience after it resumed.
            if let Some((resumed, away)) = resumed
                && resumed.elapsed() <= self.patience
            {
                return (
                    None,
                    None,
                    Some(format!(
                        "no GPU reading since this supervisor resumed: it did not run for {:.1} s (stopped, or starved of CPU)",
                        away.as_secs_f64()
                    )),
                );
            }
            let error = state.fault.clone().unwrap_or_else(|| {
                format!(
                    "nvidia-smi has not answered for {:.1} s",
                    since.elapsed().as_secs_f64()
                )
            });
            return (None, None, Some(error));
        }
        state.forget_apps_older_than(self.interval * 2);
        let (gpus, health) = state
            .gpus
            .as_ref()
            .map(|(_, rows)| assemble(rows, &state.apps, pids))
            .unzip();
        (gpus, health, state.fault.clone())
    }
}

impl GpuStream {
    /// When this process last came back after not running for longer than the patience, and
    /// for how long it was away, told by the gap between two readings asked for.
    fn away(&self) -> Option<(Instant, Duration)> {
        let now = Instant::now();
        let mut asked = self.asked.lock().ok()?;
        if let Some(gap) = asked.last.map(|last| now - last)
            && gap > self.patience
        {
            asked.resumed = Some((now, gap));
        }
        asked.last = Some(now);
        asked.resumed
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs both streams until `stop`, restarting them after a fault; each start until a probe
/// settles the GPU stream's fields probes first.
fn supervise(
    launch: &StreamLaunch,
    interval: Duration,
    state: &Arc<Mutex<StreamState>>,
    stop: &Receiver<()>,
) {
    let smi = &launch.smi;
    let silence = interval + smi.timeout;
    let mut backoff = BACKOFF.0;
    let mut settled: Option<Fields> = None;
    loop {
        let fields = match &settled {
            Some(fields) => fields.clone(),
            None => match settle_fields(launch, stop) {
                Probed::Fields(fields) => {
                    settled = Some(fields.clone());
                    fields
                }
                Probed::Failed(fault) => {
                    if let (Some(fault), Ok(mut state)) = (fault, state.lock()) {
                        state.fault = Some(fault);
                    }
                    Fields::default()
                }
                Probed::Stopped => return,
            },
        };
        let query = fields.query();
        if let Ok(mut state) = state.lock() {
            state.fields = fields;
        }
        // The streams' silence is counted from here, after the probe.
        let started = Instant::now();
        let fault = match (
            Running::spawn(launch, &query, interval, state, StreamState::gpu_line),
            Running::spawn(launch, APPS_QUERY, interval, state, StreamState::app_line),
        ) {
            (Ok(mut gpus), Ok(mut apps)) => {
                detail!(
                    STEPS,
                    "started `{}` in loop mode (every {}), pids {} and {}",
                    smi.name(),
                    crate::text::step_time(interval.as_secs_f64()),
                    gpus.child.id(),
                    apps.child.id()
                );
                let fault = watch(smi, [&mut gpus, &mut apps], state, stop, silence, started);
                gpus.kill();
                apps.kill();
                fault
            }
            (gpus, apps) => {
                let mut faults = Vec::new();
                for running in [gpus, apps] {
                    match running {
                        Ok(running) => running.kill(),
                        Err(e) => faults.push(e),
                    }
                }
                faults.dedup();
                Some(faults.join("; "))
            }
        };
        let Some(fault) = fault else {
            return;
        };
        detail!(
            STEPS,
            "{fault}, after {}",
            crate::text::step_time(backoff.as_secs_f64())
        );
        if let Ok(mut state) = state.lock() {
            state.fault = Some(fault);
            state.pending.clear();
            state.heard = None;
        }
        // A stream that ran well for a while starts again promptly.
        if started.elapsed() > BACKOFF.1 {
            backoff = BACKOFF.0;
        }
        if stopped(stop, backoff) {
            return;
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::GpuProcessSample;
    use std::process::{Command, Stdio};

    /// The real streams, against the fake `nvidia-smi` of the integration tests.
    mod against_the_fake {
        use super::*;
        use std::io::Write;
        use std::path::Path;

        const UUID: &str = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f";
        const OTHER_UUID: &str = "GPU-1a2b3c4d-0000-4000-8000-000000000001";
        const INTERVAL: Duration = Duration::from_millis(100);

        /// The fake, run with `env` set after the shell lines of `prelude`: a wrapper in `dir`,
        /// written by a child process so that no thread of this test binary holds it open for
        /// writing while another one runs it (`ETXTBSY`).
        fn fake_smi(dir: &Path, env: &[(&str, &str)], prelude: &str, timeout: Duration) -> Tool {
            let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nvidia-smi");
            let mut script = format!("#!/bin/sh\n{prelude}\n");
            for (name, value) in env {
                script.push_str(&format!("export {name}='{value}'\n"));
            }
            script.push_str(&format!("exec '{fake}' \"$@\"\n"));
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
            Tool::new(path.as_os_str(), timeout)
        }

        fn stream(dir: &Path, env: &[(&str, &str)]) -> GpuStream {
            GpuStream::start(
                fake_smi(dir, env, "", Duration::from_secs(10)),
                INTERVAL,
                None,
            )
        }

        /// The first reading (of `pids`) that `wanted` accepts, within a generous bound.
        fn reading_such_that(
            stream: &GpuStream,
            pids: &[u32],
            wanted: impl Fn(&[GpuSample], &[GpuHealth]) -> bool,
        ) -> (Vec<GpuSample>, Vec<GpuHealth>) {
            crate::time::poll(Duration::from_secs(30), Duration::from_millis(20), || {
                let (gpus, health, _) = stream.reading_with_health(pids);
                let (gpus, health) = (gpus?, health?);
                assert_eq!(gpus.len(), health.len());
                wanted(&gpus, &health).then_some((gpus, health))
            })
            .unwrap_or_else(|| {
                panic!(
                    "no such reading within 30 s; the last: {:?}",
                    stream.reading_with_health(pids)
                )
            })
        }

        /// Replaces `path` at once, so that the fake never reads half of it.
        fn replace(path: &Path, text: &str) {
            let new = path.with_extension("new");
            std::fs::write(&new, text).unwrap();
            std::fs::rename(&new, path).unwrap();
        }

        #[test]
        fn a_real_stream_reads_the_throttle_mask_under_either_driver_spelling() {
            for driver in ["new", "old"] {
                let dir = tempfile::tempdir().unwrap();
                let stream = stream(
                    dir.path(),
                    &[
                        ("FAKE_NVIDIA_SMI_DRIVER", driver),
                        (
                            "FAKE_NVIDIA_SMI_HEALTH",
                            "71|312.25|1755|0x0000000000000044|3|Yes",
                        ),
                    ],
                );
                let (gpus, health) = reading_such_that(&stream, &[], |_, _| true);
                assert_eq!(gpus[0].uuid, UUID);
                assert_eq!(gpus[0].memory_total_mib, Some(143_771), "{driver}");
                assert_eq!(
                    health,
                    [GpuHealth {
                        temperature_c: Some(71),
                        power_mw: Some(312_250),
                        sm_clock_mhz: Some(1755),
                        throttle_mask: Some(0x44),
                        ecc_uncorrected_volatile: Some(3),
                        retired_pages_pending: Some(true),
                        other_processes: Vec::new(),
                    }],
                    "{driver}"
                );
            }
        }

        #[test]
        fn a_field_the_driver_does_not_know_is_dropped_and_the_rest_still_stream() {
            let dir = tempfile::tempdir().unwrap();
            let gpus =
                format!("{UUID}|NVIDIA H200|143771|100|5;{OTHER_UUID}|NVIDIA H200|143771|200|6");
            let stream = stream(
                dir.path(),
                &[
                    ("FAKE_NVIDIA_SMI_GPUS", &gpus),
                    ("FAKE_NVIDIA_SMI_DRIVER", "old"),
                    (
                        "FAKE_NVIDIA_SMI_UNKNOWN_FIELDS",
                        "power.draw,clocks_throttle_reasons.active",
                    ),
                    (
                        "FAKE_NVIDIA_SMI_HEALTH",
                        ";[N/A]|[N/A]|[Not Supported]|[N/A]|[Unknown Error]|[N/A]",
                    ),
                ],
            );
            let (gpus, health) = reading_such_that(&stream, &[], |_, _| true);
            assert_eq!(gpus.len(), 2);
            assert_eq!(gpus[1].memory_used_mib, Some(200));
            assert_eq!(gpus[1].utilization_percent, Some(6));
            assert_eq!(
                health[0],
                GpuHealth {
                    temperature_c: Some(45),
                    sm_clock_mhz: Some(1980),
                    ecc_uncorrected_volatile: Some(0),
                    retired_pages_pending: Some(false),
                    ..GpuHealth::default()
                }
            );
            assert_eq!(health[1], GpuHealth::default());
            assert_eq!(stream.reading_with_health(&[]).2, None);
        }

        #[test]
        fn another_tenants_process_is_apart_from_the_trees_while_it_is_listed() {
            let dir = tempfile::tempdir().unwrap();
            let apps = dir.path().join("apps");
            replace(&apps, &format!("777|python|2048|{UUID}"));
            let stream = stream(
                dir.path(),
                &[
                    ("FAKE_NVIDIA_SMI_APPS", &format!("4242|python|1024|{UUID}")),
                    ("FAKE_NVIDIA_SMI_APPS_FILE", apps.to_str().unwrap()),
                ],
            );
            let (gpus, health) = reading_such_that(&stream, &[4242, 1], |gpus, health| {
                !gpus[0].processes.is_empty() && !health[0].other_processes.is_empty()
            });
            assert_eq!(
                gpus[0].processes,
                [GpuProcessSample {
                    pid: 4242,
                    used_memory_mib: Some(1024)
                }]
            );
            assert_eq!(
                health[0].other_processes,
                [GpuProcessSample {
                    pid: 777,
                    used_memory_mib: Some(2048)
                }]
            );
            // It leaves the GPU: no longer listed, it is no longer there.
            replace(&apps, "");
            reading_such_that(&stream, &[4242], |gpus, health| {
                health[0].other_processes.is_empty() && !gpus[0].processes.is_empty()
            });
        }

        #[test]
        fn a_health_file_changed_mid_stream_is_seen() {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("health");
            replace(&file, "40|100.00|1400|0x0000000000000000|0|No");
            let stream = stream(
                dir.path(),
                &[("FAKE_NVIDIA_SMI_HEALTH_FILE", file.to_str().unwrap())],
            );
            reading_such_that(&stream, &[], |_, health| {
                health[0].temperature_c == Some(40)
            });
            replace(&file, "88|350.00|1200|0x0000000000000040|2|Yes");
            let (_, health) = reading_such_that(&stream, &[], |_, health| {
                health[0].temperature_c == Some(88)
            });
            assert_eq!(health[0].power_mw, Some(350_000));
            assert_eq!(health[0].throttle_mask, Some(0x40));
            assert_eq!(health[0].ecc_uncorrected_volatile, Some(2));
            assert_eq!(health[0].retired_pages_pending, Some(true));
        }

        #[test]
        fn a_probe_that_fails_leaves_the_stream_on_its_base_fields() {
            let dir = tempfile::tempdir().unwrap();
            // Only its one-shot queries fail; loop mode works.
            let prelude =
                "case \"$*\" in *-lms*) ;; *) echo 'No devices were found'; exit 6;; esac";
            let stream = GpuStream::start(
                fake_smi(dir.path(), &[], prelude, Duration::from_secs(10)),
                INTERVAL,
                None,
            );
            let (gpus, health) = reading_such_that(&stream, &[], |_, _| true);
            assert_eq!(gpus[0].memory_total_mib, Some(143_771));
            assert_eq!(health, [GpuHealth::default()]);
        }

        /// A probe that hangs as long as the tool timeout allows is stopped with the stream:
        /// dropping it neither waits for the timeout nor leaves the probe running.
        #[test]
        fn dropping_the_stream_during_a_probe_stops_the_probe_at_once() {
            let dir = tempfile::tempdir().unwrap();
            let pids = dir.path().join("pids");
            let prelude = format!(
                "case \"$*\" in *-lms*) ;; *) echo $$ >> '{}'; exec sleep 60;; esac",
                pids.display()
            );
            let stream = GpuStream::start(
                fake_smi(dir.path(), &[], &prelude, Duration::from_secs(60)),
                INTERVAL,
                None,
            );
            let pid: i32 =
                crate::time::poll(Duration::from_secs(30), Duration::from_millis(10), || {
                    std::fs::read_to_string(&pids).ok()?.trim().parse().ok()
                })
                .expect("the probe under way");
            let dropped = Instant::now();
            drop(stream);
            assert!(
                dropped.elapsed() < Duration::from_secs(5),
                "dropping waited {:?} for the probe",
                dropped.elapsed()
            );
            assert_eq!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH),
                "the probe {pid} outlived its stream"
            );
        }
    }
}
