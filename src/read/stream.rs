//! The artifact written as the log is read, in memory that does not grow with the soak: one scan
//! of the soak's events ([`walk`]), each sample turned into its row and serialised once, into a
//! spool file; then the canonical object composed from the rest (small) and the spool, twice —
//! once into blake3 for the digest, once into the output with the digest in its place.
//!
//! The bytes are those of `serde_json::to_vec_pretty` over the whole object plus a newline (what
//! [`super::render`] gives): keys in sorted order, two-space indentation; each value is printed
//! by serde_json's pretty printer's rules started at its depth (`Nested`).

use std::io::{self, BufRead, BufReader, BufWriter, Seek, Write};
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::artifact::{current, frozen};
use super::fold::{Fold, Folded, Soak, walk};
use super::progress::RowsProgress;
use super::record::SoakRecord;
use super::rows::{Rows, SampleRow};
use crate::log::{LogError, Snapshot};
use crate::soak::artifact::Placement;
use crate::soak::error::{OutputFile, SoakError};

pub use crate::soak::artifact::Written;

/// Why the artifact could not be written: the log, the output or the spool, or no such soak
/// (then nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The temporary file the rows pass through.
    #[error("cannot keep the rows in a temporary file")]
    Spool(#[source] io::Error),
    #[error("no soak `{0}` is recorded")]
    NoSuchSoak(String),
}

/// Writes the artifact of `soak_id` to `out`.
pub fn write(
    snapshot: &Snapshot,
    soak_id: &str,
    out: &mut impl Write,
) -> Result<Written, StreamError> {
    let mut gathered = gather(snapshot, soak_id, |_| {})?;
    let digest = gathered.digest()?;
    let mut counted = Counted::new(out);
    compose(
        &gathered.head,
        Some(&digest),
        &mut gathered.spool,
        &mut counted,
    )?;
    Ok(Written {
        digest,
        bytes: counted.count,
    })
}

/// Writes the artifact of `soak_id` to the file at `path`, atomically, put in place as
/// `placement` says: what the supervisor writes when a soak ends, and `soak export --output`.
pub(crate) fn write_file(
    snapshot: &Snapshot,
    soak_id: &str,
    path: &Path,
    placement: Placement,
) -> Result<Written, SoakError> {
    crate::soak::artifact::write_placed_with(path, placement, |file| write(snapshot, soak_id, file))
        .map_err(streaming(path))
}

/// The error of an artifact (or a report, or a CSV) that could not be streamed to `path`.
pub(crate) fn streaming(path: &Path) -> impl FnOnce(StreamError) -> SoakError + '_ {
    move |e| match e {
        StreamError::Log(e) => e.into(),
        StreamError::Io(source) => SoakError::output(OutputFile::Artifact, path)(source),
        StreamError::Spool(source) => SoakError::spool(source),
        StreamError::NoSuchSoak(id) => SoakError::NoSuchSoak(id),
    }
}

/// The artifact's object without `samples` and `digest`.
pub(crate) type Head = Map<String, Value>;

/// The rows of a soak as they go by: of the current artifact, of a frozen `/2` or `/3`, or none
/// for a frozen `/1` (its samples are kept and rendered at the end).
enum Rower {
    Current(Box<Rows>),
    Frozen(Box<frozen::Rows>),
    Whole,
}

impl Rower {
    fn of(soak: &Soak) -> Self {
        if !frozen::renders(soak) {
            return Rower::Current(Box::new(current::rows(soak)));
        }
        match frozen::Rows::of(soak) {
            Some(rows) => Rower::Frozen(Box::new(rows)),
            None => Rower::Whole,
        }
    }
}

/// What [`gather`] tells of the rows as it goes.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    /// The soak's next row, as today's rows read whatever the artifact.
    Row(&'a SampleRow<'a>),
    /// The soak started again under the same id: the rows so far are not part of it.
    Restart,
}

/// A soak's artifact, gathered: the soak's record, every field of its artifact but `samples`,
/// and the rows in a spool.
pub struct Gathered {
    pub(crate) record: SoakRecord,
    pub head: Head,
    spool: Spool,
}

impl Gathered {
    /// The artifact's digest: blake3 of its rendering without `digest`.
    pub fn digest(&mut self) -> Result<String, StreamError> {
        let mut hasher = blake3::Hasher::new();
        compose(&self.head, None, &mut self.spool, &mut hasher)?;
        Ok(hasher.finalize().to_hex().to_string())
    }
}

