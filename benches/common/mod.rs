//! Data shared by the benchmarks.

use unilab::event::soak::ProcessSample;

/// The processes of the `i`-th sample of an `n`-process training tree.
pub fn training_tree(i: u64, n: u32) -> Vec<ProcessSample> {
    (0..n)
        .map(|p| ProcessSample {
            pid: 1000 + p,
            ppid: 999,
            start_ticks: 5_000 + u64::from(p),
            name: format!("worker-{p}"),
            state: 'S',
            rss_bytes: 1 << 30,
            cpu_ticks: i + u64::from(p),
            reaped_children_cpu_ticks: 0,
            threads: 12,
            open_fds: Some(40),
            read_bytes: Some(i << 10),
            write_bytes: Some(i << 8),
        })
        .collect()
}
