//! GPU selectors, as `mps start` and `mps doctor` take them.
//!
//! - omitted: the single visible GPU;
//! - `N`: the visible ordinal N;
//! - `GPU-<uuid>` or a unique prefix of one (at least `GPU-` and 4 hex digits);
//! - `A,B,...`: one task on several GPUs (`single_task_multi_gpu`);
//! - `each:A,B,...`: one task per GPU (`task_per_gpu`);
//! - `all`: every visible GPU.
//!
//! Everything resolves to canonical UUIDs of visible GPUs. MIG identifiers are refused.

use super::TopologyPlan;
use crate::diagnostic::Hint;
use crate::event::{GpuIdentity, TopologyMode};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Atom {
    Ordinal(u32),
    UuidPrefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selector {
    /// No selector: the sole visible GPU.
    Sole,
    One(Atom),
    Several(Vec<Atom>),
    Each(Vec<Atom>),
    All,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("`{0}` is not a GPU selector")]
    Invalid(String),
    #[error("`{0}` is a MIG device; unilab manages whole GPUs only")]
    Mig(String),
    #[error("a UUID prefix needs `GPU-` and at least 4 hex digits: `{0}`")]
    ShortPrefix(String),
    #[error("no GPU is visible{}", mask_note(.mask))]
    NoneVisible { mask: Option<String> },
    #[error("{} GPUs are visible, so a selector is needed: {}", .visible.len(), list(.visible))]
    Ambiguous { visible: Vec<GpuIdentity> },
    #[error("GPU {ordinal} is not visible; visible: {}", list(.visible))]
    NoSuchOrdinal {
        ordinal: u32,
        visible: Vec<GpuIdentity>,
    },
    #[error("no visible GPU matches `{prefix}`; visible: {}", list(.visible))]
    NoMatch {
        prefix: String,
        visible: Vec<GpuIdentity>,
    },
    #[error("`{prefix}` matches several GPUs: {}", list(.matches))]
    AmbiguousPrefix {
        prefix: String,
        matches: Vec<GpuIdentity>,
    },
    #[error("the selector names GPU `{0}` twice")]
    Repeated(String),
}

impl Hint for SelectorError {
    fn hint(&self) -> Option<String> {
        match self {
            SelectorError::Ambiguous { visible } => Some(format!(
                "pass one, e.g. `unilab mps start {}` or `unilab mps start {}`",
                visible.first().map(|g| g.index).unwrap_or(0),
                visible
                    .first()
                    .map(|g| g.uuid.as_str())
                    .unwrap_or("GPU-...")
            )),
            SelectorError::NoneVisible { .. } => {
                Some("check `CUDA_VISIBLE_DEVICES` and `unilab mps status`".into())
            }
            SelectorError::Invalid(_) | SelectorError::ShortPrefix(_) => {
                Some("selectors: `N`, `GPU-<uuid prefix>`, `A,B`, `each:A,B` or `all`".into())
            }
            // The message lists what is visible: it says what to pass instead.
            SelectorError::Mig(_)
            | SelectorError::NoSuchOrdinal { .. }
            | SelectorError::NoMatch { .. }
            | SelectorError::AmbiguousPrefix { .. }
            | SelectorError::Repeated(_) => None,
        }
    }
}

fn mask_note(mask: &Option<String>) -> String {
    match mask {
        Some(mask) => format!(" under `CUDA_VISIBLE_DEVICES={mask}`"),
        None => String::new(),
    }
}

fn list(gpus: &[GpuIdentity]) -> String {
    if gpus.is_empty() {
        return "none".into();
    }
    gpus.iter()
        .map(|g| format!("{} `{}`", g.index, g.uuid))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_atom(text: &str) -> Result<Atom, SelectorError> {
    let text = text.trim();
    if text.starts_with("MIG-") {
        return Err(SelectorError::Mig(text.to_owned()));
    }
    if let Some(rest) = text.strip_prefix("GPU-") {
        let hex = rest.chars().take(4).collect::<String>();
        if hex.len() < 4 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(SelectorError::ShortPrefix(text.to_owned()));
        }
        if !rest.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(SelectorError::Invalid(text.to_owned()));
        }
        return Ok(Atom::UuidPrefix(text.to_owned()));
    }
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return text
            .parse()
            .map(Atom::Ordinal)
            .map_err(|_| SelectorError::Invalid(text.to_owned()));
    }
    Err(SelectorError::Invalid(text.to_owned()))
}

