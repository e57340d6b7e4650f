//! A soak sample stored against the one before it (schema 8).
//!
//! A training tree changes little between two samples: the same processes, with the same names,
//! parents and thread counts, and counters that move by small steps. A [`CompactSample`] keeps
//! what a [`Sample`] and its [`Measures`] hold apart from the processes as they are, and packs
//! the processes into bytes that say only what changed since the soak's previous sample.
//!
//! The packed bytes are part of the frozen schema; their layout is described at [`pack`].
//! Since schema 10 the sample's beats are packed too ([`PackedBeats`]): a trainer beats the
//! same phase and the same numbers sample after sample, so their names are left out where they
//! are the previous sample's.

use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use super::{Measures, ProcessSample, Sample};

mod beats;
pub use beats::PackedBeats;

/// One sample of a soak with its processes packed against the soak's previous sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactSample {
    /// The index of the sample the processes are packed against: the soak's previous sample.
    /// `None` when they are packed against nothing (the first sample, or one stored whole every
    /// so often so that a reader never walks far back).
    pub base: Option<u64>,
    /// The sample, its `processes` left empty.
    pub sample: Sample,
    /// Its measures, `pss_bytes` and `heartbeat` left empty.
    pub measures: Measures,
    /// Whether the measures held a proportional set size for each process.
    pub pss: bool,
    /// The processes, packed.
    pub processes: Vec<u8>,
    /// The measures' beats, packed against the previous sample's.
    pub beats: Option<PackedBeats>,
}

/// Every this many samples of a soak, one is packed against nothing, so that a reader that
/// starts in the middle of a soak walks back over fewer than this many records.
pub(crate) const STANDALONE_EVERY: u64 = 64;

/// Why packed processes cannot be unpacked: the record is not what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnpackError {
    #[error("it is packed against sample {packed:?}, but the soak's previous sample is {found:?}")]
    Base {
        packed: Option<u64>,
        found: Option<u64>,
    },
    #[error("its packed processes end early")]
    Truncated,
    #[error("its packed processes have {0} bytes left over")]
    LeftOver(usize),
    #[error("its packed process {0} refers to no process of the previous sample")]
    Reference(usize),
    #[error("its packed process {0} holds a value out of range")]
    Range(usize),
    #[error("its packed beats do not fit the soak's previous sample")]
    Beats,
}

/// The numbers of a process, as the packing compares them: `None` where a field is unknown
/// (and, in [`BLANK`], where a process has no previous self).
type Numbers = [Option<u64>; FIELDS];

/// A process's fields in the packing's order: those that change most often first, so that the
/// usual change mask fits one byte.
const CPU_TICKS: usize = 0;
const RSS_BYTES: usize = 1;
const PSS_BYTES: usize = 2;
const READ_BYTES: usize = 3;
const WRITE_BYTES: usize = 4;
const STATE: usize = 5;
const THREADS: usize = 6;
const OPEN_FDS: usize = 7;
const REAPED_CPU_TICKS: usize = 8;
const PPID: usize = 9;
const FIELDS: usize = 10;
/// The sizes the kernel gives in KiB (`VmRSS` in pages, `Pss` in kB).
const IN_KIB: [usize; 2] = [RSS_BYTES, PSS_BYTES];
/// The mask's bit for the name, after the numbers'.
const NAME: usize = FIELDS;

const BLANK: Numbers = [None; FIELDS];

fn numbers(p: &ProcessSample, pss: Option<u64>) -> Numbers {
    let mut n = BLANK;
    n[CPU_TICKS] = Some(p.cpu_ticks);
    n[RSS_BYTES] = Some(p.rss_bytes);
    n[PSS_BYTES] = pss;
    n[READ_BYTES] = p.read_bytes;
    n[WRITE_BYTES] = p.write_bytes;
    n[STATE] = Some(u64::from(u32::from(p.state)));
    n[THREADS] = Some(u64::from(p.threads));
    n[OPEN_FDS] = p.open_fds.map(u64::from);
    n[REAPED_CPU_TICKS] = Some(p.reaped_children_cpu_ticks);
    n[PPID] = Some(u64::from(p.ppid));
    n
}

