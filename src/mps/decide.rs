//! The MPS decisions, as pure functions: from what the log holds (daemon records, open starts),
//! the evidence about each process it names, and what was asked, to what to do. The shell
//! (`start`, `settle`, `stop`) gathers the evidence, then appends and acts on the decision;
//! nothing here reads `/proc`, takes a lock or writes the log.

use super::DaemonRecord;
use crate::event::StaleReason;
use crate::process::Liveness;

/// What a start claims: a name, and one GPU in one scope (the user's own, or a Slurm job's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub name: &'a str,
    pub gpu: &'a str,
    pub job: Option<&'a str>,
}

impl Claim<'_> {
    /// Whether a daemon or start of `name` on `gpus` in `job`'s scope collides with this claim:
    /// the same name, or the same GPU in the same scope (one daemon a GPU in each scope).
    fn collides<'g>(
        &self,
        name: &str,
        mut gpus: impl Iterator<Item = &'g str>,
        job: Option<&str>,
    ) -> bool {
        name == self.name || (job == self.job && gpus.any(|gpu| gpu == self.gpu))
    }
}

/// Why a record is not the daemon it names, if it is not.
pub(crate) fn stale_reason(liveness: Liveness) -> Option<StaleReason> {
    match liveness {
        Liveness::Live => None,
        Liveness::Gone => Some(StaleReason::ProcessGone),
        Liveness::Reused { .. } => Some(StaleReason::PidReused),
        Liveness::NotOwned { .. } => Some(StaleReason::NotOwned),
    }
}

/// What the records in a start's way come to.
#[derive(Debug, Default)]
pub(crate) struct Way<'r> {
    /// Records in the way that no longer name their daemon: cleaned, whatever else is decided.
    pub stale: Vec<(&'r DaemonRecord, StaleReason)>,
    /// A live daemon in the way, which refuses the start.
    pub refused_by: Option<&'r DaemonRecord>,
}

/// Given this user's records, each with its liveness, when a start makes `claim`: a live daemon
/// of the same name, or on the same GPU in the same scope, refuses it; the stale records among
/// those are cleaned either way (a stale record is stale whatever the start comes to).
pub(crate) fn the_way<'r>(claim: Claim<'_>, records: &'r [(DaemonRecord, Liveness)]) -> Way<'r> {
    let mut way = Way::default();
    for (record, liveness) in records {
        let gpus = record.gpu_uuids.iter().map(String::as_str);
        if !claim.collides(&record.name, gpus, record.job.as_deref()) {
            continue;
        }
        match stale_reason(*liveness) {
            Some(reason) => way.stale.push((record, reason)),
            None => way.refused_by = way.refused_by.or(Some(record)),
        }
    }
    way
}

/// The process that opened a start (its `daemon_starting`), as far as a command can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Starter {
    /// The command deciding.
    ThisProcess,
    /// A live process of this user with the starter's identity.
    Live,
    /// Gone, its pid reused, or no longer this user's: the start was cut short.
    Gone,
}

impl Starter {
    /// The starter's state from its liveness, for a command whose pid is `me`.
    pub(crate) fn of(pid: u32, liveness: Liveness, me: u32) -> Self {
        match liveness {
            _ if pid == me => Starter::ThisProcess,
            Liveness::Live => Starter::Live,
            _ => Starter::Gone,
        }
    }
}

/// What a command does about one open start (a `daemon_starting` with nothing after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenStart {
    /// Not this command's business.
    Leave,
    /// Cut short: stop what it launched and record it failed, under its locks.
    Settle,
    /// Cut short, on this start's GPU under another name: settle it if its name's lock is free
    /// (a command that holds that lock settles it itself).
    SettleIfFree,
    /// Its starter let go of the locks this command holds but still looks alive, so it is
    /// exiting: wait for it to be gone, then settle; refuse if it is not gone in time.
    AwaitStarter,
    /// Under way: wait for its starter to let go of its locks.
    AwaitLocks,
}

