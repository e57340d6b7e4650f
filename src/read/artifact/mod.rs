//! The soak artifact: canonical JSON rendered from the soak's events alone, so that
//! `soak export` regenerates the bytes written when the soak ended.
//!
//! Canonical: keys in a fixed order (serde_json's sorted maps), numbers as serde_json prints
//! them, two-space indentation, a final newline. `digest` is blake3 over the rendering of the
//! same object without `digest`. Per-sample rows carry the tree's totals; every process of every
//! sample stays in the log (`unilab history --soak ID --json`).
//!
//! A soak's events are folded into one upcast [`Soak`](super::fold::Soak), which keeps the
//! schema its start was recorded in: a soak recorded in schema 6's forms or later renders the
//! artifact this unilab writes, `unilab.soak.artifact/4` ([`current`], its rows in
//! [`rows`](super::rows)); an older one renders the artifact its own version wrote, frozen
//! ([`frozen`]: `/1`, `/2`, `/3`). Every reader of the rows — the CSV, the report, `soak show` —
//! reads them as today's typed rows, whatever the artifact.

pub(in crate::read) mod current;
pub(in crate::read) mod frozen;

use serde_json::Value;

use super::fold::{Form, SoakRecords};
pub(in crate::read) use super::seconds;

pub(super) fn canonical(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The name of the artifact of a soak recorded in `form`s (`unilab.soak.artifact/4`), as the
/// artifact's `schema` and the report's footer say it.
pub(crate) fn schema(form: Form) -> &'static str {
    match form {
        Form::Current => current::SCHEMA,
        Form::First | Form::Second | Form::Third => frozen::schema(form),
    }
}

/// The artifact as a JSON object, without `digest`.
pub(crate) fn view(records: &SoakRecords) -> Value {
    if frozen::renders(&records.soak) {
        frozen::body(records)
    } else {
        current::body(records)
    }
}

/// The digest of an artifact whose [`view`] is `view`: blake3 of its canonical rendering.
pub(crate) fn digest(view: &Value) -> String {
    blake3::hash(&canonical(view)).to_hex().to_string()
}

/// The artifact's bytes and its digest.
pub fn render(records: &SoakRecords) -> (Vec<u8>, String) {
    let mut value = view(records);
    let digest = digest(&value);
    if let Value::Object(object) = &mut value {
        object.insert("digest".into(), digest.clone().into());
    }
    (canonical(&value), digest)
}

/// Checks an artifact's digest: blake3 of its rendering without `digest`.
pub fn digest_matches(bytes: &[u8]) -> bool {
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    let Some(Value::String(digest)) = object.remove("digest") else {
        return false;
    };
    self::digest(&Value::Object(object)) == digest
}
