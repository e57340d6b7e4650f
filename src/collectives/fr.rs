//! A flight recorder's dump, as [`Value`]s, turned into its process groups: the counters
//! of `pg_status`, the ranks of `pg_config`, the pending `entries`.
//!
//! Torch writes the counters as strings in JSON and as integers in a pickle; Gloo keys its
//! `pg_config` `''` while its entries name the group `"0"` (torch's own `fr_trace` fails
//! there with `KeyError: ('0', 0)`); dumps before `pg_status` existed, and the oldest that
//! are a bare list of entries, give no counters, which are then taken from the entries.

use std::collections::BTreeMap;

use super::value::Value;
use super::{Dump, DumpError, Frame, Group, MAX_TOP_FRAMES, Pending};

/// One entry as read: its group and the fields kept.
struct Entry {
    pg_id: String,
    name: Option<String>,
    desc: Option<String>,
    seq: Option<i64>,
    p2p: bool,
    pending: Pending,
}

pub(super) fn groups(root: &Value) -> Result<Dump, DumpError> {
    let (version, config, status, entries) = match root {
        Value::Dict(_) => (
            root.get("version")
                .and_then(Value::as_str)
                .map(str::to_owned),
            root.get("pg_config"),
            root.get("pg_status"),
            // JSON leaves `entries` out when there are none.
            root.get("entries").and_then(Value::as_list).unwrap_or(&[]),
        ),
        Value::List(items) => (None, None, None, items.as_slice()),
        _ => {
            return Err(DumpError::NotFlightRecorder(
                "neither a dict nor a list of entries".to_owned(),
            ));
        }
    };
    if matches!(root, Value::Dict(_))
        && status.is_none()
        && config.is_none()
        && root.get("entries").is_none()
    {
        return Err(DumpError::NotFlightRecorder(
            "no `pg_status`, `pg_config` or `entries`".to_owned(),
        ));
    }
    let entries: Vec<Entry> = entries.iter().filter_map(entry).collect();

    let mut by_id: BTreeMap<String, Group> = BTreeMap::new();
    if let Some(Value::Dict(items)) = status {
        for (key, counters) in items {
            let Some(id) = key.key_text() else { continue };
            let group = by_id.entry(id.clone()).or_insert_with(|| empty(id));
            group.last_enqueued = counters
                .get("last_enqueued_collective")
                .and_then(Value::as_int);
            group.last_started = counters
                .get("last_started_collective")
                .and_then(Value::as_int);
            group.last_completed = counters
                .get("last_completed_collective")
                .and_then(Value::as_int);
        }
    }
    for e in &entries {
        let group = by_id
            .entry(e.pg_id.clone())
            .or_insert_with(|| empty(e.pg_id.clone()));
        if group.name.is_none() {
            group.name.clone_from(&e.name);
            group.desc.clone_from(&e.desc);
        }
    }
    let config = config.map(configs).unwrap_or_default();
    for group in by_id.values_mut() {
        fill_from_entries(group, &entries);
        if let Some(c) = config_of(&config, group) {
            group.ranks.clone_from(&c.ranks);
            if group.desc.is_none() {
                group.desc.clone_from(&c.desc);
            }
        }
    }
    Ok(Dump {
        version,
        groups: by_id.into_values().collect(),
    })
}

fn empty(group: String) -> Group {
    Group {
        group,
        name: None,
        desc: None,
        ranks: Vec::new(),
        last_enqueued: None,
        last_started: None,
        last_completed: None,
        pending: Vec::new(),
    }
}

/// Counters a dump did not give are taken from its entries; the pending entries are the
/// collectives past the last completed one that never completed. (Gloo may leave a
/// completed entry `scheduled`; its sequence number, at or below the last completed, says
/// it is done. A timed-out NCCL entry is retired but not completed: it stays pending.)
fn fill_from_entries(group: &mut Group, entries: &[Entry]) {
    let mine = || {
        entries
            .iter()
            .filter(|e| e.pg_id == group.group && !e.p2p)
            .filter_map(|e| e.seq.map(|s| (s, e)))
    };
    let max_where = |f: &dyn Fn(&str) -> bool| {
        mine()
            .filter(|(_, e)| f(&e.pending.state))
            .map(|(s, _)| s)
            .max()
    };
    if group.last_enqueued.is_none() {
        group.last_enqueued = max_where(&|_| true);
    }
    if group.last_started.is_none() {
        group.last_started = max_where(&|s| s == "started" || s == "completed");
    }
    if group.last_completed.is_none() {
        group.last_completed = max_where(&|s| s == "completed");
    }
    let done = group.last_completed.unwrap_or(i64::MIN);
    group.pending = mine()
        .filter(|(s, e)| *s > done && e.pending.state != "completed")
        .map(|(_, e)| e.pending.clone())
        .collect();
}

