//! `unilab mps plan`: what a selector names under the mask, and whether a daemon can start.

use super::to_json;
use crate::diagnostic::Exit;
use crate::error::Error;
use crate::event::GpuIdentity;
use crate::mps::{Mps, plan};
use crate::output::Output;

pub(super) fn plan(mps: &Mps, selector: Option<&str>, out: &mut Output) -> Result<Exit, Error> {
    let topology = plan::topology(mps)?;
    let report = plan::report(mps, &topology, selector)?;
    if out.json {
        out.json_line(&to_json(&report)?)?;
        return Ok(Exit::Success);
    }
    let mask = match &report.cuda_visible_devices {
        Some(mask) => format!("CUDA_VISIBLE_DEVICES=`{mask}`"),
        None => "CUDA_VISIBLE_DEVICES unset".to_owned(),
    };
    let shown = selector
        .map(|s| format!("`{s}`"))
        .unwrap_or("(none)".into());
    out.line(&format!("selector: {shown} under {mask}"))?;
    if let Some(stop) = &report.mask_stopped_at {
        out.line(&format!(
            "mask: CUDA stops reading it at `{}`, which {}",
            stop.entry, stop.reason
        ))?;
    }
    let gpu_line = |g: &GpuIdentity| format!("  {}  {}", g.index, g.uuid);
    match report.topology_mode {
        Some(mode) => {
            out.line(&format!("mode: {mode}"))?;
            out.line("gpus:")?;
            for gpu in &report.gpus {
                out.line(&gpu_line(gpu))?;
            }
        }
        None => {
            out.line("mode: none until a selector names the GPUs; one daemon per GPU:")?;
            for choice in &report.choices {
                for gpu in &choice.gpus {
                    out.line(&format!(
                        "{}   `unilab mps start {}`",
                        gpu_line(gpu),
                        choice.selector
                    ))?;
                }
            }
        }
    }
    match &report.cannot_start {
        None => out.line("start: yes, one daemon for this GPU")?,
        Some(why) => out.line(&format!("start: no: {why}"))?,
    }
    Ok(Exit::Success)
}
