//! `unilab history`, `log verify` and the CLI around them, through the real binary: the timeline,
//! damage found and named, whose log is read or written where, the arguments, help, completions
//! and man pages, and the tables people read.
//!
//! This module holds the log of every kind of event at a fixed clock that the subjects share;
//! each subject is a module of its own.

mod cli;
mod damage;
mod history;
mod ownership;
mod tables;

use crate::common::*;
use unilab::Clock;
use unilab::EventLog;
use unilab::PROJECTIONS;

/// A clock that starts at 2025-12-02 12:00:00 UTC and advances 1.5 s a reading.
fn fixed_clock() -> Box<dyn Clock> {
    SteppingClock::boxed(1_764_676_800_000_000, 1_500_000)
}

/// A root whose log holds one event of every kind, recorded by a fixed clock.
fn root_with_every_kind() -> TestRoot {
    let root = TestRoot::new();
    let log = EventLog::open_with_clock(&root.log_path(), root.scope(), PROJECTIONS, fixed_clock())
        .unwrap();
    log.append_all(every_event_kind()).unwrap();
    root
}

/// Opens the log's redb file directly, as something other than unilab would.
fn raw_write(root: &TestRoot, change: impl FnOnce(&redb::WriteTransaction)) {
    let mut builder = redb::Builder::new();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.open(root.log_path()).unwrap();
    let txn = db.begin_write().unwrap();
    change(&txn);
    txn.commit().unwrap();
}
