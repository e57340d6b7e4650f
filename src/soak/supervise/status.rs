//! The live status line on a terminal, and what the first reading of the GPUs says of others
//! already on them. Both go through the [`Console`], never into the record.

use std::time::Duration;

use crate::event::soak::{Measures, Sample};
use crate::soak::console::Console;

/// The live status line on a terminal: the tree's totals at the latest sample. What is unknown
/// (no answer from nvidia-smi) reads `–`, never `0`.
pub(super) struct StatusLine {
    rss_bytes: u64,
    pss_bytes: Option<u64>,
    /// The tree's CPU use since the previous sample, in % of one CPU.
    cpu_percent: Option<f64>,
    /// `None` on a host without GPUs; `Some(None)` where the tree's GPU memory is unknown.
    gpu_mib: Option<Option<u64>>,
    /// The last beat's step and phase, and the sample's median step time, when beats came.
    step: Option<(u64, String, Option<f32>)>,
}

impl StatusLine {
    pub(super) fn of(sample: &Sample, measures: &Measures, cpu_percent: Option<f64>) -> Self {
        Self {
            rss_bytes: sample.processes.iter().map(|p| p.rss_bytes).sum(),
            pss_bytes: measures.tree_pss_bytes(),
            cpu_percent,
            gpu_mib: match &sample.gpus {
                Some(gpus) if gpus.is_empty() => None,
                _ => Some(sample.tree_gpu_memory_mib()),
            },
            step: measures.heartbeat.as_deref().and_then(|beats| {
                let phase = beats.phase.clone().unwrap_or_default();
                Some((beats.step?, phase, beats.step_seconds_median))
            }),
        }
    }

    /// The line at `elapsed` after spawn, `samples` taken, the progress directory last changed
    /// at `last_change` and the soak failing as stale in `stale_in`.
    pub(super) fn text(
        &self,
        soak_id: &str,
        elapsed: Duration,
        samples: u64,
        last_change: Option<Duration>,
        stale_in: Option<Duration>,
    ) -> String {
        use crate::text::duration;
        let progress = match (last_change, stale_in) {
            (Some(change), Some(left)) => format!(
                "{} ago, stale in {}",
                duration(elapsed.saturating_sub(change).as_secs_f64()),
                duration(left.as_secs_f64())
            ),
            (Some(change), None) => {
                format!(
                    "{} ago",
                    duration(elapsed.saturating_sub(change).as_secs_f64())
                )
            }
            (None, _) => "none yet".into(),
        };
        let mut line = format!(
            "soak {soak_id}: {}, {}, progress {progress}, CPU {}",
            duration(elapsed.as_secs_f64()),
            crate::text::count(samples, "sample"),
            self.cpu_percent
                .map_or_else(|| "–".to_owned(), |p| format!("{p:.0}%")),
        );
        if let Some((step, phase, median)) = &self.step {
            line.push_str(&format!(", step {step} ({phase}"));
            if let Some(median) = median {
                line.push_str(&format!(
                    ", {} a step",
                    crate::text::step_time(f64::from(*median))
                ));
            }
            line.push(')');
        }
        if let Some(pss) = self.pss_bytes {
            line.push_str(&format!(", PSS {} MiB", pss >> 20));
        }
        line.push_str(&format!(", RSS {} MiB", self.rss_bytes >> 20));
        match self.gpu_mib {
            Some(Some(mib)) => line.push_str(&format!(", GPU {mib} MiB")),
            Some(None) => line.push_str(", GPU –"),
            None => {}
        }
        line
    }
}

/// Says which of the GPUs the soak watches other processes already use, at its first reading of
/// them (as the command starts): that memory, that load and the timing are not the soak's.
pub(super) fn warn_of_others(console: &Console, sample: &Sample, measures: &Measures) {
    for (gpu, health) in sample.gpus.iter().flatten().zip(&measures.gpus) {
        if health.other_processes.is_empty() {
            continue;
        }
        let mib: u64 = health
            .other_processes
            .iter()
            .filter_map(|p| p.used_memory_mib)
            .sum();
        console.warn(&format!(
            "GPU {} ({}) is already in use by {} not of this soak ({} MiB): its memory, load and timing are shared",
            gpu.index,
            gpu.uuid,
            crate::text::count(health.other_processes.len() as u64, "process"),
            mib
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::{ProgressSignature, SampleBeats};

    #[test]
    fn the_line_tells_the_step_when_the_trainer_beats() {
        let sample = Sample {
            index: 3,
            elapsed_ms: 3_000,
            after_exit: false,
            processes: Vec::new(),
            reaped_cpu_ticks: 0,
            gpus: Some(Vec::new()),
            progress: ProgressSignature::default(),
            sampler_cost_us: 0,
            errors: Vec::new(),
        };
        let beating = Measures {
            heartbeat: Some(Box::new(SampleBeats {
                beats: 10,
                step: Some(41),
                phase: Some("train".into()),
                step_seconds_median: Some(0.1),
                ..SampleBeats::default()
            })),
            ..Measures::default()
        };
        let line = |measures: &Measures| {
            StatusLine::of(&sample, measures, Some(50.0)).text(
                "s",
                Duration::from_secs(3),
                3,
                None,
                None,
            )
        };
        assert!(
            line(&beating).contains(", step 41 (train, 100ms a step)"),
            "{}",
            line(&beating)
        );
        assert!(!line(&Measures::default()).contains("step"));
    }
}