/// Each process's proportional set size, where the measures hold one for each.
fn pss_of(measures: &Measures, processes: usize) -> impl Fn(usize) -> Option<u64> + '_ {
    let aligned = measures.pss_bytes.len() == processes;
    move |i| {
        aligned
            .then(|| measures.pss_bytes.get(i).copied().flatten())
            .flatten()
    }
}

impl CompactSample {
    /// Packs `sample` and its `measures` against `base`, the soak's previous sample and its
    /// measures (`None`: against nothing). `None` when the measures do not line up with the
    /// processes (a sample the log then stores whole).
    ///
    /// The packed bytes: the number of processes, then for each, in the sample's order: a
    /// reference (`0` for a process the base does not hold, followed by its pid and start
    /// ticks; else `1 +` the zigzagged distance of its place in the base from the place after
    /// the last one referred to), a mask of the fields that differ from the base's (or from
    /// nothing), and each of those fields: a number as `0` for unknown, else `1 +` its zigzagged
    /// change; the name as its length and bytes. Every integer is an unsigned LEB128 varint.
    pub(crate) fn pack(
        base: Option<(&Sample, &Measures)>,
        sample: &Sample,
        measures: &Measures,
    ) -> Option<Self> {
        let n = sample.processes.len();
        let pss = !measures.pss_bytes.is_empty();
        if pss && measures.pss_bytes.len() != n {
            return None;
        }
        let own_pss = pss_of(measures, n);
        let mut out = Vec::with_capacity(8 * n + 4);
        varint(&mut out, n as u128);
        let mut places = Places::new(base.map(|(base, _)| base.processes.as_slice()));
        let base_pss = base.map(|(base, measures)| pss_of(measures, base.processes.len()));
        for (i, process) in sample.processes.iter().enumerate() {
            let place = places.find(process);
            varint(&mut out, places.reference(place));
            let (previous, name) = match (place, base, &base_pss) {
                (Some(at), Some((base, _)), Some(pss)) => {
                    let before = &base.processes[at];
                    (numbers(before, pss(at)), before.name.as_str())
                }
                _ => {
                    varint(&mut out, u128::from(process.pid));
                    varint(&mut out, u128::from(process.start_ticks));
                    (BLANK, "")
                }
            };
            let now = numbers(process, own_pss(i));
            let mut mask = 0u128;
            for field in 0..FIELDS {
                if now[field] != previous[field] {
                    mask |= 1 << field;
                }
            }
            if process.name != name {
                mask |= 1 << NAME;
            }
            varint(&mut out, mask);
            for field in (0..FIELDS).filter(|field| mask & (1 << field) != 0) {
                varint(&mut out, change(field, previous[field], now[field]));
            }
            if mask & (1 << NAME) != 0 {
                varint(&mut out, process.name.len() as u128);
                out.extend_from_slice(process.name.as_bytes());
            }
        }
        let base_beats = base.and_then(|(_, measures)| measures.heartbeat.as_deref());
        Some(Self {
            base: base.map(|(base, _)| base.index),
            sample: sample.clone_without_processes(),
            measures: Measures {
                pss_bytes: Vec::new(),
                gpus: measures.gpus.clone(),
                heartbeat: None,
            },
            pss,
            processes: out,
            beats: measures
                .heartbeat
                .as_deref()
                .map(|beats| PackedBeats::pack(base_beats, beats)),
        })
    }

