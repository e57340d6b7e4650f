//! Values of the record that the command line names: each spelled as the record spells it, with
//! the help `--help` gives for it.

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::event::soak::OnJobAlarm;

impl ValueEnum for OnJobAlarm {
    fn value_variants<'a>() -> &'a [Self] {
        &[OnJobAlarm::Capture, OnJobAlarm::Stop, OnJobAlarm::Ignore]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            OnJobAlarm::Capture => {
                "Capture this rank's evidence at once (threads, stacks, py-spy, the dump signal) and keep supervising"
            }
            OnJobAlarm::Stop => {
                "Capture the evidence, then fail the soak as `job_failed` and stop its tree"
            }
            OnJobAlarm::Ignore => "Record that the alarm was seen; neither capture nor stop",
        };
        Some(PossibleValue::new(self.as_str()).help(help))
    }
}
