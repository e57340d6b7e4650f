use std::path::{Path, PathBuf};

use redb::TableHandle;
use serde_json::Value;

use super::*;
use crate::event::Scope;
use crate::log::EventLog;
use crate::projection::Soaks;

/// A row with every part of it filled, as JSON: each part, nested, holds something, so that a
/// part that changes shape changes the bytes below.
const FILLED: &str = r#"{
  "member": {"job": "ring", "run": "s0.r0", "rank": 2, "rank_text": "2", "node": "n1"},
  "seen_seq": 4242,
  "fold": {
    "run": {
      "peak_pss": 1048576,
      "utilization_sum": 170.5,
      "utilization_samples": 2,
      "captures": {
        "chosen": {
          "signature": "all_reduce < train",
          "top_frames": [{"function": "all_reduce", "file": "ring.py", "line": 41}]
        },
        "last_at_us": 1796479200000000,
        "collectives": [[2, {"sources": ["fifo"], "missing": ["none"], "groups": [{
          "group": "0", "name": "0", "desc": "default_pg", "ranks": [0, 1, 2, 3],
          "last_enqueued": 8, "last_started": 8, "last_completed": 7,
          "pending": [{"seq": 8, "op": "gloo:all_reduce", "input_sizes": [[1024]],
            "input_dtypes": ["Float"], "output_sizes": [[1024]], "state": "started",
            "top_frames": [{"name": "train_step", "file": "train.py", "line": 41}],
            "enqueued_at_us": 1796479203000000, "numel_in": 1024, "numel_out": 1024}]}]}]]
      },
      "reading": {
        "steps": {
          "last_step": 120,
          "train": {"small": 1, "buckets": {"700": 3}, "count": 4},
          "verdict_last": 121,
          "verdict_median": 0.25
        },
        "gpus": {
          "mask": "0,1",
          "seen": {"GPU-aaaa": {"index": 0, "uuid": "GPU-aaaa", "masks": 2,
            "slowed": [1, 0, 0, 0, 1], "sm_clock_mhz": {"sum": 3000.0, "count": 2},
            "power_watts": {"sum": 500.0, "count": 2}}},
          "named": {"GPU-bbbb": {"index": 1, "uuid": "GPU-bbbb", "masks": 1,
            "slowed": [0, 1, 0, 0, 0], "sm_clock_mhz": {"sum": 1400.0, "count": 1},
            "power_watts": {"sum": 240.0, "count": 1}}}
        }
      },
      "spawned_at_us": 1796479100000000,
      "progress": {
        "before": [3, 300],
        "latest": [{"progress_seen": "files", "last_progress_at_us": 1796479190000000,
          "last_progress_ms": 90000}, true]
      },
      "pace": {
        "last_phase": "data",
        "last_progress_at_us": 1796479190000000,
        "intervals": {"buckets": {"120": 7}, "count": 7},
        "last_sample_at_us": 1796479195000000
      }
    },
    "sample_interval_ms": 10000,
    "verdict_progress_ms": 95000,
    "stage": "Over"
  }
}"#;

/// The bytes [`FILLED`] is stored in, for each [`STATE_VERSION`]: a new shape is a new version
/// (and so a new table), pinned here.
const PINNED: &[(u32, &str)] = &[
    (
        1,
        "010472696e67010573302e7230010201013201026e31fb921001fc000010000000000000506540020112616c6c5f726564756365203c20747261696e010a616c6c5f726564756365010772696e672e7079012901fd00f01fd1c6c30c0001780101fbbc020304017901000000000000d03f0103302c3101084750552d6161616100084750552d61616161020100000001000000000070a740020000000000407f400201084750552d6262626201084750552d626262620100010000000000000000e09540010000000000006e400101fd002e34c5c6c30c000103fb2c0101010001fd00c3eecfc6c30c0001fc905f01000101046461746101fd00c3eecfc6c30c000178070701fd805987d0c6c30c0001fb102701fc1873010002",
    ),
    (
        2,
        "010472696e67010573302e7230010201013201026e31fb921001fc000010000000000000506540020112616c6c5f726564756365203c20747261696e010a616c6c5f726564756365010772696e672e7079012901fd00f01fd1c6c30c00010201046669666f01046e6f6e65010130010130010a64656661756c745f7067040001020301100110010e01100f676c6f6f3a616c6c5f7265647563650101fb00080105466c6f61740101fb00080773746172746564010a747261696e5f7374657008747261696e2e70795201fd807d7bd1c6c30c0001fb000801fb000801780101fbbc020304017901000000000000d03f0103302c3101084750552d6161616100084750552d61616161020100000001000000000070a740020000000000407f400201084750552d6262626201084750552d626262620100010000000000000000e09540010000000000006e400101fd002e34c5c6c30c000103fb2c0101010001fd00c3eecfc6c30c0001fc905f01000101046461746101fd00c3eecfc6c30c000178070701fd805987d0c6c30c0001fb102701fc1873010002",
    ),
];