/// Given an open start of `name` on `gpu` in `job`'s scope, when a start holding the locks of
/// `claim` looks at it. It holds the name's lock, so a live starter of the same name has ended
/// its start (its intent left open) and is exiting.
pub(crate) fn open_start_in_the_way(
    claim: Claim<'_>,
    (name, gpu, job): (&str, &str, Option<&str>),
    starter: Starter,
) -> OpenStart {
    match starter {
        Starter::ThisProcess => OpenStart::Leave,
        Starter::Live if name == claim.name => OpenStart::AwaitStarter,
        Starter::Live => OpenStart::Leave,
        Starter::Gone if name == claim.name => OpenStart::Settle,
        Starter::Gone if claim.collides(name, [gpu].into_iter(), job) => OpenStart::SettleIfFree,
        Starter::Gone => OpenStart::Leave,
    }
}

/// Given an open start, when a command that holds no lock yet (a stop, a list) acts on the
/// records: a start cut short is settled, when `settle` is asked; one under way that `wanted`
/// picks is waited for, so the command sees the daemon it starts.
pub(crate) fn open_start_outside(starter: Starter, settle: bool, wanted: bool) -> OpenStart {
    match starter {
        Starter::ThisProcess => OpenStart::Leave,
        Starter::Gone if settle => OpenStart::Settle,
        Starter::Live if wanted => OpenStart::AwaitLocks,
        _ => OpenStart::Leave,
    }
}

/// What a stop does with one record, decided under the daemon's locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Another command stopped or cleaned it first: nothing to do.
    Gone,
    /// The record no longer names its daemon: record that and clean its leftovers.
    Clean(StaleReason),
    /// The daemon runs: stop it.
    Halt,
}