    /// The sample and measures this stands for, given `base`: the soak's sample just before
    /// it and its measures, which must be the one it was packed against.
    pub(crate) fn unpack(
        self,
        base: Option<(&Sample, &Measures)>,
    ) -> Result<(Sample, Measures), UnpackError> {
        let found = base.map(|(base, _)| base.index);
        if self.base.is_some() && self.base != found {
            return Err(UnpackError::Base {
                packed: self.base,
                found,
            });
        }
        let base = if self.base.is_some() { base } else { None };
        let mut input = Input(&self.processes);
        let n = input.varint()?;
        // Every process takes two bytes at least: a count beyond that is not what was written.
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.processes.len() / 2)
            .ok_or(UnpackError::Truncated)?;
        let mut processes = Vec::with_capacity(n);
        let mut pss_bytes = Vec::with_capacity(if self.pss { n } else { 0 });
        let mut places = Places::new(base.map(|(base, _)| base.processes.as_slice()));
        let base_pss = base.map(|(base, measures)| pss_of(measures, base.processes.len()));
        for i in 0..n {
            let reference = input.varint()?;
            let place = places.resolve(reference).ok_or(UnpackError::Reference(i))?;
            let (identity, previous, name) = match (place, base, &base_pss) {
                (None, ..) => {
                    let pid = input.number(i)?;
                    let start_ticks = input.varint_u64()?;
                    ((pid, start_ticks), BLANK, "")
                }
                (Some(at), Some((base, _)), Some(pss)) => {
                    let before = base.processes.get(at).ok_or(UnpackError::Reference(i))?;
                    (
                        (before.pid, before.start_ticks),
                        numbers(before, pss(at)),
                        before.name.as_str(),
                    )
                }
                (Some(_), ..) => return Err(UnpackError::Reference(i)),
            };
            let mask = input.varint()?;
            if mask >> (NAME + 1) != 0 {
                return Err(UnpackError::Range(i));
            }
            let mut now = previous;
            for field in (0..FIELDS).filter(|field| mask & (1 << field) != 0) {
                now[field] = changed(field, previous[field], input.varint()?)
                    .ok_or(UnpackError::Range(i))?;
            }
            let name = if mask & (1 << NAME) != 0 {
                let len = usize::try_from(input.varint()?).map_err(|_| UnpackError::Truncated)?;
                String::from_utf8(input.bytes(len)?.to_vec()).map_err(|_| UnpackError::Range(i))?
            } else {
                name.to_owned()
            };
            if !self.pss && now[PSS_BYTES].is_some() {
                return Err(UnpackError::Range(i));
            }
            let process = process_of(identity, name, &now).ok_or(UnpackError::Range(i))?;
            processes.push(process);
            if self.pss {
                pss_bytes.push(now[PSS_BYTES]);
            }
        }
        if !input.0.is_empty() {
            return Err(UnpackError::LeftOver(input.0.len()));
        }
        let base_beats = base.and_then(|(_, measures)| measures.heartbeat.as_deref());
        let heartbeat = match self.beats {
            Some(beats) => Some(Box::new(
                beats.unpack(base_beats).ok_or(UnpackError::Beats)?,
            )),
            None => None,
        };
        let mut sample = self.sample;
        sample.processes = processes;
        let mut measures = self.measures;
        measures.pss_bytes = pss_bytes;
        measures.heartbeat = heartbeat;
        Ok((sample, measures))
    }
}

impl Sample {
    fn clone_without_processes(&self) -> Self {
        Self {
            index: self.index,
            elapsed_ms: self.elapsed_ms,
            after_exit: self.after_exit,
            processes: Vec::new(),
            reaped_cpu_ticks: self.reaped_cpu_ticks,
            gpus: self.gpus.clone(),
            progress: self.progress,
            sampler_cost_us: self.sampler_cost_us,
            errors: self.errors.clone(),
        }
    }
}

/// A process rebuilt from its identity, name and numbers; `None` where a number is out of its
/// field's range or missing where the field is always known.
fn process_of((pid, start_ticks): (u32, u64), name: String, n: &Numbers) -> Option<ProcessSample> {
    let small = |v: Option<u64>| v.map(u32::try_from).transpose().ok();
    Some(ProcessSample {
        pid,
        ppid: small(n[PPID])??,
        start_ticks,
        name,
        state: char::from_u32(small(n[STATE])??)?,
        rss_bytes: n[RSS_BYTES]?,
        cpu_ticks: n[CPU_TICKS]?,
        reaped_children_cpu_ticks: n[REAPED_CPU_TICKS]?,
        threads: small(n[THREADS])??,
        open_fds: small(n[OPEN_FDS])?,
        read_bytes: n[READ_BYTES],
        write_bytes: n[WRITE_BYTES],
    })
}

