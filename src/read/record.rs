//! A soak's record, typed: its events folded once ([`super::fold`]), with what its rows told as
//! they went by ([`Tally`]), and the figures every view of it presents — how it exited, its
//! progress, its peaks, its output, the evidence and findings, what is judged of its
//! resources, its steps, what it ran with — computed here once. What the soak's schema did not
//! record is decided here too, as `None` ([`Recorded`]: `found` before `/3`, `judged` before
//! `/4`, `stepped` before schema 10, `command_lossy` before schema 11), so that no view asks how
//! old a record is, and none reads another view's JSON. The current artifact is written from it
//! (`artifact::current`). The progress as of its latest sample is taken as its supervisor
//! recorded it ([`super::progress`]): no view decides progress again.

use super::fold::{Form, Recorded, SoakRecords};
use super::parameters::Parameters;
use super::rows::Tally;
use super::seconds;
use super::shown::{
    ExitShown, Found, Judged, OutcomeShown, ProgressShown, SummaryShown, TailsShown,
};
use super::stepped::Stepped;
use crate::event::soak::ProgressNoted;

/// A soak as the read side knows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SoakRecord {
    /// Its events as folded: its start, verdict, evidence and alarm, the projection's row of
    /// it, its place in the log.
    pub records: SoakRecords,
    /// What its schema recorded, and the artifact it renders.
    pub recorded: Recorded,
    pub outcome: OutcomeShown,
    /// An argument of the command is not UTF-8, so `command` holds it lossily; `None` before
    /// schema 11 (whose soaks could hold no such argument).
    pub command_lossy: Option<bool>,
    /// How the command exited; `None` while it runs, or when it never started.
    pub exit: Option<ExitShown>,
    /// How long the command ran; `None` while it runs.
    pub duration_seconds: Option<f64>,
    pub progress: ProgressShown,
    /// The progress as of its latest sample: what made it there and when progress last
    /// happened, as its supervisor recorded it with the sample (schema 12 on), or as the rule
    /// of its time reads a sample recorded before, which says when only after the spawn;
    /// `None` before a sample.
    pub sampled_progress: Option<ProgressNoted>,
    pub summary: SummaryShown,
    pub output_tail: TailsShown,
    pub parameters: Parameters,
    /// The evidence and what the verdict found; `None` before `/3`, which records none.
    pub found: Option<Found>,
    /// What the summary judges of the resources; `None` before `/4`.
    pub judged: Option<Judged>,
    /// The steps of the trainer's beats; `None` before schema 10, which read none.
    pub stepped: Option<Stepped>,
}

impl SoakRecord {
    /// The record of the soak `records` tell, whose rows told `tally`, and, as of the latest
    /// of them, `sampled_progress`.
    pub(crate) fn of(
        records: SoakRecords,
        tally: Tally,
        sampled_progress: Option<ProgressNoted>,
    ) -> Self {
        let recorded = records.soak.recorded();
        let verdict = records.soak.end.as_deref();
        let end = verdict.map(|v| &v.end);
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let limit = verdict
            .and_then(|v| v.limit)
            .map(|limit| limit.as_str().to_owned());
        let heartbeat = verdict
            .and_then(|v| v.findings.as_ref())
            .and_then(|f| f.heartbeat.as_deref());
        Self {
            outcome: OutcomeShown::of(&records),
            command_lossy: recorded.lossy.then_some(records.soak.command_lossy),
            exit: end.and_then(|e| e.exit).map(|e| ExitShown::of(&e)),
            duration_seconds: end.map(|e| seconds(e.run_ms)),
            progress: ProgressShown {
                first_seen_seconds: end.and_then(|e| e.first_progress_ms).map(seconds),
                last_change_seconds: end.and_then(|e| e.last_progress_ms).map(seconds),
                files: tally.last_progress.files,
                bytes: tally.last_progress.bytes,
            },
            sampled_progress,
            summary: tally.summary,
            output_tail: TailsShown {
                stdout: end.map(|e| text(&e.stdout_tail)).unwrap_or_default(),
                stderr: end.map(|e| text(&e.stderr_tail)).unwrap_or_default(),
            },
            parameters: Parameters::of(&records.soak),
            found: (recorded.form >= Form::Third).then(|| Found::of(&records, recorded.job)),
            judged: tally
                .judged
                .filter(|_| recorded.form >= Form::Current)
                .map(|judged| Judged { limit, ..judged }),
            stepped: recorded.beats.then(|| Stepped::of(heartbeat)),
            recorded,
            records,
        }
    }

    /// What was recorded with it (`--meta`), each value as JSON where it is JSON.
    pub(crate) fn metadata(&self) -> serde_json::Value {
        crate::event::soak::metadata_view(&self.records.soak.start.metadata)
    }

    /// The runtime snapshot recorded at its start; `null` where it is not JSON.
    pub(crate) fn runtime(&self) -> serde_json::Value {
        serde_json::from_str(&self.records.soak.start.runtime_json)
            .unwrap_or(serde_json::Value::Null)
    }

