//! The streams' rows as they come: the GPU lines of the reading under way and the last complete
//! one, the compute processes listed lately, the heartbeat and the last fault; and each GPU of a
//! reading assembled with the processes on it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::super::smi::parse_value;
use super::fields::{BASE_FIELDS, Fields};
use crate::event::soak::{GpuHealth, GpuProcessSample, GpuSample};

/// The most GPUs and compute processes a stream may list at once. A stream past either is
/// flooding: a fault, and it is restarted, so that what it writes cannot grow the supervisor's
/// memory.
pub(super) const MAX_GPUS: usize = 1 << 10;
pub(super) const MAX_APPS: usize = 1 << 16;

/// One GPU line of a reading: its sample (with no processes yet) and its health (with no other
/// processes yet).
#[derive(Debug, Clone)]
pub(super) struct GpuLine {
    pub sample: GpuSample,
    pub health: GpuHealth,
}

/// The compute processes the stream listed lately, by pid and GPU: memory, when last listed.
pub(super) type Apps = HashMap<(u32, String), (Option<u64>, Instant)>;

/// What the streams have said.
#[derive(Debug, Default)]
pub(super) struct StreamState {
    /// The fields of the GPU stream's rows, as the last probe settled them.
    pub fields: Fields,
    /// The last complete reading of every GPU, and when it completed.
    pub gpus: Option<(Instant, Vec<GpuLine>)>,
    /// The GPU lines of the reading under way.
    pub pending: Vec<GpuLine>,
    /// When the GPU stream last printed a line (the heartbeat), since its start.
    pub heard: Option<Instant>,
    /// Compute processes by pid and GPU.
    pub apps: Apps,
    /// The last fault, until a new reading completes.
    pub fault: Option<String>,
    /// A stream printed more than it may: the fault that restarts the streams.
    pub flood: Option<String>,
}

impl StreamState {
    /// One line of the GPU stream, read by the positions of [`StreamState::fields`]. A line whose
    /// index is not above the previous one's starts a new reading: the one before is complete.
    pub(super) fn gpu_line(&mut self, line: &str) {
        let values: Vec<&str> = line.split(',').map(str::trim).collect();
        if values.len() != self.fields.count() {
            return;
        }
        let (base, health) = values.split_at(BASE_FIELDS.len());
        let [index, uuid, used, total, util] = base else {
            return;
        };
        let (Ok(index), true) = (index.parse::<u32>(), uuid.starts_with("GPU-")) else {
            return;
        };
        let now = Instant::now();
        self.heard = Some(now);
        if self
            .pending
            .last()
            .is_some_and(|last| index <= last.sample.index)
        {
            self.gpus = Some((now, std::mem::take(&mut self.pending)));
            self.fault = None;
        }
        if self.pending.len() >= MAX_GPUS {
            self.flood = Some(format!(
                "nvidia-smi listed more than {MAX_GPUS} GPUs in one reading; its stream is restarted"
            ));
            self.pending.clear();
            return;
        }
        self.pending.push(GpuLine {
            sample: GpuSample {
                index,
                uuid: (*uuid).to_owned(),
                memory_used_mib: parse_value(used),
                memory_total_mib: parse_value(total),
                utilization_percent: parse_value(util),
                processes: Vec::new(),
            },
            health: self.fields.read(health),
        });
    }

    /// Processes not listed within `recent` are on no GPU: forgotten, so that a week of
    /// processes coming and going does not pile up.
    pub(super) fn forget_apps_older_than(&mut self, recent: Duration) {
        self.apps.retain(|_, (_, seen)| seen.elapsed() <= recent);
    }

    pub(super) fn app_line(&mut self, line: &str) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [pid, memory, uuid] = fields.as_slice() else {
            return;
        };
        if let Ok(pid) = pid.parse() {
            let key = (pid, (*uuid).to_owned());
            if self.apps.len() >= MAX_APPS && !self.apps.contains_key(&key) {
                self.flood = Some(format!(
                    "nvidia-smi listed more than {MAX_APPS} compute processes; its stream is restarted"
                ));
                self.apps.clear();
                return;
            }
            self.apps.insert(key, (parse_value(memory), Instant::now()));
        }
    }
}

