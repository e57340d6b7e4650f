//! The soak's tree and its teardown: which processes are the soak's, and how they are stopped
//! once the soak is decided. Everything it reads goes through a [`ProcSource`] and everything it
//! does to a process through [`Hands`], so the rules run against a fake process table in tests.

use std::collections::HashSet;
use std::time::Duration;

use super::watch::Unkillable;
use crate::event::soak::{FailureKind, LeakedProcess};
use crate::process::{self, ProcSource, ProcStat, ProcessIdentity, Signal};
use crate::time::poll_until;

/// How often the teardown looks again at what is left.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// How long the teardown waits, after the last signal, for the tree to be gone and reaped and
/// the guard done.
pub(crate) const SETTLE: Duration = Duration::from_secs(5);

/// What the teardown does to a process: signal it (after an identity check), or reap one of
/// this supervisor's children.
pub(crate) trait Hands {
    fn signal(&self, identity: ProcessIdentity, signal: Signal);
    fn reap(&self, pid: u32);
}

/// The real hands: a signal through a pidfd, to a process of `uid` only, and `waitpid`.
pub(crate) struct SystemHands<'a> {
    pub proc: &'a dyn ProcSource,
    pub uid: u32,
}

impl Hands for SystemHands<'_> {
    fn signal(&self, identity: ProcessIdentity, signal: Signal) {
        let _ = process::signal(self.proc, identity, self.uid, signal);
    }

    fn reap(&self, pid: u32) {
        process::reap(pid);
    }
}

/// The soak's processes: the guard's descendants, the orphans of the tree (the supervisor `me`
/// is their subreaper, so they are its children — should the guard die, the command is one),
/// and every process a sample saw that still runs — each with its descendants.
pub(crate) struct Tree<'a> {
    pub proc: &'a dyn ProcSource,
    pub guard: u32,
    pub me: u32,
    pub seen: &'a HashSet<ProcessIdentity>,
}

impl Tree<'_> {
    /// Every live process of the tree (the guard itself, and zombies, excluded).
    pub(crate) fn live(&self) -> Vec<ProcStat> {
        let all = self.proc.all();
        let mut roots: Vec<u32> = vec![self.guard];
        // By the time the tree is stopped the sampler's own tool runs are reaped: every other
        // child of this supervisor came to it as an orphan of the tree.
        roots.extend(
            all.iter()
                .filter(|p| p.ppid == self.me || self.seen.contains(&p.identity()))
                .map(|p| p.pid),
        );
        let mut found: Vec<ProcStat> = Vec::new();
        for root in roots {
            if root != self.guard
                && let Some(stat) = all.iter().find(|p| p.pid == root)
            {
                found.push(stat.clone());
            }
            found.extend(process::descendants(root, &all));
        }
        found.sort_by_key(|p| p.pid);
        found.dedup_by_key(|p| p.pid);
        found.retain(|p| p.pid != self.guard && !p.has_exited());
        found
    }

    /// Reaps what came to this supervisor as their subreaper and has exited.
    fn reap(&self, hands: &dyn Hands) {
        for stat in self.proc.all() {
            if stat.ppid == self.me && stat.pid != self.guard && stat.has_exited() {
                hands.reap(stat.pid);
            }
        }
    }
}

/// What the teardown left: the leaks it recorded, and what no signal ended.
#[derive(Debug, Default)]
pub(crate) struct Stopped {
    pub leaked: Vec<LeakedProcess>,
    pub unkillable: Vec<Unkillable>,
}

