//! A job explained: its ranks' soaks side by side, from what each rank's log recorded, and the
//! verdict ([`verdict`]) — the suspect and why ([`suspect`]), what the others were doing, which
//! rank tripped first, the ranks grouped by where they stood, and the ranks slower than the
//! job's steps ([`straggler`]), named in the verdict when nothing failed (`job show`, DESIGN.md's
//! fourth and fifth waves).
//!
//! Pure: the rows come in read ([`RankRow`], with the capture that speaks for each rank chosen
//! by [`RankCaptures`], its pace by [`suspect::RankPace`]; each rank's progress, memory and
//! step time over time in [`series`]), and [`JobView::of`] assembles the rest. It lives in the read layer, not in `job`: it groups by
//! [`signature`](crate::read::signature), and `job` is below `read`.
//!
//! A rank's stack is that of its main process ([`main_process`]): the topmost process of its
//! soak's tree that is neither the soak's guard nor a shell that only runs one child — the
//! trainer `srun` or a launcher started, not the `sh -c` in front of it.

use serde::Serialize;

pub(crate) mod series;
pub(crate) mod soaks;
pub(crate) mod straggler;
pub(crate) mod suspect;
mod verdict;

use straggler::gpus::GpuRun;
use straggler::{StepRank, Straggler, stragglers};
pub(crate) use suspect::{FirstStalled, Suspect};
pub(crate) use verdict::who;

use crate::event::soak::{Evidence, FailureKind, ProcessCollectives, ProcessEvidence};
use std::collections::BTreeMap;

use crate::job::alarm::Alarm;
use crate::read::collectives::{Matched, Mismatch, Stalled, matched};
use crate::read::signature::group::{self, SignatureGroup};
use crate::read::signature::{Frame, StackSignature, of_process};

/// One rank's soak, as `job show` lists it. Times are Unix seconds, as `recorded_at` is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RankRow {
    /// `null` for a soak of the job that was given no rank.
    pub rank: Option<u32>,
    pub host: String,
    /// Slurm's name for the host (`SLURMD_NODENAME`), when the soak recorded one.
    pub node: Option<String>,
    pub soak_id: String,
    /// The run of the job its soak joined (schema 13); `null` for a soak recorded before runs.
    pub run: Option<String>,
    pub status: String,
    pub failure_kind: Option<FailureKind>,
    pub started_at: f64,
    /// An abandoned soak's is its last sample's time, and its `ended` is `unknown`.
    pub ended_at: Option<f64>,
    /// `recorded`, `unknown` (abandoned) or `null` while it runs ([`crate::projection::SoakState::end`]).
    pub ended: Option<&'static str>,
    pub last_progress_at: Option<f64>,
    /// The last step its trainer beat; `null` without heartbeats.
    pub last_step: Option<u64>,
    /// The phase of its last beat; `null` without heartbeats.
    pub last_phase: Option<String>,
    /// Of the `train` phase (see [`straggler::steps`]); `null` before a step was timed.
    pub median_step_seconds: Option<f64>,
    pub peak_tree_pss_bytes: Option<u64>,
    /// The mean, over the samples, of the utilisation (percent) of the GPUs the tree ran on.
    pub gpu_utilization_mean: Option<f64>,
    /// `null` without a capture.
    pub signature: Option<String>,
    pub top_frames: Vec<Frame>,
    /// When it tripped: its own capture before its first signal, else its verdict.
    #[serde(skip)]
    pub tripped_at: Option<f64>,
    /// Why it failed, as its verdict says.
    #[serde(skip)]
    pub reason: Option<String>,
    /// Its GPUs' health over the run, what a straggler's cause is told by.
    #[serde(skip)]
    pub gpus: Vec<GpuRun>,
    /// What stalling is measured by (see [`suspect`]).
    #[serde(skip)]
    pub pace: suspect::Pace,
    /// The collectives its capture holds, by rank (one, or the ranks of a tree that holds
    /// several).
    #[serde(skip)]
    pub collectives: Vec<(u32, ProcessCollectives)>,
}

/// The captures of one rank's soak, as they are read in order: keeps the one that speaks for the
/// rank — the alarm's capture when recorded, else its own — and when its own was taken.
///
/// A rank that saw another rank's alarm captured its evidence at that moment, before any failure
/// of its own could be captured (its own capture is taken before its tree's first signal, which
/// ends its supervision); the rank that tripped first raised the alarm and made no capture for
/// it. So the first capture recorded is the alarm's when there is one, else the rank's own.
#[derive(Debug, Default, Clone, PartialEq, serde::Deserialize, Serialize)]
pub(crate) struct RankCaptures {
    chosen: Option<StackSignature>,
    last_at_us: Option<i64>,
    /// The collectives the chosen capture holds, by rank (schema 16 on).
    collectives: Vec<(u32, ProcessCollectives)>,
}