fn parse_list(text: &str) -> Result<Vec<Atom>, SelectorError> {
    text.split(',').map(parse_atom).collect()
}

impl Selector {
    pub(crate) fn parse(text: Option<&str>) -> Result<Self, SelectorError> {
        let Some(text) = text.map(str::trim) else {
            return Ok(Selector::Sole);
        };
        if text == "all" {
            return Ok(Selector::All);
        }
        if let Some(list) = text.strip_prefix("each:") {
            return parse_list(list).map(Selector::Each);
        }
        if text.contains(',') {
            return parse_list(text).map(Selector::Several);
        }
        parse_atom(text).map(Selector::One)
    }

    /// Whether it names a GPU by ordinal, which CUDA numbers by `CUDA_DEVICE_ORDER`.
    pub(crate) fn uses_ordinals(&self) -> bool {
        let ordinal = |atoms: &[Atom]| atoms.iter().any(|a| matches!(a, Atom::Ordinal(_)));
        match self {
            Selector::One(atom) => ordinal(std::slice::from_ref(atom)),
            Selector::Several(atoms) | Selector::Each(atoms) => ordinal(atoms),
            Selector::Sole | Selector::All => false,
        }
    }

    /// Resolves against the visible GPUs. `mask` is only for messages.
    pub(crate) fn resolve(
        &self,
        text: &str,
        visible: &[GpuIdentity],
        mask: Option<&str>,
    ) -> Result<TopologyPlan, SelectorError> {
        let plan = |topology_mode, gpus| TopologyPlan {
            selector: text.to_owned(),
            topology_mode,
            gpus,
        };
        if visible.is_empty() {
            return Err(SelectorError::NoneVisible {
                mask: mask.map(str::to_owned),
            });
        }
        match self {
            Selector::Sole => match visible {
                [one] => Ok(plan(TopologyMode::SingleGpu, vec![one.clone()])),
                _ => Err(SelectorError::Ambiguous {
                    visible: visible.to_vec(),
                }),
            },
            Selector::One(atom) => Ok(plan(
                TopologyMode::SingleGpu,
                vec![resolve_atom(atom, visible)?],
            )),
            Selector::Several(atoms) => {
                let gpus = resolve_all(atoms, visible)?;
                let mode = if gpus.len() == 1 {
                    TopologyMode::SingleGpu
                } else {
                    TopologyMode::SingleTaskMultiGpu
                };
                Ok(plan(mode, gpus))
            }
            Selector::Each(atoms) => {
                Ok(plan(TopologyMode::TaskPerGpu, resolve_all(atoms, visible)?))
            }
            Selector::All => {
                let mode = if visible.len() == 1 {
                    TopologyMode::SingleGpu
                } else {
                    TopologyMode::SingleTaskMultiGpu
                };
                Ok(plan(mode, visible.to_vec()))
            }
        }
    }
}

fn resolve_all(atoms: &[Atom], visible: &[GpuIdentity]) -> Result<Vec<GpuIdentity>, SelectorError> {
    let mut gpus: Vec<GpuIdentity> = Vec::new();
    for atom in atoms {
        let gpu = resolve_atom(atom, visible)?;
        if gpus.iter().any(|g| g.uuid == gpu.uuid) {
            return Err(SelectorError::Repeated(gpu.uuid));
        }
        gpus.push(gpu);
    }
    Ok(gpus)
}

