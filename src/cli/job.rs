//! `unilab job`'s definitions: a job's ranks side by side.

use std::path::PathBuf;

use clap::Subcommand;

use crate::job::id::job_flag;

#[derive(Debug, Subcommand)]
pub(crate) enum JobCommand {
    /// The jobs whose ranks' soaks are recorded under the state root, on every host
    List,
    /// Every rank's soak of a job, from every host's log under the state root, and the verdict:
    /// the suspect and why, where the other ranks stood, which rank tripped first, whose
    /// progress stopped first, which ranks straggle
    #[command(after_help = "\
The suspect is the one rank named by the first of: its stack the odd one out (odd_stack), its
last beat in a phase no other rank's is in (other_phase), its step below one every other rank
reached (behind_step), its progress stopped first (first_stalled). A rank has stalled once it
went longer than max(3 × its median step or progress interval, 2 sample intervals) without
progress; it stopped first only when it did so by more than that margin before any other rank.

A straggler is a rank whose median step time (of its heartbeats' `train` phase) is over 1.15×
the job's: the median of the ranks' median step times. Its cause is named where its GPUs (those
its processes ran on, else its `CUDA_VISIBLE_DEVICES`) differ clearly from the other ranks': a
throttle reason active in at least 10 points more of the samples and twice as often (2×), or an
SM clock at least 10 % lower on average.

Examples:
  unilab job show 4242                 a Slurm job's ranks
  unilab --json job show llama-run3    one JSON object (`ranks`, `suspect`, `first_stalled`,
                                       `groups`, `odd_ranks`, `stragglers`, `verdict`)")]
    Show {
        /// The job: what `soak run --job` named, or Slurm's job id
        #[arg(value_parser = job_flag)]
        job: crate::job::JobId,
    },
    /// Write a self-contained HTML page of a job: what `job show` says (the suspect, the verdict,
    /// the alarm, the table of ranks, the ranks grouped by stack), then every rank's progress,
    /// memory and step time on one time axis
    #[command(after_help = "\
Examples:
  unilab job report 4242 --output job-4242.html     a Slurm job's page, opened offline
  unilab job report llama-run3 > page.html          the page on standard output")]
    Report {
        /// The job: what `soak run --job` named, or Slurm's job id
        #[arg(value_parser = job_flag)]
        job: crate::job::JobId,
        /// Write it here (default: standard output)
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace `--output` if it exists
        #[arg(long, requires = "output")]
        force: bool,
    },
}
