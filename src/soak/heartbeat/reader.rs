//! The heartbeat file, read as it grows, in memory that does not grow with it.
//!
//! [`HeartbeatReader::poll`] reads what was appended since the last poll, with `pread` at its
//! own offset (the file's cursor is never used), and keeps:
//! - a budget: at most [`POLL_BUDGET`] bytes and [`MAX_BEATS_A_POLL`] beats a poll; what is
//!   past it is read at the next poll;
//! - a bound on the backlog: when more than [`MAX_BACKLOG`] bytes wait, the reader skips ahead
//!   to the last [`POLL_BUDGET`] bytes of the file, and what it skipped — the bytes, up to the
//!   end of the line it lands in — is counted as dropped;
//! - only the start of a line whose newline has not come yet, at most [`MAX_LINE`] bytes: a
//!   longer line is counted oversized once and skipped up to its newline without being kept;
//! - a file cut shorter than what was read, or rewritten so that the last [`TAIL`] bytes before
//!   the reader's offset are no longer the ones it read there (a trainer that opens the file
//!   with `open(path, "w")` at each beat: its lines are often of one length, so the size alone
//!   would not tell), whether it stopped at a line's start, inside a line it holds or inside one
//!   it skips, is read again from its start, and the poll says so; so is another file put in
//!   its place ([`HeartbeatReader::replace`]).
//!
//! So the reader holds at most two buffers of [`MAX_LINE`] bytes, whatever the file holds: a
//! flood, one line of 100 MB, binary garbage. [`HeartbeatReader::poll_each`] hands each beat
//! over as it is read, borrowed from the buffer (the supervisor's way: nothing is allocated
//! for a common line); [`HeartbeatReader::poll`] collects them.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::beat::{Beat, Line};
use super::parse;
use crate::event::soak::HeartbeatErrors;

/// The longest line kept, without its newline.
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// The most bytes read in one poll.
pub(crate) const POLL_BUDGET: u64 = 4 * 1024 * 1024;
/// The most beats returned by one poll.
pub(crate) const MAX_BEATS_A_POLL: usize = 16_384;
/// The most bytes left waiting before the reader skips ahead.
pub(crate) const MAX_BACKLOG: u64 = 16 * POLL_BUDGET;
/// How many of the last bytes read are kept to tell a file rewritten in place.
pub(crate) const TAIL: usize = 256;

/// A poll's errors, added to the whole file's.
fn add(totals: &mut HeartbeatErrors, other: &HeartbeatErrors) {
    totals.malformed += other.malformed;
    totals.oversized += other.oversized;
    totals.dropped_bytes += other.dropped_bytes;
    totals.truncations += other.truncations;
}

/// What one poll read: its beats (`B`: in the file's order, or how many when each was handed
/// over as it was read) and what else it found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Polled<B = Vec<Beat<'static>>> {
    pub beats: B,
    pub errors: HeartbeatErrors,
    /// Whether the file had been cut short and was read again from its start.
    pub truncated: bool,
    /// Bytes written but not read yet (past the budget).
    pub backlog_bytes: u64,
}

/// Where the reader is in a line it does not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skipping {
    No,
    /// The rest of an oversized line (already counted).
    Oversized,
    /// The rest of a line whose start was skipped (counted as dropped bytes).
    Dropped,
}

/// A heartbeat file being read as it grows.
#[derive(Debug)]
pub struct HeartbeatReader {
    file: File,
    /// The next byte to read.
    offset: u64,
    /// The last bytes before `offset` (at most [`TAIL`]), as they were read: empty at the start.
    tail: Vec<u8>,
    /// The start of a line whose newline has not been read; empty unless `skipping` is `No`.
    partial: Vec<u8>,
    skipping: Skipping,
    chunk: Vec<u8>,
    totals: HeartbeatErrors,
}

impl HeartbeatReader {
    /// A reader of `file` from its start.
    pub fn new(file: File) -> Self {
        HeartbeatReader {
            file,
            offset: 0,
            tail: Vec::with_capacity(TAIL),
            partial: Vec::new(),
            skipping: Skipping::No,
            chunk: vec![0; MAX_LINE],
            totals: HeartbeatErrors::default(),
        }
    }

    /// The bytes of the file read so far (a line held in part among them).
    pub fn consumed(&self) -> u64 {
        self.offset
    }

    /// The errors of every poll so far.
    pub fn errors(&self) -> HeartbeatErrors {
        self.totals
    }

    /// Reads `file` from its start from now on: another file was put in place of the one read
    /// (renamed over it, or removed and created again). Counted as a truncation.
    pub fn replace(&mut self, file: File) {
        self.file = file;
        self.restart();
        self.totals.truncations += 1;
    }

    /// The file was found cut short or rewritten: read from its start again, counted.
    fn truncated(&mut self, polled: &mut Polled<usize>) {
        self.restart();
        polled.truncated = true;
        polled.errors.truncations += 1;
    }

    /// The file, read from its start again.
    fn restart(&mut self) {
        self.offset = 0;
        self.tail.clear();
        self.partial.clear();
        self.skipping = Skipping::No;
    }