impl RankCaptures {
    pub(crate) fn take(&mut self, evidence: &Evidence) {
        if self.chosen.is_none() {
            self.chosen = Some(main_process(&evidence.processes).map_or_else(
                || StackSignature {
                    signature: crate::read::signature::UNKNOWN.to_owned(),
                    top_frames: Vec::new(),
                },
                of_process,
            ));
            self.collectives = evidence
                .processes
                .iter()
                .filter_map(|p| Some((p.rank?, p.collectives.clone()?)))
                .collect();
        }
        self.last_at_us = Some(evidence.captured_at_us);
    }

    /// Where no capture held collectives, the NCCL watchdog's lines in `tail` (the command's
    /// standard error, as its verdict kept it), by the rank they name.
    pub(crate) fn tail(&mut self, tail: &[u8]) {
        if self.collectives.iter().any(|(_, c)| !c.groups.is_empty()) {
            return;
        }
        let text = String::from_utf8_lossy(tail);
        for said in crate::collectives::watchdog::from_tail(&text) {
            let Some(rank) = said.rank else { continue };
            let at = match self.collectives.iter().position(|(r, _)| *r == rank) {
                Some(at) => at,
                None => {
                    self.collectives.push((rank, ProcessCollectives::default()));
                    self.collectives.len() - 1
                }
            };
            let found = &mut self.collectives[at].1;
            found.sources.push("output_tail".to_owned());
            found.groups = said.groups;
        }
    }

    /// The signature that speaks for the rank, when its last capture was taken, and the
    /// collectives of the ranks its chosen capture holds.
    pub(crate) fn done(
        self,
    ) -> (
        Option<StackSignature>,
        Option<i64>,
        Vec<(u32, ProcessCollectives)>,
    ) {
        (self.chosen, self.last_at_us, self.collectives)
    }
}

/// Shells that stand in front of the command they run (`sh -c 'python train.py'`).
const SHELLS: [&str; 5] = ["sh", "bash", "dash", "zsh", "ksh"];

/// The process that stands for a soak's command in its evidence: of the processes whose parent
/// is not in the evidence (the guard's children, or the guard), the earliest started, lowest pid
/// on a tie; the soak's guard gives way to its child, and so does a shell with one child.
pub(crate) fn main_process(processes: &[ProcessEvidence]) -> Option<&ProcessEvidence> {
    let children = |pid: u32| {
        processes
            .iter()
            .filter(move |p| p.ppid == pid && p.pid != pid)
    };
    let is_guard = |p: &ProcessEvidence| p.cmdline.iter().any(|a| a == "__soak-guard");
    let mut chosen = processes
        .iter()
        .filter(|p| !processes.iter().any(|q| q.pid == p.ppid && q.pid != p.pid))
        .min_by_key(|p| (p.start_ticks, p.pid))?;
    // Bounded by the number of processes: each step goes one level down the tree.
    for _ in 0..processes.len() {
        let shell = SHELLS.contains(&chosen.name.as_str());
        let mut kids = children(chosen.pid);
        let next = match (kids.next(), kids.next()) {
            (Some(only), None) if shell || is_guard(chosen) => only,
            (Some(first), Some(_)) if is_guard(chosen) => children(chosen.pid)
                .min_by_key(|p| (p.start_ticks, p.pid))
                .unwrap_or(first),
            _ => break,
        };
        chosen = next;
    }
    Some(chosen)
}

/// `job show`'s answer, as its JSON names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct JobView {
    pub job: String,
    /// By rank (a soak without one last), then by start.
    pub ranks: Vec<RankRow>,
    /// The job's alarm as written; `null` when none was raised.
    pub alarm: Option<Alarm>,
    /// The one rank that stands out, and why; `null` when none does.
    pub suspect: Option<Suspect>,
    /// `null` while every rank still progresses (see [`suspect`]).
    pub first_stalled: Option<FirstStalled>,
    pub groups: Vec<SignatureGroup>,
    pub odd_ranks: Vec<u32>,
    /// The ranks slower than the job's median step (see [`straggler`]), by rank.
    pub stragglers: Vec<Straggler>,
    /// The collective some ranks wait in that others never entered; `null` when none is known.
    pub collective: Option<Stalled>,
    /// The collectives whose op, sizes or dtypes differ between ranks.
    pub mismatches: Vec<Mismatch>,
    /// One sentence; `null` when there is nothing to say.
    pub verdict: Option<String>,
    /// The verdict's clauses, one a line in the human output.
    #[serde(skip)]
    pub verdict_lines: Vec<String>,
}

