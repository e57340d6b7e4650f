//! Old forms upcast once, at load (cqrs-es's `EventUpcaster`): a [`StoredEvent`] of any form
//! becomes the domain [`Event`] of its kind, and the [`Envelope`] keeps the schema of the form
//! it was stored in; a domain event becomes its kind's newest stored form to be appended.
//!
//! The upcast keeps every value an old form holds, so that an event goes back into the form it
//! was read from ([`Event::into_stored`]) exactly — what `history --json` shows of an old record
//! and what a frozen artifact is rendered from. Where schema 1's soak payloads lack a field the
//! newest ones have, the upcast gives the value schema 1 meant: no progress required (it had no
//! such failure), no tick rate recorded (`0`: its artifact reads ticks at the exporting host's
//! rate), no teardown apart from the run, no sample after the exit and no reaped CPU time; its
//! GPU list is known.
//!
//! Schema 5–8's evidence lacks each process's rank and the MPS clients ended: `None` both.
//! Schema 5–9's supervision, findings and measures lack the heartbeat ([`v9`]): `None`.
//! Schema 1–10's starts could not record a command line that is not UTF-8 (the command line
//! refused one): `command_lossy` is `false`.
//!
//! A schema step adds its form here: the schema it introduces it in ([`StoredEvent::schema`]),
//! its upcast, and its place in [`Event::into_stored`].

use super::soak::{Evidence, ProcessEvidence, ProcessSample, Sample, SoakEnd, SoakStart};
use super::stored::{StoredEnvelope, StoredEvent, v1, v8};

mod v9;
use super::{Envelope, Event};

impl StoredEvent {
    /// The schema version that introduced this form.
    pub(crate) fn schema(&self) -> u32 {
        use StoredEvent as S;
        match self {
            S::TopologyResolved { .. }
            | S::DaemonStartedV3 { .. }
            | S::DaemonVerifiedLive { .. }
            | S::DaemonStartFailed { .. }
            | S::DaemonStaleCleaned { .. }
            | S::DaemonStopped { .. }
            | S::SoakStartedV1(_)
            | S::SoakSampledV1(_)
            | S::SoakFinishedV1(_)
            | S::SoakAbandoned { .. }
            | S::ArtifactWritten { .. } => 1,
            S::SoakStartedV4(_)
            | S::SoakSampledV5(_)
            | S::SoakFinishedV4(_)
            | S::DaemonStartingV3 { .. } => 2,
            S::LeaseAcquired { .. } | S::LeaseReleased { .. } => 3,
            S::DaemonStartedV6 { .. } | S::DaemonStarting { .. } => 4,
            S::SoakEvidenceCapturedV8(_) | S::SoakStartedV5 { .. } | S::SoakFinishedV5 { .. } => 5,
            S::SoakStartedV8 { .. } | S::SoakSampledV9 { .. } | S::SoakFinishedV9 { .. } => 6,
            S::DaemonStarted { .. } => 7,
            S::SoakSampledCompactV9(_) | S::SoakArchived(_) => 8,
            S::SoakStartedV9 { .. } | S::SoakEvidenceCaptured(_) | S::SoakJobAlarmSeen(_) => 9,
            S::SoakStartedV10 { .. }
            | S::SoakSampled { .. }
            | S::SoakSampledCompact(_)
            | S::SoakFinished { .. } => 10,
            S::SoakStarted { .. } => 11,
        }
    }