/// Where `value` holds nothing (`null`, an empty list or map).
fn empty_parts(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Null => found.push(at.to_owned()),
        Value::Array(items) if items.is_empty() => found.push(at.to_owned()),
        Value::Object(fields) if fields.is_empty() => found.push(at.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                empty_parts(item, &format!("{at}[{i}]"), found);
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields {
                empty_parts(field, &format!("{at}.{key}"), found);
            }
        }
        _ => {}
    }
}

/// A row is stored as the bytes its version was pinned with: a row of another shape would be
/// misread by a reader of this version, so a change of shape (a field added to the fold or to
/// any part of it, as a new signal of the job's verdict adds one) must come with a new
/// [`STATE_VERSION`], which names a new table, built from the events when a log meets it.
#[test]
fn a_row_is_stored_in_the_shape_its_version_names() {
    let filled: KeptRank = serde_json::from_str(FILLED).unwrap_or_else(|e| {
        panic!("the shape of a kept row changed ({e}): fill the new part in FILLED, raise STATE_VERSION and pin its bytes")
    });
    let mut empty = Vec::new();
    empty_parts(&serde_json::to_value(&filled).unwrap(), "row", &mut empty);
    assert!(empty.is_empty(), "FILLED leaves parts empty: {empty:?}");
    let hex: String = codec::encode(&filled)
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let pinned = PINNED.iter().find(|(v, _)| *v == STATE_VERSION);
    assert_eq!(
        pinned.map(|(_, bytes)| *bytes),
        Some(hex.as_str()),
        "a kept row's bytes changed: raise STATE_VERSION (a new table) and pin (STATE_VERSION, {hex:?})"
    );
    assert_eq!(TABLE.name(), format!("soak_ranks_v{STATE_VERSION}"));
}

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("migrations/fixtures/v{version}"))
}

/// A copy of the frozen fixture of `version` (its archives beside it), opened with every view:
/// migrated, and the table of this view built.
fn opened(version: u32, dir: &Path) -> EventLog {
    for entry in std::fs::read_dir(fixture(version)).unwrap() {
        let name = entry.unwrap().file_name();
        let name = name.to_string_lossy();
        if name == "events.redb" || name.starts_with("events.soak-") {
            std::fs::copy(fixture(version).join(&*name), dir.join(&*name)).unwrap();
        }
    }
    let scope = Scope {
        uid: 1000,
        host: "fixture-host".into(),
    };
    EventLog::open(&dir.join("events.redb"), scope, crate::read::VIEWS).unwrap()
}

/// The table built for every frozen fixture that holds a job's soak (schema 9 on) — by the
/// migration to schema 14, or by the appends that froze schema 14's — holds for each job soak
/// the fold a full fold of its records makes, and for every other soak, the archived one among
/// them (folded from its archive), a row that says it is outside a job; and the log verifies.
#[test]
fn what_a_log_keeps_of_each_rank_is_what_a_full_fold_of_its_records_makes() {
    for version in 9..=crate::log::migrate::SCHEMA_VERSION {
        let dir = crate::testing::files::private_tempdir();
        let log = opened(version, dir.path());
        let snapshot = log.snapshot().unwrap();
        snapshot.verify(crate::read::VIEWS).unwrap();
        let mut kept = rows(&snapshot).unwrap().expect("the table was built");
        let mut jobs = 0;
        for soak in Soaks::rows(&snapshot).unwrap() {
            let id = &soak.soak_id;
            let row = kept
                .remove(id)
                .unwrap_or_else(|| panic!("v{version}: no row of {id}"));
            match &row.member {
                Some(member) => {
                    jobs += 1;
                    assert_eq!(row.seen_seq, soak.last_seq, "v{version}: {id}");
                    let full = super::super::folded(&snapshot, id, None).unwrap();
                    assert_eq!(row.fold, full, "v{version}: {id}");
                    assert_ne!(row.fold, RankFold::default(), "v{version}: {id}");
                    assert_eq!(member.job, "ring", "v{version}: {id}");
                }
                None => assert_eq!(row.fold.run, Default::default(), "v{version}: {id}"),
            }
        }
        assert!(kept.is_empty(), "v{version}: rows of no soak: {kept:?}");
        let least = if version >= 13 { 2 } else { 1 };
        assert!(jobs >= least, "v{version}: {jobs} job soaks");
    }
}