impl JobView {
    pub(crate) fn of(job: &str, mut ranks: Vec<RankRow>, alarm: Option<Alarm>) -> Self {
        ranks.sort_by(|a, b| {
            (
                a.rank.is_none(),
                a.rank,
                a.started_at.total_cmp(&b.started_at),
            )
                .cmp(&(b.rank.is_none(), b.rank, std::cmp::Ordering::Equal))
        });
        let signed: Vec<(u32, StackSignature)> = ranks
            .iter()
            .filter_map(|r| {
                Some((
                    r.rank?,
                    StackSignature {
                        signature: r.signature.clone()?,
                        top_frames: r.top_frames.clone(),
                    },
                ))
            })
            .collect();
        let grouping = group::group(&signed);
        let collectives: BTreeMap<u32, ProcessCollectives> = ranks
            .iter()
            .flat_map(|r| r.collectives.iter().cloned())
            .collect();
        let Matched {
            stalled,
            mismatches,
        } = matched(&collectives);
        let judged = suspect::judge(&ranks, &grouping, stalled.as_ref());
        let stepped: Vec<StepRank> = ranks
            .iter()
            .map(|r| StepRank {
                rank: r.rank,
                host: &r.host,
                median_step_seconds: r.median_step_seconds,
                gpus: &r.gpus,
            })
            .collect();
        let stragglers = stragglers(&stepped);
        let verdict_lines = verdict::lines(
            &ranks,
            alarm.as_ref(),
            (&signed, &grouping),
            &judged,
            &stragglers,
        );
        let mut verdict_lines = verdict_lines;
        verdict_lines.extend(mismatches.iter().map(Mismatch::sentence));
        if stalled.is_none() {
            verdict_lines.extend(crate::read::collectives::none_read(&collectives));
        }
        let verdict = (!verdict_lines.is_empty()).then(|| verdict_lines.join("; "));
        Self {
            job: job.to_owned(),
            ranks,
            alarm,
            suspect: judged.suspect,
            first_stalled: judged.first_stalled,
            groups: grouping.groups,
            odd_ranks: grouping.odd_ranks,
            stragglers,
            collective: stalled,
            mismatches,
            verdict,
            verdict_lines,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::ThreadEvidence;

    fn process(pid: u32, ppid: u32, name: &str, wchan: &str) -> ProcessEvidence {
        ProcessEvidence {
            pid,
            ppid,
            start_ticks: u64::from(pid),
            name: name.into(),
            state: 'S',
            cmdline: vec![name.into()],
            threads: vec![ThreadEvidence {
                tid: pid,
                name: name.into(),
                state: 'S',
                wchan: Some(wchan.into()),
                syscall: None,
            }],
            kernel_stack: None,
            python_stack: None,
            holds_gpu_device: false,
            rank: None,
            collectives: None,
        }
    }

    pub(super) fn row(rank: u32, host: &str, signature: &str, progress: f64) -> RankRow {
        RankRow {
            rank: Some(rank),
            host: host.into(),
            node: None,
            soak_id: format!("s{rank}"),
            run: Some("1".into()),
            status: "failed".into(),
            failure_kind: Some(FailureKind::StaleProgress),
            started_at: 100.0,
            ended_at: Some(200.0),
            ended: Some("recorded"),
            last_progress_at: Some(progress),
            last_step: None,
            last_phase: None,
            median_step_seconds: None,
            peak_tree_pss_bytes: None,
            gpu_utilization_mean: None,
            signature: Some(signature.into()),
            top_frames: vec![Frame {
                function: signature.into(),
                file: None,
                line: None,
            }],
            tripped_at: Some(150.0 + f64::from(rank)),
            reason: Some("no progress for 3s".into()),
            gpus: Vec::new(),
            pace: suspect::Pace {
                sample_interval_seconds: Some(0.5),
                ..suspect::Pace::default()
            },
            collectives: Vec::new(),
        }
    }

    /// Rank 2 hangs in a sleep, its progress stops first, and rank 1 trips first: the verdict
    /// leads with rank 2, the suspect by its odd stack, then what the others were doing, then
    /// who tripped first as what it is, and that rank 2's progress stopped first too.
    #[test]
    fn the_verdict_leads_with_the_suspect_then_the_others_then_who_tripped() {
        let rows = vec![
            row(3, "n2", "wait_woken", 120.0),
            row(1, "n1", "wait_woken", 120.5),
            row(2, "n2", "hrtimer_nanosleep", 118.0),
            row(0, "n1", "wait_woken", 121.0),
        ];
        let mut rows = rows;
        rows[0].tripped_at = Some(160.0);
        rows[1].tripped_at = Some(150.0);
        rows[3].tripped_at = Some(170.0);
        let view = JobView::of("J", rows, None);
        assert_eq!(
            view.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3)]
        );
        assert_eq!(view.odd_ranks, vec![2]);
        assert_eq!(
            view.first_stalled,
            Some(FirstStalled {
                rank: Some(2),
                host: "n2".into(),
                last_progress_at: 118.0,
                ahead_seconds: 2.0,
            })
        );
        assert_eq!(
            view.verdict.as_deref().unwrap(),
            "rank 2 on n2 is the suspect: its stack is the odd one out: `hrtimer_nanosleep`; the other 3 ranks are in `wait_woken`; rank 1 on n1 tripped first: stale_progress (no progress for 3s); rank 2 on n2's progress stopped first, 2s before any other rank's"
        );
        let suspect = view.suspect.as_ref().unwrap();
        assert_eq!(
            (suspect.rank, suspect.why),
            (Some(2), suspect::Why::OddStack)
        );
        assert!(suspect.disagreements.is_empty(), "{suspect:?}");
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["ranks"][2]["failure_kind"], "stale_progress");
        assert_eq!(json["stragglers"], serde_json::json!([]));
        assert!(json["ranks"][0].get("tripped_at").is_none());
        assert!(json["ranks"][0].get("pace").is_none());
        assert_eq!(json["ranks"][0]["run"], "1");
        assert_eq!(json["ranks"][0]["last_phase"], serde_json::Value::Null);
        assert_eq!(json["suspect"]["why"], "odd_stack");
        assert_eq!(json["suspect"]["host"], "n2");
        assert!(json["first_stalled"].get("ahead_seconds").is_none());
    }

    /// Four ranks that passed, rank 2 three times slower a step: it is the straggler, and the
    /// verdict names it; once a rank failed, the verdict tells the failure, and the straggler
    /// is still listed.
    #[test]
    fn a_slow_rank_of_a_job_that_passed_is_the_verdict() {
        let rows: Vec<RankRow> = [0.1, 0.1, 0.3, 0.1]
            .into_iter()
            .zip(0..)
            .map(|(median, rank)| RankRow {
                status: "passed".into(),
                failure_kind: None,
                tripped_at: None,
                signature: None,
                top_frames: Vec::new(),
                last_step: Some(30),
                median_step_seconds: Some(median),
                ..row(rank, "n1", "x", 120.0)
            })
            .collect();
        let view = JobView::of("J", rows.clone(), None);
        assert_eq!(view.stragglers.len(), 1);
        assert_eq!(view.stragglers[0].rank, Some(2));
        assert_eq!(
            view.verdict_lines,
            ["rank 2 on n1 straggles: its median step 300ms is 3.00× the job's 100ms"],
            "a job that passed: no rank's progress stopped first"
        );
        assert_eq!(view.first_stalled, None, "ranks that passed never stalled");
        assert_eq!(view.suspect, None);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["stragglers"][0]["ratio"], 3.0);
        assert_eq!(json["ranks"][2]["median_step_seconds"], 0.3);

        let mut failed = rows;
        failed[0].failure_kind = Some(FailureKind::StaleProgress);
        failed[0].tripped_at = Some(150.0);
        let view = JobView::of("J", failed, None);
        assert_eq!(view.stragglers.len(), 1);
        assert!(
            view.verdict_lines.iter().all(|l| !l.contains("straggles")),
            "{:?}",
            view.verdict_lines
        );
    }

    /// The alarm says who tripped first; without captures there are no groups, and no verdict
    /// when nothing is known.
    #[test]
    fn the_alarm_names_the_first_and_a_job_without_evidence_has_no_groups() {
        let alarm = Alarm {
            job: "J".into(),
            run: None,
            rank: Some(3),
            host: "n2".into(),
            soak_id: "s3".into(),
            failure_kind: "stale_progress".into(),
            reason: "no progress\nfor 3s".into(),
            at: 150.0,
        };
        let mut quiet = row(0, "n1", "x", 1.0);
        quiet.signature = None;
        quiet.top_frames.clear();
        quiet.last_progress_at = None;
        let view = JobView::of("J", vec![quiet.clone()], Some(alarm));
        assert!(view.groups.is_empty());
        assert_eq!(
            view.verdict.as_deref(),
            Some("rank 3 on n2 tripped first: stale_progress (no progress\\nfor 3s)")
        );
        quiet.failure_kind = None;
        assert_eq!(JobView::of("J", vec![quiet], None).verdict, None);
    }

    /// The guard and a shell in front of the command give way to the process they run; of two
    /// children of the guard the first started stands for the soak.
    #[test]
    fn the_main_process_is_the_command_not_its_guard_or_shell() {
        let mut guard = process(10, 1, "unilab", "do_wait");
        guard.cmdline = vec!["unilab".into(), "__soak-guard".into()];
        let shell = process(11, 10, "sh", "do_wait");
        let python = process(12, 11, "python3", "wait_woken");
        let loader = process(13, 12, "python3", "pipe_read");
        let tree = vec![loader.clone(), python.clone(), shell.clone(), guard.clone()];
        assert_eq!(main_process(&tree).map(|p| p.pid), Some(12));
        let without_guard = vec![python.clone(), loader.clone(), shell];
        assert_eq!(main_process(&without_guard).map(|p| p.pid), Some(12));
        let launcher = process(20, 10, "python3", "do_wait");
        let late = process(30, 10, "python3", "do_wait");
        assert_eq!(
            main_process(&[late, guard, launcher]).map(|p| p.pid),
            Some(20)
        );
        assert_eq!(main_process(&[]), None);
        // A tree that names itself its parent is read, not looped over.
        let odd = process(40, 40, "sh", "x");
        assert_eq!(main_process(&[odd]).map(|p| p.pid), Some(40));
    }

    /// The first capture speaks for the rank (the alarm's, when it saw one); the last says when
    /// it tripped.
    #[test]
    fn the_first_capture_speaks_for_the_rank_and_the_last_says_when_it_tripped() {
        let capture = |at: i64, wchan: &str| Evidence {
            trigger: FailureKind::StaleProgress,
            captured_at_us: at,
            processes: vec![process(5, 1, "python3", wchan)],
            cgroup: None,
            kernel_messages: Vec::new(),
            unavailable: Vec::new(),
            mps: Vec::new(),
        };
        let mut captures = RankCaptures::default();
        assert_eq!(RankCaptures::default().done(), (None, None, Vec::new()));
        captures.take(&capture(10, "wait_woken"));
        captures.take(&capture(20, "do_nanosleep"));
        let (signature, at, _) = captures.done();
        assert_eq!(signature.unwrap().signature, "wait_woken");
        assert_eq!(at, Some(20));
        let mut empty = RankCaptures::default();
        empty.take(&Evidence {
            processes: Vec::new(),
            ..capture(1, "x")
        });
        assert_eq!(empty.done().0.unwrap().signature, "unknown");
    }

    /// A rank whose capture had no collectives (nothing answered) is read from the NCCL
    /// watchdog's lines its verdict kept; one whose capture had them is not.
    #[test]
    fn the_watchdogs_lines_stand_in_for_a_capture_without_collectives() {
        let tail = b"[rank1]:[E1003 18:37:01.833 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.\n[rank1]:[E1003 18:37:01.833 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.\n";
        let mut evidence = Evidence {
            trigger: FailureKind::StaleProgress,
            captured_at_us: 1,
            processes: vec![process(10, 1, "python3", "futex_wait_queue")],
            cgroup: None,
            kernel_messages: Vec::new(),
            unavailable: Vec::new(),
            mps: Vec::new(),
        };
        evidence.processes[0].rank = Some(1);
        evidence.processes[0].collectives = Some(ProcessCollectives {
            missing: vec!["no `unilab.watch_collectives()` runs in it".into()],
            ..ProcessCollectives::default()
        });
        let mut captures = RankCaptures::default();
        captures.take(&evidence);
        captures.tail(tail);
        let (_, _, collectives) = captures.done();
        assert_eq!(collectives.len(), 1, "{collectives:?}");
        let (rank, found) = &collectives[0];
        assert_eq!(*rank, 1);
        assert_eq!(found.sources, vec!["output_tail".to_owned()]);
        assert_eq!(found.groups[0].last_enqueued, Some(6463));
        assert_eq!(found.missing.len(), 1, "why no dump stays said");
    }
}
