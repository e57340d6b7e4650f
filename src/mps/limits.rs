//! The limits MPS users set on a shared GPU: the share of SMs a client may use (active thread
//! percentage) and the device memory a client process may pin. On the daemon (`mps start`) they
//! are the defaults of its servers, set over the control socket and read back; on a client
//! (`mps exec`) they are its `CUDA_MPS_*` variables.
//!
//! MPS takes memory limits as an integer with `M` or `G`, per device as the client numbers
//! devices. A daemon unilab starts serves one GPU, which its clients see as device 0.

use std::path::Path;

use super::control;
use crate::event::DaemonLimits;
use crate::tool::Tool;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// An active thread percentage as the flags take it: above 0, at most 100.
pub(crate) fn parse_percentage(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!(
            "`{text}` is not a percentage above 0 and at most 100"
        )),
    }
}

/// A pinned memory limit as the flags take it: a size (`512MiB`, `40GiB`) of whole MiB, as MPS
/// counts it, above 0.
pub(crate) fn parse_pinned_limit(text: &str) -> Result<u64, String> {
    let bytes = crate::size::parse_size(text).map_err(|e| e.to_string())?;
    if bytes == 0 || !bytes.is_multiple_of(MIB) {
        return Err(format!(
            "`{text}` is not a whole number of MiB above 0, as MPS takes it (e.g. `512MiB`, `40GiB`)"
        ));
    }
    Ok(bytes)
}

/// A size as MPS writes it: `40G`, or `512M` when it is not whole GiB.
pub(crate) fn mps_size(bytes: u64) -> String {
    if bytes.is_multiple_of(GIB) {
        format!("{}G", bytes / GIB)
    } else {
        format!("{}M", bytes / MIB)
    }
}

/// A size as MPS writes it back (`40G`, `512M`, `0` for none), in bytes.
fn parse_mps_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = match text.chars().last()? {
        'G' | 'g' => (&text[..text.len() - 1], GIB),
        'M' | 'm' => (&text[..text.len() - 1], MIB),
        _ => (text, 1),
    };
    number.trim().parse::<u64>().ok()?.checked_mul(scale)
}

/// The variables that hold one client to `limits` (`mps exec`).
pub(crate) fn client_environment(limits: &DaemonLimits) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if let Some(p) = limits.active_thread_percentage {
        env.push((
            crate::env::EnvVars::CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
            format!("{p}"),
        ));
    }
    if let Some(bytes) = limits.pinned_memory_limit {
        env.push((
            crate::env::EnvVars::CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
            format!("0={}", mps_size(bytes)),
        ));
    }
    env
}

/// Sets `limits` as the daemon's defaults and reads each back; why not, when a value read back
/// is not the one asked for or the daemon did not answer.
pub(crate) fn apply(
    control: &Tool,
    pipe_directory: &Path,
    log_directory: &Path,
    limits: &DaemonLimits,
) -> Result<(), String> {
    let ask = |line: &str| match control::send(control, pipe_directory, log_directory, line) {
        Ok(Some(reply)) => Ok(reply.trim().to_owned()),
        Ok(None) => Err(format!("it did not answer `{line}`")),
        Err(e) => Err(format!("`{line}`: {e}")),
    };
    if let Some(asked) = limits.active_thread_percentage {
        ask(&format!("set_default_active_thread_percentage {asked}"))?;
        let read = ask("get_default_active_thread_percentage")?;
        if !read
            .parse::<f64>()
            .is_ok_and(|got| (got - asked).abs() < 0.05)
        {
            return Err(format!(
                "the active thread percentage read back is `{read}`, not the {asked} asked for"
            ));
        }
    }
    if let Some(asked) = limits.pinned_memory_limit {
        ask(&format!(
            "set_default_device_pinned_mem_limit 0 {}",
            mps_size(asked)
        ))?;
        let read = ask("get_default_device_pinned_mem_limit 0")?;
        if parse_mps_size(&read) != Some(asked) {
            return Err(format!(
                "the pinned memory limit read back is `{read}`, not the {} asked for",
                mps_size(asked)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_and_written_as_mps_takes_them() {
        assert_eq!(parse_percentage("25").unwrap(), 25.0);
        for bad in ["0", "101", "-5", "x", "NaN"] {
            assert!(parse_percentage(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_pinned_limit("2GiB").unwrap(), 2 * GIB);
        assert_eq!(parse_pinned_limit("512MiB").unwrap(), 512 * MIB);
        for bad in ["0", "1000", "1.5MiB", "lots"] {
            assert!(parse_pinned_limit(bad).is_err(), "{bad}");
        }
        assert_eq!(mps_size(2 * GIB), "2G");
        assert_eq!(mps_size(1536 * MIB), "1536M");
        assert_eq!(parse_mps_size("2G"), Some(2 * GIB));
        assert_eq!(parse_mps_size("1536M"), Some(1536 * MIB));
        assert_eq!(parse_mps_size("0"), Some(0));
        assert_eq!(parse_mps_size("garbled"), None);
        let env = client_environment(&DaemonLimits {
            active_thread_percentage: Some(25.0),
            pinned_memory_limit: Some(GIB),
        });
        assert_eq!(
            env,
            [
                ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25".to_owned()),
                ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G".to_owned())
            ]
        );
    }
}
