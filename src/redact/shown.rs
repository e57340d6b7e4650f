//! A record as the views show it: every command line in it masked by the rule of
//! [`mask_argv`], so that a log written before a form of credential was masked (or by an older
//! unilab) shows none in `history`, `soak show`, `soak list` or a report. The log keeps what
//! it recorded, and `soak export` gives the artifact as it was written, byte for byte.
//! Masking what was masked when recorded changes nothing.

use std::borrow::Cow;

use super::mask_argv;
use crate::event::Event;

/// `event` with its command lines masked: a soak's start's, its evidence's processes', its
/// leaked processes' and an archived soak's; any other event as it is.
pub(crate) fn event(event: &Event) -> Cow<'_, Event> {
    let holds_one = matches!(
        event,
        Event::SoakStarted { .. }
            | Event::SoakEvidenceCaptured(_)
            | Event::SoakFinished { .. }
            | Event::SoakArchived(_)
    );
    if !holds_one {
        return Cow::Borrowed(event);
    }
    let mask = |argv: &mut Vec<String>| *argv = mask_argv(argv);
    let mut masked = event.clone();
    match &mut masked {
        Event::SoakStarted { start, .. } => mask(&mut start.command),
        Event::SoakEvidenceCaptured(evidence) => {
            evidence
                .processes
                .iter_mut()
                .for_each(|p| mask(&mut p.cmdline));
        }
        Event::SoakFinished { end, .. } => {
            end.leaked_processes
                .iter_mut()
                .for_each(|p| mask(&mut p.cmdline));
        }
        Event::SoakArchived(archived) => mask(&mut archived.soak.command),
        _ => {}
    }
    Cow::Owned(masked)
}
