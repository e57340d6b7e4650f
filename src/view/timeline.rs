//! The human timeline of `unilab history` (and of a soak's report): a line for each record.
//! What the log stores is `event`'s (and so are the fields `history --json` shows); how it reads
//! to a person is here.

use crate::event::soak::Measures;
use crate::event::{Event, Sample, StartedDaemon};
use crate::log::Record;
use crate::text::{count, duration, human_time, shell_command};
use crate::view::explained::{ProcessAt, ThreadAt, one_line_evidence};

/// One line of the human timeline.
pub(crate) fn record_line(record: &Record) -> String {
    let envelope = &record.envelope;
    let event = crate::redact::shown::event(&envelope.event);
    // What a record holds came from files and other processes (an alarm, a reason, a path): the
    // line is escaped whole, as it has no colour of its own.
    let line = format!(
        "{:>6}  {}  {:<28}  {:<22}  {}",
        envelope.seq,
        human_time(envelope.recorded_at_us),
        envelope.subject.to_string(),
        envelope.event.kind(),
        summary(&event)
    );
    crate::text::foreign(&line).into_owned()
}

/// A one-line description for the human timeline of `unilab history`.
fn summary(event: &Event) -> String {
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
        Event::DaemonStarted {
            record,
            foreground,
            job,
            ..
        } => daemon_started(record, *foreground, job.as_ref().and_then(Option::as_deref)),
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
        Event::SoakStarted { start, .. } => started(&start.command, &start.parameters),
        Event::SoakSampled {
            sample, measures, ..
        } => sampled(sample, measures.as_deref()),
        Event::SoakArchived(archived) => format!(
            "{} moved to `{}`",
            count(archived.records, "record"),
            archived.file
        ),
        Event::SoakEvidenceCaptured(evidence) => captured(evidence),
        Event::SoakJobAlarmSeen(seen) => alarm_seen(seen),
        Event::SoakFinished { end, .. } => finished(&end.outcome, end.run_ms),
        Event::SoakAbandoned { supervisor, reason } => {
            format!("supervisor pid {} gone: {reason}", supervisor.pid)
        }
        Event::ArtifactWritten { path, digest, .. } => format!("`{path}` (digest {digest})"),
        Event::DaemonStarting {
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

/// The command as a shell takes it back, and the settings that decide its verdict.
fn started(command: &[String], parameters: &crate::event::soak::SoakParameters) -> String {
    let ms = |ms: u64| duration(ms as f64 / 1000.0);
    format!(
        "`{}` (every {}, stale after {}, startup timeout {})",
        shell_command(command),
        ms(parameters.sample_interval_ms),
        ms(parameters.stale_progress_ms),
        ms(parameters.startup_timeout_ms)
    )
}

/// A sample's line: its processes, their RSS and — where measured — their PSS, and the
/// trainer's beats in it (schema 10 on).
fn sampled(s: &Sample, measures: Option<&Measures>) -> String {
    let rss_bytes = s.processes.iter().map(|p| p.rss_bytes).sum::<u64>();
    let pss_bytes = measures.and_then(Measures::tree_pss_bytes);
    let errors = s.errors.len();
    let beats = measures
        .and_then(|m| m.heartbeat.as_deref())
        .map(|beats| {
            let step = beats
                .step
                .map(|step| format!(" to step {step}"))
                .unwrap_or_default();
            format!(", {}{step}", count(beats.beats, "beat"))
        })
        .unwrap_or_default();
    format!(
        "#{} at {}: {}, {}RSS {} MiB, {}{beats}{}",
        s.index,
        duration(s.elapsed_ms as f64 / 1000.0),
        count(s.processes.len() as u64, "process"),
        pss_bytes
            .map(|pss| format!("PSS {} MiB, ", pss / (1024 * 1024)))
            .unwrap_or_default(),
        rss_bytes / (1024 * 1024),
        count(s.progress.files, "progress file"),
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

/// Who raised the job's alarm, and why.
fn alarm_seen(seen: &crate::event::soak::JobAlarmSeen) -> String {
    let seen = &seen.alarm;
    let rank = seen
        .rank
        .map_or_else(|| "a rank".to_owned(), |rank| format!("rank {rank}"));
    format!(
        "job {}: {rank} on {} tripped ({}: {}), soak {}",
        seen.job, seen.host, seen.failure_kind, seen.reason, seen.soak_id
    )
}

fn finished(outcome: &crate::event::soak::Outcome, run_ms: u64) -> String {
    format!(
        "{} after {}: {}",
        outcome.status.as_str(),
        duration(run_ms as f64 / 1000.0),
        outcome.reason
    )
}
