//! The bytes of every stored form, pinned: a fixed value of each variant of [`StoredEvent`],
//! encoded as the log encodes a record, must give the bytes committed in `forms.hex` when the
//! form was added. Stored forms still hold live payload types (`SoakSampledV5(Box<Sample>)`),
//! so a change to any type a form reaches — a field added, removed, reordered or retyped, an
//! enum's variant inserted — changes old records' meaning without a word from the compiler;
//! this test names every form it changes. Which types are copied frozen into
//! `event::stored` instead, and why, is in `migrations/README.md`.
//!
//! A new form (a schema step's new variant at the end of `StoredEvent`) gets a fixed value at
//! the end of [`every_form`] and its line at the end of `forms.hex`: the test prints the line.
//! No other line's bytes ever change; the form a step supersedes is renamed (`…V11`), and its
//! line's name with it.
//!
//! The fixed values are built of parts ([`parts`], [`samples`], [`evidence`]) that reach every
//! type a stored form holds: each field given a value no other field of its form holds
//! ([`Fresh`]), every `Option` a `Some` and every list and map one entry at least (checked),
//! each enum its last variant (a variant inserted before it, or one removed, moves its index).
//! No `..Default::default()`: a field added to a type must be given a value there, and then
//! changes the bytes of every form that holds it.

mod evidence;
mod fresh;
mod parts;
mod samples;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::codec;
use crate::event::StoredEvent;
use evidence::*;
use fresh::Fresh;
use parts::*;
use samples::*;

/// The committed bytes: a line a form, `<variant> <hex>`, in the order of `StoredEvent`.
const FORMS: &str = include_str!("forms.hex");

/// One fixed value of every form, in the order of [`StoredEvent`]'s variants; each built with
/// its own [`Fresh`] values.
#[expect(
    clippy::too_many_lines,
    reason = "one fixed value a form, in the order of the enum: the whole list in one place"
)]
fn every_form() -> Vec<StoredEvent> {
    use StoredEvent as S;
    let forms: [fn(&mut Fresh) -> StoredEvent; _] = [
        |n| S::TopologyResolved {
            selector: n.text(),
            topology_mode: topology_mode(),
            gpus: vec![gpu_identity(n)],
            cuda_visible_devices: Some(n.text()),
        },
        |n| S::DaemonStartedV3 {
            record: daemon(n),
            foreground: n.bool(),
        },
        |n| S::DaemonVerifiedLive {
            process: n.identity(),
        },
        |n| S::DaemonStartFailed {
            reason: n.text(),
            process: Some(n.identity()),
        },
        |n| S::DaemonStaleCleaned {
            process: n.identity(),
            reason: stale_reason(),
        },
        |n| S::DaemonStopped {
            process: n.identity(),
            method: stop_method(),
        },
        |n| S::SoakStartedV1(Box::new(start_v1(n))),
        |n| S::SoakSampledV1(Box::new(sample_v1(n))),
        |n| S::SoakFinishedV1(Box::new(end_v1(n))),
        |n| S::SoakAbandoned {
            supervisor: n.identity(),
            reason: n.text(),
        },
        |n| S::ArtifactWritten {
            path: n.text(),
            digest: n.text(),
            bytes: n.u64(),
        },
        |n| S::SoakStartedV4(Box::new(start(n))),
        |n| S::SoakSampledV5(Box::new(sample(n))),
        |n| S::SoakFinishedV4(Box::new(end(n))),
        |n| S::DaemonStartingV3 {
            gpu: n.text(),
            pipe_directory: n.text(),
            log_directory: n.text(),
            starter: n.identity(),
        },
        |n| S::LeaseAcquired {
            holder: n.identity(),
            job: Some(n.text()),
            started: n.bool(),
        },
        |n| S::LeaseReleased {
            holder: n.identity(),
            reason: lease_end(),
        },
        |n| S::DaemonStartedV6 {
            record: daemon(n),
            foreground: n.bool(),
            job: Some(n.text()),
        },
        |n| S::DaemonStarting {
            gpu: n.text(),
            pipe_directory: n.text(),
            log_directory: n.text(),
            starter: n.identity(),
            job: Some(n.text()),
        },
        |n| S::SoakEvidenceCapturedV8(Box::new(evidence_v8(n))),
        |n| S::SoakStartedV5 {
            start: Box::new(start(n)),
            supervision: supervision_v9(n),
        },
        |n| S::SoakFinishedV5 {
            end: Box::new(end(n)),
            findings: Box::new(findings_v9(n)),
        },
        |n| S::SoakStartedV8 {
            start: Box::new(start(n)),
            supervision: supervision_v9(n),
            limits: limits(n),
        },
        |n| S::SoakSampledV9 {
            sample: Box::new(sample(n)),
            measures: Box::new(measures_v9(n)),
        },
        |n| S::SoakFinishedV9 {
            end: Box::new(end(n)),
            findings: Box::new(findings_v9(n)),
            limit: Some(resource_limit()),
        },
        |n| S::DaemonStarted {
            record: daemon(n),
            foreground: n.bool(),
            job: Some(n.text()),
            limits: daemon_limits(n),
        },
        |n| S::SoakSampledCompactV9(Box::new(compact_v9(n))),
        |n| S::SoakArchived(Box::new(archived(n))),
        |n| S::SoakStartedV9 {
            start: Box::new(start(n)),
            supervision: supervision_v9(n),
            limits: limits(n),
            job: Some(job_member_v12(n)),
        },
        |n| S::SoakEvidenceCapturedV15(Box::new(evidence_v15(n))),
        |n| S::SoakJobAlarmSeen(Box::new(alarm_seen(n))),
        |n| S::SoakStartedV10 {
            start: Box::new(start(n)),
            supervision: supervision(n),
            limits: limits(n),
            job: Some(job_member_v12(n)),
        },
        |n| S::SoakSampledV11 {
            sample: Box::new(sample(n)),
            measures: Box::new(measures(n)),
        },
        |n| S::SoakSampledCompactV11(Box::new(compact(n))),
        |n| S::SoakFinishedV14 {
            end: Box::new(end(n)),
            findings: Box::new(findings_v14(n)),
            limit: Some(resource_limit()),
        },
        |n| S::SoakStartedV12 {
            start: Box::new(start(n)),
            supervision: supervision(n),
            limits: limits(n),
            job: Some(job_member_v12(n)),
            command_lossy: n.bool(),
        },
        |n| S::SoakSampled {
            sample: Box::new(sample(n)),
            measures: Box::new(measures(n)),
            noted: Some(progress_noted(n)),
        },
        |n| S::SoakSampledCompact {
            packed: Box::new(compact(n)),
            noted: Some(progress_noted(n)),
        },
        |n| S::SoakStarted {
            start: Box::new(start(n)),
            supervision: supervision(n),
            limits: limits(n),
            job: Some(job_member(n)),
            command_lossy: n.bool(),
        },
        |n| S::SoakFinished {
            end: Box::new(end(n)),
            findings: Box::new(findings(n)),
            limit: Some(resource_limit()),
        },
        |n| S::SoakEvidenceCaptured(Box::new(evidence(n))),
    ];
    forms
        .into_iter()
        .map(|form| form(&mut Fresh::new()))
        .collect()
}

