//! Which processes of a soak's tree the kernel's OOM killer killed, from what the kernel says:
//! its log names each kill's pid ("Killed process 1234 (python3)"), and the command's memory
//! cgroup counts the kills in it (`oom_kill`). A pure core: the supervisor reads both.
//!
//! The log, where it can be read, is what names a process; the cgroup's count then only
//! confirms. Where the log cannot be read (an ordinary user under `kernel.dmesg_restrict`), a
//! command that died of SIGKILL while the count rose is taken to be the OOM killer's victim —
//! unilab sent it no SIGKILL before the verdict — and kills the count shows beyond those named
//! are said as a number.

use std::collections::HashMap;

use crate::event::soak::{FailureKind, OomKill, OomSource};

/// What the kernel said during the soak.
#[derive(Debug, Clone, Default)]
pub(crate) struct OomClues<'a> {
    /// The command's memory cgroup: its path, limit and `oom_kill` count before and after.
    pub cgroup: Option<CgroupCount>,
    /// The kills the kernel's log named during the soak (pid, name); `None` when it could not
    /// be read.
    pub logged: Option<&'a [(u32, String)]>,
    /// Every process of the tree the soak saw, by pid.
    pub tree: Option<&'a HashMap<u32, String>>,
    /// The command, when it died of SIGKILL: its pid and name.
    pub command_killed: Option<(u32, String)>,
}

/// The command's memory cgroup, and how many OOM kills it counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupCount {
    pub path: String,
    pub limit_bytes: Option<u64>,
    pub before: Option<u64>,
    pub after: Option<u64>,
}

/// The OOM kills of a soak.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OomFound {
    pub kills: Vec<OomKill>,
    /// The command itself is among them.
    pub command: Option<u32>,
    /// Kills the cgroup counted that no log line named (the log could not be read).
    pub unnamed: u64,
    /// `cgroup /x: limit 16.0 GiB`, where the cgroup is known.
    pub cgroup: Option<String>,
}

/// The kills of the tree's processes, from `clues`.
pub(crate) fn attribute(clues: &OomClues) -> OomFound {
    let counted = clues
        .cgroup
        .as_ref()
        .and_then(|c| Some(c.after?.saturating_sub(c.before?)));
    let in_tree = |pid: &u32| clues.tree.is_some_and(|tree| tree.contains_key(pid));
    let mut kills: Vec<OomKill> = Vec::new();
    for (pid, name) in clues.logged.unwrap_or_default() {
        if in_tree(pid) && !kills.iter().any(|k| k.pid == *pid) {
            kills.push(OomKill {
                pid: *pid,
                name: name.clone(),
                source: OomSource::Kmsg,
            });
        }
    }
    if let Some((pid, name)) = &clues.command_killed
        && !kills.iter().any(|k| k.pid == *pid)
        && clues.logged.is_none()
        && counted.is_some_and(|n| n > 0)
    {
        kills.push(OomKill {
            pid: *pid,
            name: name.clone(),
            source: OomSource::Cgroup,
        });
    }
    let unnamed = match (clues.logged, counted) {
        (None, Some(n)) => n.saturating_sub(kills.len() as u64),
        _ => 0,
    };
    let command = clues
        .command_killed
        .as_ref()
        .map(|(pid, _)| *pid)
        .filter(|pid| kills.iter().any(|k| k.pid == *pid));
    OomFound {
        kills,
        command,
        unnamed,
        cgroup: clues.cgroup.as_ref().map(|c| match c.limit_bytes {
            Some(limit) => format!("cgroup {}: limit {}", c.path, crate::text::bytes(limit)),
            None => format!("cgroup {}", c.path),
        }),
    }
}