/// Each GPU of a reading with the compute processes listed on it: those of `pids` (the soak's
/// tree) in its sample, the others (other tenants) in its health, each by pid.
pub(super) fn assemble(
    rows: &[GpuLine],
    apps: &Apps,
    pids: &[u32],
) -> (Vec<GpuSample>, Vec<GpuHealth>) {
    rows.iter()
        .map(|row| {
            let (mut sample, mut health) = (row.sample.clone(), row.health.clone());
            for ((pid, uuid), (memory, _)) in apps {
                if *uuid != sample.uuid {
                    continue;
                }
                let process = GpuProcessSample {
                    pid: *pid,
                    used_memory_mib: *memory,
                };
                if pids.contains(pid) {
                    sample.processes.push(process);
                } else {
                    health.other_processes.push(process);
                }
            }
            sample.processes.sort_by_key(|p| p.pid);
            health.other_processes.sort_by_key(|p| p.pid);
            (sample, health)
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::stream::fields::Health;

    #[test]
    fn a_reading_completes_when_the_next_one_begins() {
        let mut state = StreamState::default();
        state.gpu_line("0, GPU-a, 10, 100, 5");
        state.gpu_line("1, GPU-b, 20, 100, [N/A]");
        assert!(
            state.gpus.is_none(),
            "the second GPU's line may not be the last"
        );
        state.gpu_line("0, GPU-a, 11, 100, 6");
        let (_, gpus) = state.gpus.as_ref().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].sample.utilization_percent, None);
        state.gpu_line("Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.");
        state.gpu_line("garbage");
        assert_eq!(state.pending.len(), 1);
        state.app_line("4242, 512, GPU-a");
        state.app_line("not, a, pid");
        assert_eq!(state.apps.len(), 1);
        state.forget_apps_older_than(Duration::from_secs(60));
        assert_eq!(state.apps.len(), 1, "listed just now");
        std::thread::sleep(Duration::from_millis(20));
        state.forget_apps_older_than(Duration::from_millis(10));
        assert!(state.apps.is_empty(), "not listed lately");
    }

    #[test]
    fn rows_are_read_by_the_positions_of_the_fields_accepted() {
        let mut state = StreamState {
            fields: Fields {
                health: vec![
                    (Health::ThrottleMask, "clocks_throttle_reasons.active"),
                    (Health::Temperature, "temperature.gpu"),
                ],
            },
            ..StreamState::default()
        };
        state.gpu_line("0, GPU-a, 10, 100, 5, 0x0000000000000004, 67");
        // A row of the base fields alone, or of every field, is not one of these.
        state.gpu_line("1, GPU-b, 10, 100, 5");
        state.gpu_line("1, GPU-b, 10, 100, 5, 45, 120.50, 1980, 0x0, 0, No");
        state.gpu_line("1, GPU-b, 20, 100, 7, [N/A], [Not Supported]");
        state.gpu_line("0, GPU-a, 11, 100, 6, 0x0000000000000000, 68");
        let (_, gpus) = state.gpus.as_ref().unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].sample.memory_used_mib, Some(10));
        assert_eq!(
            gpus[0].health,
            GpuHealth {
                temperature_c: Some(67),
                throttle_mask: Some(4),
                ..GpuHealth::default()
            }
        );
        assert_eq!(gpus[1].sample.utilization_percent, Some(7));
        assert_eq!(gpus[1].health, GpuHealth::default());
    }

    #[test]
    fn processes_on_a_gpu_are_the_trees_or_other_tenants() {
        let mut state = StreamState::default();
        state.gpu_line("0, GPU-a, 10, 100, 5");
        state.gpu_line("1, GPU-b, 10, 100, 5");
        state.gpu_line("0, GPU-a, 10, 100, 5");
        for line in [
            "42, 512, GPU-a",
            "7, 2048, GPU-a",
            "3, [N/A], GPU-a",
            "42, 1, GPU-b",
        ] {
            state.app_line(line);
        }
        let (_, rows) = state.gpus.as_ref().unwrap();
        let (gpus, health) = assemble(rows, &state.apps, &[42]);
        let process = |pid, used_memory_mib| GpuProcessSample {
            pid,
            used_memory_mib,
        };
        assert_eq!(gpus[0].processes, [process(42, Some(512))]);
        assert_eq!(
            health[0].other_processes,
            [process(3, None), process(7, Some(2048))]
        );
        assert_eq!(gpus[1].processes, [process(42, Some(1))]);
        assert!(health[1].other_processes.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Loop mode reads whatever nvidia-smi prints, line by line: no line panics it, a reading
        /// holds only well-formed GPU lines, and no stream grows past its caps — whichever
        /// fields were accepted.
        #[test]
        fn no_stream_of_lines_panics_or_grows_past_its_caps(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    "[0-9]{1,3}, GPU-[a-f0-9-]{1,12}, [0-9]{0,6}, [0-9N/A\\[\\]]{0,6}, .{0,8}",
                    "[0-9]{1,3}, GPU-[a-f0-9-]{1,12}, [0-9]{0,6}, [0-9]{0,6}, [0-9]{0,3}, \
                     [0-9]{0,3}, [0-9.]{0,8}, [0-9]{0,4}, 0x[0-9A-Fa-f+]{0,18}, [0-9]{0,3}, \
                     (Yes|No|\\[N/A\\])",
                    "[0-9]{1,7}, [0-9]{0,6} ?(MiB)?, GPU-[a-f0-9]{1,8}",
                    ".{0,300}",
                ],
                0..300,
            ),
        ) {
            for fields in [Fields::default(), Fields::all()] {
                let mut state = StreamState { fields, ..StreamState::default() };
                for line in &lines {
                    state.gpu_line(line);
                    state.app_line(line);
                }
                proptest::prop_assert!(state.pending.len() <= MAX_GPUS);
                proptest::prop_assert!(state.apps.len() <= MAX_APPS);
                for gpu in state.gpus.iter().flat_map(|(_, g)| g).chain(&state.pending) {
                    proptest::prop_assert!(gpu.sample.uuid.starts_with("GPU-"));
                }
            }
        }
    }

    #[test]
    fn a_reading_of_more_gpus_than_any_host_has_is_a_flood_not_a_heap() {
        let mut state = StreamState::default();
        for i in 0..=MAX_GPUS {
            state.gpu_line(&format!("{i}, GPU-{i:08x}, 1, 2, 3"));
        }
        assert!(state.flood.is_some());
        assert!(state.pending.len() <= MAX_GPUS);
        let huge = format!("{}, GPU-a, 1, 2, 3", "9".repeat(70_000));
        state.gpu_line(&huge);
        state.app_line(&huge);
    }
}
