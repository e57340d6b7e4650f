//! The MPS clients in a tree about to be signalled, ended first by the daemon that serves them.
//!
//! A CUDA program killed while it is an MPS client can leave its server in an undefined state,
//! and every other client of that server with it; NVIDIA's way to end one cleanly is to ask the
//! control daemon to `terminate_client <server> <client>`. So before a soak's tree is signalled,
//! each daemon this user recorded on this host is asked `get_server_list`, then `get_client_list
//! <server>` for each server, and the clients that are processes of the tree are terminated.
//!
//! What it keeps: only a daemon whose record still names its live process (pid, start time and
//! owner, as `mps stop` proves it) is asked anything — a daemon unilab cannot prove it started is
//! never talked to, whatever listens in its pipe directory; only the tree's own processes are
//! named to `terminate_client`; nothing is signalled here. Every call runs under the control
//! tool's timeout and all of it under one budget, the daemons asked side by side: a daemon that
//! does not answer is named as wedged and left, never waited on past the budget. Answers are
//! parsed as text that may be anything: what is not a pid is passed over and said.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use super::control;
use super::records::{self, liveness};
use super::{DaemonRecord, HostEnv, Mps};
use crate::event::soak::MpsTeardown;
use crate::log::{LogError, LogReader, Snapshot};
use crate::paths::StatePaths;
use crate::process::{Liveness, ProcSource, ProcessIdentity, SystemProc};
use crate::tool::{self, Tool, ToolError};

/// What asking the daemons came to: each server whose clients in the tree were terminated, and
/// what stood in the way, as text for the console (a wedged daemon, an answer that was not one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTeardown {
    pub terminated: Vec<MpsTeardown>,
    pub notes: Vec<String>,
}

/// Ends the MPS clients among `tree` (the tree's processes as they were seen) through the
/// daemons of this user's records on this host (`snapshot`'s): each call within the control
/// tool's timeout, all of it within twice that (a wedged daemon costs one timeout; a slow one
/// with many clients in the tree is cut off at two). A record that cannot be read is a note: the
/// teardown goes on to its signals whatever this finds.
pub(crate) fn for_tree(
    paths: &StatePaths,
    snapshot: &Snapshot,
    proc: &dyn ProcSource,
    control: Tool,
    tree: &[ProcessIdentity],
) -> ClientTeardown {
    let budget = control.timeout.saturating_mul(2);
    let mps = Mps {
        paths,
        proc,
        smi: tool::nvidia_smi(),
        control,
        env: HostEnv::default(),
    };
    match records::records(&mps, snapshot) {
        Ok(records) => terminate_in_tree(&mps, &records, tree, budget),
        Err(e) => ClientTeardown {
            terminated: Vec::new(),
            notes: vec![records_unread(&e)],
        },
    }
}

/// What is said when the daemons' records cannot be read, so no client is asked to end.
pub(crate) fn records_unread(e: &dyn std::fmt::Display) -> String {
    format!("the MPS daemons' records could not be read ({e}): no MPS client was asked to end")
}

/// [`for_tree`] with this user's log at `paths` and the real `/proc`: for the crate's tests.
pub fn terminate_clients_in_tree(
    paths: &StatePaths,
    control: Tool,
    tree: &[ProcessIdentity],
) -> Result<ClientTeardown, LogError> {
    let Some(reader) = LogReader::open(&paths.log_path(), &paths.scope())? else {
        return Ok(ClientTeardown::default());
    };
    let snapshot = reader.snapshot()?;
    Ok(for_tree(
        paths,
        &snapshot,
        &SystemProc::default(),
        control,
        tree,
    ))
}

/// Asks each live daemon of `records` to end its clients among `tree`; all of it within
/// `budget` (and each call within the control tool's own timeout). A client is named to
/// `terminate_client` only while its pid is still the tree's process (the same start time): a
/// process that ended during the capture may have left its pid to another.
pub(crate) fn terminate_in_tree(
    mps: &Mps,
    records: &[DaemonRecord],
    tree: &[ProcessIdentity],
    budget: Duration,
) -> ClientTeardown {
    let tree: BTreeMap<u32, ProcessIdentity> = tree
        .iter()
        .filter(|p| p.pid != 0)
        .map(|p| (p.pid, *p))
        .collect();
    let mut teardown = ClientTeardown::default();
    if tree.is_empty() {
        return teardown;
    }
    // Authority first, from `/proc` alone: a stale record's pipe directory is never opened.
    let live: Vec<&DaemonRecord> = records
        .iter()
        .filter(|r| liveness(mps, r) == Liveness::Live)
        .collect();
    // A budget past what the clock can hold is none.
    let deadline = Instant::now().checked_add(budget);
    let control = &mps.control;
    let proc = mps.proc;
    let tree = &tree;
    let asked: Vec<ClientTeardown> = std::thread::scope(|s| {
        let asking: Vec<_> = live
            .iter()
            .map(|&record| {
                let ask = Asker {
                    control,
                    proc,
                    record,
                    deadline,
                };
                (record, s.spawn(move || ask.end_clients(tree)))
            })
            .collect();
        asking
            .into_iter()
            .map(|(record, thread)| {
                thread.join().unwrap_or_else(|_| ClientTeardown {
                    terminated: Vec::new(),
                    notes: vec![format!(
                        "asking MPS daemon `{}` to end its clients failed unexpectedly",
                        record.name
                    )],
                })
            })
            .collect()
    });
    for one in asked {
        teardown.terminated.extend(one.terminated);
        teardown.notes.extend(one.notes);
    }
    teardown
}

