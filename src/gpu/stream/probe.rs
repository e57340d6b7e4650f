//! The probe: which fields the driver knows, settled before the GPU stream starts by one-shot
//! queries (not a loop, under the tool timeout), each refused field asked again under its older
//! name or dropped, a bounded number of times.

use std::io::Read;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::super::smi::FORMAT;
use super::child::{StreamLaunch, stopped};
use super::fields::{Fields, HEALTH_FIELDS, refused_field};
use crate::tool::kill_group;
use crate::trace::{STEPS, detail};

/// The most a probe's answer may hold: a row for each of the most GPUs, with room to spare. A
/// probe that prints more failed.
const MAX_ANSWER: u64 = 1 << 20;
/// How often a probe under way looks whether it has its answer, or the stream was dropped.
const PROBE_TICK: Duration = Duration::from_millis(5);

/// What nvidia-smi said to one probe of a list of fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ProbeAnswer {
    /// It answered (exit 0): it knows every field asked.
    Known,
    /// It refused the field named.
    Refused(String),
    /// It failed otherwise; with the fault to record where it did not answer in time.
    Failed(Option<String>),
    /// The stream was dropped meanwhile.
    Stopped,
}

/// What probing settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probed {
    /// The fields the driver knows.
    Fields(Fields),
    /// None could be settled; with the fault to record, if any.
    Failed(Option<String>),
    /// The stream was dropped meanwhile.
    Stopped,
}

/// Asks `ask` about every field, then again after each refusal without the field refused (or
/// with its older name), until it answers; each refusal takes a name away, so it asks at most
/// once a name and once more.
pub(super) fn probe(mut ask: impl FnMut(&Fields) -> ProbeAnswer) -> Probed {
    let names: usize = HEALTH_FIELDS.iter().map(|(_, names)| names.len()).sum();
    let mut fields = Fields::all();
    for _ in 0..=names {
        match ask(&fields) {
            ProbeAnswer::Known => return Probed::Fields(fields),
            ProbeAnswer::Refused(field) => match fields.without(&field) {
                Some(fewer) => fields = fewer,
                None => return Probed::Failed(None),
            },
            ProbeAnswer::Failed(fault) => return Probed::Failed(fault),
            ProbeAnswer::Stopped => return Probed::Stopped,
        }
    }
    Probed::Failed(None)
}

/// One probe: `fields` asked once, not in a loop, under the tool's timeout, started as the
/// streams are (leashed); given up as soon as the stream is dropped.
fn ask(launch: &StreamLaunch, fields: &Fields, stop: &Receiver<()>) -> ProbeAnswer {
    let query = fields.query();
    let Ok((mut child, _leash)) = launch.spawn(&[&query, FORMAT]) else {
        return ProbeAnswer::Failed(None);
    };
    let Some(stdout) = child.stdout.take() else {
        kill_group(&mut child);
        return ProbeAnswer::Failed(None);
    };
    let (sender, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = Read::take(stdout, MAX_ANSWER + 1).read_to_end(&mut text);
        let _ = sender.send(text);
    });
    let timeout = launch.smi.timeout;
    let deadline = Instant::now() + timeout;
    let mut text: Option<Vec<u8>> = None;
    let answer = loop {
        if text.is_none() {
            text = answered.try_recv().ok();
        }
        match (&text, child.try_wait()) {
            (Some(text), _) if text.len() as u64 > MAX_ANSWER => break ProbeAnswer::Failed(None),
            (Some(text), Ok(Some(status))) => {
                if status.success() {
                    return ProbeAnswer::Known;
                }
                return refused_field(&String::from_utf8_lossy(text))
                    .map_or(ProbeAnswer::Failed(None), |field| {
                        ProbeAnswer::Refused(field.to_owned())
                    });
            }
            (_, Err(_)) => break ProbeAnswer::Failed(None),
            _ => {}
        }
        if Instant::now() >= deadline {
            break ProbeAnswer::Failed(Some(format!(
                "nvidia-smi did not answer within {:.1} s",
                timeout.as_secs_f64()
            )));
        }
        if stopped(stop, PROBE_TICK) {
            break ProbeAnswer::Stopped;
        }
    };
    kill_group(&mut child);
    answer
}