/// The artifact of `soak_id` in one scan of its events, each row also given to `on_row`.
pub fn gather(
    snapshot: &Snapshot,
    soak_id: &str,
    on_row: impl FnMut(Piece<'_>),
) -> Result<Gathered, StreamError> {
    let (record, head, spool) = gather_into(snapshot, soak_id, Spool::new()?, on_row, true)?;
    Ok(Gathered {
        record,
        head: head.unwrap_or_default(),
        spool,
    })
}

/// The record of `soak_id`, in one scan of its events, each row given to `on_row` and kept
/// nowhere: what every view of a soak reads (its rows only as they go by).
pub(crate) fn read(
    snapshot: &Snapshot,
    soak_id: &str,
    on_row: impl FnMut(Piece<'_>),
) -> Result<SoakRecord, StreamError> {
    Ok(gather_into(snapshot, soak_id, Spool::discarding(), on_row, false)?.0)
}

/// The soak's record, its artifact's head (when `heads`) and its rows spooled.
fn gather_into(
    snapshot: &Snapshot,
    soak_id: &str,
    mut spool: Spool,
    mut on_row: impl FnMut(Piece<'_>),
    heads: bool,
) -> Result<(SoakRecord, Option<Head>, Spool), StreamError> {
    // The progress as of the latest row, for the record: read from every row, whatever its
    // artifact.
    let mut progress = RowsProgress::default();
    let mut on_row = |piece: Piece<'_>| {
        match piece {
            Piece::Row(row) => progress.row(row),
            Piece::Restart => progress.restart(),
        }
        on_row(piece);
    };
    let mut folded = Folded::default();
    let mut rower = Rower::Whole;
    let empty = Default::default();
    let walked = walk(snapshot, soak_id, |event, schema, _| {
        match folded.fold(event, schema) {
            Fold::Restarted => {
                rower = folded.soak.as_ref().map_or(Rower::Whole, Rower::of);
                spool = spool.fresh()?;
                on_row(Piece::Restart);
            }
            Fold::Sample(sample, measures, progress) => match &mut rower {
                Rower::Current(rows) => {
                    let measures = measures.as_deref().unwrap_or(&empty);
                    let row = rows.row(&sample, measures, progress.as_ref());
                    spool.push(&row)?;
                    on_row(Piece::Row(&row));
                }
                Rower::Frozen(rows) => {
                    let row = rows.row(&sample);
                    spool.push(&row)?;
                    on_row(Piece::Row(&frozen::read(&row)));
                }
                Rower::Whole => folded.keep((*sample, measures.map(|m| *m), progress)),
            },
            Fold::Folded => {}
        }
        Ok::<(), StreamError>(())
    })?;
    let Some(mut records) = folded.records(walked) else {
        return Err(StreamError::NoSuchSoak(soak_id.to_owned()));
    };
    // The rows of the current artifact and of `/2`–`/3` went to the spool as they came; what
    // they tell, and the heads of `/2`–`/3`, need only what the rows kept. Schema 1's soak is
    // rendered from all its samples.
    let (head, tally) = match &rower {
        Rower::Current(rows) => (None, rows.tally()),
        Rower::Frozen(rows) => (heads.then(|| rows.head(&records)), rows.tally()),
        Rower::Whole => {
            let (head, rows, tally) = frozen::whole(&records);
            for row in &rows {
                spool.push(row)?;
                on_row(Piece::Row(&frozen::read_v1(row)));
            }
            (heads.then_some(head), tally)
        }
    };
    records.soak.samples = Vec::new();
    let record = SoakRecord::of(records, tally, progress.latest());
    // The current artifact is written from the record.
    let head = match rower {
        Rower::Current(_) => heads.then(|| current::head(&record)),
        Rower::Frozen(_) | Rower::Whole => head,
    };
    spool.finish()?;
    Ok((record, head, spool))
}

/// Writes the object `head` with `digest` and `samples` in their sorted places, as serde_json's
/// pretty printer would, and a final newline.
fn compose(
    head: &Head,
    digest: Option<&str>,
    samples: &mut Spool,
    out: &mut impl Write,
) -> Result<(), StreamError> {
    let mut keys: Vec<&str> = head.keys().map(String::as_str).collect();
    keys.push("samples");
    keys.extend(digest.map(|_| "digest"));
    keys.sort_unstable();
    for (i, key) in keys.into_iter().enumerate() {
        out.write_all(if i == 0 { b"{\n  " } else { b",\n  " })?;
        serde_json::to_writer(&mut *out, key).map_err(io::Error::from)?;
        out.write_all(b": ")?;
        match (key, head.get(key)) {
            ("digest", _) => serde_json::to_writer(&mut *out, &digest).map_err(io::Error::from)?,
            ("samples", _) => samples.copy_to(out)?,
            (_, Some(value)) => pretty(value, 1, out)?,
            (_, None) => unreachable!("every key comes from the head"),
        }
    }
    Ok(out.write_all(b"\n}\n")?)
}

/// `value` pretty-printed at `depth` (two spaces a level), as serde_json's pretty printer prints
/// it nested that deep.
fn pretty(value: &impl Serialize, depth: usize, out: &mut impl Write) -> io::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(out, Nested::at(depth));
    value.serialize(&mut serializer)?;
    Ok(())
}

/// serde_json's `PrettyFormatter` (two-space indentation), starting `depth` levels deep.
struct Nested {
    depth: usize,
    has_value: bool,
}

impl Nested {
    fn at(depth: usize) -> Self {
        Self {
            depth,
            has_value: false,
        }
    }

    fn indent<W: ?Sized + Write>(&self, out: &mut W) -> io::Result<()> {
        const SPACES: &[u8] = &[b' '; 64];
        let mut left = self.depth * 2;
        while left > 0 {
            let now = left.min(SPACES.len());
            out.write_all(&SPACES[..now])?;
            left -= now;
        }
        Ok(())
    }

    fn open<W: ?Sized + Write>(&mut self, out: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        out.write_all(bracket)
    }

    fn close<W: ?Sized + Write>(&mut self, out: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            out.write_all(b"\n")?;
            self.indent(out)?;
        }
        out.write_all(bracket)
    }

    fn next<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        out.write_all(if first { b"\n" } else { b",\n" })?;
        self.indent(out)
    }
}