/// One daemon, asked within the deadline (none: each call within the tool's timeout only).
struct Asker<'a> {
    control: &'a Tool,
    proc: &'a dyn ProcSource,
    record: &'a DaemonRecord,
    deadline: Option<Instant>,
}

/// What one command to a daemon came to.
enum Asked {
    Reply(String),
    /// No answer in time: within the tool's own timeout (wedged), or within what was left of
    /// the budget (`cut`).
    Silent {
        waited: Duration,
        cut: bool,
    },
    /// No daemon took it, or the client failed (`Cannot find MPS control daemon process`).
    NotTaken,
    /// The control tool could not be run at all.
    Failed(ToolError),
}

impl Asker<'_> {
    fn end_clients(&self, tree: &BTreeMap<u32, ProcessIdentity>) -> ClientTeardown {
        let mut out = ClientTeardown::default();
        let servers = match self.ask("get_server_list") {
            Asked::Reply(reply) => self.pids(&reply, "get_server_list", &mut out.notes),
            other => {
                out.notes.push(self.unanswered("get_server_list", &other));
                return out;
            }
        };
        for server in servers {
            let line = format!("get_client_list {server}");
            let clients = match self.ask(&line) {
                Asked::Reply(reply) => self.pids(&reply, &line, &mut out.notes),
                other => {
                    out.notes.push(self.unanswered(&line, &other));
                    return out;
                }
            };
            let mut terminated = Vec::new();
            let mut stop = false;
            for (client, identity) in clients
                .into_iter()
                .filter_map(|c| tree.get(&c).map(|identity| (c, identity)))
            {
                if self.proc.stat(client).map(|s| s.identity()) != Some(*identity) {
                    out.notes.push(format!(
                        "MPS client {client} of daemon `{}` is no longer the tree's process: not ended",
                        self.record.name
                    ));
                    continue;
                }
                let line = format!("terminate_client {server} {client}");
                match self.ask(&line) {
                    Asked::Reply(_) => terminated.push(client),
                    other => {
                        out.notes.push(self.unanswered(&line, &other));
                        // A daemon that went silent is asked nothing more.
                        stop = matches!(other, Asked::Silent { .. } | Asked::Failed(_));
                        if stop {
                            break;
                        }
                    }
                }
            }
            if !terminated.is_empty() {
                out.terminated.push(MpsTeardown {
                    daemon: self.record.name.clone(),
                    server_pid: server,
                    terminated,
                });
            }
            if stop {
                break;
            }
        }
        out
    }

    fn ask(&self, line: &str) -> Asked {
        let left = self.deadline.map_or(self.control.timeout, |deadline| {
            deadline.saturating_duration_since(Instant::now())
        });
        if left.is_zero() {
            return Asked::Silent {
                waited: Duration::ZERO,
                cut: true,
            };
        }
        let tool = self.control.clone().within(left);
        let cut = tool.timeout < self.control.timeout;
        match control::send(
            &tool,
            Path::new(&self.record.pipe_directory),
            Path::new(&self.record.log_directory),
            line,
        ) {
            Ok(Some(reply)) => Asked::Reply(reply),
            Ok(None) => Asked::NotTaken,
            Err(ToolError::Timeout { timeout, .. }) => Asked::Silent {
                waited: timeout,
                cut,
            },
            Err(e) => Asked::Failed(e),
        }
    }

    /// The pids of an answer, one a line; a line that is not one is passed over, and said.
    fn pids(&self, reply: &str, asked: &str, notes: &mut Vec<String>) -> Vec<u32> {
        let (pids, passed_over) = parse_pids(reply);
        if passed_over > 0 {
            notes.push(format!(
                "MPS daemon `{}` answered `{asked}` with {passed_over} line{} that {} not a pid; {} passed over",
                self.record.name,
                if passed_over == 1 { "" } else { "s" },
                if passed_over == 1 { "is" } else { "are" },
                if passed_over == 1 { "it was" } else { "they were" },
            ));
        }
        pids
    }

    fn unanswered(&self, asked: &str, how: &Asked) -> String {
        let daemon = format!(
            "MPS daemon `{}` (pid {})",
            self.record.name, self.record.pid
        );
        let what = match how {
            Asked::Reply(_) => "answered".to_owned(),
            Asked::Silent { cut: true, .. } => {
                "was not asked to the end: the time for ending MPS clients ran out".to_owned()
            }
            Asked::Silent { waited, .. } => format!(
                "did not answer within {}: it is wedged",
                crate::text::duration(waited.as_secs_f64())
            ),
            Asked::NotTaken => "did not take the command".to_owned(),
            Asked::Failed(e) => format!("could not be asked ({e})"),
        };
        format!(
            "{daemon} {what} (`{asked}`); its clients in the tree, if any, are stopped by signal"
        )
    }
}

