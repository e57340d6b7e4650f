//! What the summary of a `/4` artifact judges of the resources, in words: the trend of the
//! tree's memory and when it reaches the ceiling at that rate, each GPU's temperature, energy and
//! throttling, and warnings — new uncorrected ECC errors, a GPU shared with other processes.
//! `soak show` prints these lines and the report lays them out.

use crate::read::shown::Judged;
use crate::text::{bytes, duration, foreign};

/// A memory trend below this is told as flat (allocator noise, a few pages).
const FLAT_BYTES_PER_HOUR: f64 = 1024.0 * 1024.0;

/// What a person is told of a soak's resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JudgedText {
    /// Labelled lines: `memory`, `gpu`.
    pub lines: Vec<(&'static str, String)>,
    pub warnings: Vec<String>,
}

/// `+120.0 MiB/h`, `-3.0 MiB/h`, `flat`.
fn signed_rate(bytes_per_hour: f64) -> String {
    if bytes_per_hour.abs() < FLAT_BYTES_PER_HOUR {
        return "flat".into();
    }
    let sign = if bytes_per_hour < 0.0 { "-" } else { "+" };
    format!("{sign}{}/h", bytes(bytes_per_hour.abs().round() as u64))
}

impl JudgedText {
    /// The words for `judged`, of a soak that ran `ran_seconds` (when known).
    pub(crate) fn of(judged: &Judged, ran_seconds: Option<f64>) -> Self {
        let mut text = Self::default();
        if let Some(trend) = &judged.memory_trend {
            let mut line = format!(
                "PSS {} since {}",
                signed_rate(trend.bytes_per_hour),
                duration(trend.since_seconds)
            );
            if let (Some(limit), Some(source), Some(seconds)) = (
                trend.limit_bytes,
                &trend.limit_source,
                trend.projected_seconds_to_limit,
            ) {
                line.push_str(&format!(
                    "; at this rate the memory limit ({}: {}) is reached in {}",
                    foreign(source),
                    bytes(limit),
                    duration(seconds)
                ));
            }
            text.lines.push(("memory", line));
        }
        for gpu in &judged.gpu_health {
            let mut said = vec![short(&gpu.uuid)];
            if let Some(t) = gpu.max_temperature_c {
                said.push(format!("up to {t} °C"));
            }
            if let Some(j) = gpu.energy_joules {
                said.push(format!("{:.2} kWh", j / 3.6e6));
            }
            let throttled: Vec<String> = gpu
                .seconds_throttled
                .iter()
                .filter(|(reason, seconds)| reason.as_str() != "gpu_idle" && **seconds > 0.0)
                .map(|(reason, seconds)| format!("{} {}", foreign(reason), duration(*seconds)))
                .collect();
            if !throttled.is_empty() {
                said.push(format!("throttled: {}", throttled.join(", ")));
            }
            if let Some(rate) = gpu.tree_memory_mib_per_hour {
                said.push(format!(
                    "this soak's memory {}",
                    signed_rate(rate * 1024.0 * 1024.0)
                ));
            }
            if said.len() > 1 {
                text.lines.push(("gpu", said.join(", ")));
            }
            if let Some(n) = gpu.ecc_uncorrected_increase.filter(|n| *n > 0) {
                text.warnings.push(format!(
                    "GPU {}: {} uncorrected ECC {} during the soak",
                    short(&gpu.uuid),
                    n,
                    if n == 1 { "error" } else { "errors" }
                ));
            }
        }
        if let Some(rate) = judged.progress_rate {
            text.lines.push((
                "rate",
                format!(
                    "progress {}/min, {:.1} files/min",
                    bytes(rate.bytes_per_minute.max(0.0) as u64),
                    rate.files_per_minute
                ),
            ));
            if let (Some(before), Some(recent)) = (
                rate.after_warmup_bytes_per_minute,
                rate.recent_bytes_per_minute,
            ) && before > 0.0
                && recent < before * 2.0 / 3.0
            {
                text.warnings.push(format!(
                    "progress slowed to {}/min in the last tenth of the run, from {}/min after the warm-up",
                    bytes(recent.max(0.0) as u64),
                    bytes(before as u64)
                ));
            }
        }
        for shared in judged.contention.iter().filter(|c| c.seconds_shared > 0.0) {
            let share = ran_seconds
                .filter(|ran| *ran > 0.0)
                .map(|ran| {
                    format!(
                        " for {:.0} % of the soak",
                        (shared.seconds_shared / ran * 100.0).min(100.0)
                    )
                })
                .unwrap_or_else(|| format!(" for {}", duration(shared.seconds_shared)));
            let memory = shared
                .peak_other_memory_mib
                .map(|mib| format!(" (up to {})", bytes(mib << 20)))
                .unwrap_or_default();
            text.warnings.push(format!(
                "GPU {} was shared with other processes{memory}{share}",
                short(&shared.uuid)
            ));
        }
        text
    }
}