    /// The domain event of this form and the schema of the form; `None` for a compact sample,
    /// which stands for a whole one only with the soak's sample before it: the log unpacks it
    /// against that first.
    #[expect(
        clippy::too_many_lines,
        reason = "one arm a stored form: the whole table in one match the compiler checks is complete"
    )]
    pub(crate) fn upcast(self) -> Option<(Event, u32)> {
        use StoredEvent as S;
        let schema = self.schema();
        let event = match self {
            S::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            } => Event::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            },
            S::DaemonStartedV3 { record, foreground } => Event::DaemonStarted {
                record,
                foreground,
                job: None,
                limits: None,
            },
            S::DaemonStartedV6 {
                record,
                foreground,
                job,
            } => Event::DaemonStarted {
                record,
                foreground,
                job: Some(job),
                limits: None,
            },
            S::DaemonStarted {
                record,
                foreground,
                job,
                limits,
            } => Event::DaemonStarted {
                record,
                foreground,
                job: Some(job),
                limits: Some(limits),
            },
            S::DaemonVerifiedLive { process } => Event::DaemonVerifiedLive { process },
            S::DaemonStartFailed { reason, process } => {
                Event::DaemonStartFailed { reason, process }
            }
            S::DaemonStaleCleaned { process, reason } => {
                Event::DaemonStaleCleaned { process, reason }
            }
            S::DaemonStopped { process, method } => Event::DaemonStopped { process, method },
            S::SoakStartedV1(start) => Event::SoakStarted {
                start: Box::new(start_of_v1(*start)),
                supervision: None,
                limits: None,
                job: None,
                command_lossy: false,
            },
            S::SoakStartedV4(start) => Event::SoakStarted {
                start,
                supervision: None,
                limits: None,
                job: None,
                command_lossy: false,
            },
            S::SoakStartedV5 { start, supervision } => Event::SoakStarted {
                start,
                supervision: Some(supervision.into()),
                limits: None,
                job: None,
                command_lossy: false,
            },
            S::SoakStartedV8 {
                start,
                supervision,
                limits,
            } => Event::SoakStarted {
                start,
                supervision: Some(supervision.into()),
                limits: Some(limits),
                job: None,
                command_lossy: false,
            },
            S::SoakStartedV9 {
                start,
                supervision,
                limits,
                job,
            } => Event::SoakStarted {
                start,
                supervision: Some(supervision.into()),
                limits: Some(limits),
                job,
                command_lossy: false,
            },
            S::SoakStartedV10 {
                start,
                supervision,
                limits,
                job,
            } => Event::SoakStarted {
                start,
                supervision: Some(supervision),
                limits: Some(limits),
                job,
                command_lossy: false,
            },
            S::SoakStarted {
                start,
                supervision,
                limits,
                job,
                command_lossy,
            } => Event::SoakStarted {
                start,
                supervision: Some(supervision),
                limits: Some(limits),
                job,
                command_lossy,
            },
            S::SoakSampledV1(sample) => Event::SoakSampled {
                sample: Box::new(sample_of_v1(*sample)),
                measures: None,
            },
            S::SoakSampledV5(sample) => Event::SoakSampled {
                sample,
                measures: None,
            },
            S::SoakSampledV9 { sample, measures } => Event::SoakSampled {
                sample,
                measures: Some(Box::new((*measures).into())),
            },
            S::SoakSampled { sample, measures } => Event::SoakSampled {
                sample,
                measures: Some(measures),
            },
            S::SoakFinishedV1(end) => Event::SoakFinished {
                end: Box::new(end_of_v1(*end)),
                findings: None,
                limit: None,
            },
            S::SoakFinishedV4(end) => Event::SoakFinished {
                end,
                findings: None,
                limit: None,
            },
            S::SoakFinishedV5 { end, findings } => Event::SoakFinished {
                end,
                findings: Some(Box::new((*findings).into())),
                limit: None,
            },
            S::SoakFinishedV9 {
                end,
                findings,
                limit,
            } => Event::SoakFinished {
                end,
                findings: Some(Box::new((*findings).into())),
                limit,
            },
            S::SoakFinished {
                end,
                findings,
                limit,
            } => Event::SoakFinished {
                end,
                findings: Some(findings),
                limit,
            },
            S::SoakAbandoned { supervisor, reason } => Event::SoakAbandoned { supervisor, reason },
            S::ArtifactWritten {
                path,
                digest,
                bytes,
            } => Event::ArtifactWritten {
                path,
                digest,
                bytes,
            },
            S::DaemonStartingV3 {
                gpu,
                pipe_directory,
                log_directory,
                starter,
            } => Event::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job: None,
            },
            S::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job,
            } => Event::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job: Some(job),
            },
            S::LeaseAcquired {
                holder,
                job,
                started,
            } => Event::LeaseAcquired {
                holder,
                job,
                started,
            },
            S::LeaseReleased { holder, reason } => Event::LeaseReleased { holder, reason },
            S::SoakEvidenceCapturedV8(evidence) => {
                Event::SoakEvidenceCaptured(Box::new(evidence_of_v8(*evidence)))
            }
            S::SoakEvidenceCaptured(evidence) => Event::SoakEvidenceCaptured(evidence),
            S::SoakArchived(archived) => Event::SoakArchived(archived),
            S::SoakJobAlarmSeen(seen) => Event::SoakJobAlarmSeen(seen),
            S::SoakSampledCompactV9(_) | S::SoakSampledCompact(_) => return None,
        };
        Some((event, schema))
    }
}