fn resolve_atom(atom: &Atom, visible: &[GpuIdentity]) -> Result<GpuIdentity, SelectorError> {
    match atom {
        Atom::Ordinal(n) => visible
            .iter()
            .find(|g| g.index == *n)
            .cloned()
            .ok_or_else(|| SelectorError::NoSuchOrdinal {
                ordinal: *n,
                visible: visible.to_vec(),
            }),
        Atom::UuidPrefix(prefix) => {
            let matches: Vec<GpuIdentity> = visible
                .iter()
                .filter(|g| g.uuid.starts_with(prefix.as_str()))
                .cloned()
                .collect();
            match matches.as_slice() {
                [one] => Ok(one.clone()),
                [] => Err(SelectorError::NoMatch {
                    prefix: prefix.clone(),
                    visible: visible.to_vec(),
                }),
                _ => Err(SelectorError::AmbiguousPrefix {
                    prefix: prefix.clone(),
                    matches,
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visible(n: u32) -> Vec<GpuIdentity> {
        (0..n)
            .map(|i| GpuIdentity {
                index: i,
                uuid: format!("GPU-{i}{i}{i}{i}aaaa-0000"),
            })
            .collect()
    }

    fn resolve(text: Option<&str>, n: u32) -> Result<TopologyPlan, SelectorError> {
        Selector::parse(text)?.resolve(text.unwrap_or(""), &visible(n), None)
    }

    #[test]
    fn every_form_resolves_to_uuids_and_a_mode() {
        let plan = resolve(None, 1).unwrap();
        assert_eq!(plan.topology_mode, TopologyMode::SingleGpu);
        assert_eq!(plan.gpus[0].uuid, "GPU-0000aaaa-0000");
        assert_eq!(
            resolve(Some("1"), 3).unwrap().gpus[0].uuid,
            "GPU-1111aaaa-0000"
        );
        assert_eq!(resolve(Some("GPU-2222"), 3).unwrap().gpus[0].index, 2);
        let several = resolve(Some("0,2"), 3).unwrap();
        assert_eq!(several.topology_mode, TopologyMode::SingleTaskMultiGpu);
        assert_eq!(several.gpus.len(), 2);
        let each = resolve(Some("each:2,GPU-0000"), 3).unwrap();
        assert_eq!(each.topology_mode, TopologyMode::TaskPerGpu);
        assert_eq!(each.gpus[1].index, 0);
        assert_eq!(
            resolve(Some("all"), 1).unwrap().topology_mode,
            TopologyMode::SingleGpu
        );
        assert_eq!(
            resolve(Some("all"), 2).unwrap().topology_mode,
            TopologyMode::SingleTaskMultiGpu
        );
    }

    #[test]
    fn only_ordinals_depend_on_the_device_order() {
        for (text, ordinals) in [
            (None, false),
            (Some("all"), false),
            (Some("GPU-1111"), false),
            (Some("each:GPU-1111,GPU-2222"), false),
            (Some("1"), true),
            (Some("GPU-1111,0"), true),
            (Some("each:0,1"), true),
        ] {
            assert_eq!(
                Selector::parse(text).unwrap().uses_ordinals(),
                ordinals,
                "{text:?}"
            );
        }
    }

    #[test]
    fn refusals_are_specific() {
        assert!(matches!(
            resolve(None, 2),
            Err(SelectorError::Ambiguous { .. })
        ));
        assert!(matches!(
            resolve(None, 0),
            Err(SelectorError::NoneVisible { .. })
        ));
        assert!(matches!(
            resolve(Some("3"), 2),
            Err(SelectorError::NoSuchOrdinal { ordinal: 3, .. })
        ));
        assert!(matches!(
            resolve(Some("GPU-9999"), 2),
            Err(SelectorError::NoMatch { .. })
        ));
        assert!(matches!(
            resolve(Some("GPU-12"), 2),
            Err(SelectorError::ShortPrefix(_))
        ));
        assert!(matches!(
            resolve(Some("MIG-GPU-0000"), 2),
            Err(SelectorError::Mig(_))
        ));
        assert!(matches!(
            resolve(Some("0,0"), 2),
            Err(SelectorError::Repeated(_))
        ));
        assert!(matches!(
            resolve(Some("-1"), 2),
            Err(SelectorError::Invalid(_))
        ));
        assert!(matches!(
            resolve(Some("gpu0"), 2),
            Err(SelectorError::Invalid(_))
        ));
        let same_prefix = vec![
            GpuIdentity {
                index: 0,
                uuid: "GPU-abcd0000".into(),
            },
            GpuIdentity {
                index: 1,
                uuid: "GPU-abcd1111".into(),
            },
        ];
        let err = Selector::parse(Some("GPU-abcd"))
            .unwrap()
            .resolve("GPU-abcd", &same_prefix, None)
            .unwrap_err();
        assert!(matches!(err, SelectorError::AmbiguousPrefix { .. }));
        assert!(err.to_string().contains("GPU-abcd1111"));
    }
}
