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
use unilab::EventLog;
use unilab::PROJECTIONS;

/// A root whose log holds one event of every kind, recorded by a fixed clock.
fn root_with_every_kind() -> TestRoot {
    let root = TestRoot::new();
    let log = EventLog::open_with_clock(&root.log_path(), root.scope(), PROJECTIONS, fixed_clock())
        .unwrap();
    log.append_all(every_event_kind()).unwrap();
    root
}
