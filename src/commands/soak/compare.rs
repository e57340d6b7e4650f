//! `unilab soak compare A B`: two soaks side by side — the regression check people do by hand
//! between two versions of their code. Verdict, run time, memory (peak and trend), GPU memory and
//! utilisation, throttling and progress rate, each with how B differs from A; the verdict first
//! when it differs, then the figures that changed most, then the rest. Each soak's source commit
//! (from its runtime snapshot) heads its column.
//!
//! When either trainer beat, its steps too: the `train` phase's step time (median, p99), its
//! steps a second, the throughput of the `samples` and `tokens` it beats (what a step processed
//! times the steps a second: see `read::stepped::rows`; left out where neither soak
//! beat the number) and the goodput. Soaks without beats compare as they always did.

use serde::Serialize;
use serde_json::Value;

use super::{resolve, status_text};
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::log::Snapshot;
use crate::output::{self, Output};
use crate::paths::StatePaths;
use crate::projection::SoakSummary;
use crate::read::record::SoakRecord;
use crate::read::stepped::rows::PerStep;
use crate::read::stepped::{PhaseShown, Stepped};
use crate::read::stream;
use crate::read::stream::Piece;
use crate::text::bytes;
use crate::view::stepped::per_second;

pub(super) fn compare(
    paths: &StatePaths,
    a: &str,
    b: &str,
    out: &mut Output,
) -> Result<Exit, Error> {
    let (snapshot, first) = resolve(paths, a, out)?;
    let (_, second) = resolve(paths, b, out)?;
    let (a, b) = (Side::of(&snapshot, &first)?, Side::of(&snapshot, &second)?);
    let figures = compared(&a, &b);
    let verdict_differs = a.status != b.status;
    if out.json {
        out.json_line(&serde_json::json!({
            "a": a.head(),
            "b": b.head(),
            "verdict_differs": verdict_differs,
            "differences": figures,
        }))?;
        return Ok(Exit::Success);
    }
    let rows: Vec<[String; 4]> = [
        [
            "soak".to_owned(),
            crate::text::foreign(&a.soak_id).into_owned(),
            crate::text::foreign(&b.soak_id).into_owned(),
            String::new(),
        ],
        [
            "commit".to_owned(),
            a.commit_text(),
            b.commit_text(),
            String::new(),
        ],
        [
            "verdict".to_owned(),
            a.status.clone(),
            b.status.clone(),
            if verdict_differs { "differs" } else { "" }.to_owned(),
        ],
    ]
    .into_iter()
    .chain(figures.iter().map(|f| {
        [
            f.figure.to_owned(),
            f.a_text.clone(),
            f.b_text.clone(),
            f.change.clone().unwrap_or_default(),
        ]
    }))
    .collect();
    for line in output::table(&["", "A", "B", "B against A"], &rows) {
        out.line(&line)?;
    }
    Ok(Exit::Success)
}

/// One soak as compared: what its record and its rows say.
struct Side {
    soak_id: String,
    status: String,
    commit: Option<String>,
    dirty: Option<bool>,
    record: SoakRecord,
    /// The mean of its GPUs' utilisation over the samples that read them.
    mean_utilization: Option<f64>,
    /// What a `train` step processed of the counts its trainer beat.
    per_step: PerStep,
}

impl Side {
    fn of(snapshot: &Snapshot, summary: &SoakSummary) -> Result<Self, Error> {
        let (mut sum, mut n) = (0.0, 0u64);
        let mut per_step = PerStep::default();
        let record = stream::read(snapshot, &summary.soak_id, |piece| {
            if let Piece::Row(row) = piece {
                per_step.take(row);
                for util in row
                    .gpus
                    .iter()
                    .flatten()
                    .filter_map(|g| g.utilization_percent)
                {
                    sum += f64::from(util);
                    n += 1;
                }
            }
        })
        .map_err(stream::streaming(&std::env::temp_dir()))?;
        let runtime = record.runtime();
        let git = &runtime["source"]["git"];
        Ok(Self {
            soak_id: summary.soak_id.clone(),
            status: status_text(summary),
            commit: git["commit"].as_str().map(str::to_owned),
            dirty: git["dirty"].as_bool(),
            record,
            mean_utilization: (n > 0).then(|| sum / n as f64),
            per_step,
        })
    }

    fn commit_text(&self) -> String {
        commit_text(self.commit.as_deref(), self.dirty)
    }

