//! What the sampler could not read, row by row: each message once (how many rows had it, when
//! first and last), and the runs of rows it spoiled, shaded on the charts.
//!
//! One message is not an error of the run: the GPU tool not found before any GPU was read — a
//! host without `nvidia-smi`, absent from the start. It is kept apart as a note, and the rows it
//! is the only message of are not shaded. Once a GPU was read the tool was there: its going
//! missing after that is an error like any other. The record keeps every message as it was
//! sampled; only the page reads them so. A host with no GPU tool at all (none named, none on
//! `PATH`) samples no GPU and its rows say nothing of it: the runtime snapshot's "not found" is
//! the note then.

use serde::Serialize;

/// A message of the sampler, told once: how many rows had it, and when first and last.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(in crate::view::report) struct SamplerError {
    pub text: String,
    pub rows: u64,
    pub first: f64,
    pub last: f64,
}

/// The sampler's messages of the rows so far.
#[derive(Debug, Default)]
pub(super) struct Erred {
    /// Whether each row had a sampler error (the absent tool's note aside).
    rows: Vec<bool>,
    errors: Vec<SamplerError>,
    /// The GPU tool not found before any GPU was read (one message: the tool is one a run).
    absent_tool: Vec<SamplerError>,
    /// How many rows had no message but the absent tool's.
    noted_only: u64,
    /// Whether any row so far read a GPU.
    gpu_read: bool,
}

impl Erred {
    /// A row at `at` with its sampler's `errors`; `gpu_read` whether it read any GPU.
    pub(super) fn add(&mut self, at: f64, errors: &[String], gpu_read: bool) {
        self.gpu_read |= gpu_read;
        let mut erred = false;
        for text in errors {
            let note = !self.gpu_read && tool_not_found(text);
            erred |= !note;
            let list = if note {
                &mut self.absent_tool
            } else {
                &mut self.errors
            };
            match list.iter_mut().find(|e| &e.text == text) {
                Some(seen) => {
                    seen.rows += 1;
                    seen.last = at;
                }
                None => list.push(SamplerError {
                    text: text.clone(),
                    rows: 1,
                    first: at,
                    last: at,
                }),
            }
        }
        self.noted_only += u64::from(!erred && !errors.is_empty());
        self.rows.push(erred);
    }

    /// The GPU tool, not found (`text`) from the start at `at`, where no row said so.
    pub(super) fn note_absent_tool(&mut self, text: &str, at: f64) {
        if self.absent_tool.is_empty() && !self.gpu_read {
            self.absent_tool.push(SamplerError {
                text: text.to_owned(),
                rows: 0,
                first: at,
                last: at,
            });
        }
    }

    /// Each message of the sampler, once; the absent tool's note apart.
    pub(super) fn errors(&self) -> &[SamplerError] {
        &self.errors
    }

    /// The GPU tool, not found before any GPU was read: when, and in how many rows.
    pub(super) fn absent_tool(&self) -> Option<&SamplerError> {
        self.absent_tool.first()
    }

    /// How many rows had no sampler message but the absent tool's.
    pub(super) fn noted_only(&self) -> u64 {
        self.noted_only
    }

    /// The runs of rows with a sampler error, each as the time from its first row to the next
    /// row after it (or its own last), runs closer than `merge` seconds joined: a soak whose
    /// every sample erred is one band, not a line a sample.
    pub(super) fn bands(&self, times: &[f64], merge: f64) -> Vec<(f64, f64)> {
        let erred = &self.rows;
        let mut bands: Vec<(f64, f64)> = Vec::new();
        let mut i = 0;
        while i < erred.len() {
            if !erred[i] {
                i += 1;
                continue;
            }
            let start = times[i];
            while i < erred.len() && erred[i] {
                i += 1;
            }
            let end = times.get(i).copied().unwrap_or(times[i - 1]);
            match bands.last_mut() {
                Some(last) if start - last.1 <= merge => last.1 = end,
                _ => bands.push((start, end)),
            }
        }
        bands
    }
}

/// Whether a sampler's message says the GPU tool was not found: `` `nvidia-smi` was not found ``
/// (or the path `UNILAB_NVIDIA_SMI` names), as the GPU stream words it.
pub(super) fn tool_not_found(text: &str) -> bool {
    text.strip_suffix("` was not found")
        .and_then(|t| t.strip_prefix('`'))
        .is_some_and(|program| !program.is_empty() && !program.contains('`'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errors: &[&str]) -> Vec<String> {
        errors.iter().map(|&e| e.to_owned()).collect()
    }

    #[test]
    fn a_tool_absent_from_the_start_is_a_note_and_no_band() {
        let mut erred = Erred::default();
        let missing = texts(&["`nvidia-smi` was not found"]);
        erred.add(0.0, &[], false);
        for i in 1..10 {
            erred.add(f64::from(i), &missing, false);
        }
        assert!(erred.errors().is_empty());
        let note = erred.absent_tool().unwrap();
        assert_eq!((note.rows, note.first, note.last), (9, 1.0, 9.0));
        assert_eq!(erred.noted_only(), 9);
        let times: Vec<f64> = (0..10).map(f64::from).collect();
        assert!(erred.bands(&times, 0.1).is_empty());
    }

    #[test]
    fn a_tool_gone_missing_after_a_gpu_was_read_is_an_error_with_its_band() {
        let mut erred = Erred::default();
        let missing = texts(&["`/opt/nvidia/bin/nvidia-smi` was not found"]);
        for i in 0..5 {
            erred.add(f64::from(i), &[], true);
        }
        for i in 5..10 {
            erred.add(f64::from(i), &missing, false);
        }
        assert!(erred.absent_tool().is_none());
        assert_eq!(erred.errors().len(), 1);
        assert_eq!(erred.errors()[0].rows, 5);
        assert_eq!(erred.noted_only(), 0);
        let times: Vec<f64> = (0..10).map(f64::from).collect();
        assert_eq!(erred.bands(&times, 0.1), [(5.0, 9.0)]);
    }

    #[test]
    fn another_error_beside_the_absent_tool_is_still_shaded() {
        let mut erred = Erred::default();
        let both = texts(&[
            "`nvidia-smi` was not found",
            "pss: cannot read smaps_rollup",
        ]);
        erred.add(0.0, &both, false);
        erred.add(1.0, &both[..1], false);
        assert_eq!(erred.errors().len(), 1);
        assert_eq!(erred.absent_tool().unwrap().rows, 2);
        assert_eq!(erred.noted_only(), 1);
        assert_eq!(erred.bands(&[0.0, 1.0], 0.0), [(0.0, 1.0)]);
        assert!(!tool_not_found("nvidia-smi has not answered for 2.0 s"));
        assert!(!tool_not_found("`` was not found"));
    }
}
