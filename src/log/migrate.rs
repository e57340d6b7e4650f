//! Schema versions and the steps between them.
//!
//! The log records its schema version in the `meta` table. Opening a log of an older version
//! runs every step from its version to [`SCHEMA_VERSION`] inside the opening write transaction,
//! so a log is either wholly migrated or untouched; a newer version is refused.
//!
//! Events are immutable and their hashes cover their stored bytes, so a step that must change
//! how events are encoded keeps the old records and teaches the decoder the old form, or
//! re-encodes and re-chains them and records the old head hash in the log. Each released version
//! has a frozen fixture log in `migrations/fixtures/`, opened by the test suite with the current
//! code.

use redb::WriteTransaction;

/// The schema version this code writes.
pub const SCHEMA_VERSION: u32 = 16;

/// Turns a log of version `from` into one of version `from + 1`.
pub(crate) struct Step {
    pub from: u32,
    pub description: &'static str,
    pub apply: fn(&WriteTransaction) -> Result<(), redb::Error>,
}

/// Every step, in order.
pub(crate) const STEPS: &[Step] = &[
    Step {
        from: 1,
        description: "soak events in schema 2's forms",
        // Schema 2 adds the soak events' new forms as new variants at the end of `StoredEvent`: every
        // schema 1 record decodes unchanged and keeps its hash, and soaks recorded in the old forms
        // render their old artifact. Nothing to rewrite; the version alone keeps an older unilab,
        // which could not decode the new forms, away from the log.
        apply: |_| Ok(()),
    },
    Step {
        from: 2,
        description: "leases on shared daemons",
        // Schema 3 adds `lease_acquired` and `lease_released` at the end of `StoredEvent`, and the
        // `leases` view. No schema 2 log holds a lease, so the view starts empty and nothing is
        // rewritten; the version keeps an older unilab, which could not decode leases, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 3,
        description: "each daemon's job recorded",
        // Schema 4 adds `daemon_starting` and `daemon_started` in forms that record the Slurm
        // job (new variants at the end of `StoredEvent`) and the `daemon_jobs` view. Schema 3 records
        // decode and hash unchanged, their daemons have no row in the view (their name is the
        // only witness of their job), so nothing is rewritten; the version keeps an older
        // unilab, which could not decode the new forms, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 4,
        description: "evidence captured before the kill",
        // Schema 5 adds `soak_evidence_captured`, and `soak_started` and `soak_finished` in
        // forms that carry how the soak is supervised and what its verdict found, as new variants
        // at the end of `StoredEvent`. Schema 4 records decode and hash unchanged and their soaks
        // render their old artifact; nothing is rewritten, and the version keeps an older unilab,
        // which could not decode the new forms, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 5,
        description: "real memory, GPU health and budgets",
        // Schema 6 adds `soak_started`, `soak_sampled` and `soak_finished` in forms that carry
        // the soak's budgets, each sample's proportional set sizes and GPU health, and the budget
        // that failed it (new variants at the end of `StoredEvent`; `resource_limit` at the end of the
        // failure kinds). Schema 5 records decode and hash unchanged and their soaks render
        // `/3`; nothing is rewritten, and the version keeps an older unilab away.
        apply: |_| Ok(()),
    },
    Step {
        from: 6,
        description: "the limits a daemon was started with",
        // Schema 7 adds `daemon_started` in a form that records the daemon's active thread
        // percentage and pinned memory limit (a new variant at the end of `StoredEvent`) and the
        // `daemon_limits` view. Schema 6 records decode and hash unchanged; their daemons have
        // no row in the view (they were started without limits), so nothing is rewritten, and
        // the version keeps an older unilab, which could not decode the new form, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 7,
        description: "compact samples and archived soaks",
        // Schema 8 adds `soak_sampled` in a compact form (each sample's processes stored
        // against the soak's previous sample) and `soak_archived` (a soak's records moved to an
        // archive file), as new variants at the end of `StoredEvent`. Schema 7 records decode and hash
        // unchanged — re-encoding them would re-chain the whole log; `log archive` is what
        // shrinks an old log — so nothing is rewritten, and the version keeps an older unilab,
        // which could not decode the new forms, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 8,
        description: "a job's alarm",
        // Schema 9 adds `soak_job_alarm_seen`, `soak_started` in a form that records the job a
        // soak belongs to (its rank, what it does on another rank's alarm) and
        // `soak_evidence_captured` in a form with each process's rank and the MPS clients
        // ended (new variants at the end of `StoredEvent`; `job_failed` and the trigger
        // `job_alarm` at the end of the failure kinds). Schema 8 records decode and hash
        // unchanged and their soaks export as they did, byte for byte; nothing is rewritten,
        // and the version keeps an older unilab, which could not decode the new forms, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 9,
        description: "heartbeats",
        // Schema 10 adds a soak's heartbeats: `soak_started` whose supervision says how steps
        // are judged, `soak_sampled` (whole and packed) whose measures hold the beats since the
        // previous sample, `soak_finished` whose findings hold the run's steps, the heartbeat
        // file's errors and the goodput (new variants at the end of `StoredEvent`; the forms
        // they supersede keep theirs, frozen in `event::stored::v9`). Schema 9 records decode
        // and hash unchanged and their soaks export as they did, byte for byte; nothing is
        // rewritten, and the version keeps an older unilab, which could not decode the new
        // forms, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 10,
        description: "a command line that is not UTF-8",
        // Schema 11 adds `soak_started` in a form that says whether its command line is
        // recorded lossily (an argument that is not UTF-8, run as its bytes): a new variant at
        // the end of `StoredEvent`, the form it supersedes renamed `SoakStartedV10`. Schema 10
        // records decode and hash unchanged (no earlier unilab could run such an argument) and
        // their soaks export as they did, byte for byte; nothing is rewritten, and the version
        // keeps an older unilab, which could not decode the new form, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 11,
        description: "progress in the record",
        // Schema 12 adds `soak_sampled` (whole and packed) in forms that hold the progress the
        // supervisor decided at the sample (`progress_seen`, `last_progress_at_us`,
        // `last_progress_ms`): new variants at the end of `StoredEvent`, the forms they
        // supersede renamed `SoakSampledV11` and `SoakSampledCompactV11`. Schema 11 records
        // decode and hash unchanged, and their soaks export as they did, byte for byte (their
        // samples carry no progress: readers decide it as before); nothing is rewritten.
        apply: |_| Ok(()),
    },
    Step {
        from: 12,
        description: "a job's runs",
        // Schema 13 adds `soak_started` in a form whose job holds the run the rank joined
        // (`run`: Slurm's step and restart count, torchrun's run, `--run`, or counted): a new
        // variant at the end of `StoredEvent`, the form it supersedes renamed
        // `SoakStartedV12`, the job of schema 9–12's forms frozen in `event::stored::v12`.
        // Schema 12 records decode and hash unchanged; their soaks form run `null` and export
        // as they did, byte for byte. Nothing is rewritten.
        apply: |_| Ok(()),
    },
    Step {
        from: 13,
        description: "each soak's rank summary kept",
        // Schema 14 keeps, beside the events, what the job views read of each soak (its job,
        // and its rank's fold: `read::job::soaks::kept`), a view of its own kept inside each
        // append's transaction. Records decode and hash unchanged and nothing is rewritten:
        // the open that migrates builds the view's table from the events (and the archives) in
        // this same transaction (`log::build`), or, where a reader handed no views migrated,
        // the next open that is handed them. The version keeps an older unilab, which would
        // append without keeping the table, away.
        apply: |_| Ok(()),
    },
    Step {
        from: 14,
        description: "beats timed where they arrive",
        // Schema 15 adds `soak_finished` in a form whose heartbeat errors count the beats not
        // taken as they came (a `t` that disagrees with the arrival, a repeated step) and the
        // reads for want of an inotify watch: a new variant at the end of `StoredEvent`, the
        // form it supersedes renamed `SoakFinishedV14`, its findings frozen in
        // `event::stored::v14`. Schema 14 records decode and hash unchanged, and their soaks
        // export as they did, byte for byte; nothing is rewritten.
        apply: |_| Ok(()),
    },
    Step {
        from: 15,
        description: "the collectives of each rank in the evidence",
        // Schema 16 adds `soak_evidence_captured` in a form whose processes hold the
        // collectives asked of each rank (`event::soak::collectives`): a new variant at the end
        // of `StoredEvent`, the form it supersedes renamed `SoakEvidenceCapturedV15`, frozen
        // in `event::stored::v15`. Schema 15 records decode and hash unchanged; nothing is
        // rewritten. The rank rows the job views keep change shape with it
        // (`soak_ranks_v2`), and are built again from the events by the open that migrates.
        apply: |_| Ok(()),
    },
];