    fn head(&self) -> Value {
        serde_json::json!({
            "soak_id": self.soak_id,
            "status": self.status,
            "commit": self.commit,
            "dirty": self.dirty,
        })
    }

    /// The figures compared, as numbers (`None` where this soak does not know one).
    fn figure(&self, which: Figure) -> Option<f64> {
        let judged = self.record.judged.as_ref();
        let summary = &self.record.summary;
        match which {
            Figure::RunTime => self.record.duration_seconds,
            Figure::PeakPss => judged.and_then(|j| j.peak_tree_pss_bytes).map(|b| b as f64),
            Figure::PeakRss => Some(summary.peak_rss_bytes as f64),
            Figure::MemoryTrend => judged
                .and_then(|j| j.memory_trend.as_ref())
                .map(|t| t.bytes_per_hour),
            Figure::PeakGpuMemory => summary.peak_tree_gpu_memory_mib.map(|m| m as f64),
            Figure::GpuUtilization => self.mean_utilization,
            // A soak without GPU data has no health of any GPU: unknown, not 0 s.
            Figure::Throttled => judged.filter(|j| !j.gpu_health.is_empty()).map(|j| {
                j.gpu_health
                    .iter()
                    .flat_map(|g| &g.seconds_throttled)
                    .filter(|(reason, _)| reason.as_str() != "gpu_idle")
                    .fold(0.0, |total, (_, seconds)| total + seconds)
            }),
            Figure::ProgressRate => judged
                .and_then(|j| j.progress_rate)
                .map(|r| r.bytes_per_minute),
            Figure::PeakCpu => summary.peak_cpu_percent,
            Figure::StepTime => self.train().and_then(|t| t.median_seconds),
            Figure::StepTimeP99 => self.train().and_then(|t| t.p99_seconds),
            Figure::StepsPerSecond => self.stepped()?.steps_per_second(),
            Figure::SamplesPerSecond => self.throughput("samples"),
            Figure::TokensPerSecond => self.throughput("tokens"),
            Figure::Goodput => self.stepped()?.goodput.map(|g| g.fraction * 100.0),
        }
    }

    /// Its steps, when its trainer beat.
    fn stepped(&self) -> Option<&Stepped> {
        self.record.stepped.as_ref().filter(|s| s.beaten())
    }

    fn train(&self) -> Option<&PhaseShown> {
        self.stepped()?.train()
    }

    /// `name` a second: what a `train` step processed of it times the steps a second.
    fn throughput(&self, name: &str) -> Option<f64> {
        Some(self.per_step.per_step(name)? * self.stepped()?.steps_per_second()?)
    }
}

/// A commit as `soak compare` shows it: its first 12 characters, escaped (`git` printed it into
/// the snapshot: another process's text), and whether the tree was dirty.
fn commit_text(commit: Option<&str>, dirty: Option<bool>) -> String {
    let Some(commit) = commit else {
        return "-".into();
    };
    let short: String = commit.chars().take(12).collect();
    let short = crate::text::foreign(&short);
    match dirty {
        Some(true) => format!("{short} (dirty)"),
        _ => short.into_owned(),
    }
}

/// The figures compared, in the order they are listed when they change as much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    RunTime,
    PeakPss,
    PeakRss,
    MemoryTrend,
    PeakGpuMemory,
    GpuUtilization,
    Throttled,
    ProgressRate,
    PeakCpu,
    StepTime,
    StepTimeP99,
    StepsPerSecond,
    SamplesPerSecond,
    TokensPerSecond,
    Goodput,
}

impl Figure {
    /// The figures of the trainer's beats, compared when either soak's trainer beat.
    const STEPS: [Figure; 6] = [
        Figure::StepTime,
        Figure::StepTimeP99,
        Figure::StepsPerSecond,
        Figure::SamplesPerSecond,
        Figure::TokensPerSecond,
        Figure::Goodput,
    ];

    const ALL: [Figure; 9] = [
        Figure::RunTime,
        Figure::PeakPss,
        Figure::PeakRss,
        Figure::MemoryTrend,
        Figure::PeakGpuMemory,
        Figure::GpuUtilization,
        Figure::Throttled,
        Figure::ProgressRate,
        Figure::PeakCpu,
    ];

