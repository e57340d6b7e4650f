//! A storage that fails: every append is tried against a redb backend that fails its Nth write,
//! sync or resize with ENOSPC or EIO, for every N the append reaches. The append must fail
//! cleanly (an error, no panic) and leave nothing of itself visible — or, where redb had made
//! the commit durable before the failing write, report the append as done — leave the log
//! verifiable, and let the next append through. A retry of an append whose outcome could not be
//! told must not record it twice.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use super::tables::ViewTable;
use super::{EventLog, LogError, LogReader, Projection, Update, Views};
use crate::event::{Envelope, Event, Scope, Subject};
use crate::process::ProcessIdentity;
use crate::testing::files::private_tempdir as private_dir;

/// A view kept in each append's transaction, as the projections are (the log names none of
/// them): events seen per daemon subject.
struct Counts;

impl Projection for Counts {
    type Row = u64;
    const TABLE: ViewTable = ViewTable::new("fault_counts");

    fn key(subject: &Subject) -> Option<&str> {
        match subject {
            Subject::Daemon(name) => Some(name),
            _ => None,
        }
    }

    fn apply(current: Option<&u64>, _: &Envelope) -> Update<u64> {
        Update::Put(current.copied().unwrap_or(0) + 1)
    }
}

static VIEWS: Views = &[&Counts];

/// Which call of the backend fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Sync,
    SetLen,
}

/// When to fail: the `nth` call of `op` after the fault is armed, once.
#[derive(Debug)]
struct Fault {
    op: Op,
    nth: usize,
    errno: i32,
    armed: AtomicBool,
    calls: AtomicUsize,
    fired: AtomicBool,
}

