//! Compact samples (schema 8): a soak's samples are stored packed against the soak's previous
//! sample, and every way of reading the log gives back exactly the samples appended.

use crate::common::*;
use unilab::{Event, Measures, ProcessSample, Record, Sample, StoredEvent, Subject};

/// The `i`-th sample of a tree that changes as a training tree does: workers come and go,
/// counters move, one process is renamed, proportional set sizes on every fourth sample.
fn changing(i: u64) -> (Sample, Measures) {
    let mut s = sample(i, 6);
    s.processes
        .retain(|p| !(u64::from(p.pid) + i).is_multiple_of(7));
    for (n, p) in s.processes.iter_mut().enumerate() {
        p.rss_bytes += i * 4096 * n as u64;
        p.read_bytes = p.read_bytes.map(|b| b + i * 1000);
        if i % 10 == 3 {
            p.state = 'R';
        }
    }
    if i.is_multiple_of(5) {
        s.processes.push(ProcessSample {
            pid: 9_000 + i as u32,
            name: format!("dataloader-{i}"),
            ..s.processes[0].clone()
        });
    }
    s.processes.reverse();
    let pss = if i.is_multiple_of(4) {
        s.processes.iter().map(|p| Some(p.rss_bytes / 2)).collect()
    } else {
        Vec::new()
    };
    (
        s,
        Measures {
            pss_bytes: pss,
            ..Measures::default()
        },
    )
}

fn sampled((sample, measures): (Sample, Measures)) -> Event {
    Event::SoakSampled {
        sample: Box::new(sample),
        measures: Some(Box::new(measures)),
        progress: None,
    }
}

fn samples_of(records: &[Record], id: &str) -> Vec<Event> {
    records
        .iter()
        .filter(|r| r.envelope.subject == Subject::Soak(id.into()))
        .map(|r| r.envelope.event.clone())
        .collect()
}

#[test]
fn every_way_of_reading_gives_back_the_samples_appended() {
    let root = TestRoot::new();
    let log = root.log();
    let soak = || Subject::Soak("a".into());
    let mut appended = Vec::new();
    // Singly and in groups, beside another soak and a daemon, with a record of the soak that is
    // no sample in the middle of its samples.
    for i in 0..150u64 {
        let event = sampled(changing(i));
        appended.push(event.clone());
        if i % 3 == 0 {
            log.append(soak(), event).unwrap();
        } else {
            log.append_all([
                (soak(), event),
                (Subject::Soak("b".into()), sampled(changing(1000 + i))),
                (Subject::Daemon("d".into()), live(i as u32)),
            ])
            .unwrap();
        }
        if i == 70 {
            let artifact = Event::ArtifactWritten {
                path: "/x".into(),
                digest: "d".into(),
                bytes: 1,
            };
            appended.push(artifact.clone());
            log.append(soak(), artifact).unwrap();
        }
    }
    let snapshot = log.snapshot().unwrap();
    let mut whole = Vec::new();
    snapshot
        .scan(1, |r| {
            whole.push(r);
            Ok(true)
        })
        .unwrap();
    assert_eq!(samples_of(&whole, "a"), appended, "scan from the start");
    // Stored packed: a sample of the 6-process soak is far smaller than its whole encoding.
    let mut sizes = Vec::new();
    snapshot
        .scan_sized(|r, bytes| {
            if r.envelope.subject == soak()
                && matches!(r.envelope.event, StoredEvent::SoakSampledCompact { .. })
            {
                sizes.push(bytes);
            }
            Ok(())
        })
        .unwrap();
    assert!(sizes.len() > 140, "{} samples stored packed", sizes.len());

    // From the middle, as `history --since` and a follower read.
    let middle = whole[whole.len() / 2].envelope.seq;
    let mut from_middle = Vec::new();
    snapshot
        .scan(middle, |r| {
            from_middle.push(r);
            Ok(true)
        })
        .unwrap();
    assert_eq!(
        from_middle[..],
        whole[whole.len() / 2..],
        "scan from the middle"
    );
    let mut subject_from_middle = Vec::new();
    snapshot
        .scan_subject(&soak(), middle, |r| {
            subject_from_middle.push(r);
            Ok::<_, unilab::LogError>(true)
        })
        .unwrap();
    let expected: Vec<_> = whole
        .iter()
        .filter(|r| r.envelope.subject == soak() && r.envelope.seq >= middle)
        .cloned()
        .collect();
    assert_eq!(subject_from_middle, expected, "the subject from the middle");
    // One at a time, and backwards.
    for record in &whole {
        assert_eq!(
            snapshot.get(record.envelope.seq).unwrap().as_ref(),
            Some(record)
        );
    }
    let mut backwards = Vec::new();
    snapshot
        .scan_subject_back(&soak(), u64::MAX, |r| {
            backwards.push(r);
            Ok(true)
        })
        .unwrap();
    backwards.reverse();
    assert_eq!(samples_of(&backwards, "a"), appended, "backwards");
    // The views and the check see them whole too.
    let report = snapshot.verify(unilab::PROJECTIONS).unwrap();
    assert_eq!(report.events, whole.len() as u64);
}