/// One `pg_config` item: its key, its `name`, `desc` and ranks.
#[derive(Default)]
struct Config {
    key: String,
    name: Option<String>,
    desc: Option<String>,
    ranks: Vec<u64>,
}

fn configs(v: &Value) -> Vec<Config> {
    let Value::Dict(items) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|(k, c)| {
            Some(Config {
                key: k.key_text()?,
                name: c.get("name").and_then(Value::key_text),
                desc: c.get("desc").and_then(Value::key_text),
                ranks: c.get("ranks").map(ranks).unwrap_or_default(),
            })
        })
        .collect()
}

/// The config of a group: by its name (key or `name`), else by its description (Gloo keys
/// the default group `''`), else the only one there is.
fn config_of<'a>(config: &'a [Config], group: &Group) -> Option<&'a Config> {
    let named = |c: &&Config| {
        group
            .name
            .as_deref()
            .is_some_and(|n| c.key == n || c.name.as_deref() == Some(n))
    };
    let described = |c: &&Config| group.desc.is_some() && c.desc == group.desc;
    config
        .iter()
        .find(named)
        .or_else(|| config.iter().find(described))
        .or_else(|| (config.len() == 1).then(|| &config[0]))
}

/// `"[0, 1, 2, 3]"` (torch's `ranks_str`) or a list of integers.
fn ranks(v: &Value) -> Vec<u64> {
    match v {
        Value::Str(s) => s
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .filter_map(|r| r.trim().parse().ok())
            .collect(),
        Value::List(items) => items
            .iter()
            .filter_map(Value::as_int)
            .filter_map(|i| u64::try_from(i).ok())
            .collect(),
        _ => Vec::new(),
    }
}

fn entry(v: &Value) -> Option<Entry> {
    let pg_id = v.get("pg_id").and_then(Value::key_text)?;
    let (name, desc) = match v.get("process_group") {
        Some(Value::List(p)) => (
            p.first().and_then(Value::key_text),
            p.get(1).and_then(Value::key_text),
        ),
        Some(other) => (other.key_text(), None),
        None => (None, None),
    };
    let state = match v.get("state").and_then(Value::as_str) {
        Some(s) => s.to_owned(),
        // Before `state`, a completion time said it.
        None if v
            .get("time_discovered_completed_ns")
            .and_then(Value::as_int)
            .is_some_and(|t| t > 0) =>
        {
            "completed".to_owned()
        }
        None => "scheduled".to_owned(),
    };
    let seq = v.get("collective_seq_id").and_then(Value::as_int);
    Some(Entry {
        pg_id,
        name,
        desc,
        seq,
        p2p: matches!(v.get("is_p2p"), Some(Value::Bool(true))),
        pending: Pending {
            seq: seq.unwrap_or(-1),
            op: v
                .get("profiling_name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            input_sizes: sizes(v.get("input_sizes")),
            input_dtypes: strings(v.get("input_dtypes")),
            output_sizes: sizes(v.get("output_sizes")),
            state,
            top_frames: frames(v.get("frames")),
            enqueued_at_us: v
                .get("time_created_ns")
                .and_then(Value::as_int)
                .filter(|t| *t > 0)
                .map(|t| t / 1000),
            numel_in: None,
            numel_out: None,
        },
    })
}

fn sizes(v: Option<&Value>) -> Vec<Vec<i64>> {
    v.and_then(Value::as_list)
        .unwrap_or(&[])
        .iter()
        .map(|t| {
            t.as_list()
                .unwrap_or(&[])
                .iter()
                .filter_map(Value::as_int)
                .collect()
        })
        .collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_list)
        .unwrap_or(&[])
        .iter()
        .filter_map(Value::key_text)
        .collect()
}

fn frames(v: Option<&Value>) -> Vec<Frame> {
    v.and_then(Value::as_list)
        .unwrap_or(&[])
        .iter()
        .take(MAX_TOP_FRAMES)
        .map(|f| Frame {
            name: f.get("name").and_then(Value::key_text).unwrap_or_default(),
            file: f
                .get("filename")
                .and_then(Value::key_text)
                .unwrap_or_default(),
            line: f.get("line").and_then(Value::as_int).unwrap_or(0),
        })
        .collect()
}
