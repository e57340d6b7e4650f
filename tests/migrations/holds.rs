//! What each schema step's frozen fixture holds: the form its version brought, read back.

use super::*;

/// The schema-8 fixture holds what its version brought: samples stored packed against the one
/// before (all but the first and the 64th, packed against nothing) and a soak archived beside
/// it.
#[test]
fn the_schema_8_fixture_holds_packed_samples() {
    let root = TestRoot::new();
    install(8, &root);
    let reader = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let (mut packed, mut alone, mut archived) = (0, 0, 0);
    reader
        .snapshot()
        .unwrap()
        .scan_sized(|record, _| {
            if record.envelope.subject == Subject::Soak(PACKED_IN_FIXTURE.into())
                && let StoredEvent::SoakSampledCompactV9(sample) = &record.envelope.event
            {
                match sample.base {
                    Some(base) => assert_eq!(base + 1, sample.sample.index),
                    None => alone += 1,
                }
                packed += 1;
            }
            archived += usize::from(matches!(
                record.envelope.event,
                StoredEvent::SoakArchived(_)
            ));
            Ok(())
        })
        .unwrap();
    assert_eq!((packed, alone, archived), (70, 2, 1));
}

/// The schema-10 fixture holds a soak whose trainer beat: its samples' beats stored packed
/// against the sample before (the phase and the numbers' keys left out where unchanged), read
/// back whole.
#[test]
fn the_schema_10_fixture_holds_packed_beats() {
    let root = TestRoot::new();
    install(10, &root);
    let reader = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let snapshot = reader.snapshot().unwrap();
    let soak = Subject::Soak(HEARTBEAT_SOAK_IN_FIXTURE.into());
    let mut packed = Vec::new();
    snapshot
        .scan_sized(|record, _| {
            if record.envelope.subject == soak
                && let StoredEvent::SoakSampledCompactV11(sample) = &record.envelope.event
            {
                packed.push((sample.base, sample.beats.clone()));
            }
            Ok(())
        })
        .unwrap();
    let bases: Vec<_> = packed.iter().map(|(base, _)| *base).collect();
    assert_eq!(bases, [None, Some(0), Some(1), Some(2), Some(3), Some(4)]);
    // The second sample's phase and keys are the first's: left out; the first's are written.
    let second = packed[1].1.as_ref().unwrap();
    assert_eq!((&second.phase, &second.keys), (&None, &None), "{packed:?}");
    let first = packed[0].1.as_ref().unwrap();
    assert_eq!(first.phase, Some(Some("train".to_owned())));
    let mut read = Vec::new();
    snapshot
        .scan(1, |record| {
            if record.envelope.subject == soak
                && let Event::SoakSampled {
                    measures: Some(measures),
                    ..
                } = record.envelope.event
            {
                read.push(measures.heartbeat.map(|b| (b.phase, b.numbers.len())));
            }
            Ok(true)
        })
        .unwrap();
    let train = |numbers| Some((Some("train".to_owned()), numbers));
    assert_eq!(
        read,
        [
            train(1),
            train(1),
            Some((Some("checkpoint".to_owned()), 1)),
            None,
            Some((Some("eval".to_owned()), 2)),
            train(1),
        ]
    );
}

