//! The human timeline of `unilab history`: a line for each event, and the event's own fields
//! for `history --json`. What the log stores is `event`'s; how it reads to a person is here.

use crate::event::{Event, StartedDaemon};
use crate::soak::artifact::explained::{ProcessAt, ThreadAt, one_line_evidence};
use crate::text::{count, duration};

/// The event's own fields as a JSON object (without `kind`), for `history --json`. Schema 5's
/// and 6's soak start, sample and verdict show schema 2's fields as they were, with what the
/// later schemas add beside them (`supervision`, `limits`, `measures`, `findings`, `limit`).
///
/// A soak start's runtime snapshot, which the event holds as JSON text (so that the artifact
/// embeds it byte for byte), is shown as the object it is, under the artifact's name `runtime`;
/// its metadata values given as JSON (`--meta-json`) as the JSON they are, as the artifact
/// shows them.
pub(crate) fn fields_json(event: &Event) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = inner_fields(event);
    if let Event::SoakArchived(archived) = event {
        // Digests as hashes are shown everywhere else: hex, not 32 numbers.
        let hex = |digest: &[u8; 32]| crate::log::chain::to_hex(digest).into();
        fields.insert("records_digest".into(), hex(&archived.records_digest));
        fields.insert("gaps_digest".into(), hex(&archived.gaps_digest));
        return fields;
    }
    let lifted = match event {
        Event::SoakStartedV5 { .. } | Event::SoakStarted { .. } => "start",
        Event::SoakSampled { .. } => "sample",
        Event::SoakFinishedV5 { .. } | Event::SoakFinished { .. } => "end",
        _ => return runtime_as_object(fields),
    };
    if let Some(serde_json::Value::Object(inner)) = fields.remove(lifted) {
        fields.extend(inner);
    }
    if let Some(serde_json::Value::Object(metadata)) = fields.get_mut("metadata") {
        for value in metadata.values_mut() {
            if let serde_json::Value::String(held) = value {
                *value = crate::event::soak::metadata_value(held);
            }
        }
    }
    runtime_as_object(fields)
}

/// `runtime_json` (text) as `runtime` (an object). Text that is not JSON — a damaged or
/// hand-made log — stays as it was recorded under `runtime_json`, with `runtime` null: forensics
/// loses nothing.
fn runtime_as_object(
    mut fields: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    let Some(serde_json::Value::String(text)) = fields.get("runtime_json") else {
        return fields;
    };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(runtime) => {
            fields.remove("runtime_json");
            fields.insert("runtime".into(), runtime);
        }
        Err(_) => {
            fields.insert("runtime".into(), serde_json::Value::Null);
        }
    }
    fields
}

fn inner_fields(event: &Event) -> serde_json::Map<String, serde_json::Value> {
    // Serde's external tagging gives `{"Variant": {fields}}` for every variant with fields;
    // the inner object is what we want.
    match serde_json::to_value(event) {
        Ok(serde_json::Value::Object(outer)) => outer
            .into_iter()
            .next()
            .and_then(|(_, inner)| match inner {
                serde_json::Value::Object(fields) => Some(fields),
                _ => None,
            })
            .unwrap_or_default(),
        _ => serde_json::Map::new(),
    }
}

/// A one-line description for the human timeline of `unilab history`.
pub(crate) fn summary(event: &Event) -> String {
    match event {
        Event::TopologyResolved {
            selector,
            topology_mode,
            gpus,
            ..
        } => {
            let uuids: Vec<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
            let selector = if selector.is_empty() {
                "(none: the sole visible GPU)".to_owned()
            } else {
                format!("`{selector}`")
            };
            format!(
                "selector {selector} → {topology_mode} on {}",
                uuids.join(",")
            )
        }
        Event::DaemonStartedV3 { record, foreground }
        | Event::DaemonStartedV6 {
            record, foreground, ..
        }
        | Event::DaemonStarted {
            record, foreground, ..
        } => daemon_started(record, *foreground, recorded_job(event)),
        Event::DaemonVerifiedLive { process } => {
            format!("pid {} answers on its control socket", process.pid)
        }
        Event::DaemonStartFailed { reason, .. } => reason.clone(),
        Event::DaemonStaleCleaned { process, reason } => {
            format!("pid {}: {}, record removed", process.pid, reason.as_str())
        }
        Event::DaemonStopped { process, method } => {
            format!("pid {} stopped ({})", process.pid, method.as_str())
        }
        Event::SoakStartedV1(start) => started(&start.command, &start.parameters),
        Event::SoakStartedV4(start)
        | Event::SoakStartedV5 { start, .. }
        | Event::SoakStarted { start, .. } => started(&start.command, &start.parameters),
        Event::SoakSampledV1(_) | Event::SoakSampledV5(_) | Event::SoakSampled { .. } => {
            sampled(event)
        }
        // The log hands readers the whole sample; a compact one reaching here is still said.
        Event::SoakSampledCompact(compact) => format!("#{} (compact)", compact.sample.index),
        Event::SoakArchived(archived) => format!(
            "{} moved to `{}`",
            count(archived.records, "record"),
            archived.file
        ),
        Event::SoakEvidenceCaptured(evidence) => captured(evidence),
        Event::SoakFinishedV1(end) => finished(&end.outcome, end.duration_ms),
        Event::SoakFinishedV4(end)
        | Event::SoakFinishedV5 { end, .. }
        | Event::SoakFinished { end, .. } => finished(&end.outcome, end.run_ms),
        Event::SoakAbandoned { supervisor, reason } => {
            format!("supervisor pid {} gone: {reason}", supervisor.pid)
        }
        Event::ArtifactWritten { path, digest, .. } => format!("`{path}` (digest {digest})"),
        Event::DaemonStartingV3 {
            gpu,
            pipe_directory,
            starter,
            ..
        }
        | Event::DaemonStarting {
            gpu,
            pipe_directory,
            starter,
            ..
        } => format!(
            "pid {} launches a daemon for {gpu} (pipe `{pipe_directory}`)",
            starter.pid
        ),
        Event::LeaseAcquired {
            holder,
            job,
            started,
        } => format!(
            "pid {} {} the daemon{}",
            holder.pid,
            if *started { "started and uses" } else { "uses" },
            job.as_ref()
                .map(|j| format!(" (job {j})"))
                .unwrap_or_default()
        ),
        Event::LeaseReleased { holder, reason } => {
            format!("pid {} is done with it ({})", holder.pid, reason.as_str())
        }
    }
}

