//! The proof of what a schema step touches. In test builds the event module holds a made-up
//! twelfth schema's form of `soak_finished` — `StoredEvent::SoakFinishedWithNote`, with a `note`
//! beside schema 6's fields — and the domain `SoakFinished` a `note`; every line of that step
//! is under `#[cfg(test)]` in `src/event/` (`stored`, `upcast`, `fields`, the verdict's
//! constructor in `soak/bounds.rs`) and nowhere else. With only that, the log stores and reads
//! the new form, the views fold it, `history` shows its fields and the artifact renders its
//! soak; and an older form reads as before, without the note.

use crate::event::soak::{
    ExitInfo, Findings, Outcome, OutcomeStatus, SoakEnd, SoakParameters, SoakStart,
};
use crate::event::{Event, Scope, StoredEvent, Subject};
use crate::log::{EventLog, Record};
use crate::projection::{self, SoakState, Soaks};

fn verdict(reason: &str) -> SoakEnd {
    SoakEnd {
        outcome: Outcome {
            status: OutcomeStatus::Passed,
            failure_kind: None,
            reason: reason.into(),
        },
        exit: Some(ExitInfo {
            code: Some(0),
            signal: None,
        }),
        run_ms: 1_000,
        teardown_ms: 10,
        first_progress_ms: Some(500),
        last_progress_ms: Some(900),
        leaked_processes: Vec::new(),
        stdout_tail: b"done\n".to_vec(),
        stderr_tail: Vec::new(),
    }
}

/// The start of a soak as the supervisor records it.
fn started(id: &str) -> Event {
    let start = SoakStart {
        soak_id: id.into(),
        command: vec!["train".into()],
        cwd: "/work".into(),
        progress_dir: "/work/progress".into(),
        output: "/work/soak.json".into(),
        parameters: SoakParameters {
            sample_interval_ms: 1000,
            startup_timeout_ms: 10_000,
            stale_progress_ms: 5000,
            shutdown_grace_ms: 1000,
            min_duration_ms: 0,
        },
        require_progress: true,
        metadata: Default::default(),
        environment: Default::default(),
        supervisor: crate::process::ProcessIdentity {
            pid: 1,
            start_ticks: 1,
        },
        runtime_json: "{}".into(),
        ticks_per_second: 100,
    };
    Event::SoakStarted {
        start: Box::new(start),
        supervision: Some(Default::default()),
        limits: Some(Default::default()),
        job: None,
        command_lossy: false,
    }
}

#[test]
fn a_new_form_is_stored_read_folded_and_shown_with_no_change_outside_the_event_module() {
    let dir = crate::testing::files::private_tempdir();
    let scope = Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "node".into(),
    };
    let log = EventLog::open(&dir.path().join("events.redb"), scope, projection::ALL).unwrap();
    let (new, old) = (Subject::Soak("new".into()), Subject::Soak("old".into()));
    // The writer uses the new field; the old soak's verdict is stored in schema 6's form.
    let Event::SoakFinished {
        end,
        findings,
        limit,
        ..
    } = Event::finished(verdict("ran"), Findings::default(), None)
    else {
        unreachable!()
    };
    let noted = Event::SoakFinished {
        end: end.clone(),
        findings: findings.clone(),
        limit,
        note: Some("checked by hand".into()),
    };
    log.append_all([
        (new.clone(), StoredEvent::from(started("new"))),
        (new.clone(), noted.into()),
        (old.clone(), started("old").into()),
        (
            old.clone(),
            StoredEvent::SoakFinishedV9 {
                end,
                findings: Box::new((*findings.unwrap_or_default()).into()),
                limit,
            },
        ),
    ])
    .unwrap();

    let snapshot = log.snapshot().unwrap();
    let mut records: Vec<Record> = Vec::new();
    snapshot
        .scan(1, |record| {
            records.push(record);
            Ok(true)
        })
        .unwrap();
    let verdict_of = |subject: &Subject| {
        records
            .iter()
            .find(|r| r.envelope.subject == *subject && r.envelope.event.kind() == "soak_finished")
            .unwrap()
    };
    let (read_new, read_old) = (verdict_of(&new), verdict_of(&old));
    assert_eq!(
        (read_new.envelope.schema, read_old.envelope.schema),
        (12, 6)
    );
    let note = |record: &Record| match &record.envelope.event {
        Event::SoakFinished { note, .. } => note.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(note(read_new).as_deref(), Some("checked by hand"));
    assert_eq!(note(read_old), None, "the older form has none");

    // The views fold it as any verdict, and verify.
    let rows = Soaks::rows(&snapshot).unwrap();
    assert!(
        rows.iter()
            .all(|row| row.state == SoakState::Finished(OutcomeStatus::Passed)),
        "{rows:?}"
    );
    snapshot.verify(projection::ALL).unwrap();

    // `history --json` shows each record's own form: the note, then none.
    let shown = super::record_json(read_new);
    assert_eq!(shown["note"], "checked by hand");
    assert_eq!(shown["outcome"]["reason"], "ran");
    assert!(super::record_json(read_old).get("note").is_none());
    assert!(super::record_line(read_new).contains("passed after 1s: ran"));

    // The artifact of its soak renders as any other (the note is for the code that uses it).
    let soak = crate::read::fold::collect(&snapshot, "new")
        .unwrap()
        .unwrap();
    let (bytes, _) = crate::read::artifact::render(&soak);
    let artifact: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(artifact["outcome"]["reason"], "ran");
}
