//! `soak_sampled`'s forms, one function a form (named after its variant), and the way back.
//! Samples go whole: packing them is the log's (`log::pack`), which unpacks a packed form into
//! a whole one before it is upcast.
//!
//! Schema 1's sample lacks what schema 2 added: no sample after the exit and no reaped CPU time;
//! its GPU list is known. The measures (schema 6) are `None` where a form did not record them;
//! schema 6–9's have no heartbeat ([`super::v9`]). The progress the supervisor decided
//! (schema 12) is `None` before: readers decide it for such a sample
//! (`soak::watch::progress::ProgressReading`).

use crate::event::Event;
use crate::event::soak::{Measures, ProcessSample, ProgressNoted, Sample};
use crate::event::stored::{StoredEvent, v1, v9};

pub(super) fn v1(sample: v1::Sample) -> Event {
    Event::SoakSampled {
        sample: Box::new(sample_of_v1(sample)),
        measures: None,
        progress: None,
    }
}

pub(super) fn v5(sample: Box<Sample>) -> Event {
    Event::SoakSampled {
        sample,
        measures: None,
        progress: None,
    }
}

pub(super) fn v9(sample: Box<Sample>, measures: v9::Measures) -> Event {
    Event::SoakSampled {
        sample,
        measures: Some(Box::new(measures.into())),
        progress: None,
    }
}

pub(super) fn v11(sample: Box<Sample>, measures: Box<Measures>) -> Event {
    Event::SoakSampled {
        sample,
        measures: Some(measures),
        progress: None,
    }
}

pub(super) fn current(
    sample: Box<Sample>,
    measures: Box<Measures>,
    progress: Option<ProgressNoted>,
) -> Event {
    Event::SoakSampled {
        sample,
        measures: Some(measures),
        progress,
    }
}

/// The sample in the whole form of `schema` (see [`Event::into_stored`]).
pub(super) fn into_stored(
    sample: Box<Sample>,
    measures: Option<Box<Measures>>,
    progress: Option<ProgressNoted>,
    schema: u32,
) -> StoredEvent {
    use StoredEvent as S;
    match schema {
        ..=1 => S::SoakSampledV1(Box::new(sample_to_v1(*sample))),
        2..=5 => S::SoakSampledV5(sample),
        6..=9 => S::SoakSampledV9 {
            sample,
            measures: Box::new((*measures.unwrap_or_default()).into()),
        },
        10..=11 => S::SoakSampledV11 {
            sample,
            measures: measures.unwrap_or_default(),
        },
        _ => S::SoakSampled {
            sample,
            measures: measures.unwrap_or_default(),
            noted: progress,
        },
    }
}

pub(super) fn sample_of_v1(sample: v1::Sample) -> Sample {
    Sample {
        index: sample.index,
        elapsed_ms: sample.elapsed_ms,
        after_exit: false,
        processes: sample
            .processes
            .into_iter()
            .map(|p| ProcessSample {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                rss_bytes: p.rss_bytes,
                cpu_ticks: p.cpu_ticks,
                reaped_children_cpu_ticks: 0,
                threads: p.threads,
                open_fds: p.open_fds,
                read_bytes: p.read_bytes,
                write_bytes: p.write_bytes,
            })
            .collect(),
        reaped_cpu_ticks: 0,
        gpus: Some(sample.gpus),
        progress: sample.progress,
        sampler_cost_us: sample.sampler_cost_us,
        errors: sample.errors,
    }
}

fn sample_to_v1(sample: Sample) -> v1::Sample {
    v1::Sample {
        index: sample.index,
        elapsed_ms: sample.elapsed_ms,
        processes: sample
            .processes
            .into_iter()
            .map(|p| v1::ProcessSample {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                rss_bytes: p.rss_bytes,
                cpu_ticks: p.cpu_ticks,
                threads: p.threads,
                open_fds: p.open_fds,
                read_bytes: p.read_bytes,
                write_bytes: p.write_bytes,
            })
            .collect(),
        gpus: sample.gpus.unwrap_or_default(),
        progress: sample.progress,
        sampler_cost_us: sample.sampler_cost_us,
        errors: sample.errors,
    }
}
