//! What a daemon's own logs say went wrong: the tail of `control.log` and `server.log` in its
//! log directory, read for what MPS users hit — a client of another user queued behind this
//! user's clients, a server that failed to start, a client limit reached — each with its line
//! and the time MPS wrote on it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;

/// How much of the end of each log is read.
const TAIL_BYTES: u64 = 64 << 10;
/// How many findings are kept, the latest.
const MAX_FINDINGS: usize = 10;

/// One line of a daemon's log that tells of trouble.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LogFinding {
    /// `queued_client`, `server_failed` or `client_limit`.
    pub kind: &'static str,
    /// `control.log` or `server.log`.
    pub file: &'static str,
    /// The time MPS wrote on the line (`2026-12-02 11:36:55.686`, the host's local time).
    pub at: Option<String>,
    pub line: String,
}

impl LogFinding {
    /// What the finding means, for people.
    pub(crate) fn meaning(&self) -> &'static str {
        match self.kind {
            "queued_client" => {
                "a client was queued: one server serves one user at a time, so another user's client waits until this user's clients finish"
            }
            "server_failed" => "an MPS server failed to start",
            _ => "a server reached its limit of clients",
        }
    }
}

/// What kind of trouble a log line tells of, if any.
fn kind_of(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    if lower.contains("push client to pending list") {
        return Some("queued_client");
    }
    let exited_badly = lower
        .split_once("exited with status ")
        .is_some_and(|(_, rest)| !rest.trim().starts_with('0'));
    if lower.contains("failed to start") || exited_badly {
        return Some("server_failed");
    }
    if lower.contains("maximum number of clients") || lower.contains("client limit") {
        return Some("client_limit");
    }
    None
}

/// The time in a line's `[YYYY-MM-DD HH:MM:SS.mmm Control 9507]` prefix.
fn time_of(line: &str) -> Option<String> {
    let inside = line.strip_prefix('[')?.split(']').next()?;
    let mut words = inside.split_whitespace();
    let (date, time) = (words.next()?, words.next()?);
    let looks_like = date.len() == 10
        && date.chars().all(|c| c.is_ascii_digit() || c == '-')
        && time
            .chars()
            .all(|c| c.is_ascii_digit() || c == ':' || c == '.');
    looks_like.then(|| format!("{date} {time}"))
}

/// The last bytes of `path`, as text (lossy); empty when it cannot be read.
fn tail(path: &Path) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(TAIL_BYTES);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(TAIL_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // A tail that starts mid-line drops that partial line.
    match (start > 0, text.split_once('\n')) {
        (true, Some((_, rest))) => rest.to_owned(),
        _ => text,
    }
}

/// The findings in the tails of the daemon's logs in `log_directory`, oldest first, the latest
/// [`MAX_FINDINGS`] of them.
pub(crate) fn findings(log_directory: &Path) -> Vec<LogFinding> {
    let mut found: Vec<LogFinding> = ["control.log", "server.log"]
        .into_iter()
        .flat_map(|file| {
            tail(&log_directory.join(file))
                .lines()
                .filter_map(|line| {
                    kind_of(line).map(|kind| LogFinding {
                        kind,
                        file,
                        at: time_of(line),
                        line: crate::text::foreign(line.trim()).into_owned(),
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    // Times of one format sort as text; lines without one keep their place.
    found.sort_by(|a, b| a.at.cmp(&b.at));
    let excess = found.len().saturating_sub(MAX_FINDINGS);
    found.drain(..excess);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_mps_users_hit_is_found_with_its_time() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("control.log"),
            "[2026-12-02 11:36:55.686 Control 9507] Starting control daemon using socket /tmp/x/control\n\
             [2026-12-02 11:37:01.001 Control 9507] Server is not ready, push client to pending list\n\
             [2026-12-02 11:37:02.002 Control 9507] Server 4711 exited with status 1\n\
             [2026-12-02 11:37:03.003 Control 9507] Server 4712 exited with status 0\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("server.log"),
            "[2026-12-02 11:37:04.000 Server 4713] Server has reached the maximum number of clients\n",
        )
        .unwrap();
        let found = findings(dir.path());
        let kinds: Vec<(&str, &str, Option<&str>)> = found
            .iter()
            .map(|f| (f.kind, f.file, f.at.as_deref()))
            .collect();
        assert_eq!(
            kinds,
            [
                (
                    "queued_client",
                    "control.log",
                    Some("2026-12-02 11:37:01.001")
                ),
                (
                    "server_failed",
                    "control.log",
                    Some("2026-12-02 11:37:02.002")
                ),
                (
                    "client_limit",
                    "server.log",
                    Some("2026-12-02 11:37:04.000")
                ),
            ]
        );
        assert!(findings(&dir.path().join("none")).is_empty());
    }
}
