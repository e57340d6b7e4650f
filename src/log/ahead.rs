//! Reading ahead: a long run of stored records read and hashed on a second thread while this
//! one decodes and visits them.

use std::sync::mpsc;

use super::chain;
use super::error::LogError;

/// How many records the reading thread hands over at once.
const BATCH: usize = 256;

/// Runs `read` on a second thread, a few batches ahead of `visit` on this one: `read` gives each
/// record's sequence and stored bytes (and stops when told `false`), the second thread checks the
/// record against its own hash and copies it into a batch, and `visit` gets the records in the
/// same order with what the hash check said, until it returns `false` or an error. The hashing
/// and redb's reads overlap the decoding and whatever `visit` does with a record; at most two
/// batches of [`BATCH`] wait between the threads, so memory stays flat however many records. Only
/// bytes cross: a decoded record freed on another thread than the one that allocated it costs
/// more than decoding it (glibc takes the allocating arena's lock). An error of `read` arrives
/// after every record it gave before it. Where no thread can be started (the user's process
/// limit reached), all of it runs here, one record after the other.
pub(super) fn read_ahead<E: From<LogError>>(
    read: impl FnOnce(&mut dyn FnMut(u64, &[u8]) -> bool) -> Result<(), LogError> + Send,
    mut visit: impl FnMut(u64, &[u8], bool) -> Result<bool, E>,
) -> Result<(), E> {
    // The reader takes `read` from here; if it cannot start, this thread does.
    let slot = std::sync::Mutex::new(Some(read));
    let take = || slot.lock().ok().and_then(|mut read| read.take());
    let spawned = std::thread::scope(|scope| {
        let (batches, received) = mpsc::sync_channel::<Result<Batch, LogError>>(2);
        let reader = std::thread::Builder::new().spawn_scoped(scope, move || {
            let Some(read) = take() else { return };
            let mut batch = Batch::default();
            let read = read(&mut |seq, stored| {
                batch.push(seq, stored, chain::hash_holds(stored));
                batch.records.len() < BATCH || batches.send(Ok(batch.hand_over())).is_ok()
            });
            // A closed channel means `visit` stopped: there is nothing more to say.
            if batches.send(Ok(batch)).is_ok()
                && let Err(e) = read
            {
                let _ = batches.send(Err(e));
            }
        });
        if reader.is_err() {
            return None;
        }
        // Returning drops `received`, which ends the reader at its next batch.
        let visited = || {
            for batch in received {
                for (seq, stored, hash_holds) in batch?.records() {
                    if !visit(seq, stored, hash_holds)? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        };
        Some(visited())
    });
    if let Some(visited) = spawned {
        return visited;
    }
    let Some(read) = take() else {
        return Ok(());
    };
    let mut failed = None;
    read(
        &mut |seq, stored| match visit(seq, stored, chain::hash_holds(stored)) {
            Ok(going_on) => going_on,
            Err(e) => {
                failed = Some(e);
                false
            }
        },
    )?;
    failed.map_or(Ok(()), Err)
}

/// Stored records on their way from the reading thread: their bytes in one buffer.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Each record's sequence, the end of its bytes, and whether its own hash holds.
    records: Vec<(u64, usize, bool)>,
}

impl Batch {
    /// This batch, leaving an empty one as large in its place.
    fn hand_over(&mut self) -> Self {
        let next = Self {
            bytes: Vec::with_capacity(self.bytes.len()),
            records: Vec::with_capacity(self.records.len()),
        };
        std::mem::replace(self, next)
    }

    fn push(&mut self, seq: u64, stored: &[u8], hash_holds: bool) {
        self.bytes.extend_from_slice(stored);
        self.records.push((seq, self.bytes.len(), hash_holds));
    }

    fn records(&self) -> impl Iterator<Item = (u64, &[u8], bool)> {
        let mut start = 0;
        self.records.iter().map(move |&(seq, end, hash_holds)| {
            let stored = &self.bytes[start..end];
            start = end;
            (seq, stored, hash_holds)
        })
    }
}