/// Stops what is left of the soak's tree. After a failure (`failure` says which) the soak fails
/// closed: SIGTERM the whole tree, the grace period, SIGKILL the rest. After the command exited,
/// whatever outlives it by the grace period has leaked: it is recorded, then killed. Either way,
/// `before_first` is handed the live tree and why it is to be stopped before the first signal
/// reaches it (and not at all when nothing is left to signal): the moment to capture evidence.
/// While it waits out the grace, `hurry` (a second Ctrl-C) sends SIGKILL at once.
/// Then it waits, at most `settle`, for the tree to be gone and reaped and for `guard_done`,
/// killing what appears meanwhile; what is still there then (a process in uninterruptible
/// sleep ignores SIGKILL) is named, never waited for longer.
pub(crate) fn stop_tree(
    tree: &Tree,
    hands: &dyn Hands,
    failure: Option<FailureKind>,
    (grace, settle): (Duration, Duration),
    (mut guard_done, hurry): (impl FnMut() -> bool, &dyn Fn() -> bool),
    before_first: impl FnOnce(&[ProcStat], FailureKind),
) -> Stopped {
    let mut leaked = Vec::new();
    let gone = || tree.live().is_empty();
    // Each process is sent SIGKILL once: what no SIGKILL ended, another will not end either.
    let mut killed = HashSet::new();
    let mut kill = |stat: &ProcStat| {
        if killed.insert(stat.identity()) {
            hands.signal(stat.identity(), Signal::Kill);
        }
    };
    if let Some(trigger) = failure {
        let live = tree.live();
        if !live.is_empty() {
            before_first(&live, trigger);
        }
        for stat in tree.live() {
            hands.signal(stat.identity(), Signal::Terminate);
        }
        if !poll_until(grace, LOOK_EVERY, || gone() || hurry()) || !gone() {
            tree.live().iter().for_each(&mut kill);
        }
    } else {
        poll_until(grace, LOOK_EVERY, gone);
        let live = tree.live();
        leaked = live
            .iter()
            .map(|stat| LeakedProcess {
                identity: stat.identity(),
                name: stat.comm.clone(),
                // A process whose map is locked is listed without its command line.
                cmdline: tree.proc.cmdline(stat.pid).unwrap_or_default(),
            })
            .collect();
        if !live.is_empty() {
            before_first(&live, FailureKind::LeakedProcesses);
        }
        live.iter().for_each(&mut kill);
    }
    // Killing what appeared since, until the tree is gone or `settle` has passed.
    let gone = poll_until(settle, LOOK_EVERY, || {
        tree.reap(hands);
        let live = tree.live();
        live.iter().for_each(&mut kill);
        live.is_empty() && guard_done()
    });
    let unkillable = if gone {
        Vec::new()
    } else {
        tree.live()
            .into_iter()
            .map(|stat| Unkillable {
                wchan: tree.proc.wchan(stat.pid),
                pid: stat.pid,
                name: stat.comm,
                state: stat.state,
            })
            .collect()
    };
    Stopped { leaked, unkillable }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::testing::proc::FakeProc;

    const UID: u32 = 1000;
    const ME: u32 = 1;
    const NO_WAIT: (Duration, Duration) = (Duration::ZERO, SETTLE);
    const GUARD: u32 = 10;

    /// A process table that signals change: a process exits on SIGKILL, and on SIGTERM unless it
    /// ignores it; what this supervisor reaps leaves the table. Every signal is kept.
    struct FakeTable {
        procs: Mutex<FakeProc>,
        ignores_term: HashSet<u32>,
        /// In uninterruptible sleep: no signal ends them.
        stuck: HashSet<u32>,
        sent: Mutex<Vec<(u32, Signal)>>,
        reaped: Mutex<Vec<u32>>,
    }

    impl FakeTable {
        /// `(pid, ppid)` pairs, each a live process of `UID`.
        fn of(processes: &[(u32, u32)], ignores_term: &[u32]) -> Self {
            let procs = processes.iter().fold(FakeProc::new(), |t, (pid, ppid)| {
                t.with(*pid, u64::from(*pid) * 100, 'S', UID)
                    .parent(*pid, *ppid)
                    .cmdline_of(*pid, &["worker", &pid.to_string()])
            });
            Self {
                procs: Mutex::new(procs),
                ignores_term: ignores_term.iter().copied().collect(),
                stuck: HashSet::new(),
                sent: Mutex::default(),
                reaped: Mutex::default(),
            }
        }

        fn sent(&self) -> Vec<(u32, Signal)> {
            let mut sent = self.sent.lock().unwrap().clone();
            sent.sort_by_key(|(pid, s)| (*pid, *s == Signal::Kill));
            sent
        }

        fn tree<'a>(&'a self, seen: &'a HashSet<ProcessIdentity>) -> Tree<'a> {
            Tree {
                proc: self,
                guard: GUARD,
                me: ME,
                seen,
            }
        }
    }

    impl ProcSource for FakeTable {
        fn stat(&self, pid: u32) -> Option<ProcStat> {
            self.procs.lock().unwrap().stat(pid)
        }
        fn uid(&self, pid: u32) -> Option<u32> {
            self.procs.lock().unwrap().uid(pid)
        }
        fn all(&self) -> Vec<ProcStat> {
            self.procs.lock().unwrap().all()
        }
        fn cmdline(&self, pid: u32) -> Result<Vec<String>, crate::proc_read::Blocked> {
            self.procs.lock().unwrap().cmdline(pid)
        }
        fn environ(&self, pid: u32) -> Result<Vec<Vec<u8>>, crate::proc_read::Blocked> {
            self.procs.lock().unwrap().environ(pid)
        }
        fn wchan(&self, pid: u32) -> Option<String> {
            self.procs.lock().unwrap().wchan(pid)
        }
    }

    impl Hands for FakeTable {
        fn signal(&self, identity: ProcessIdentity, signal: Signal) {
            self.sent.lock().unwrap().push((identity.pid, signal));
            if self.stuck.contains(&identity.pid) {
                return;
            }
            if signal == Signal::Kill || !self.ignores_term.contains(&identity.pid) {
                self.procs.lock().unwrap().exit(identity.pid);
            }
        }
        fn reap(&self, pid: u32) {
            self.reaped.lock().unwrap().push(pid);
            self.procs.lock().unwrap().reap(pid);
        }
    }

    fn pids(stats: &[ProcStat]) -> Vec<u32> {
        stats.iter().map(|s| s.pid).collect()
    }

    /// The guard (10) under the supervisor (1); its command (11) with a worker (12); an orphan
    /// the supervisor adopted (20) with a child (21); a process a sample saw that moved away
    /// (30, now under init's 2); and processes that are not the soak's (40 under 2, 41 under 40).
    fn host() -> Vec<(u32, u32)> {
        vec![
            (ME, 0),
            (2, 0),
            (GUARD, ME),
            (11, GUARD),
            (12, 11),
            (20, ME),
            (21, 20),
            (30, 2),
            (40, 2),
            (41, 40),
        ]
    }

    fn seen_30() -> HashSet<ProcessIdentity> {
        HashSet::from([ProcessIdentity {
            pid: 30,
            start_ticks: 3000,
        }])
    }

    #[test]
    fn given_a_host_when_the_tree_is_listed_then_it_is_the_soaks_processes_only() {
        let table = FakeTable::of(&host(), &[]);
        let seen = seen_30();
        assert_eq!(pids(&table.tree(&seen).live()), [11, 12, 20, 21, 30]);
        // A process the sample saw whose pid now names another process is not the soak's.
        let reused = HashSet::from([ProcessIdentity {
            pid: 40,
            start_ticks: 1,
        }]);
        assert_eq!(pids(&table.tree(&reused).live()), [11, 12, 20, 21]);
        table.procs.lock().unwrap().exit(12);
        assert_eq!(
            pids(&table.tree(&seen).live()),
            [11, 20, 21, 30],
            "a zombie is not live"
        );
    }

    #[test]
    fn given_a_failed_soak_when_the_tree_is_stopped_then_sigterm_then_sigkill_for_what_stays() {
        let table = FakeTable::of(&host(), &[21]);
        let seen = seen_30();
        let mut before = Vec::new();
        let stopped = stop_tree(
            &table.tree(&seen),
            &table,
            Some(FailureKind::StaleProgress),
            (Duration::from_millis(50), SETTLE),
            (|| true, &|| false),
            |live, trigger| before.push((pids(live), trigger, table.sent().len())),
        );
        assert_eq!(
            before,
            [(vec![11, 12, 20, 21, 30], FailureKind::StaleProgress, 0)],
            "handed the live tree once, before any signal"
        );
        let leaked = stopped.leaked;
        assert!(stopped.unkillable.is_empty());
        assert!(
            leaked.is_empty(),
            "a failed soak's tree is stopped, not leaked"
        );
        use Signal::{Kill, Terminate};
        assert_eq!(
            table.sent(),
            [
                (11, Terminate),
                (12, Terminate),
                (20, Terminate),
                (21, Terminate),
                (21, Kill),
                (30, Terminate)
            ],
            "never the guard, never a process that is not the soak's"
        );
        assert_eq!(
            *table.reaped.lock().unwrap(),
            [20],
            "only the supervisor's own children are reaped"
        );
        assert!(table.tree(&seen).live().is_empty());
    }

    #[test]
    fn given_a_command_that_exited_when_processes_outlive_the_grace_then_they_are_leaks_and_killed()
    {
        let table = FakeTable::of(&host(), &[]);
        let seen = HashSet::new();
        let mut before = Vec::new();
        let stopped = stop_tree(
            &table.tree(&seen),
            &table,
            None,
            NO_WAIT,
            (|| true, &|| false),
            |live, trigger| before.push((pids(live), trigger, table.sent().len())),
        );
        assert_eq!(
            before,
            [(vec![11, 12, 20, 21], FailureKind::LeakedProcesses, 0)],
            "the leaks, before they are killed"
        );
        let leaked = stopped.leaked;
        let leaks: Vec<(u32, Vec<String>)> = leaked
            .iter()
            .map(|l| (l.identity.pid, l.cmdline.clone()))
            .collect();
        assert_eq!(
            leaks,
            [11, 12, 20, 21].map(|pid| (pid, vec!["worker".to_owned(), pid.to_string()]))
        );
        assert!(
            table.sent().iter().all(|(_, s)| *s == Signal::Kill),
            "a leak is killed outright: {:?}",
            table.sent()
        );
    }

    #[test]
    fn given_a_tree_already_gone_when_it_is_stopped_then_nothing_is_signalled() {
        let table = FakeTable::of(&[(ME, 0), (GUARD, ME), (40, 2)], &[]);
        let seen = HashSet::new();
        let mut asked = 0;
        let mut handed = false;
        let stopped = stop_tree(
            &table.tree(&seen),
            &table,
            Some(FailureKind::Interrupted),
            NO_WAIT,
            (
                || {
                    asked += 1;
                    true
                },
                &|| false,
            ),
            |_, _| handed = true,
        );
        assert!(stopped.leaked.is_empty() && table.sent().is_empty());
        assert!(!handed, "no evidence of a tree that is gone");
        assert_eq!(asked, 1, "the guard is asked once the tree is gone");
    }

    #[test]
    fn given_a_process_in_uninterruptible_sleep_when_the_tree_is_stopped_then_it_is_named_not_waited_for()
     {
        let mut table = FakeTable::of(&host(), &[]);
        let stuck = std::mem::take(&mut *table.procs.lock().unwrap()).stuck_in(12, "nv_wait");
        *table.procs.lock().unwrap() = stuck;
        table.stuck.insert(12);
        let seen = HashSet::new();
        let began = std::time::Instant::now();
        let settle = Duration::from_millis(200);
        let stopped = stop_tree(
            &table.tree(&seen),
            &table,
            Some(FailureKind::StaleProgress),
            (Duration::from_millis(50), settle),
            (|| true, &|| false),
            |_, _| {},
        );
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the waits are bounded"
        );
        assert_eq!(
            stopped.unkillable,
            [Unkillable {
                pid: 12,
                name: "fake".into(),
                state: 'D',
                wchan: Some("nv_wait".into()),
            }]
        );
        let to_12: Vec<Signal> = table
            .sent()
            .into_iter()
            .filter(|(pid, _)| *pid == 12)
            .map(|(_, s)| s)
            .collect();
        assert_eq!(
            to_12,
            [Signal::Terminate, Signal::Kill],
            "signalled, once each"
        );
    }

    /// A second Ctrl-C during the grace period: SIGKILL at once, not after the grace.
    #[test]
    fn given_a_hurry_during_the_grace_when_the_tree_is_stopped_then_sigkill_comes_at_once() {
        let table = FakeTable::of(&host(), &[21]);
        let seen = seen_30();
        let began = std::time::Instant::now();
        let stopped = stop_tree(
            &table.tree(&seen),
            &table,
            Some(FailureKind::Interrupted),
            (Duration::from_secs(60), SETTLE),
            (|| true, &|| true),
            |_, _| {},
        );
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "not the 60 s grace: {:?}",
            began.elapsed()
        );
        assert!(stopped.unkillable.is_empty());
        assert!(
            table
                .sent()
                .iter()
                .any(|(pid, s)| *pid == 21 && *s == Signal::Kill),
            "the one that ignores SIGTERM got SIGKILL: {:?}",
            table.sent()
        );
    }
}
