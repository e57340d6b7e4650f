//! `unilab mps env`: the environment that points a client at a live daemon, as shell exports.

use super::target;
use crate::cli::mps::TargetArgs;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::mps::{Mps, records};
use crate::output::Output;

/// Quotes a value for a POSIX shell.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

pub(super) fn env(mps: &Mps, target_args: &TargetArgs, out: &mut Output) -> Result<Exit, Error> {
    let record = target(mps, target_args, out)?;
    let env = records::environment(&record);
    if out.json {
        let object: serde_json::Map<String, serde_json::Value> = env
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        out.json_line(&serde_json::Value::Object(object))?;
    } else {
        for (key, value) in env {
            out.line(&format!("export {key}={}", shell_quote(&value)))?;
        }
    }
    Ok(Exit::Success)
}