/// The schema-11 fixture holds a start stored in schema 11's form, its command line recorded
/// lossily (an argument that was not UTF-8), beside the schema-10 soak's start in its own form;
/// `soak show` says which is lossy.
#[test]
fn the_schema_11_fixture_holds_a_lossy_command_line() {
    let root = TestRoot::new();
    install(11, &root);
    let reader = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let mut starts = Vec::new();
    reader
        .snapshot()
        .unwrap()
        .scan_sized(|record, _| {
            match &record.envelope.event {
                StoredEvent::SoakStartedV12 {
                    start,
                    command_lossy,
                    ..
                } => starts.push((start.soak_id.clone(), Some(*command_lossy))),
                StoredEvent::SoakStartedV10 { start, .. } => {
                    starts.push((start.soak_id.clone(), None));
                }
                _ => {}
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(
        starts,
        [
            (HEARTBEAT_SOAK_IN_FIXTURE.to_owned(), None),
            (LOSSY_SOAK_IN_FIXTURE.to_owned(), Some(true)),
        ]
    );
    for (id, lossy) in [
        (LOSSY_SOAK_IN_FIXTURE, true),
        (HEARTBEAT_SOAK_IN_FIXTURE, false),
    ] {
        let out = root
            .unilab()
            .args(["--json", "soak", "show", id])
            .output()
            .unwrap();
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(shown["command_lossy"], lossy, "{id}: {shown}");
    }
}

/// The schema-12 fixture holds a soak whose samples carry the progress their supervisor
/// decided, stored packed with it; every reader shows it as recorded: `history --json`, the
/// artifact's rows, `soak show --json`. The older soaks beside it show none.
#[test]
fn the_schema_12_fixture_holds_samples_with_their_progress() {
    let root = TestRoot::new();
    install(12, &root);
    let reader = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let mut noted = Vec::new();
    reader
        .snapshot()
        .unwrap()
        .scan_sized(|record, _| {
            if record.envelope.subject == Subject::Soak(NOTED_SOAK_IN_FIXTURE.into()) {
                match &record.envelope.event {
                    StoredEvent::SoakSampledCompact { noted: n, .. } => noted.push(*n),
                    StoredEvent::SoakSampled { .. } => panic!("stored whole"),
                    _ => {}
                }
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(noted.len(), 6);
    let last = noted.last().copied().flatten().unwrap();
    assert_eq!(last.progress_seen, Some(unilab::ProgressSeen::Files));

    let history = root
        .unilab()
        .args(["history", "--soak", NOTED_SOAK_IN_FIXTURE, "--json"])
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&history.stdout)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let sampled: Vec<_> = lines
        .iter()
        .filter(|l| l["kind"] == "soak_sampled")
        .collect();
    assert_eq!(sampled.len(), 6);
    assert_eq!(sampled[5]["progress_seen"], "files");
    assert_eq!(
        sampled[5]["last_progress_at_us"],
        last.last_progress_at_us.unwrap()
    );
    assert_eq!(sampled[3]["progress_seen"], serde_json::Value::Null);

    let export = |id: &str| -> serde_json::Value {
        let out = root.unilab().args(["soak", "export", id]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let rows = export(NOTED_SOAK_IN_FIXTURE)["samples"].clone();
    let seen: Vec<_> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["progress_seen"].clone())
        .collect();
    assert_eq!(
        seen,
        [
            "null",
            "\"beat\"",
            "\"beat\"",
            "null",
            "\"beat\"",
            "\"files\""
        ]
        .map(|v| serde_json::from_str::<serde_json::Value>(v).unwrap())
    );
    let at = last.last_progress_at_us.unwrap() as f64 / 1e6;
    assert_eq!(rows[5]["last_progress_at"], at);
    for row in export(HEARTBEAT_SOAK_IN_FIXTURE)["samples"]
        .as_array()
        .unwrap()
    {
        let row = row.as_object().unwrap();
        assert!(!row.contains_key("progress_seen") && !row.contains_key("last_progress_at"));
    }

    let shown = |id: &str| -> serde_json::Value {
        let out = root
            .unilab()
            .args(["--json", "soak", "show", id])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(shown(NOTED_SOAK_IN_FIXTURE)["last_progress_at"], at);
    assert_eq!(
        shown(HEARTBEAT_SOAK_IN_FIXTURE)["last_progress_at"],
        serde_json::Value::Null
    );
}

/// The schema-13 fixture holds a job's soak whose start, in schema 13's form, holds the run its
/// rank joined: `history --json` shows the run with the job, and the artifact's alarm (the one
/// that stopped the rank) gains it. The schema-9 job soak beside it, recorded before runs,
/// holds none and exports as it did (its frozen artifact is checked with every other).
#[test]
fn the_schema_13_fixture_holds_a_job_soaks_run() {
    let root = TestRoot::new();
    install(13, &root);
    let reader = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let mut jobs = Vec::new();
    reader
        .snapshot()
        .unwrap()
        .scan_sized(|record, _| {
            match &record.envelope.event {
                StoredEvent::SoakStarted { start, job, .. } => {
                    jobs.push((start.soak_id.clone(), job.as_ref().map(|j| j.run.clone())));
                }
                StoredEvent::SoakStartedV9 { start, job, .. } => {
                    jobs.push((start.soak_id.clone(), job.as_ref().map(|_| None)));
                }
                _ => {}
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(
        jobs,
        [
            (JOB_SOAK_IN_FIXTURE.to_owned(), Some(None)),
            (
                RUN_SOAK_IN_FIXTURE.to_owned(),
                Some(Some("s0.r0".to_owned()))
            ),
        ]
    );
    let history = root
        .unilab()
        .args(["history", "--soak", RUN_SOAK_IN_FIXTURE, "--json"])
        .output()
        .unwrap();
    let first: serde_json::Value = serde_json::Deserializer::from_slice(&history.stdout)
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(first["kind"], "soak_started", "{first}");
    assert_eq!(first["job"]["run"], "s0.r0", "{first}");
    let export = |id: &str| -> serde_json::Value {
        let out = root.unilab().args(["soak", "export", id]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let alarm = &export(RUN_SOAK_IN_FIXTURE)["outcome"]["job_alarm"];
    assert_eq!(alarm["run"], "s0.r0", "{alarm}");
    assert_eq!(alarm["rank"], 2, "{alarm}");
    let older = &export(JOB_SOAK_IN_FIXTURE)["outcome"]["job_alarm"];
    assert!(
        older.as_object().is_some_and(|o| !o.contains_key("run")),
        "{older}"
    );
}

/// The schema-15 fixture holds a soak whose verdict, in schema 15's form, counts the beats not
/// taken as they came: the artifact's `heartbeat_errors` shows the counts and its summary the
/// beats of phases past the first 16, and `soak show` warns of them. The beaten soak of schema
/// 10 beside it, whose verdict counted none of these, shows none (its frozen artifact is
/// checked with every other).
#[test]
fn the_schema_15_fixture_holds_a_verdict_counting_the_beats_not_taken() {
    let root = TestRoot::new();
    install(15, &root);
    let reader = LogReader::open(&root.log_path(), &root.scope())
        .unwrap()
        .unwrap();
    let mut forms = Vec::new();
    reader
        .snapshot()
        .unwrap()
        .scan_sized(|record, _| {
            match &record.envelope.event {
                StoredEvent::SoakFinished { .. } => forms.push((record.envelope.subject, 15)),
                StoredEvent::SoakFinishedV14 { .. } => forms.push((record.envelope.subject, 14)),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
    assert!(
        forms.contains(&(Subject::Soak(COUNTED_SOAK_IN_FIXTURE.into()), 15)),
        "{forms:?}"
    );
    assert!(
        forms.contains(&(Subject::Soak(HEARTBEAT_SOAK_IN_FIXTURE.into()), 14)),
        "{forms:?}"
    );
    let export = |id: &str| -> serde_json::Value {
        let out = root.unilab().args(["soak", "export", id]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let summary = &export(COUNTED_SOAK_IN_FIXTURE)["summary"];
    assert_eq!(
        summary["heartbeat_errors"],
        serde_json::json!({
            "clock": 3, "dropped": 0, "malformed": 2, "oversized": 1,
            "polling_fallbacks": 0, "repeats": 7, "truncations": 0,
        })
    );
    assert_eq!(summary["untracked"], 40);
    let older = export(HEARTBEAT_SOAK_IN_FIXTURE);
    let older = older["summary"].as_object().unwrap();
    assert!(!older.contains_key("untracked"));
    let errors = older["heartbeat_errors"].as_object().unwrap();
    assert!(!errors.contains_key("clock") && !errors.contains_key("repeats"));
    let shown = root
        .unilab()
        .args(["soak", "show", COUNTED_SOAK_IN_FIXTURE])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned()
        + &String::from_utf8_lossy(&shown.stderr);
    assert!(
        shown.contains("3 beats whose `t` disagreed with its arrival"),
        "{shown}"
    );
    assert!(
        shown.contains("7 beats repeating the step and phase"),
        "{shown}"
    );
    assert!(
        shown.contains("40 beats of phases past the first 16"),
        "{shown}"
    );
}