    /// Reads what was appended since the last poll (within the budget); beats without `t` are
    /// stamped `now_unix`.
    pub fn poll(&mut self, now_unix: f64) -> std::io::Result<Polled> {
        let mut beats = Vec::new();
        let polled = self.poll_each(now_unix, |beat| beats.push(beat.clone().into_owned()))?;
        Ok(with_beats(polled, beats))
    }

    /// [`Self::poll`], each beat handed to `on_beat` as it is read.
    pub fn poll_each(
        &mut self,
        now_unix: f64,
        on_beat: impl FnMut(&Beat<'_>),
    ) -> std::io::Result<Polled<usize>> {
        self.poll_each_between(now_unix, now_unix, on_beat)
    }

    /// [`Self::poll_each`] of lines that arrived after `since_unix` and by `now_unix`: the
    /// lines of one read are stamped evenly over that time, the last at `now_unix` (a read
    /// that finds several lines cannot tell when each came; all at `now_unix` would make one
    /// step of the wait and nothing of the others).
    pub fn poll_each_between(
        &mut self,
        since_unix: f64,
        now_unix: f64,
        mut on_beat: impl FnMut(&Beat<'_>),
    ) -> std::io::Result<Polled<usize>> {
        let arrived = Arrived {
            since: since_unix.min(now_unix),
            now: now_unix,
        };
        let mut polled = Polled::default();
        // `fstat`, not `statx` for every field as `File::metadata` asks: a poll's second cost.
        let size = nix::sys::stat::fstat(&self.file)
            .map(|stat| u64::try_from(stat.st_size).unwrap_or(0))
            .map_err(std::io::Error::from)?;
        // Whether the bytes before the offset are still the ones read there is told by the
        // first read, which takes them too (one system call a poll, not two); where nothing
        // is to be read after them, or the backlog is to be skipped, they are read alone.
        let mut unverified = !self.tail.is_empty();
        if size < self.offset {
            unverified = false;
            self.truncated(&mut polled);
        } else if unverified && (size == self.offset || size - self.offset > MAX_BACKLOG) {
            unverified = false;
            if !self.tail_still_there()? {
                self.truncated(&mut polled);
            }
        }
        if size - self.offset > MAX_BACKLOG {
            self.skip_to(size - POLL_BUDGET, &mut polled.errors)?;
        }
        let mut end = size.min(self.offset + POLL_BUDGET);
        while self.offset < end && polled.beats < MAX_BEATS_A_POLL {
            let tail = if unverified { self.tail.len() } else { 0 };
            let want = usize::try_from(end - self.offset)
                .unwrap_or(usize::MAX)
                .min(self.chunk.len() - tail);
            let mut chunk = std::mem::take(&mut self.chunk);
            let read = self
                .file
                .read_at(&mut chunk[..tail + want], self.offset - tail as u64);
            if std::mem::take(&mut unverified)
                && read
                    .as_ref()
                    .is_ok_and(|&n| n < tail || chunk[..tail] != self.tail[..])
            {
                self.chunk = chunk;
                self.truncated(&mut polled);
                if size > MAX_BACKLOG {
                    self.skip_to(size - POLL_BUDGET, &mut polled.errors)?;
                }
                end = size.min(self.offset + POLL_BUDGET);
                continue;
            }
            let consumed =
                read.map(|n| self.take(&chunk[tail..n], arrived, &mut polled, &mut on_beat));
            self.chunk = chunk;
            match consumed? {
                0 => break,
                n => {
                    self.offset += n as u64;
                    keep_tail(&mut self.tail, &self.chunk[tail..tail + n]);
                }
            }
        }
        polled.backlog_bytes = size.saturating_sub(self.offset);
        add(&mut self.totals, &polled.errors);
        Ok(polled)
    }

    /// The last poll: reads what is left within the budget, and counts a last line without
    /// its newline as malformed (a writer stopped in the middle of it: its numbers may be cut),
    /// and what is past the budget — never to be read — as dropped, with the line held.
    pub fn finish(&mut self, now_unix: f64) -> std::io::Result<Polled> {
        let mut beats = Vec::new();
        let polled = self.finish_each(now_unix, |beat| beats.push(beat.clone().into_owned()))?;
        Ok(with_beats(polled, beats))
    }

    /// [`Self::finish`], each beat handed to `on_beat` as it is read.
    pub fn finish_each(
        &mut self,
        now_unix: f64,
        on_beat: impl FnMut(&Beat<'_>),
    ) -> std::io::Result<Polled<usize>> {
        let mut polled = self.poll_each(now_unix, on_beat)?;
        let mut errors = HeartbeatErrors::default();
        if polled.backlog_bytes > 0 {
            errors.dropped_bytes = polled.backlog_bytes + self.partial.len() as u64;
        } else if self.skipping == Skipping::No && !self.partial.iter().all(u8::is_ascii_whitespace)
        {
            errors.malformed = 1;
        }
        self.partial.clear();
        add(&mut polled.errors, &errors);
        add(&mut self.totals, &errors);
        Ok(polled)
    }

    /// Whether the bytes before the offset are still the ones the reader read there (the end of
    /// a line when it stopped at a line's start, else of a line it holds or skips): a file
    /// truncated and written again between two polls is caught here, unless it happens to hold
    /// the same bytes there too (then it holds what was read, so far).
    fn tail_still_there(&self) -> std::io::Result<bool> {
        if self.tail.is_empty() {
            return Ok(self.offset == 0); // (a skip that found the file cut: read it again)
        }
        let mut there = [0u8; TAIL];
        let there = &mut there[..self.tail.len()];
        let n = self
            .file
            .read_at(there, self.offset - self.tail.len() as u64)?;
        Ok(n == there.len() && *there == *self.tail)
    }

    /// Skips unread to `to`, counting what is skipped as dropped, up to the end of the line
    /// `to` lands in.
    fn skip_to(&mut self, to: u64, errors: &mut HeartbeatErrors) -> std::io::Result<()> {
        let mut before = [0u8; TAIL];
        let want = usize::try_from(to).map_or(TAIL, |to| to.min(TAIL));
        let from = to - want as u64;
        let n = self.file.read_at(&mut before[..want], from)?;
        errors.dropped_bytes += to - self.offset + self.partial.len() as u64;
        self.partial.clear();
        self.offset = to;
        self.tail.clear();
        let whole = n == want;
        if whole {
            self.tail.extend_from_slice(&before[..n]);
        }
        self.skipping = if whole && before[..n].last() == Some(&b'\n') {
            Skipping::No
        } else {
            Skipping::Dropped
        };
        Ok(())
    }

    /// Takes the lines in `bytes` (read at the offset); returns how many bytes it used: all of
    /// them, or up to the end of the line that filled the poll's beats.
    fn take(
        &mut self,
        bytes: &[u8],
        arrived: Arrived,
        polled: &mut Polled<usize>,
        on_beat: &mut impl FnMut(&Beat<'_>),
    ) -> usize {
        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
        let mut used = 0;
        let mut nth = 0;
        while let Some(newline) = bytes[used..].iter().position(|&b| b == b'\n') {
            let piece = &bytes[used..used + newline];
            used += newline + 1;
            nth += 1;
            let now_unix = arrived.of(nth, lines);
            match self.skipping {
                Skipping::Oversized => self.skipping = Skipping::No,
                Skipping::Dropped => {
                    polled.errors.dropped_bytes += piece.len() as u64 + 1;
                    self.skipping = Skipping::No;
                }
                Skipping::No if self.partial.len() + piece.len() > MAX_LINE => {
                    polled.errors.oversized += 1;
                    self.partial.clear();
                }
                Skipping::No if self.partial.is_empty() => line(piece, now_unix, polled, on_beat),
                Skipping::No => {
                    self.partial.extend_from_slice(piece);
                    line(&self.partial, now_unix, polled, on_beat);
                    self.partial.clear();
                }
            }
            if polled.beats >= MAX_BEATS_A_POLL {
                return used;
            }
        }
        let rest = &bytes[used..];
        match self.skipping {
            Skipping::Oversized => {}
            Skipping::Dropped => polled.errors.dropped_bytes += rest.len() as u64,
            Skipping::No if self.partial.len() + rest.len() > MAX_LINE => {
                polled.errors.oversized += 1;
                self.partial.clear();
                self.skipping = Skipping::Oversized;
            }
            Skipping::No => self.partial.extend_from_slice(rest),
        }
        bytes.len()
    }
}

/// When the lines of one read arrived: after `since`, by `now`.
#[derive(Clone, Copy)]
struct Arrived {
    since: f64,
    now: f64,
}

impl Arrived {
    /// The time of the `nth` (from 1) of `lines` lines read at once.
    fn of(self, nth: usize, lines: usize) -> f64 {
        if lines > 1 {
            self.since + (self.now - self.since) * nth as f64 / lines as f64
        } else {
            self.now
        }
    }
}

fn line(
    bytes: &[u8],
    now_unix: f64,
    polled: &mut Polled<usize>,
    on_beat: &mut impl FnMut(&Beat<'_>),
) {
    let mut beat = Beat::new();
    match parse::parse_into(bytes, now_unix, &mut beat) {
        Ok(()) => {
            polled.beats += 1;
            on_beat(&beat);
        }
        Err(Line::Malformed) => polled.errors.malformed += 1,
        Err(Line::Blank) => {}
    }
}

/// `tail` followed by `read`, cut to its last [`TAIL`] bytes.
fn keep_tail(tail: &mut Vec<u8>, read: &[u8]) {
    if read.len() >= TAIL {
        tail.clear();
        tail.extend_from_slice(&read[read.len() - TAIL..]);
        return;
    }
    let keep = TAIL - read.len();
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    tail.extend_from_slice(read);
}

/// `polled`, with the beats it handed over.
fn with_beats(polled: Polled<usize>, beats: Vec<Beat<'static>>) -> Polled {
    Polled {
        beats,
        errors: polled.errors,
        truncated: polled.truncated,
        backlog_bytes: polled.backlog_bytes,
    }
}

#[cfg(test)]
mod tests;
