//! Two forms of one kind in one log, through every reader: a soak started in schema 11's form
//! (its command line recorded lossily, `command_lossy`) beside one started in schema 10's form,
//! which has no such field. Each record reads back with its own form's schema and fields, the
//! views fold both and verify, `history --json` shows each record's own fields, and the artifact
//! holds `command_lossy` only for the soak whose form records it.
//!
//! What a schema step touches is listed in `migrations/README.md` ("A schema step's files"),
//! from schema 11's; the frozen fixtures (`tests/migrations.rs`) check every older form.

use crate::event::soak::{
    ExitInfo, Findings, Outcome, OutcomeStatus, SoakEnd, SoakParameters, SoakStart,
};
use crate::event::{Event, Scope, Subject};
use crate::log::{EventLog, Record};
use crate::projection::{SoakState, Soaks};

fn verdict() -> Event {
    let end = SoakEnd {
        outcome: Outcome {
            status: OutcomeStatus::Passed,
            failure_kind: None,
            reason: "ran".into(),
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
    };
    Event::finished(end, Findings::default(), None)
}

/// The start of a soak as the supervisor records it, its command line lossy or not.
fn started(id: &str, command_lossy: bool) -> Event {
    let argument = if command_lossy { "\u{fffd}" } else { "ok" };
    let start = SoakStart {
        soak_id: id.into(),
        command: vec!["train".into(), argument.into()],
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
        command_lossy,
    }
}

#[test]
fn starts_of_schema_10s_and_11s_forms_in_one_log_read_fold_verify_and_show_their_own_fields() {
    let dir = crate::testing::files::private_tempdir();
    let scope = Scope {
        uid: nix::unistd::getuid().as_raw(),
        host: "node".into(),
    };
    let log = EventLog::open(&dir.path().join("events.redb"), scope, crate::read::VIEWS).unwrap();
    let (new, old) = (Subject::Soak("new".into()), Subject::Soak("old".into()));
    // The lossy soak's start goes in schema 11's form, the older soak's in schema 10's, as the
    // unilab of each wrote them.
    log.append_all([
        (new.clone(), started("new", true).into_stored(11)),
        (new.clone(), verdict().into()),
        (old.clone(), started("old", false).into_stored(10)),
        (old.clone(), verdict().into()),
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
    let start_of = |subject: &Subject| {
        records
            .iter()
            .find(|r| r.envelope.subject == *subject && r.envelope.event.kind() == "soak_started")
            .unwrap()
    };
    let (read_new, read_old) = (start_of(&new), start_of(&old));
    assert_eq!(
        (read_new.envelope.schema, read_old.envelope.schema),
        (11, 10)
    );
    let lossy = |record: &Record| match &record.envelope.event {
        Event::SoakStarted { command_lossy, .. } => *command_lossy,
        other => panic!("{other:?}"),
    };
    assert_eq!((lossy(read_new), lossy(read_old)), (true, false));

    // The views fold both as any soak, and verify.
    let rows = Soaks::rows(&snapshot).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .all(|row| row.state == SoakState::Finished(OutcomeStatus::Passed)),
        "{rows:?}"
    );
    snapshot.verify(crate::read::VIEWS).unwrap();

    // `history --json` shows each record's own form: the field, then none.
    let shown = super::record_json(read_new);
    assert_eq!(shown["command_lossy"], true);
    assert_eq!(shown["command"][1], "\u{fffd}");
    let shown_old = super::record_json(read_old);
    assert!(shown_old.get("command_lossy").is_none(), "{shown_old}");
    assert_eq!(shown_old["command"][1], "ok");

    // The artifact says it for the soak whose form records it, and nothing for the older one.
    let artifact = |id: &str| {
        let soak = crate::read::fold::collect(&snapshot, id).unwrap().unwrap();
        let (bytes, _) = crate::read::artifact::render(&soak);
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
    };
    let (artifact_new, artifact_old) = (artifact("new"), artifact("old"));
    assert_eq!(artifact_new["command_lossy"], true);
    assert!(
        artifact_old.get("command_lossy").is_none(),
        "{artifact_old}"
    );
    assert_eq!(artifact_old["outcome"]["reason"], "ran");
}
