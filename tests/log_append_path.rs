//! Every record the log gains takes one path: an append and `log archive` alike check the head
//! they append to, so neither hides records cut from the log's end under a new, consistent head.

use predicates::prelude::*;
use unilab::Subject;

use crate::common::*;
use crate::log_archive::{V4_SOAK, archive_of, root_with_every_kind};

/// Removes the last record of `root`'s log, as something other than unilab would. What `log
/// verify` then says: it is missing.
fn cut_the_last_record(root: &TestRoot) -> String {
    use redb::ReadableTable;
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.open(root.log_path()).unwrap();
    let txn = db.begin_write().unwrap();
    let last = {
        let mut events = txn.open_table(unilab::testing::tables::EVENTS).unwrap();
        let last = events.last().unwrap().unwrap().0.value();
        events.remove(last).unwrap();
        last
    };
    txn.commit().unwrap();
    format!("at sequence {last}: it is missing")
}

/// `log archive` over a log whose last record was cut is refused as an append over it is —
/// the same error, exit 5 — and changes nothing: no archive file is left, and the log still
/// fails verification at the same place, its soak's records still in it.
#[test]
fn archive_over_a_log_cut_at_its_end_is_refused_as_an_append_is() {
    let root = root_with_every_kind(1_000_000);
    root.damaged_on_purpose();
    let missing = cut_the_last_record(&root);
    let appended = root.log().append(Subject::Host, live(1));
    let refused = appended
        .expect_err("an append over a cut end is refused")
        .to_string();
    assert!(refused.contains(&missing), "{refused}");
    root.unilab()
        .args(["log", "archive", "--soak", V4_SOAK])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(refused.as_str()));
    assert!(
        !archive_of(&root, V4_SOAK).exists(),
        "a refused archive leaves no file"
    );
    root.unilab()
        .args(["log", "verify"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains(missing.as_str()));
    root.unilab()
        .args(["history", "--soak", V4_SOAK])
        .assert()
        .stdout(predicate::str::contains("soak_started"));
}