/// Where each process of a sample was in the base: tried at the place after the last one
/// found (a tree sampled in the same order), else looked up.
struct Places<'a> {
    base: &'a [ProcessSample],
    index: Option<HashMap<(u32, u64), usize>>,
    expected: usize,
}

impl<'a> Places<'a> {
    fn new(base: Option<&'a [ProcessSample]>) -> Self {
        Self {
            base: base.unwrap_or_default(),
            index: None,
            expected: 0,
        }
    }

    fn find(&mut self, process: &ProcessSample) -> Option<usize> {
        let identity = (process.pid, process.start_ticks);
        let same = |p: &ProcessSample| (p.pid, p.start_ticks) == identity;
        if self.base.get(self.expected).is_some_and(same) {
            return Some(self.expected);
        }
        let base = self.base;
        let index = self.index.get_or_insert_with(|| {
            let mut index = HashMap::with_capacity(base.len());
            for (at, p) in base.iter().enumerate().rev() {
                index.insert((p.pid, p.start_ticks), at);
            }
            index
        });
        index.get(&identity).copied()
    }

    /// The reference written for a process at `place`, moving the expected place past it.
    fn reference(&mut self, place: Option<usize>) -> u128 {
        let Some(at) = place else { return 0 };
        let distance = at as i64 - self.expected as i64;
        self.expected = at + 1;
        1 + u128::from(zigzag(distance))
    }

    /// The place a written reference names: `Some(None)` for a new process, `None` for a
    /// reference that cannot be (the caller checks it against the base).
    fn resolve(&mut self, reference: u128) -> Option<Option<usize>> {
        if reference == 0 {
            return Some(None);
        }
        let distance = unzigzag(u64::try_from(reference - 1).ok()?);
        let at = usize::try_from(i64::try_from(self.expected).ok()?.checked_add(distance)?).ok()?;
        if at >= self.base.len() {
            return None;
        }
        self.expected = at + 1;
        Some(Some(at))
    }
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// How a number is written: `0` for unknown, else `1 +` its zigzagged change from `previous`
/// (from 0 where that was unknown). A size the kernel counts in KiB ([`IN_KIB`]) changes by
/// whole KiB: such a change is written in KiB, its lowest bit clear (set for one in bytes).
fn change(field: usize, previous: Option<u64>, now: Option<u64>) -> u128 {
    now.map_or(0, |now| {
        let delta = now.wrapping_sub(previous.unwrap_or(0)) as i64;
        let written = if !IN_KIB.contains(&field) {
            u128::from(zigzag(delta))
        } else if delta % 1024 == 0 {
            u128::from(zigzag(delta / 1024)) << 1
        } else {
            u128::from(zigzag(delta)) << 1 | 1
        };
        1 + written
    })
}

/// The number [`change`] wrote; `None` for what it cannot have written.
fn changed(field: usize, previous: Option<u64>, written: u128) -> Option<Option<u64>> {
    if written == 0 {
        return Some(None);
    }
    let written = written - 1;
    let delta = if !IN_KIB.contains(&field) {
        unzigzag(u64::try_from(written).ok()?)
    } else if written & 1 == 0 {
        unzigzag(u64::try_from(written >> 1).ok()?).checked_mul(1024)?
    } else {
        unzigzag(u64::try_from(written >> 1).ok()?)
    };
    Some(Some(previous.unwrap_or(0).wrapping_add(delta as u64)))
}

fn varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The packed bytes not read yet.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn varint(&mut self) -> Result<u128, UnpackError> {
        let mut value = 0u128;
        for (i, &byte) in self.0.iter().enumerate().take(19) {
            value |= u128::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(value);
            }
        }
        Err(UnpackError::Truncated)
    }

    fn varint_u64(&mut self) -> Result<u64, UnpackError> {
        u64::try_from(self.varint()?).map_err(|_| UnpackError::Truncated)
    }

    fn number(&mut self, process: usize) -> Result<u32, UnpackError> {
        u32::try_from(self.varint()?).map_err(|_| UnpackError::Range(process))
    }

    fn bytes(&mut self, len: usize) -> Result<&[u8], UnpackError> {
        if len > self.0.len() {
            return Err(UnpackError::Truncated);
        }
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests;