/// The pids in a daemon's answer, one a line, in order and each once, and how many non-blank
/// lines were not a pid (pid 0 is none).
fn parse_pids(reply: &str) -> (Vec<u32>, usize) {
    let mut pids = Vec::new();
    let mut seen = BTreeSet::new();
    let mut passed_over = 0;
    for line in reply.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let pid = line
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| line.parse::<u32>().ok())
            .flatten()
            .filter(|&pid| pid != 0);
        match pid {
            Some(pid) => {
                if seen.insert(pid) {
                    pids.push(pid);
                }
            }
            None => passed_over += 1,
        }
    }
    (pids, passed_over)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::event::TopologyMode;
    use crate::testing::proc::FakeProc;

    const UID: u32 = 1000;

    fn record(name: &str, pid: u32) -> DaemonRecord {
        DaemonRecord {
            name: name.into(),
            uid: UID,
            host: "node".into(),
            topology_mode: TopologyMode::SingleGpu,
            gpu_uuids: vec!["GPU-aaaa".into()],
            pipe_directory: format!("/nonexistent/unilab-{UID}/mps/{name}"),
            log_directory: format!("/nonexistent/{name}/log"),
            pid,
            process_start_ticks: 7,
            created_at: 0.0,
            job: None,
            active_thread_percentage: None,
            pinned_memory_limit: None,
        }
    }

    /// Only a record whose process is live (same start time, same owner) is asked anything:
    /// here asking fails (no control tool), so a note shows who was asked.
    #[test]
    fn only_a_live_records_daemon_is_asked_and_an_empty_tree_asks_none() {
        let paths = StatePaths {
            root: PathBuf::from("/state"),
            host: "node".into(),
            uid: UID,
        };
        let proc = FakeProc::new()
            .with(10, 7, 'S', UID)
            .with(11, 8, 'S', UID)
            .with(12, 7, 'S', UID + 1);
        let mps = Mps {
            paths: &paths,
            proc: &proc,
            smi: Tool::new("/nonexistent/nvidia-smi", Duration::from_secs(1)),
            control: Tool::new("/nonexistent/control", Duration::from_secs(1)),
            env: HostEnv::default(),
        };
        let records = [
            record("live", 10),
            record("reused", 11),
            record("foreign", 12),
            record("gone", 13),
        ];
        let tree = [10, 11, 99].map(|pid| ProcessIdentity {
            pid,
            start_ticks: 7,
        });
        let teardown = terminate_in_tree(&mps, &records, &tree, Duration::MAX);
        assert!(teardown.terminated.is_empty());
        assert_eq!(teardown.notes.len(), 1, "{:?}", teardown.notes);
        assert!(
            teardown.notes[0].starts_with("MPS daemon `live` (pid 10) could not be asked"),
            "{:?}",
            teardown.notes
        );
        assert_eq!(
            terminate_in_tree(
                &mps,
                &records,
                &[ProcessIdentity {
                    pid: 0,
                    start_ticks: 7
                }],
                Duration::MAX
            ),
            ClientTeardown::default()
        );
    }

    #[test]
    fn a_daemons_answer_gives_its_pids_once_each_and_counts_what_is_not_one() {
        assert_eq!(parse_pids(""), (vec![], 0));
        assert_eq!(parse_pids("\n"), (vec![], 0));
        assert_eq!(parse_pids("12\n 34 \n12\n"), (vec![12, 34], 0));
        assert_eq!(
            parse_pids("\u{0}\u{1} garbled\n-5\n0\n99999999999\n7\n+8\n٣\n"),
            (vec![7], 6)
        );
    }
}