/// The job a `daemon_started` recorded, if its form records one.
fn recorded_job(event: &Event) -> Option<&str> {
    match event {
        Event::DaemonStartedV6 { job, .. } | Event::DaemonStarted { job, .. } => job.as_deref(),
        _ => None,
    }
}

fn daemon_started(record: &StartedDaemon, foreground: bool, job: Option<&str>) -> String {
    format!(
        "pid {} on {}{}{} (pipe `{}`)",
        record.pid,
        record.gpu_uuids.join(","),
        if foreground { ", foreground" } else { "" },
        job.map(|job| format!(", job {job}")).unwrap_or_default(),
        record.pipe_directory
    )
}

fn started(command: &[String], parameters: &crate::event::soak::SoakParameters) -> String {
    format!(
        "`{}` (every {} ms, stale after {} ms)",
        command.join(" "),
        parameters.sample_interval_ms,
        parameters.stale_progress_ms
    )
}

/// A sample's line: its processes, their RSS and — where measured (schema 6) — their PSS.
fn sampled(event: &Event) -> String {
    let (index, elapsed_ms, rss_bytes, pss_bytes, processes, files, errors) = match event {
        Event::SoakSampledV1(s) => (
            s.index,
            s.elapsed_ms,
            s.processes.iter().map(|p| p.rss_bytes).sum::<u64>(),
            None,
            s.processes.len(),
            s.progress.files,
            s.errors.len(),
        ),
        Event::SoakSampledV5(s) | Event::SoakSampled { sample: s, .. } => (
            s.index,
            s.elapsed_ms,
            s.processes.iter().map(|p| p.rss_bytes).sum::<u64>(),
            match event {
                Event::SoakSampled { measures, .. } => measures.tree_pss_bytes(),
                _ => None,
            },
            s.processes.len(),
            s.progress.files,
            s.errors.len(),
        ),
        _ => return String::new(),
    };
    format!(
        "#{index} at {}: {}, {}RSS {} MiB, {}{}",
        duration(elapsed_ms as f64 / 1000.0),
        count(processes as u64, "process"),
        pss_bytes
            .map(|pss| format!("PSS {} MiB, ", pss / (1024 * 1024)))
            .unwrap_or_default(),
        rss_bytes / (1024 * 1024),
        count(files, "progress file"),
        if errors == 0 {
            String::new()
        } else {
            format!(", {}", count(errors as u64, "sampler error"))
        }
    )
}

/// The evidence in one line: what for, and each process's state and where it waits.
fn captured(evidence: &crate::event::soak::Evidence) -> String {
    let processes: Vec<ProcessAt<'_>> = evidence
        .processes
        .iter()
        .map(|p| ProcessAt {
            pid: p.pid,
            name: &p.name,
            state: p.state,
            threads: p
                .threads
                .iter()
                .map(|t| ThreadAt {
                    tid: t.tid,
                    state: t.state,
                    syscall: t.syscall.as_deref(),
                    wchan: t.wchan.as_deref(),
                })
                .collect(),
        })
        .collect();
    one_line_evidence(evidence.trigger.as_str(), &processes)
}

fn finished(outcome: &crate::event::soak::Outcome, run_ms: u64) -> String {
    format!(
        "{} after {}: {}",
        outcome.status.as_str(),
        duration(run_ms as f64 / 1000.0),
        outcome.reason
    )
}
