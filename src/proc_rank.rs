//! The rank a process of a job was started as: `RANK` in the environment it was started with,
//! as torchrun and the job launchers set it for each worker. One soak over a launcher holds
//! several ranks, so each captured process carries its own.
//!
//! `environ` needs the process's memory map, so it is read through [`ProcDir`]: a process whose
//! map is locked gives [`Blocked`] within `proc_read`'s patience, never a read that hangs. The
//! file's size is the kernel's to bound (the environment a process was started with fits the
//! stack limit at `exec`). Nothing read here can make unilab panic.

use crate::env::EnvVars;
use crate::proc_read::{Blocked, ProcDir};

/// The rank of the process of `dir` — `None` where its environment has no `RANK`, holds one
/// that is not a rank, or cannot be read (the process is gone, or another user's) — and the
/// socket of torch's worker server its environment names (`TORCH_WORKER_SERVER_SOCKET`).
pub(crate) fn rank_and_server_of(
    dir: &ProcDir<'_>,
) -> Result<(Option<u32>, Option<std::path::PathBuf>), Blocked> {
    use std::os::unix::ffi::OsStrExt;
    let entries = dir.entries("environ")?;
    let server = env_value(&entries, EnvVars::TORCH_WORKER_SERVER_SOCKET)
        .filter(|v| !v.is_empty())
        .map(|v| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(v)));
    Ok((rank_in_environ(&entries), server))
}

/// The rank `entries` (`NAME=value`, as `environ` holds them) give: the first `RANK`, read as
/// the job's rank is read from unilab's own environment (`job::resolve`): blanks around it are
/// dropped, and a blank value or one that is not a whole number from 0 is no rank.
pub(crate) fn rank_in_environ(entries: &[Vec<u8>]) -> Option<u32> {
    let value = env_value(entries, EnvVars::RANK)?;
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// The value of the first entry named `key`, as `getenv` finds it.
fn env_value<'a>(entries: &'a [Vec<u8>], key: &str) -> Option<&'a [u8]> {
    entries.iter().find_map(|entry| {
        entry
            .strip_prefix(key.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::proc::FakeProc;

    fn entries(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|e| e.as_bytes().to_vec()).collect()
    }

    #[test]
    fn the_rank_is_the_first_rank_entry_not_another_ranks_variable() {
        assert_eq!(
            rank_in_environ(&entries(&[
                "LOCAL_RANK=1",
                "GROUP_RANK=0",
                "RANK=5",
                "RANK=6"
            ])),
            Some(5)
        );
        assert_eq!(
            rank_in_environ(&entries(&["LOCAL_RANK=1", "RANKS=3"])),
            None
        );
        assert_eq!(rank_in_environ(&entries(&[])), None);
    }

    #[test]
    fn a_rank_that_is_not_a_whole_number_is_none() {
        for bad in [
            "RANK=",
            "RANK=  ",
            "RANK=-1",
            "RANK=3.0",
            "RANK=0x3",
            "RANK=4294967296",
            "RANK=\u{663}",
        ] {
            assert_eq!(rank_in_environ(&entries(&[bad])), None, "{bad}");
        }
        assert_eq!(rank_in_environ(&[b"RANK=\xff\xfe".to_vec()]), None);
        for (good, rank) in [
            ("RANK= 3\n", 3),
            ("RANK=+3", 3),
            ("RANK=4294967295", u32::MAX),
        ] {
            assert_eq!(rank_in_environ(&entries(&[good])), Some(rank), "{good}");
        }
    }

    #[test]
    fn a_processes_rank_is_read_from_its_environ() {
        let proc = FakeProc::new()
            .with(10, 100, 'S', 1000)
            .environ_of(10, &["PATH=/usr/bin", "WORLD_SIZE=4", "RANK=2"])
            .with(11, 100, 'S', 1000)
            .environ_of(11, &["PATH=/usr/bin"]);
        assert_eq!(
            rank_and_server_of(&ProcDir::new(proc.root(), 10, 100)).map(|r| r.0),
            Ok(Some(2))
        );
        assert_eq!(
            rank_and_server_of(&ProcDir::new(proc.root(), 11, 100)).map(|r| r.0),
            Ok(None)
        );
        assert_eq!(
            rank_and_server_of(&ProcDir::new(proc.root(), 12, 100)).map(|r| r.0),
            Ok(None),
            "gone"
        );
    }

    /// A process whose memory map is locked is named as blocked, not waited for.
    #[test]
    fn a_process_whose_environ_does_not_return_is_blocked() {
        let mut proc = FakeProc::new().with(10, 100, 'S', 1000);
        let fifo = proc.never_returns(10, "environ");
        let blocked = rank_and_server_of(&ProcDir::new(proc.root(), 10, 100)).unwrap_err();
        assert_eq!((blocked.pid, blocked.file), (10, "environ"));
        // Let the stuck read return, so its worker ends.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
    }
}