/// A GPU's UUID, short enough to read: `GPU-0f8e0c2a`.
fn short(uuid: &str) -> String {
    foreign(&uuid.chars().take(12).collect::<String>()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::shown::{
        ContentionShown, GpuHealthShown, MemoryTrendShown, ProgressRateShown,
    };

    fn judged() -> Judged {
        Judged {
            peak_tree_pss_bytes: Some(3 << 30),
            memory_trend: Some(MemoryTrendShown {
                bytes_per_hour: 120.0 * 1024.0 * 1024.0,
                bytes_at_since: 1e9,
                since_seconds: 1800.0,
                limit_bytes: Some(64 << 30),
                limit_source: Some("cgroup /job_7".into()),
                projected_seconds_to_limit: Some(14.0 * 3600.0),
            }),
            gpu_health: vec![GpuHealthShown {
                uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
                max_temperature_c: Some(83),
                energy_joules: Some(7.2e6),
                seconds_throttled: [
                    ("gpu_idle".to_owned(), 5.0),
                    ("hw_thermal_slowdown".to_owned(), 90.0),
                ]
                .into_iter()
                .collect(),
                ecc_uncorrected_increase: Some(2),
                tree_memory_mib_per_hour: Some(0.0),
            }],
            contention: vec![ContentionShown {
                uuid: "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f".into(),
                seconds_shared: 35.0,
                peak_other_memory_mib: Some(40_960),
            }],
            progress_rate: Some(ProgressRateShown {
                bytes_per_minute: 3.0 * 1024.0 * 1024.0,
                files_per_minute: 2.0,
                after_warmup_bytes_per_minute: Some(3.0 * 1024.0 * 1024.0),
                recent_bytes_per_minute: Some(1024.0 * 1024.0),
            }),
            limit: None,
        }
    }

    #[test]
    fn the_trend_the_gpus_and_the_warnings_read_as_people_say_them() {
        let text = JudgedText::of(&judged(), Some(100.0));
        assert_eq!(
            text.lines,
            [
                (
                    "memory",
                    "PSS +120.0 MiB/h since 30m; at this rate the memory limit (cgroup /job_7: 64.0 GiB) is reached in 14h".to_owned()
                ),
                (
                    "gpu",
                    "GPU-0f8e0c2a, up to 83 °C, 2.00 kWh, throttled: hw_thermal_slowdown 1m 30s, this soak's memory flat".to_owned()
                ),
                ("rate", "progress 3.0 MiB/min, 2.0 files/min".to_owned()),
            ]
        );
        assert_eq!(
            text.warnings,
            [
                "GPU GPU-0f8e0c2a: 2 uncorrected ECC errors during the soak",
                "progress slowed to 1.0 MiB/min in the last tenth of the run, from 3.0 MiB/min after the warm-up",
                "GPU GPU-0f8e0c2a was shared with other processes (up to 40.0 GiB) for 35 % of the soak"
            ]
        );
    }
}
