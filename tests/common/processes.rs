//! Real processes as `/proc` shows them, and a command run under an address-space limit.

use std::process::Command;

use unilab::testing::{ProcStat, parse_stat};

use super::*;

/// `/proc/<pid>/stat`, parsed by the library's parser; `None` when there is no such process.
pub fn proc_stat(pid: impl std::fmt::Display) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat(&text).unwrap_or_else(|| panic!("an unreadable /proc/{pid}/stat: {text:?}")))
}

/// Whether `pid` has exited: there is no such process, or only its zombie is left.
pub fn exited(pid: impl std::fmt::Display) -> bool {
    proc_stat(pid).is_none_or(|stat| stat.has_exited())
}

/// The live processes (zombies excluded) for which `wanted(pid)` holds. A process of another test
/// whose memory map is locked (see [`HangingMount`]) is passed by: reading its command line or
/// environment would block until that test ends.
pub fn live_pids_where(wanted: impl Fn(u32) -> bool) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_stat(pid).is_some_and(|s| !s.has_exited() && s.comm != STUCK_MM_NAME))
        .filter(|pid| wanted(*pid))
        .collect()
}

/// `cmd` (made with `env_clear`, as the tests' commands are) run through `sh` under an
/// address-space limit of `bytes`: a command that grows past it fails to allocate instead of
/// growing the test machine.
pub fn with_address_space_limit(cmd: &Command, bytes: u64) -> Command {
    let mut limited = Command::new("sh");
    limited
        .env_clear()
        .envs(
            cmd.get_envs()
                .filter_map(|(key, value)| Some((key.to_owned(), value?.to_owned()))),
        )
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$@\"", bytes / 1024))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        limited.current_dir(dir);
    }
    limited
}