    /// The record as every view shows it: its command lines masked (the command's, the leaked
    /// processes', the evidence's). The artifact is written from the record as it is.
    pub(crate) fn masked(mut self) -> Self {
        let mask = crate::redact::mask_argv;
        let start = &mut self.records.soak.start;
        start.command = mask(&start.command);
        if let Some(verdict) = self.records.soak.end.as_deref_mut() {
            for leaked in &mut verdict.end.leaked_processes {
                leaked.cmdline = mask(&leaked.cmdline);
            }
        }
        for evidence in [&mut self.records.evidence, &mut self.records.job_evidence]
            .into_iter()
            .flatten()
        {
            for process in &mut evidence.processes {
                process.cmdline = mask(&process.cmdline);
            }
        }
        if let Some(found) = &mut self.found {
            found.mask();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::{Evidence, FailureKind, LeakedProcess, ProcessEvidence};
    use crate::process::ProcessIdentity;
    use crate::read::sketch::Sketch;

    /// Every command line of a record is masked when shown: the command, the evidence's
    /// processes', the leaked processes'; what only looks like one (its metadata) is left alone.
    #[test]
    fn a_records_command_lines_are_masked_when_shown() {
        let bearer = "Authorization: Bearer abcdefgh123";
        let masked = "Authorization: Bearer [redacted]";
        let mut record = Sketch {
            command: vec!["curl".into(), "-H".into(), bearer.into()],
            duration_seconds: Some(1.0),
            ..Sketch::default()
        }
        .record();
        let start = &mut record.records.soak.start;
        start.metadata.insert("command".into(), bearer.into());
        let process = ProcessEvidence {
            pid: 1,
            ppid: 0,
            start_ticks: 1,
            name: "sleep".into(),
            state: 'S',
            cmdline: vec!["sleep".into(), bearer.into()],
            threads: Vec::new(),
            kernel_stack: None,
            python_stack: None,
            holds_gpu_device: false,
            rank: None,
            collectives: None,
        };
        let evidence = Evidence {
            trigger: FailureKind::StaleProgress,
            captured_at_us: 0,
            processes: vec![process],
            cgroup: None,
            kernel_messages: Vec::new(),
            unavailable: Vec::new(),
            mps: Vec::new(),
        };
        record.records.evidence = Some(Box::new(evidence));
        if let Some(verdict) = record.records.soak.end.as_deref_mut() {
            verdict.end.leaked_processes.push(LeakedProcess {
                identity: ProcessIdentity {
                    pid: 2,
                    start_ticks: 2,
                },
                name: "x".into(),
                cmdline: vec!["--token".into(), "t0k3n".into()],
            });
        }
        let record = SoakRecord::of(
            record.records,
            Tally {
                summary: record.summary,
                last_progress: Default::default(),
                judged: record.judged,
            },
            None,
        )
        .masked();
        assert_eq!(record.records.soak.start.command, ["curl", "-H", masked]);
        let found = record.found.as_ref().unwrap();
        assert_eq!(
            found.evidence.as_ref().unwrap().processes[0].cmdline,
            ["sleep", masked]
        );
        let leaked = &record
            .records
            .soak
            .end
            .as_ref()
            .unwrap()
            .end
            .leaked_processes;
        assert_eq!(leaked[0].cmdline, ["--token", "[redacted]"]);
        assert_eq!(record.metadata()["command"], bearer);
    }

    /// What each schema did not record reads as unknown, decided once here: no evidence nor
    /// findings before `/3` (schema 5), no judgment of resources before `/4` (schema 6), no
    /// steps before schema 10, no word on a lossy command line before schema 11; what was
    /// recorded reads as recorded, nothing found as nothing (not as unknown).
    #[test]
    fn what_a_schema_did_not_record_reads_as_unknown() {
        let of_schema = |schema: u32| {
            let sketched = Sketch {
                duration_seconds: Some(1.0),
                ..Sketch::default()
            }
            .record();
            let mut records = sketched.records;
            records.soak.schema = schema;
            let tally = Tally {
                summary: sketched.summary,
                last_progress: Default::default(),
                judged: sketched.judged,
            };
            SoakRecord::of(records, tally, None)
        };
        let known = |r: &SoakRecord| {
            (
                r.found.is_some(),
                r.judged.is_some(),
                r.stepped.is_some(),
                r.command_lossy,
            )
        };
        assert_eq!(known(&of_schema(1)), (false, false, false, None));
        assert_eq!(known(&of_schema(4)), (false, false, false, None));
        assert_eq!(known(&of_schema(5)), (true, false, false, None));
        assert_eq!(known(&of_schema(9)), (true, true, false, None));
        assert_eq!(known(&of_schema(10)), (true, true, true, None));
        assert_eq!(known(&of_schema(11)), (true, true, true, Some(false)));
        let found = of_schema(11).found.unwrap();
        assert_eq!((found.evidence, found.job_evidence), (None, None));
        assert!(found.outcome.oom_kills.is_empty() && found.outcome.child.is_none());
        assert_eq!(of_schema(1).parameters.require_progress, None);
        assert_eq!(of_schema(2).parameters.require_progress, Some(true));
        assert!(of_schema(5).parameters.supervision.is_some());
        assert!(of_schema(5).parameters.budgets.is_none());
        assert!(of_schema(10).parameters.steps.is_some());
    }
}