impl serde_json::ser::Formatter for Nested {
    fn begin_array<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.open(out, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.close(out, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        self.next(out, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _out: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.open(out, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.close(out, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        self.next(out, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        out.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _out: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// The rows of `samples`, serialised at their depth in the artifact, in an unnamed temporary
/// file: read back as often as needed, never held in memory.
struct Spool {
    /// `None` for a spool that keeps nothing ([`read`]).
    file: Option<BufWriter<std::fs::File>>,
    rows: u64,
}

impl Spool {
    fn new() -> Result<Self, StreamError> {
        let file = tempfile::tempfile().map_err(StreamError::Spool)?;
        Ok(Self {
            file: Some(BufWriter::with_capacity(1 << 16, file)),
            rows: 0,
        })
    }

    fn discarding() -> Self {
        Self {
            file: None,
            rows: 0,
        }
    }

    /// An empty spool of the same kind.
    fn fresh(&self) -> Result<Self, StreamError> {
        match self.file {
            Some(_) => Self::new(),
            None => Ok(Self::discarding()),
        }
    }

    fn push(&mut self, row: &impl Serialize) -> Result<(), StreamError> {
        if let Some(file) = &mut self.file {
            file.write_all(if self.rows == 0 {
                b"\n    "
            } else {
                b",\n    "
            })
            .and_then(|()| pretty(row, 2, file))
            .map_err(StreamError::Spool)?;
        }
        self.rows += 1;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), StreamError> {
        self.file
            .as_mut()
            .map_or(Ok(()), Write::flush)
            .map_err(StreamError::Spool)
    }

    /// The array: `[]`, or its rows and the closing bracket on its own line.
    fn copy_to(&mut self, out: &mut impl Write) -> Result<(), StreamError> {
        if self.rows == 0 {
            return Ok(out.write_all(b"[]")?);
        }
        out.write_all(b"[")?;
        // Only `gather`'s artifacts are composed, and their spools keep the rows.
        let Some(file) = &mut self.file else {
            let kept_none = io::Error::other("the rows of this artifact were not kept");
            return Err(StreamError::Spool(kept_none));
        };
        copy_out(file.get_mut(), out)?;
        Ok(out.write_all(b"\n  ]")?)
    }
}

/// Copies the whole of a spool file to `out`, leaving the file's position at its end: a failure
/// to read the spool is [`StreamError::Spool`], one to write `out` [`StreamError::Io`].
pub(super) fn copy_out(file: &mut std::fs::File, out: &mut impl Write) -> Result<(), StreamError> {
    file.rewind().map_err(StreamError::Spool)?;
    let mut reader = BufReader::with_capacity(1 << 16, &mut *file);
    loop {
        let chunk = reader.fill_buf().map_err(StreamError::Spool)?;
        if chunk.is_empty() {
            return Ok(());
        }
        out.write_all(chunk)?;
        let n = chunk.len();
        reader.consume(n);
    }
}

/// A writer that counts what passes through it.
struct Counted<W> {
    inner: W,
    count: u64,
}

impl<W> Counted<W> {
    fn new(inner: W) -> Self {
        Self { inner, count: 0 }
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
