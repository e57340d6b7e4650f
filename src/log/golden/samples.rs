//! The parts of a soak's samples: whole, packed, and their measures.

use std::collections::BTreeMap;

use super::fresh::Fresh;
use crate::event::soak::{
    CompactSample, GpuHealth, GpuProcessSample, GpuSample, Measures, PackedBeats, ProcessSample,
    ProgressNoted, ProgressSeen, ProgressSignature, Sample, SampleBeats,
};
use crate::event::stored::{v1, v9};

fn gpu_process(n: &mut Fresh) -> GpuProcessSample {
    GpuProcessSample {
        pid: n.u32(),
        used_memory_mib: Some(n.u64()),
    }
}

fn gpu_sample(n: &mut Fresh) -> GpuSample {
    GpuSample {
        index: n.u32(),
        uuid: n.text(),
        memory_used_mib: Some(n.u64()),
        memory_total_mib: Some(n.u64()),
        utilization_percent: Some(n.u32()),
        processes: vec![gpu_process(n)],
    }
}

fn progress(n: &mut Fresh) -> ProgressSignature {
    ProgressSignature {
        files: n.u64(),
        bytes: n.u64(),
        newest_mtime_ns: Some(n.i64()),
    }
}

pub(super) fn sample_v1(n: &mut Fresh) -> v1::Sample {
    v1::Sample {
        index: n.u64(),
        elapsed_ms: n.u64(),
        processes: vec![v1::ProcessSample {
            pid: n.u32(),
            ppid: n.u32(),
            start_ticks: n.u64(),
            name: n.text(),
            state: n.char(),
            rss_bytes: n.u64(),
            cpu_ticks: n.u64(),
            threads: n.u32(),
            open_fds: Some(n.u32()),
            read_bytes: Some(n.u64()),
            write_bytes: Some(n.u64()),
        }],
        gpus: vec![gpu_sample(n)],
        progress: progress(n),
        sampler_cost_us: n.u64(),
        errors: vec![n.text()],
    }
}

pub(super) fn sample(n: &mut Fresh) -> Sample {
    Sample {
        index: n.u64(),
        elapsed_ms: n.u64(),
        after_exit: n.bool(),
        processes: vec![ProcessSample {
            pid: n.u32(),
            ppid: n.u32(),
            start_ticks: n.u64(),
            name: n.text(),
            state: n.char(),
            rss_bytes: n.u64(),
            cpu_ticks: n.u64(),
            reaped_children_cpu_ticks: n.u64(),
            threads: n.u32(),
            open_fds: Some(n.u32()),
            read_bytes: Some(n.u64()),
            write_bytes: Some(n.u64()),
        }],
        reaped_cpu_ticks: n.u64(),
        gpus: Some(vec![gpu_sample(n)]),
        progress: progress(n),
        sampler_cost_us: n.u64(),
        errors: vec![n.text()],
    }
}

fn gpu_health(n: &mut Fresh) -> GpuHealth {
    GpuHealth {
        temperature_c: Some(n.u32()),
        power_mw: Some(n.u64()),
        sm_clock_mhz: Some(n.u32()),
        throttle_mask: Some(n.u64()),
        ecc_uncorrected_volatile: Some(n.u64()),
        retired_pages_pending: Some(n.bool()),
        other_processes: vec![gpu_process(n)],
    }
}

pub(super) fn measures_v9(n: &mut Fresh) -> v9::Measures {
    v9::Measures {
        pss_bytes: vec![Some(n.u64())],
        gpus: vec![gpu_health(n)],
    }
}

pub(super) fn measures(n: &mut Fresh) -> Measures {
    Measures {
        pss_bytes: vec![Some(n.u64())],
        gpus: vec![gpu_health(n)],
        heartbeat: Some(Box::new(SampleBeats {
            beats: n.u32(),
            step: Some(n.u64()),
            phase: Some(n.text()),
            step_seconds_min: Some(n.f32()),
            step_seconds_median: Some(n.f32()),
            step_seconds_max: Some(n.f32()),
            numbers: BTreeMap::from([(n.text(), n.f64())]),
        })),
    }
}

pub(super) fn compact_v9(n: &mut Fresh) -> v9::CompactSample {
    v9::CompactSample {
        base: Some(n.u64()),
        sample: sample(n),
        measures: measures_v9(n),
        pss: n.bool(),
        processes: n.bytes(),
    }
}

pub(super) fn compact(n: &mut Fresh) -> CompactSample {
    CompactSample {
        base: Some(n.u64()),
        sample: sample(n),
        measures: measures(n),
        pss: n.bool(),
        processes: n.bytes(),
        beats: Some(PackedBeats {
            beats: n.u32(),
            step: Some(n.u64()),
            phase: Some(Some(n.text())),
            step_seconds_min: Some(n.f32()),
            step_seconds_median: Some(n.f32()),
            step_seconds_max: Some(n.f32()),
            keys: Some(vec![n.text()]),
            values: vec![n.f64()],
        }),
    }
}

/// The progress a supervisor decided at a sample (schema 12).
pub(super) fn progress_noted(n: &mut Fresh) -> ProgressNoted {
    ProgressNoted {
        progress_seen: Some(ProgressSeen::Beat),
        last_progress_at_us: Some(n.i64()),
        last_progress_ms: Some(n.u64()),
    }
}