/// Given whether the record still stands in the log and the liveness of what it names, when a
/// stop holds its locks.
pub(crate) fn stop(still_recorded: bool, liveness: Liveness) -> Stop {
    if !still_recorded {
        return Stop::Gone;
    }
    match stale_reason(liveness) {
        Some(reason) => Stop::Clean(reason),
        None => Stop::Halt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::TopologyMode;

    fn record(name: &str, gpu: &str, job: Option<&str>) -> DaemonRecord {
        DaemonRecord {
            name: name.into(),
            uid: 1000,
            host: "node".into(),
            topology_mode: TopologyMode::SingleGpu,
            gpu_uuids: vec![gpu.into()],
            pipe_directory: format!("/run/user/1000/unilab/mps/{name}"),
            log_directory: format!("/state/node/1000/mps/{name}/log"),
            pid: 10,
            process_start_ticks: 7,
            created_at: 0.0,
            job: job.map(str::to_owned),
            active_thread_percentage: None,
            pinned_memory_limit: None,
        }
    }

    const CLAIM: Claim<'static> = Claim {
        name: "gpu-aaaa",
        gpu: "GPU-aaaa",
        job: None,
    };

    fn names(stale: &[(&DaemonRecord, StaleReason)]) -> Vec<(String, StaleReason)> {
        stale
            .iter()
            .map(|(r, why)| (r.name.clone(), *why))
            .collect()
    }

    #[test]
    fn given_a_live_daemon_of_the_name_or_on_the_gpu_when_a_start_claims_them_then_it_is_refused() {
        for other in [
            record("gpu-aaaa", "GPU-bbbb", None),
            record("mine", "GPU-aaaa", None),
        ] {
            let records = [(other.clone(), Liveness::Live)];
            let way = the_way(CLAIM, &records);
            assert_eq!(way.refused_by.map(|r| &r.name), Some(&other.name));
            assert!(way.stale.is_empty());
        }
    }

    #[test]
    fn given_daemons_of_other_gpus_or_scopes_when_a_start_claims_its_gpu_then_nothing_is_in_the_way()
     {
        let records = [
            (record("b", "GPU-bbbb", None), Liveness::Live),
            (record("job7-a", "GPU-aaaa", Some("7")), Liveness::Live),
        ];
        let way = the_way(CLAIM, &records);
        assert!(way.refused_by.is_none() && way.stale.is_empty(), "{way:?}");
    }

    #[test]
    fn given_stale_records_in_the_way_when_a_start_claims_them_then_each_is_cleaned_with_its_reason()
     {
        let records = [
            (record("gpu-aaaa", "GPU-aaaa", None), Liveness::Gone),
            (
                record("other", "GPU-aaaa", None),
                Liveness::Reused { start_ticks: 9 },
            ),
            (record("live", "GPU-aaaa", None), Liveness::Live),
            (record("far", "GPU-cccc", None), Liveness::Gone),
        ];
        let way = the_way(CLAIM, &records);
        assert_eq!(
            names(&way.stale),
            [
                ("gpu-aaaa".to_owned(), StaleReason::ProcessGone),
                ("other".to_owned(), StaleReason::PidReused)
            ],
            "stale records are cleaned even when a live one refuses, and only those in the way"
        );
        assert_eq!(way.refused_by.map(|r| r.name.as_str()), Some("live"));
    }

    #[test]
    fn given_an_open_start_of_the_name_when_the_lock_holder_looks_then_a_live_starter_is_awaited() {
        let same = ("gpu-aaaa", "GPU-aaaa", None);
        assert_eq!(
            open_start_in_the_way(CLAIM, same, Starter::Live),
            OpenStart::AwaitStarter,
            "a starter without the lock is exiting: never refused outright, never overwritten"
        );
        assert_eq!(
            open_start_in_the_way(CLAIM, same, Starter::Gone),
            OpenStart::Settle
        );
        assert_eq!(
            open_start_in_the_way(CLAIM, same, Starter::ThisProcess),
            OpenStart::Leave
        );
    }

    #[test]
    fn given_an_open_start_of_another_name_when_the_lock_holder_looks_then_only_a_cut_one_on_its_gpu_is_settled()
     {
        let on_gpu = ("other", "GPU-aaaa", None);
        assert_eq!(
            open_start_in_the_way(CLAIM, on_gpu, Starter::Gone),
            OpenStart::SettleIfFree
        );
        assert_eq!(
            open_start_in_the_way(CLAIM, on_gpu, Starter::Live),
            OpenStart::Leave,
            "its starter holds that name's lock: it is under way"
        );
        for elsewhere in [
            ("other", "GPU-bbbb", None),
            ("job7-other", "GPU-aaaa", Some("7")),
        ] {
            assert_eq!(
                open_start_in_the_way(CLAIM, elsewhere, Starter::Gone),
                OpenStart::Leave,
                "{elsewhere:?}"
            );
        }
    }

    #[test]
    fn given_an_open_start_when_a_command_outside_it_acts_then_cut_ones_are_settled_and_wanted_ones_awaited()
     {
        assert_eq!(
            open_start_outside(Starter::Gone, true, false),
            OpenStart::Settle
        );
        assert_eq!(
            open_start_outside(Starter::Gone, false, true),
            OpenStart::Leave
        );
        assert_eq!(
            open_start_outside(Starter::Live, false, true),
            OpenStart::AwaitLocks
        );
        assert_eq!(
            open_start_outside(Starter::Live, true, false),
            OpenStart::Leave
        );
        assert_eq!(
            open_start_outside(Starter::ThisProcess, true, true),
            OpenStart::Leave
        );
    }

    #[test]
    fn given_a_starter_when_its_liveness_is_known_then_only_a_live_one_of_this_user_is_live() {
        assert_eq!(Starter::of(5, Liveness::Live, 5), Starter::ThisProcess);
        assert_eq!(Starter::of(5, Liveness::Live, 6), Starter::Live);
        for gone in [
            Liveness::Gone,
            Liveness::Reused { start_ticks: 1 },
            Liveness::NotOwned { uid: 0 },
        ] {
            assert_eq!(Starter::of(5, gone, 6), Starter::Gone);
        }
    }

    #[test]
    fn given_a_record_under_its_locks_when_a_stop_decides_then_gone_stale_or_halt() {
        assert_eq!(stop(false, Liveness::Live), Stop::Gone);
        assert_eq!(
            stop(true, Liveness::Reused { start_ticks: 3 }),
            Stop::Clean(StaleReason::PidReused)
        );
        assert_eq!(
            stop(true, Liveness::NotOwned { uid: 0 }),
            Stop::Clean(StaleReason::NotOwned)
        );
        assert_eq!(stop(true, Liveness::Live), Stop::Halt);
    }
}