/// Settles the GPU stream's fields with `nvidia-smi` (see [`probe`]) and says so in the trace.
pub(super) fn settle_fields(launch: &StreamLaunch, stop: &Receiver<()>) -> Probed {
    let probed = probe(|fields| {
        let answer = ask(launch, fields, stop);
        if let ProbeAnswer::Refused(field) = &answer {
            detail!(
                STEPS,
                "nvidia-smi does not know `{field}`: asked without it"
            );
        }
        answer
    });
    match &probed {
        Probed::Fields(fields) => detail!(STEPS, "the GPU stream asks `{}`", fields.query()),
        Probed::Failed(fault) => detail!(
            STEPS,
            "no fields settled ({}): the GPU stream asks `{}`",
            fault.as_deref().unwrap_or("nvidia-smi failed"),
            Fields::default().query()
        ),
        Probed::Stopped => {}
    }
    probed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::soak::GpuHealth;
    use crate::gpu::stream::fields::BASE_FIELDS;

    /// A driver as a probe sees it: the names it refuses, each asked list recorded.
    fn driver<'a>(
        refuses: &'a [&'a str],
        asked: &'a mut Vec<String>,
    ) -> impl FnMut(&Fields) -> ProbeAnswer + 'a {
        move |fields| {
            asked.push(fields.query());
            match fields
                .health
                .iter()
                .find(|(_, name)| refuses.contains(name))
            {
                Some((_, name)) => ProbeAnswer::Refused((*name).to_owned()),
                None => ProbeAnswer::Known,
            }
        }
    }

    #[test]
    fn probing_drops_refused_fields_and_falls_back_to_the_old_mask_spelling() {
        let mut asked = Vec::new();
        assert_eq!(
            probe(driver(&[], &mut asked)),
            Probed::Fields(Fields::all())
        );
        assert_eq!(
            asked.len(),
            1,
            "a driver that knows every field is asked once"
        );

        // Before driver 535, with no ECC on this board.
        let mut asked = Vec::new();
        let old = [
            "clocks_event_reasons.active",
            "ecc.errors.uncorrected.volatile.total",
        ];
        let Probed::Fields(fields) = probe(driver(&old, &mut asked)) else {
            panic!("no fields settled: {asked:?}");
        };
        assert_eq!(
            fields.query(),
            "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,\
             power.draw,clocks.sm,clocks_throttle_reasons.active,retired_pages.pending"
        );
        assert_eq!(asked.len(), 3);
        assert_eq!(
            fields.read(&["50", "[N/A]", "1410", "0x0000000000000001", "No"]),
            GpuHealth {
                temperature_c: Some(50),
                sm_clock_mhz: Some(1410),
                throttle_mask: Some(1),
                retired_pages_pending: Some(false),
                ..GpuHealth::default()
            }
        );

        // Neither spelling of the mask.
        let mut asked = Vec::new();
        let neither = [
            "clocks_event_reasons.active",
            "clocks_throttle_reasons.active",
        ];
        let Probed::Fields(fields) = probe(driver(&neither, &mut asked)) else {
            panic!("no fields settled: {asked:?}");
        };
        assert!(!fields.query().contains("reasons"), "{}", fields.query());
        assert_eq!(fields.count(), BASE_FIELDS.len() + HEALTH_FIELDS.len() - 1);
    }

    #[test]
    fn probing_gives_up_on_a_base_field_a_failure_or_refusals_without_end() {
        let mut asked = Vec::new();
        assert_eq!(
            probe(|fields| {
                asked.push(fields.query());
                ProbeAnswer::Refused("uuid".into())
            }),
            Probed::Failed(None)
        );
        assert_eq!(asked.len(), 1);
        assert_eq!(
            probe(|_| ProbeAnswer::Refused("a.field.never.asked".into())),
            Probed::Failed(None)
        );
        let hung = ProbeAnswer::Failed(Some("nvidia-smi did not answer within 5.0 s".into()));
        assert_eq!(
            probe(|_| hung.clone()),
            Probed::Failed(Some("nvidia-smi did not answer within 5.0 s".into()))
        );
        assert_eq!(probe(|_| ProbeAnswer::Stopped), Probed::Stopped);
        // A driver that refuses every field it is asked for, one at a time: each refusal takes
        // a name away, so probing ends with the base fields and never loops.
        let mut asks = 0;
        let probed = probe(|fields| {
            asks += 1;
            fields
                .health
                .first()
                .map_or(ProbeAnswer::Known, |(_, name)| {
                    ProbeAnswer::Refused((*name).to_owned())
                })
        });
        assert_eq!(probed, Probed::Fields(Fields::default()));
        assert_eq!(asks, 8, "one ask a name, and one for the base fields");
    }
}