impl Fault {
    fn check(&self, op: Op) -> std::io::Result<()> {
        if op != self.op || !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
            self.fired.store(true, Ordering::SeqCst);
            return Err(std::io::Error::from_raw_os_error(self.errno));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Flaky {
    inner: FileBackend,
    fault: Arc<Fault>,
}

impl StorageBackend for Flaky {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.fault.check(Op::SetLen)?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.fault.check(Op::Sync)?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.fault.check(Op::Write)?;
        self.inner.write(offset, data)
    }
    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

fn scope() -> Scope {
    Scope {
        uid: 1000,
        host: "faults".into(),
    }
}

/// A lease taken by pid `n`: an event whose seq and payload say which append it was.
fn event(n: u32) -> (Subject, Event) {
    (
        Subject::Daemon(format!("d{n}")),
        Event::LeaseAcquired {
            holder: ProcessIdentity {
                pid: n,
                start_ticks: u64::from(n),
            },
            job: None,
            started: false,
        },
    )
}

/// The pids of every event in the log, in order, after verifying it whole.
fn verified(path: &Path) -> Vec<u32> {
    let reader = LogReader::open(path, &scope()).unwrap().unwrap();
    let snapshot = reader.snapshot().unwrap();
    snapshot.verify(VIEWS).unwrap();
    let mut pids = Vec::new();
    snapshot
        .replay(|envelope| {
            if let Event::LeaseAcquired { holder, .. } = envelope.event {
                pids.push(holder.pid);
            }
        })
        .unwrap();
    pids
}

/// One append against a backend that fails the `nth` `op`. Whether the fault was reached.
fn one_round(op: Op, errno: i32, nth: usize) -> bool {
    let dir = private_dir();
    let path = dir.path().join("events.redb");
    {
        let log = EventLog::open(&path, scope(), VIEWS).unwrap();
        for n in 1..=3 {
            let (subject, event) = event(n);
            log.append(subject, event).unwrap();
        }
    }
    let fault = Arc::new(Fault {
        op,
        nth,
        errno,
        armed: AtomicBool::new(false),
        calls: AtomicUsize::new(0),
        fired: AtomicBool::new(false),
    });
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let backend = Flaky {
        inner: FileBackend::new(file).unwrap(),
        fault: Arc::clone(&fault),
    };
    let log = EventLog::on_backend(&path, scope(), VIEWS, backend).unwrap();
    fault.armed.store(true, Ordering::SeqCst);
    let (subject, event_4) = event(4);
    let failed = log.append(subject, event_4);
    fault.armed.store(false, Ordering::SeqCst);
    let fired = fault.fired.load(Ordering::SeqCst);
    let what = format!("{op:?} #{nth} errno {errno}");
    match &failed {
        Err(LogError::NoSpace { .. }) => assert_eq!(errno, libc_enospc(), "{what}"),
        Err(LogError::Unreadable { .. }) => assert_ne!(errno, libc_enospc(), "{what}"),
        Err(other) => panic!("{what}: an append failed as {other:?}"),
        Ok(_) => {}
    }
    assert!(failed.is_ok() || fired, "{what}: failed without the fault");
    // The next append goes through: the log is opened again after the failure.
    let (subject, event_5) = event(5);
    log.append(subject, event_5)
        .unwrap_or_else(|e| panic!("{what}: the append after the failure: {e}"));
    drop(log);
    let expected: Vec<u32> = if failed.is_ok() {
        vec![1, 2, 3, 4, 5]
    } else {
        vec![1, 2, 3, 5]
    };
    assert_eq!(verified(&path), expected, "{what}: nothing half-written");
    fired
}

fn libc_enospc() -> i32 {
    nix::errno::Errno::ENOSPC as i32
}

#[test]
fn an_append_on_a_failing_storage_fails_cleanly_and_the_log_stays_whole() {
    let mut reached = Vec::new();
    for op in [Op::Write, Op::Sync, Op::SetLen] {
        for errno in [nix::errno::Errno::ENOSPC, nix::errno::Errno::EIO] {
            let mut nth = 1;
            // Until the append no longer reaches the Nth call.
            while one_round(op, errno as i32, nth) {
                nth += 1;
                assert!(nth < 200, "{op:?}: an append made over 200 calls");
            }
            reached.push((op, errno, nth - 1));
        }
    }
    // Each kind of call is made by an append at least once, so each was failed at least once.
    for (op, errno, calls) in &reached {
        assert!(
            *calls >= 1 || *op == Op::SetLen,
            "{op:?} {errno}: never reached"
        );
    }
}

/// The question an append left open (its commit failed, the log could not be read) is answered
/// by the next append. Events that landed are not appended again — a retry may hold them among
/// newer ones (a soak's samples held through a full disk), and another process may have
/// appended since — while events that did not land are appended.
#[test]
fn a_retry_of_an_append_that_landed_is_not_recorded_twice() {
    let dir = private_dir();
    let path = dir.path().join("events.redb");
    let log = EventLog::open(&path, scope(), VIEWS).unwrap();
    let other = EventLog::open(&path, scope(), VIEWS).unwrap();
    let append = |log: &EventLog, pids: &[u32]| log.append_all(pids.iter().map(|n| event(*n)));
    let left_open = |landed: &[super::Appended]| {
        let last = landed.last().unwrap();
        *log.lock_unsettled() = Some(super::handle::Unsettled {
            head: (last.seq, last.hash),
            appended: landed.to_vec(),
        });
    };
    append(&log, &[1, 2, 3]).unwrap();
    // 4 and 5 landed, but their append was left open, as after a failed commit.
    let landed = append(&log, &[4, 5]).unwrap();
    left_open(&landed);
    let retried = append(&log, &[4, 5, 6]).unwrap();
    assert_eq!(
        &retried[..2],
        &landed[..],
        "the retry's landed events are the first append's"
    );
    assert_eq!(retried[2].seq, landed[1].seq + 1, "only 6 is appended");
    // Another process appends after one that landed: it still counts as landed.
    let landed = append(&log, &[7]).unwrap();
    left_open(&landed);
    append(&other, &[8]).unwrap();
    assert_eq!(append(&log, &[7]).unwrap(), landed);
    // One that did not land is appended when tried again.
    let mut not_in = landed.clone();
    not_in[0].seq += 10;
    left_open(&not_in);
    assert_eq!(append(&log, &[9]).unwrap()[0].seq, landed[0].seq + 2);
    drop((log, other));
    assert_eq!(verified(&path), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
}
