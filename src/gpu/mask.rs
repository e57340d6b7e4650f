//! `CUDA_VISIBLE_DEVICES`, applied as CUDA applies it.
//!
//! Unset: every GPU. Empty: none. Otherwise comma-separated, whitespace-trimmed entries, each an
//! index or a `GPU-` UUID or unique prefix of one. Parsing stops at the first invalid entry (an
//! unknown or ambiguous UUID prefix, an index out of range, a negative or non-numeric index, a
//! repeated device), keeping what came before. The survivors are renumbered 0, 1, ... in mask
//! order: those are the ordinals CUDA programs see. nvidia-smi ignores the mask; unilab applies it.

use super::GpuInfo;
use crate::event::GpuIdentity;

/// The GPUs a CUDA program would see, and the entry where parsing stopped, if it stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Visible {
    pub gpus: Vec<GpuIdentity>,
    pub stopped_at: Option<StoppedAt>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct StoppedAt {
    pub entry: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    #[error("`CUDA_VISIBLE_DEVICES` names the MIG device `{0}`; unilab manages whole GPUs only")]
    Mig(String),
}

/// Applies `mask` (the value of `CUDA_VISIBLE_DEVICES`, `None` when unset) to `gpus` as listed
/// by nvidia-smi.
pub(crate) fn visible(mask: Option<&str>, gpus: &[GpuInfo]) -> Result<Visible, MaskError> {
    let Some(mask) = mask else {
        return Ok(Visible {
            gpus: gpus
                .iter()
                .enumerate()
                .map(|(ordinal, gpu)| identity(ordinal, gpu))
                .collect(),
            stopped_at: None,
        });
    };
    let mut chosen: Vec<&GpuInfo> = Vec::new();
    let mut stopped_at = None;
    if !mask.trim().is_empty() {
        for entry in mask.split(',').map(str::trim) {
            if entry.starts_with("MIG-") {
                return Err(MaskError::Mig(entry.to_owned()));
            }
            match lookup(entry, gpus) {
                Ok(gpu) if chosen.iter().any(|c| c.uuid == gpu.uuid) => {
                    stopped_at = Some(stop(entry, "repeats a device already listed"));
                    break;
                }
                Ok(gpu) => chosen.push(gpu),
                Err(reason) => {
                    stopped_at = Some(stop(entry, &reason));
                    break;
                }
            }
        }
    }
    Ok(Visible {
        gpus: chosen
            .into_iter()
            .enumerate()
            .map(|(ordinal, gpu)| identity(ordinal, gpu))
            .collect(),
        stopped_at,
    })
}

/// Whether the mask names a GPU by index, which CUDA numbers by `CUDA_DEVICE_ORDER`.
pub(crate) fn uses_indices(mask: &str) -> bool {
    mask.split(',')
        .map(str::trim)
        .any(|entry| !entry.is_empty() && !entry.starts_with("GPU-") && !entry.starts_with("MIG-"))
}

fn identity(ordinal: usize, gpu: &GpuInfo) -> GpuIdentity {
    GpuIdentity {
        index: u32::try_from(ordinal).unwrap_or(u32::MAX),
        uuid: gpu.uuid.clone(),
    }
}

fn stop(entry: &str, reason: &str) -> StoppedAt {
    StoppedAt {
        entry: entry.to_owned(),
        reason: reason.to_owned(),
    }
}

fn lookup<'a>(entry: &str, gpus: &'a [GpuInfo]) -> Result<&'a GpuInfo, String> {
    if entry.starts_with("GPU-") {
        let matches: Vec<&GpuInfo> = gpus.iter().filter(|g| g.uuid.starts_with(entry)).collect();
        return match matches.as_slice() {
            [one] => Ok(one),
            [] => Err("matches no GPU".into()),
            _ => Err(format!("matches {} GPUs", matches.len())),
        };
    }
    match entry.parse::<i64>() {
        Ok(n) if n < 0 => Err("is a negative index".into()),
        Ok(n) => usize::try_from(n)
            .ok()
            .and_then(|n| gpus.get(n))
            .ok_or_else(|| {
                format!(
                    "is out of range ({})",
                    crate::text::count(gpus.len() as u64, "GPU")
                )
            }),
        Err(_) => Err("is neither an index nor a GPU UUID".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus() -> Vec<GpuInfo> {
        ["GPU-aaaa1111", "GPU-aaaa2222", "GPU-bbbb3333"]
            .iter()
            .enumerate()
            .map(|(i, uuid)| GpuInfo {
                index: i as u32,
                uuid: (*uuid).into(),
                name: "NVIDIA H200".into(),
            })
            .collect()
    }

    fn uuids(mask: Option<&str>) -> (Vec<String>, Option<String>) {
        let v = visible(mask, &gpus()).unwrap();
        (
            v.gpus.into_iter().map(|g| g.uuid).collect(),
            v.stopped_at.map(|s| s.entry),
        )
    }

    #[test]
    fn unset_is_all_and_empty_is_none() {
        assert_eq!(uuids(None).0.len(), 3);
        assert!(uuids(Some("")).0.is_empty());
        assert!(uuids(Some("  ")).0.is_empty());
    }

    #[test]
    fn entries_are_trimmed_and_renumbered_in_mask_order() {
        let v = visible(Some(" 2 , GPU-aaaa2"), &gpus()).unwrap();
        assert_eq!(
            v.gpus,
            [
                GpuIdentity {
                    index: 0,
                    uuid: "GPU-bbbb3333".into()
                },
                GpuIdentity {
                    index: 1,
                    uuid: "GPU-aaaa2222".into()
                },
            ]
        );
        assert_eq!(v.stopped_at, None);
    }

    #[test]
    fn parsing_stops_at_the_first_invalid_entry() {
        for (mask, kept, stop) in [
            ("0,GPU-aaaa,2", vec!["GPU-aaaa1111"], "GPU-aaaa"),
            ("1,GPU-ffff,0", vec!["GPU-aaaa2222"], "GPU-ffff"),
            ("2,7,0", vec!["GPU-bbbb3333"], "7"),
            ("0,-1,2", vec!["GPU-aaaa1111"], "-1"),
            ("0,0", vec!["GPU-aaaa1111"], "0"),
            ("1,GPU-aaaa2222", vec!["GPU-aaaa2222"], "GPU-aaaa2222"),
            ("zero,1", vec![], "zero"),
            ("0,,1", vec!["GPU-aaaa1111"], ""),
        ] {
            let (uuids, stopped) = uuids(Some(mask));
            assert_eq!(uuids, kept, "{mask}");
            assert_eq!(stopped.as_deref(), Some(stop), "{mask}");
        }
    }

    #[test]
    fn a_mask_uses_indices_unless_every_entry_is_a_uuid() {
        assert!(uses_indices("1"));
        assert!(uses_indices("GPU-aaaa, 0"));
        assert!(!uses_indices("GPU-aaaa1111,GPU-bbbb"));
        assert!(!uses_indices(""));
    }

    #[test]
    fn mig_devices_are_refused() {
        assert!(matches!(
            visible(Some("MIG-1234"), &gpus()),
            Err(MaskError::Mig(_))
        ));
    }
}