impl StoredEnvelope {
    /// The record as readers see it (see [`StoredEvent::upcast`]); `None` for a compact
    /// sample.
    pub(crate) fn upcast(self) -> Option<Envelope> {
        let (event, schema) = self.event.upcast()?;
        Some(Envelope {
            seq: self.seq,
            recorded_at_us: self.recorded_at_us,
            scope: self.scope,
            subject: self.subject,
            event,
            schema,
        })
    }
}

impl Event {
    /// This event in the stored form of `schema` (the newest of its kind's forms introduced by
    /// then): for an event read from the log with the schema its envelope names, exactly what
    /// the record holds. Samples go whole: packing them is the log's.
    #[expect(
        clippy::too_many_lines,
        reason = "one arm a kind, each choosing its form: the whole table in one match"
    )]
    pub(crate) fn into_stored(self, schema: u32) -> StoredEvent {
        use StoredEvent as S;
        match self {
            Event::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            } => S::TopologyResolved {
                selector,
                topology_mode,
                gpus,
                cuda_visible_devices,
            },
            Event::DaemonStarted {
                record,
                foreground,
                job,
                limits,
            } => match schema {
                ..=3 => S::DaemonStartedV3 { record, foreground },
                4..=6 => S::DaemonStartedV6 {
                    record,
                    foreground,
                    job: job.flatten(),
                },
                _ => S::DaemonStarted {
                    record,
                    foreground,
                    job: job.flatten(),
                    limits: limits.unwrap_or_default(),
                },
            },
            Event::DaemonVerifiedLive { process } => S::DaemonVerifiedLive { process },
            Event::DaemonStartFailed { reason, process } => {
                S::DaemonStartFailed { reason, process }
            }
            Event::DaemonStaleCleaned { process, reason } => {
                S::DaemonStaleCleaned { process, reason }
            }
            Event::DaemonStopped { process, method } => S::DaemonStopped { process, method },
            Event::SoakStarted {
                start,
                supervision,
                limits,
                job,
                command_lossy,
            } => match schema {
                ..=1 => S::SoakStartedV1(Box::new(start_to_v1(*start))),
                2..=4 => S::SoakStartedV4(start),
                5 => S::SoakStartedV5 {
                    start,
                    supervision: supervision.unwrap_or_default().into(),
                },
                6..=8 => S::SoakStartedV8 {
                    start,
                    supervision: supervision.unwrap_or_default().into(),
                    limits: limits.unwrap_or_default(),
                },
                9 => S::SoakStartedV9 {
                    start,
                    supervision: supervision.unwrap_or_default().into(),
                    limits: limits.unwrap_or_default(),
                    job,
                },
                10 => S::SoakStartedV10 {
                    start,
                    supervision: supervision.unwrap_or_default(),
                    limits: limits.unwrap_or_default(),
                    job,
                },
                _ => S::SoakStarted {
                    start,
                    supervision: supervision.unwrap_or_default(),
                    limits: limits.unwrap_or_default(),
                    job,
                    command_lossy,
                },
            },
            Event::SoakSampled { sample, measures } => match schema {
                ..=1 => S::SoakSampledV1(Box::new(sample_to_v1(*sample))),
                2..=5 => S::SoakSampledV5(sample),
                6..=9 => S::SoakSampledV9 {
                    sample,
                    measures: Box::new((*measures.unwrap_or_default()).into()),
                },
                _ => S::SoakSampled {
                    sample,
                    measures: measures.unwrap_or_default(),
                },
            },
            Event::SoakFinished {
                end,
                findings,
                limit,
            } => match schema {
                ..=1 => S::SoakFinishedV1(Box::new(end_to_v1(*end))),
                2..=4 => S::SoakFinishedV4(end),
                5 => S::SoakFinishedV5 {
                    end,
                    findings: Box::new((*findings.unwrap_or_default()).into()),
                },
                6..=9 => S::SoakFinishedV9 {
                    end,
                    findings: Box::new((*findings.unwrap_or_default()).into()),
                    limit,
                },
                _ => S::SoakFinished {
                    end,
                    findings: findings.unwrap_or_default(),
                    limit,
                },
            },
            Event::SoakAbandoned { supervisor, reason } => S::SoakAbandoned { supervisor, reason },
            Event::ArtifactWritten {
                path,
                digest,
                bytes,
            } => S::ArtifactWritten {
                path,
                digest,
                bytes,
            },
            Event::DaemonStarting {
                gpu,
                pipe_directory,
                log_directory,
                starter,
                job,
            } => match schema {
                ..=3 => S::DaemonStartingV3 {
                    gpu,
                    pipe_directory,
                    log_directory,
                    starter,
                },
                _ => S::DaemonStarting {
                    gpu,
                    pipe_directory,
                    log_directory,
                    starter,
                    job: job.flatten(),
                },
            },
            Event::LeaseAcquired {
                holder,
                job,
                started,
            } => S::LeaseAcquired {
                holder,
                job,
                started,
            },
            Event::LeaseReleased { holder, reason } => S::LeaseReleased { holder, reason },
            Event::SoakEvidenceCaptured(evidence) => match schema {
                ..=8 => S::SoakEvidenceCapturedV8(Box::new(evidence_to_v8(*evidence))),
                _ => S::SoakEvidenceCaptured(evidence),
            },
            Event::SoakArchived(archived) => S::SoakArchived(archived),
            Event::SoakJobAlarmSeen(seen) => S::SoakJobAlarmSeen(seen),
        }
    }
}

