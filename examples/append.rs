//! Appends events to this user's event log under a state root, one durable transaction each,
//! as a soak supervisor does with its samples. The quick start uses it to put something in a
//! log; it also counts the fsyncs of an append:
//!
//! ```text
//! cargo build --release --example append
//! strace -f -c -e trace=fsync,fdatasync,sync_file_range,msync \
//!     target/release/examples/append /tmp/unilab-root 1000
//! ```

use std::path::PathBuf;

use unilab::EventLog;
use unilab::PROJECTIONS;
use unilab::ProcessIdentity;
use unilab::StatePaths;
use unilab::{Event, Subject};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: append STATE_ROOT COUNT";
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(args.next().ok_or(usage)?);
    let count: u32 = args.next().ok_or(usage)?.parse()?;
    let paths = StatePaths::resolve(Some(&root))?;
    let log = EventLog::open(&paths.log_path(), paths.scope(), PROJECTIONS)?;
    for i in 0..count {
        log.append(
            Subject::Daemon("example".into()),
            Event::DaemonVerifiedLive {
                process: ProcessIdentity {
                    pid: std::process::id(),
                    start_ticks: u64::from(i),
                },
            },
        )?;
    }
    eprintln!(
        "appended {count} events to `{}`",
        paths.log_path().display()
    );
    Ok(())
}
