//! `history --soak`'s phase changes: after a sample whose beats ended in another phase than the
//! previous beaten sample's, a line saying so (the first beaten sample's phase too: where the
//! beats began). A soak gets at most [`SHOWN`] such lines, so that a trainer flipping phase at
//! every sample does not double its timeline; how many more there were is said once, before the
//! soak's end (or after the last line, when the timeline stops before it). The samples' own
//! lines carry each sample's beats (`history --soak ID --json` every sample's phase).

use crate::event::Event;
use crate::text::{count, foreign};

/// The phase changes a soak's timeline shows.
pub(super) const SHOWN: u64 = 20;

/// Under the record whose line it follows.
const INDENT: &str = "        ";

/// The phase changes of one soak's timeline, as its records go by.
#[derive(Debug, Default)]
pub(super) struct PhaseLines {
    /// The phase of the last sample that beat.
    phase: Option<String>,
    shown: u64,
    left_out: u64,
}

impl PhaseLines {
    /// The line to print before `event`'s own: how many changes were left out, before the end.
    pub(super) fn before(&mut self, event: &Event) -> Option<String> {
        match event {
            Event::SoakFinished { .. } | Event::SoakAbandoned { .. } => self.left_out(),
            _ => None,
        }
    }

    /// The line to print after `event`'s own: the phase it changed to, if it is a sample.
    pub(super) fn after(&mut self, event: &Event) -> Option<String> {
        let Event::SoakSampled {
            sample, measures, ..
        } = event
        else {
            return None;
        };
        let beats = measures.as_deref()?.heartbeat.as_deref()?;
        let phase = beats.phase.as_deref()?;
        if self.phase.as_deref() == Some(phase) {
            return None;
        }
        let previous = self.phase.replace(phase.to_owned());
        if self.shown == SHOWN {
            self.left_out += 1;
            return None;
        }
        self.shown += 1;
        let changed = match previous {
            Some(previous) => format!("phase {} → {}", foreign(&previous), foreign(phase)),
            None => format!("phase {}", foreign(phase)),
        };
        let step = beats
            .step
            .map(|step| format!(" at step {step}"))
            .unwrap_or_default();
        Some(format!(
            "{INDENT}{changed}{step} (sample #{})",
            sample.index
        ))
    }

    /// How many changes were left out, once (`None` when none were).
    pub(super) fn left_out(&mut self) -> Option<String> {
        let n = std::mem::take(&mut self.left_out);
        (n > 0).then(|| {
            format!(
                "{INDENT}… {} left out (the first {SHOWN} are shown)",
                count(n, "more phase change")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::{Measures, SampleBeats};
    use crate::event::{Event, Sample};

    fn sampled(index: u64, phase: Option<&str>) -> Event {
        let measures = Measures {
            heartbeat: phase.map(|phase| {
                Box::new(SampleBeats {
                    beats: 3,
                    step: Some(index * 3),
                    phase: Some(phase.to_owned()),
                    ..SampleBeats::default()
                })
            }),
            ..Measures::default()
        };
        Event::SoakSampled {
            sample: Box::new(Sample {
                index,
                elapsed_ms: index * 1000,
                after_exit: false,
                processes: Vec::new(),
                reaped_cpu_ticks: 0,
                gpus: None,
                progress: Default::default(),
                sampler_cost_us: 0,
                errors: Vec::new(),
            }),
            measures: Some(Box::new(measures)),
            progress: None,
        }
    }

    #[test]
    fn a_line_when_the_phase_changes_and_none_while_it_stays() {
        let mut lines = PhaseLines::default();
        let said: Vec<Option<String>> = [
            sampled(0, None),
            sampled(1, Some("train")),
            sampled(2, Some("train")),
            sampled(3, None),
            sampled(4, Some("checkpoint")),
            sampled(5, Some("train")),
        ]
        .iter()
        .map(|e| lines.after(e))
        .collect();
        assert_eq!(
            said,
            [
                None,
                Some("        phase train at step 3 (sample #1)".into()),
                None,
                None,
                Some("        phase train → checkpoint at step 12 (sample #4)".into()),
                Some("        phase checkpoint → train at step 15 (sample #5)".into()),
            ]
        );
        assert_eq!(lines.left_out(), None);
    }

    /// A trainer that flips phase at every sample of a long soak: 20 lines, then one that says
    /// how many more there were, before the soak's end.
    #[test]
    fn a_phase_flipping_every_sample_shows_the_first_few_and_counts_the_rest() {
        let mut lines = PhaseLines::default();
        let printed = (0..5000u64)
            .filter_map(|i| lines.after(&sampled(i, Some(["train", "eval"][i as usize % 2]))))
            .count();
        assert_eq!(printed as u64, SHOWN);
        let end = Event::SoakAbandoned {
            supervisor: crate::process::ProcessIdentity {
                pid: 1,
                start_ticks: 1,
            },
            reason: "gone".into(),
        };
        assert_eq!(
            lines.before(&end).as_deref(),
            Some("        … 4980 more phase changes left out (the first 20 are shown)")
        );
        assert_eq!(lines.before(&end), None, "said once");
    }
}
