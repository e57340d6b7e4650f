//! The fields of the GPU stream's rows: the base fields every driver knows, then the health
//! fields each under every name drivers have given it; and how a row's values read.

use super::super::smi::parse_value;
use crate::event::soak::GpuHealth;

/// The fields of the GPU stream that every driver knows: the first of its rows, in this order.
pub(super) const BASE_FIELDS: [&str; 5] = [
    "index",
    "uuid",
    "memory.used",
    "memory.total",
    "utilization.gpu",
];
/// A health figure of the GPU stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Health {
    Temperature,
    Power,
    SmClock,
    ThrottleMask,
    EccUncorrected,
    RetiredPending,
}

/// The health fields asked for after the base ones, each under every name drivers have given
/// it, newest first: a driver that refuses one name is asked the next.
pub(super) const HEALTH_FIELDS: [(Health, &[&str]); 6] = [
    (Health::Temperature, &["temperature.gpu"]),
    (Health::Power, &["power.draw"]),
    (Health::SmClock, &["clocks.sm"]),
    (
        Health::ThrottleMask,
        &[
            "clocks_event_reasons.active",
            "clocks_throttle_reasons.active",
        ],
    ),
    (
        Health::EccUncorrected,
        &["ecc.errors.uncorrected.volatile.total"],
    ),
    (Health::RetiredPending, &["retired_pages.pending"]),
];

/// The fields of the GPU stream's rows: [`BASE_FIELDS`], then each health field the driver
/// accepted, under the name it accepted. The default is the base fields alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fields {
    pub health: Vec<(Health, &'static str)>,
}

impl Fields {
    /// Every health field under its newest name: what a probe asks first.
    pub(super) fn all() -> Self {
        Self {
            health: HEALTH_FIELDS
                .iter()
                .filter_map(|(health, names)| Some((*health, *names.first()?)))
                .collect(),
        }
    }

    /// The `--query-gpu=` argument that asks for these fields.
    pub(super) fn query(&self) -> String {
        let names: Vec<&str> = BASE_FIELDS
            .iter()
            .copied()
            .chain(self.health.iter().map(|(_, name)| *name))
            .collect();
        format!("--query-gpu={}", names.join(","))
    }

    /// How many fields a row of these has.
    pub(super) fn count(&self) -> usize {
        BASE_FIELDS.len() + self.health.len()
    }

    /// These fields once the driver refused `refused`: its next older name in its place, or
    /// without it when it has none. `None` when `refused` is no health field asked for (a base
    /// field, or one never asked): no list of these fields can do without it.
    pub(super) fn without(&self, refused: &str) -> Option<Self> {
        let at = self.health.iter().position(|(_, name)| *name == refused)?;
        let health = self.health[at].0;
        let (_, names) = HEALTH_FIELDS.iter().find(|(h, _)| *h == health)?;
        let mut fields = self.clone();
        match names.iter().skip_while(|name| **name != refused).nth(1) {
            Some(older) => fields.health[at].1 = older,
            None => {
                fields.health.remove(at);
            }
        }
        Some(fields)
    }

    /// The health figures of a row's values after its base fields, one a field.
    pub(super) fn read(&self, values: &[&str]) -> GpuHealth {
        let mut health = GpuHealth::default();
        for ((field, _), value) in self.health.iter().zip(values) {
            match field {
                Health::Temperature => health.temperature_c = parse_value(value),
                Health::Power => health.power_mw = milliwatts(value),
                Health::SmClock => health.sm_clock_mhz = parse_value(value),
                Health::ThrottleMask => health.throttle_mask = hex_mask(value),
                Health::EccUncorrected => health.ecc_uncorrected_volatile = parse_value(value),
                Health::RetiredPending => health.retired_pages_pending = yes_no(value),
            }
        }
        health
    }
}

/// Watts as nvidia-smi prints them (`120.50`) in milliwatts; `None` for `[N/A]` and the like.
fn milliwatts(field: &str) -> Option<u64> {
    let watts: f64 = field.trim().parse().ok()?;
    // No GPU draws a gigawatt: a figure past that is not one to record.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked finite, not negative and far below u64::MAX"
    )]
    (watts.is_finite() && (0.0..1e9).contains(&watts)).then(|| (watts * 1000.0).round() as u64)
}

/// A bit mask as nvidia-smi prints it (`0x0000000000000004`); `None` for `[N/A]` and the like.
fn hex_mask(field: &str) -> Option<u64> {
    let field = field.trim();
    let digits = field
        .strip_prefix("0x")
        .or_else(|| field.strip_prefix("0X"))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// `Yes` or `No`; `None` for `[N/A]` and the like.
fn yes_no(field: &str) -> Option<bool> {
    match field.trim() {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

/// The field nvidia-smi names where it says `Field "x" is not a valid field to query.`
pub(super) fn refused_field(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        line.trim()
            .strip_prefix("Field \"")?
            .strip_suffix("\" is not a valid field to query.")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_figures_parse_and_what_is_unavailable_is_none() {
        let all = Fields::all();
        let health = all.read(&["45", "120.50", "1980", "0x0000000000000044", "3", "Yes"]);
        assert_eq!(
            health,
            GpuHealth {
                temperature_c: Some(45),
                power_mw: Some(120_500),
                sm_clock_mhz: Some(1980),
                throttle_mask: Some(0x44),
                ecc_uncorrected_volatile: Some(3),
                retired_pages_pending: Some(true),
                other_processes: Vec::new(),
            }
        );
        let unknown = [
            "[N/A]",
            "[Not Supported]",
            "[Unknown Error]",
            "[N/A]",
            "[N/A]",
            "[N/A]",
        ];
        assert_eq!(all.read(&unknown), GpuHealth::default());
        assert_eq!(milliwatts("312.07"), Some(312_070));
        assert_eq!(milliwatts("0.00"), Some(0));
        for bad in ["-1.00", "NaN", "inf", "1e30", ""] {
            assert_eq!(milliwatts(bad), None, "{bad}");
        }
        assert_eq!(hex_mask("0x0000000000000000"), Some(0));
        assert_eq!(hex_mask("0xFFFFFFFFFFFFFFFF"), Some(u64::MAX));
        for bad in ["4", "0x", "0x+4", "0x10000000000000000", "[N/A]"] {
            assert_eq!(hex_mask(bad), None, "{bad}");
        }
        assert_eq!(yes_no("No"), Some(false));
        assert_eq!(yes_no("[N/A]"), None);
    }

    #[test]
    fn a_refusal_names_its_field() {
        assert_eq!(
            refused_field(
                "Field \"clocks_event_reasons.active\" is not a valid field to query.\n\n"
            ),
            Some("clocks_event_reasons.active")
        );
        assert_eq!(refused_field("No devices were found"), None);
    }
}