/// The variant's name, as serde tags it.
fn name(form: &StoredEvent) -> String {
    match serde_json::to_value(form) {
        Ok(Value::Object(tagged)) => tagged.keys().next().cloned().unwrap_or_default(),
        other => panic!("{other:?}"),
    }
}

/// Every variant of [`StoredEvent`] by name, in order, as its derived `Deserialize` lists them:
/// what the compiler knows of the enum, to hold [`every_form`] to.
fn variants() -> &'static [&'static str] {
    struct Variants<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Variants<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not an enum"))
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = variants;
            Err(de::Error::custom("only the names were asked for"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
            ignored_any
        }
    }

    let mut names: &'static [&'static str] = &[];
    let _ = StoredEvent::deserialize(Variants(&mut names));
    names
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where `value` holds nothing (`null`, an empty list or map): a type reached there has no
/// bytes in the form, and a change to it would go unseen.
fn empty_parts(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Null => found.push(at.to_owned()),
        Value::Array(items) if items.is_empty() => found.push(at.to_owned()),
        Value::Object(fields) if fields.is_empty() => found.push(at.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                empty_parts(item, &format!("{at}[{i}]"), found);
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields {
                empty_parts(field, &format!("{at}.{key}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn there_is_a_fixed_value_of_every_form_and_it_fills_every_part() {
    let forms = every_form();
    let names: Vec<String> = forms.iter().map(name).collect();
    assert_eq!(
        names,
        variants(),
        "one form of every variant, in their order"
    );
    let mut empty = Vec::new();
    for form in &forms {
        let json = serde_json::to_value(form).unwrap();
        empty_parts(&json, "", &mut empty);
    }
    assert!(empty.is_empty(), "parts with nothing in them: {empty:#?}");
}

#[test]
fn every_stored_form_encodes_as_the_bytes_it_was_frozen_with() {
    let frozen: Vec<(&str, &str)> = FORMS
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split_once(' ').unwrap_or((line, "")))
        .collect();
    let mut wrong = Vec::new();
    for (at, form) in every_form().iter().enumerate() {
        let line = format!("{} {}", name(form), hex(&codec::encode(form).unwrap()));
        match frozen.get(at) {
            Some((frozen_name, bytes)) if line == format!("{frozen_name} {bytes}") => {}
            Some((frozen_name, _)) if *frozen_name == name(form) => wrong.push(format!(
                "the bytes of `{frozen_name}` changed: a stored form never changes (see \
                 migrations/README.md); it now encodes as\n{line}"
            )),
            Some((frozen_name, _)) => wrong.push(format!(
                "line {} of forms.hex is `{frozen_name}`, but the form there is `{}`: forms \
                 are never reordered or removed",
                at + 1,
                name(form)
            )),
            None => wrong.push(format!("a new form: add to forms.hex\n{line}")),
        }
    }
    for (frozen_name, _) in frozen.iter().skip(variants().len()) {
        wrong.push(format!("forms.hex holds `{frozen_name}`, which is no form"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