/// A version no step leads from, or a step that failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("no migration step leads from schema version {0}")]
    NoStep(u32),
    #[error("migration step from version {from} ({description}) failed")]
    StepFailed {
        from: u32,
        description: &'static str,
        #[source]
        source: Box<redb::Error>,
    },
}

/// Runs `steps` from `from` up to `to` inside `txn`.
pub(crate) fn run(
    txn: &WriteTransaction,
    from: u32,
    to: u32,
    steps: &[Step],
) -> Result<(), MigrationError> {
    for version in from..to {
        let step = steps
            .iter()
            .find(|s| s.from == version)
            .ok_or(MigrationError::NoStep(version))?;
        (step.apply)(txn).map_err(|source| MigrationError::StepFailed {
            from: version,
            description: step.description,
            source: Box::new(source),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

    use super::*;

    const TRAIL: TableDefinition<u32, u32> = TableDefinition::new("trail");

    fn mark(txn: &WriteTransaction, from: u32) -> Result<(), redb::Error> {
        let mut trail = txn.open_table(TRAIL)?;
        let next = trail.len()? as u32;
        trail.insert(next, from)?;
        Ok(())
    }

    const TEST_STEPS: &[Step] = &[
        Step {
            from: 2,
            description: "second",
            apply: |txn| mark(txn, 2),
        },
        Step {
            from: 1,
            description: "first",
            apply: |txn| mark(txn, 1),
        },
        Step {
            from: 3,
            description: "fails",
            apply: |_| Err(redb::Error::Corrupted("step 3 refuses".into())),
        },
    ];

    fn trail(db: &redb::Database) -> Vec<u32> {
        let txn = db.begin_read().unwrap();
        let Ok(table) = txn.open_table(TRAIL) else {
            return Vec::new();
        };
        table
            .iter()
            .unwrap()
            .map(|e| e.unwrap().1.value())
            .collect()
    }

    #[test]
    fn steps_run_in_version_order_inside_the_transaction() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let db = redb::Database::create(file.path()).unwrap();
        let txn = db.begin_write().unwrap();
        run(&txn, 1, 3, TEST_STEPS).unwrap();
        txn.commit().unwrap();
        assert_eq!(trail(&db), [1, 2]);
    }

    #[test]
    fn a_failing_or_missing_step_leaves_the_log_untouched() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let db = redb::Database::create(file.path()).unwrap();
        let txn = db.begin_write().unwrap();
        let err = run(&txn, 1, 4, TEST_STEPS).unwrap_err();
        assert!(matches!(err, MigrationError::StepFailed { from: 3, .. }));
        drop(txn); // aborted, as the opening code does on error
        assert!(trail(&db).is_empty());

        let txn = db.begin_write().unwrap();
        let err = run(&txn, 1, 6, &TEST_STEPS[..2]).unwrap_err();
        assert!(matches!(err, MigrationError::NoStep(3)));
    }

    #[test]
    fn the_current_version_needs_no_step() {
        assert!(STEPS.iter().all(|s| s.from < SCHEMA_VERSION));
        for version in (1..).take_while(|v| *v < SCHEMA_VERSION) {
            assert!(
                STEPS.iter().any(|s| s.from == version),
                "no step from {version}"
            );
        }
    }
}