#[test]
fn a_log_opened_again_goes_on_packing_and_reads_back_whole() {
    let root = TestRoot::new();
    let soak = || Subject::Soak("a".into());
    let mut appended = Vec::new();
    for round in 0..3u64 {
        let log = root.log();
        for i in round * 10..round * 10 + 10 {
            let event = sampled(changing(i));
            appended.push(event.clone());
            log.append(soak(), event).unwrap();
        }
    }
    let log = root.log();
    let snapshot = log.snapshot().unwrap();
    let mut read = Vec::new();
    snapshot
        .scan_subject(&soak(), 1, |r| {
            read.push(r);
            Ok::<_, unilab::LogError>(true)
        })
        .unwrap();
    assert_eq!(samples_of(&read, "a"), appended);
}

#[test]
fn a_packed_sample_that_does_not_unpack_is_damage_not_a_panic() {
    let root = TestRoot::new();
    root.damaged_on_purpose();
    let log = root.log();
    let soak = || Subject::Soak("a".into());
    log.append(soak(), sampled(changing(1))).unwrap();
    // A record that claims a base the soak does not have, and one whose bytes are cut.
    let Event::SoakSampled {
        sample,
        measures: Some(measures),
        ..
    } = sampled(changing(2))
    else {
        unreachable!()
    };
    let forged = unilab::CompactSample {
        base: Some(5),
        sample: Sample {
            processes: Vec::new(),
            ..*sample
        },
        measures: *measures,
        pss: false,
        processes: vec![3, 0],
        beats: None,
    };
    let forged = StoredEvent::SoakSampledCompact {
        packed: Box::new(forged),
        noted: None,
    };
    log.append(soak(), forged).unwrap();
    let snapshot = log.snapshot().unwrap();
    let error = snapshot
        .scan(1, |_| Ok(true))
        .expect_err("a sample that does not unpack");
    assert!(
        matches!(&error, unilab::LogError::Damaged { detail, .. }
            if detail.contains("sample 2 cannot be unpacked")),
        "{error:?}"
    );
    drop(snapshot);
    drop(log);
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicates::str::contains("cannot be unpacked"));
    root.unilab()
        .args(["history", "--soak", "a"])
        .assert()
        .code(5);
}

/// A long soak whose samples are stored packed, archived: its archive's records are unpacked
/// from the soak's first, and everything reads as before.
#[test]
fn a_packed_soak_reads_back_the_same_from_its_archive() {
    let root = TestRoot::new();
    let id = "20261206T080000-c8c8";
    let supervisor = unilab::ProcessIdentity {
        pid: 5000,
        start_ticks: 1_000_000,
    };
    let log = root.log();
    log.append_all(measured_soak(id, 150, |i| 2 + (i % 5) as u32, supervisor))
        .unwrap();
    drop(log);
    let read = |args: &[&str]| {
        let output = root.unilab().args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        output.stdout
    };
    let commands: [&[&str]; 4] = [
        &["soak", "export", id],
        &["soak", "export", id, "--format", "csv"],
        &["soak", "show", id],
        &["--json", "history", "--soak", id],
    ];
    let before: Vec<Vec<u8>> = commands.iter().map(|args| read(args)).collect();
    let samples: serde_json::Value = serde_json::from_slice(&before[0]).unwrap();
    assert_eq!(samples["samples"].as_array().unwrap().len(), 150);

    read(&["log", "archive", "--soak", id]);
    assert!(
        root.log_path()
            .with_file_name(format!("events.soak-{id}.zst"))
            .exists()
    );
    for (args, was) in commands.iter().zip(&before) {
        assert!(
            read(args) == *was,
            "{args:?} reads otherwise from the archive"
        );
    }
    let verified: serde_json::Value =
        serde_json::from_slice(&read(&["--json", "log", "verify"])).unwrap();
    assert_eq!(verified["archives"][0]["checked"], true, "{verified}");
}