/// The writer's side: a domain event in its kind's newest form, what an append stores (a field
/// that is `None` stored as its kind's empty value).
impl From<Event> for StoredEvent {
    fn from(event: Event) -> Self {
        event.into_stored(u32::MAX)
    }
}

fn start_of_v1(start: v1::SoakStart) -> SoakStart {
    SoakStart {
        soak_id: start.soak_id,
        command: start.command,
        cwd: start.cwd,
        progress_dir: start.progress_dir,
        output: start.output,
        parameters: start.parameters,
        require_progress: false,
        metadata: start.metadata,
        environment: start.environment,
        supervisor: start.supervisor,
        runtime_json: start.runtime_json,
        ticks_per_second: 0,
    }
}

fn start_to_v1(start: SoakStart) -> v1::SoakStart {
    v1::SoakStart {
        soak_id: start.soak_id,
        command: start.command,
        cwd: start.cwd,
        progress_dir: start.progress_dir,
        output: start.output,
        parameters: start.parameters,
        metadata: start.metadata,
        environment: start.environment,
        supervisor: start.supervisor,
        runtime_json: start.runtime_json,
    }
}

fn sample_of_v1(sample: v1::Sample) -> Sample {
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

fn end_of_v1(end: v1::SoakEnd) -> SoakEnd {
    SoakEnd {
        outcome: end.outcome,
        exit: end.exit,
        run_ms: end.duration_ms,
        teardown_ms: 0,
        first_progress_ms: end.first_progress_ms,
        last_progress_ms: end.last_progress_ms,
        leaked_processes: end.leaked_processes,
        stdout_tail: end.stdout_tail,
        stderr_tail: end.stderr_tail,
    }
}

fn end_to_v1(end: SoakEnd) -> v1::SoakEnd {
    v1::SoakEnd {
        outcome: end.outcome,
        exit: end.exit,
        duration_ms: end.run_ms,
        first_progress_ms: end.first_progress_ms,
        last_progress_ms: end.last_progress_ms,
        leaked_processes: end.leaked_processes,
        stdout_tail: end.stdout_tail,
        stderr_tail: end.stderr_tail,
    }
}

fn evidence_of_v8(evidence: v8::Evidence) -> Evidence {
    Evidence {
        trigger: evidence.trigger,
        captured_at_us: evidence.captured_at_us,
        processes: evidence
            .processes
            .into_iter()
            .map(|p| ProcessEvidence {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                cmdline: p.cmdline,
                threads: p.threads,
                kernel_stack: p.kernel_stack,
                python_stack: p.python_stack,
                holds_gpu_device: p.holds_gpu_device,
                rank: None,
            })
            .collect(),
        cgroup: evidence.cgroup,
        kernel_messages: evidence.kernel_messages,
        unavailable: evidence.unavailable,
        mps: Vec::new(),
    }
}

fn evidence_to_v8(evidence: Evidence) -> v8::Evidence {
    v8::Evidence {
        trigger: evidence.trigger,
        captured_at_us: evidence.captured_at_us,
        processes: evidence
            .processes
            .into_iter()
            .map(|p| v8::ProcessEvidence {
                pid: p.pid,
                ppid: p.ppid,
                start_ticks: p.start_ticks,
                name: p.name,
                state: p.state,
                cmdline: p.cmdline,
                threads: p.threads,
                kernel_stack: p.kernel_stack,
                python_stack: p.python_stack,
                holds_gpu_device: p.holds_gpu_device,
            })
            .collect(),
        cgroup: evidence.cgroup,
        kernel_messages: evidence.kernel_messages,
        unavailable: evidence.unavailable,
    }
}

#[cfg(test)]
mod tests;
