//! A record's own fields as `history --json` shows them: the fields of the form it is stored
//! in, so that an old record shows what it holds and nothing it does not.

use serde_json::{Map, Value};

use super::{Event, StoredEvent};

/// The event's own fields as a JSON object (without `kind`), in the stored form of `schema`.
/// The soak start, sample and verdict of schema 5 and later show schema 2's fields as they
/// were, with what the later forms add beside them (`supervision`, `limits`, `measures`,
/// `findings`, `limit`, and schema 12's sample its progress's fields).
///
/// A soak start's runtime snapshot, which the event holds as JSON text (so that the artifact
/// embeds it byte for byte), is shown as the object it is, under the artifact's name `runtime`;
/// in the forms since schema 5, its metadata values given as JSON (`--meta-json`) as the JSON
/// they are, as the artifact shows them.
pub(crate) fn fields_json(event: &Event, schema: u32) -> Map<String, Value> {
    let stored = event.clone().into_stored(schema);
    let mut fields = inner_fields(&stored);
    if let StoredEvent::SoakArchived(archived) = &stored {
        // Digests as hashes are shown everywhere else: hex, not 32 numbers.
        let hex = |digest: &[u8; 32]| {
            blake3::Hash::from_bytes(*digest)
                .to_hex()
                .to_string()
                .into()
        };
        fields.insert("records_digest".into(), hex(&archived.records_digest));
        fields.insert("gaps_digest".into(), hex(&archived.gaps_digest));
        return fields;
    }
    let lifted = match &stored {
        StoredEvent::SoakStartedV5 { .. }
        | StoredEvent::SoakStartedV8 { .. }
        | StoredEvent::SoakStartedV9 { .. }
        | StoredEvent::SoakStartedV10 { .. }
        | StoredEvent::SoakStartedV12 { .. }
        | StoredEvent::SoakStarted { .. } => "start",
        StoredEvent::SoakSampledV9 { .. }
        | StoredEvent::SoakSampledV11 { .. }
        | StoredEvent::SoakSampled { .. } => "sample",
        StoredEvent::SoakFinishedV5 { .. }
        | StoredEvent::SoakFinishedV9 { .. }
        | StoredEvent::SoakFinishedV14 { .. }
        | StoredEvent::SoakFinished { .. } => "end",
        _ => return runtime_as_object(fields),
    };
    if let Some(Value::Object(inner)) = fields.remove(lifted) {
        fields.extend(inner);
    }
    // Schema 12's sample: the progress the supervisor decided, under the design's names
    // (`progress_seen`, `last_progress_at_us`, `last_progress_ms`); nothing when it noted none.
    if let StoredEvent::SoakSampled { .. } = &stored
        && let Some(noted) = fields.remove("noted")
        && let Value::Object(inner) = noted
    {
        fields.extend(inner);
    }
    if let Some(Value::Object(metadata)) = fields.get_mut("metadata") {
        for value in metadata.values_mut() {
            if let Value::String(held) = value {
                *value = super::soak::metadata_value(held);
            }
        }
    }
    runtime_as_object(fields)
}

/// `runtime_json` (text) as `runtime` (an object). Text that is not JSON — a damaged or
/// hand-made log — stays as it was recorded under `runtime_json`, with `runtime` null: forensics
/// loses nothing.
fn runtime_as_object(mut fields: Map<String, Value>) -> Map<String, Value> {
    let Some(Value::String(text)) = fields.get("runtime_json") else {
        return fields;
    };
    match serde_json::from_str::<Value>(text) {
        Ok(runtime) => {
            fields.remove("runtime_json");
            fields.insert("runtime".into(), runtime);
        }
        Err(_) => {
            fields.insert("runtime".into(), Value::Null);
        }
    }
    fields
}

fn inner_fields(event: &StoredEvent) -> Map<String, Value> {
    // Serde's external tagging gives `{"Variant": {fields}}` for every variant with fields;
    // the inner object is what we want.
    match serde_json::to_value(event) {
        Ok(Value::Object(outer)) => outer
            .into_iter()
            .next()
            .and_then(|(_, inner)| match inner {
                Value::Object(fields) => Some(fields),
                _ => None,
            })
            .unwrap_or_default(),
        _ => Map::new(),
    }
}
