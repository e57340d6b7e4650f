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
pub const SCHEMA_VERSION: u32 = 1;

/// Turns a log of version `from` into one of version `from + 1`.
pub struct Step {
    pub from: u32,
    pub description: &'static str,
    pub apply: fn(&WriteTransaction) -> Result<(), redb::Error>,
}

/// Every step, in order. Version 1 is the first release, so there are none yet.
pub const STEPS: &[Step] = &[];

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
        source: redb::Error,
    },
}

/// Runs `steps` from `from` up to `to` inside `txn`.
pub fn run(
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
            source,
        })?;
    }
    Ok(())
}