    fn name(self) -> &'static str {
        match self {
            Figure::RunTime => "run time",
            Figure::PeakPss => "peak memory (PSS)",
            Figure::PeakRss => "peak RSS",
            Figure::MemoryTrend => "memory trend",
            Figure::PeakGpuMemory => "peak GPU memory",
            Figure::GpuUtilization => "GPU utilisation",
            Figure::Throttled => "GPU throttled",
            Figure::ProgressRate => "progress rate",
            Figure::PeakCpu => "peak CPU",
            Figure::StepTime => "step time (median)",
            Figure::StepTimeP99 => "step time (p99)",
            Figure::StepsPerSecond => "steps/s",
            Figure::SamplesPerSecond => "samples/s",
            Figure::TokensPerSecond => "tokens/s",
            Figure::Goodput => "goodput",
        }
    }

    fn text(self, value: Option<f64>) -> String {
        let Some(v) = value else {
            return "-".into();
        };
        match self {
            Figure::RunTime | Figure::Throttled => output::duration(v),
            Figure::PeakPss | Figure::PeakRss => bytes(v.max(0.0) as u64),
            Figure::MemoryTrend => crate::soak::growth::rate(v),
            Figure::PeakGpuMemory => bytes((v.max(0.0) as u64) << 20),
            Figure::GpuUtilization | Figure::PeakCpu => format!("{v:.0}%"),
            Figure::ProgressRate => format!("{}/min", bytes(v.max(0.0) as u64)),
            Figure::StepTime | Figure::StepTimeP99 => crate::text::step_time(v),
            Figure::StepsPerSecond | Figure::SamplesPerSecond | Figure::TokensPerSecond => {
                per_second(v)
            }
            Figure::Goodput => format!("{v:.1}%"),
        }
    }

    /// Whether it is one of the beats' throughputs, left out where neither soak knows it.
    fn throughput(self) -> bool {
        matches!(self, Figure::SamplesPerSecond | Figure::TokensPerSecond)
    }
}

/// One line of the comparison.
#[derive(Debug, Clone, Serialize)]
struct Compared {
    figure: &'static str,
    a: Option<f64>,
    b: Option<f64>,
    /// B against A, in percent; `None` where either is unknown or A is zero.
    change_percent: Option<f64>,
    #[serde(skip)]
    a_text: String,
    #[serde(skip)]
    b_text: String,
    #[serde(skip)]
    change: Option<String>,
}

/// Every figure, those that changed most first (unknown changes last); the beats' figures
/// when either soak's trainer beat.
fn compared(a: &Side, b: &Side) -> Vec<Compared> {
    let beaten = a.stepped().is_some() || b.stepped().is_some();
    let steps = Figure::STEPS.iter().filter(|_| beaten);
    let mut figures: Vec<Compared> = Figure::ALL
        .iter()
        .chain(steps)
        .filter_map(|&figure| {
            let (va, vb) = (a.figure(figure), b.figure(figure));
            if figure.throughput() && va.is_none() && vb.is_none() {
                return None;
            }
            let change_percent = va
                .zip(vb)
                .filter(|(va, _)| *va != 0.0)
                .map(|(va, vb)| ((vb - va) / va.abs() * 1000.0).round() / 10.0);
            Some(Compared {
                figure: figure.name(),
                a: va,
                b: vb,
                change_percent,
                a_text: figure.text(va),
                b_text: figure.text(vb),
                change: change_percent.map(|c| format!("{c:+.1}%")),
            })
        })
        .collect();
    // A stable sort: equal changes keep the figures' own order.
    figures.sort_by(|x, y| {
        let weight = |c: &Compared| c.change_percent.map_or(-1.0, f64::abs);
        weight(y).total_cmp(&weight(x))
    });
    figures
}

#[cfg(test)]
mod tests {
    use super::commit_text;

    /// A commit of a snapshot whose twelfth byte fell inside a character panicked `soak
    /// compare` (it was cut by bytes), and its escapes reached the terminal raw.
    #[test]
    fn a_commit_is_cut_by_characters_and_escaped() {
        assert_eq!(
            commit_text(Some("0123456789abcdef"), Some(true)),
            "0123456789ab (dirty)"
        );
        assert_eq!(commit_text(Some("aééééééééééééé"), None), "aééééééééééé");
        assert_eq!(
            commit_text(Some("ab\u{1b}[31mx\ny"), Some(false)),
            "ab\\u{1b}[31mx\\ny"
        );
        assert_eq!(commit_text(None, Some(true)), "-");
    }
}