impl OomFound {
    /// What a verdict of `kind` whose reason is `reason` says with these kills: a command the
    /// OOM killer killed is named so right after how it died; the others after the reason.
    pub(crate) fn explain(&self, kind: Option<FailureKind>, reason: String) -> String {
        let cgroup = self
            .cgroup
            .as_ref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        let mut reason = reason;
        let mut others: Vec<&OomKill> = self.kills.iter().collect();
        if kind == Some(FailureKind::CommandFailed)
            && let Some(pid) = self.command
        {
            reason = format!("{reason}: killed by the kernel's OOM killer{cgroup}");
            others.retain(|k| k.pid != pid);
        }
        if !others.is_empty() {
            let named: Vec<String> = others
                .iter()
                .map(|k| format!("{} ({})", k.pid, k.name))
                .collect();
            reason = format!(
                "{reason}; the kernel's OOM killer killed {}{cgroup}",
                named.join(", ")
            );
        }
        if self.unnamed > 0 {
            reason = format!(
                "{reason}; the kernel's OOM killer killed {} in the command's memory cgroup{cgroup} during the soak (the kernel log, which would name them, is not readable)",
                crate::text::count(self.unnamed, "process"),
            );
        }
        reason
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> HashMap<u32, String> {
        HashMap::from([(10, "python3".to_owned()), (11, "worker".to_owned())])
    }

    fn cgroup(before: u64, after: u64) -> Option<CgroupCount> {
        Some(CgroupCount {
            path: "/job".into(),
            limit_bytes: Some(64 << 20),
            before: Some(before),
            after: Some(after),
        })
    }

    #[test]
    fn the_log_names_the_trees_kills_and_not_another_processs() {
        let tree = tree();
        let logged = [(11, "worker".to_owned()), (99, "other".to_owned())];
        let found = attribute(&OomClues {
            cgroup: cgroup(0, 2),
            logged: Some(&logged),
            tree: Some(&tree),
            command_killed: None,
        });
        assert_eq!(found.kills.len(), 1);
        assert_eq!(
            (found.kills[0].pid, found.kills[0].source),
            (11, OomSource::Kmsg)
        );
        assert_eq!((found.command, found.unnamed), (None, 0));
        assert_eq!(
            found.explain(Some(FailureKind::StaleProgress), "no progress".into()),
            "no progress; the kernel's OOM killer killed 11 (worker) (cgroup /job: limit 64.0 MiB)"
        );
    }

    #[test]
    fn without_the_log_a_command_killed_while_the_count_rose_is_the_victim() {
        let tree = tree();
        let clues = OomClues {
            cgroup: cgroup(3, 5),
            logged: None,
            tree: Some(&tree),
            command_killed: Some((10, "python3".into())),
        };
        let found = attribute(&clues);
        assert_eq!(found.kills[0].source, OomSource::Cgroup);
        assert_eq!((found.command, found.unnamed), (Some(10), 1));
        assert_eq!(
            found.explain(
                Some(FailureKind::CommandFailed),
                "the command was killed by signal 9 (SIGKILL)".into()
            ),
            "the command was killed by signal 9 (SIGKILL): killed by the kernel's OOM killer (cgroup /job: limit 64.0 MiB); the kernel's OOM killer killed 1 process in the command's memory cgroup (cgroup /job: limit 64.0 MiB) during the soak (the kernel log, which would name them, is not readable)"
        );
        let quiet = attribute(&OomClues {
            cgroup: cgroup(3, 3),
            ..clues
        });
        assert_eq!(
            quiet,
            OomFound {
                cgroup: quiet.cgroup.clone(),
                ..OomFound::default()
            }
        );
    }

    #[test]
    fn a_command_the_log_names_is_named_once() {
        let tree = tree();
        let logged = [(10, "python3".to_owned())];
        let found = attribute(&OomClues {
            cgroup: None,
            logged: Some(&logged),
            tree: Some(&tree),
            command_killed: Some((10, "python3".into())),
        });
        assert_eq!((found.kills.len(), found.command), (1, Some(10)));
        assert_eq!(
            found.explain(Some(FailureKind::CommandFailed), "killed".into()),
            "killed: killed by the kernel's OOM killer"
        );
    }
}
