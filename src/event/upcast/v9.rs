//! Schema 5–9's supervision, findings and measures, and schema 8–9's compact sample, to and
//! from the current forms: the heartbeat schema 10 adds is `None` in what they held, and left
//! out of what goes back into them.

use crate::event::soak::{CompactSample, Findings, Measures, Supervision};
use crate::event::stored::v9;

impl From<v9::Supervision> for Supervision {
    fn from(old: v9::Supervision) -> Self {
        Supervision {
            fail_fast: old.fail_fast,
            py_spy: old.py_spy,
            dump_signal: old.dump_signal,
            dump_wait_ms: old.dump_wait_ms,
            evidence_unavailable: old.evidence_unavailable,
            heartbeat: None,
        }
    }
}

impl From<Supervision> for v9::Supervision {
    fn from(new: Supervision) -> Self {
        v9::Supervision {
            fail_fast: new.fail_fast,
            py_spy: new.py_spy,
            dump_signal: new.dump_signal,
            dump_wait_ms: new.dump_wait_ms,
            evidence_unavailable: new.evidence_unavailable,
        }
    }
}

impl From<v9::Findings> for Findings {
    fn from(old: v9::Findings) -> Self {
        Findings {
            child: old.child,
            oom_kills: old.oom_kills,
            unkillable: old.unkillable,
            gpu_release: old.gpu_release,
            heartbeat: None,
        }
    }
}

impl From<Findings> for v9::Findings {
    fn from(new: Findings) -> Self {
        v9::Findings {
            child: new.child,
            oom_kills: new.oom_kills,
            unkillable: new.unkillable,
            gpu_release: new.gpu_release,
        }
    }
}

impl From<v9::Measures> for Measures {
    fn from(old: v9::Measures) -> Self {
        Measures {
            pss_bytes: old.pss_bytes,
            gpus: old.gpus,
            heartbeat: None,
        }
    }
}

impl From<Measures> for v9::Measures {
    fn from(new: Measures) -> Self {
        v9::Measures {
            pss_bytes: new.pss_bytes,
            gpus: new.gpus,
        }
    }
}

impl From<v9::CompactSample> for CompactSample {
    fn from(old: v9::CompactSample) -> Self {
        CompactSample {
            base: old.base,
            sample: old.sample,
            measures: old.measures.into(),
            pss: old.pss,
            processes: old.processes,
            beats: None,
        }
    }
}

impl From<CompactSample> for v9::CompactSample {
    fn from(new: CompactSample) -> Self {
        v9::CompactSample {
            base: new.base,
            sample: new.sample,
            measures: new.measures.into(),
            pss: new.pss,
            processes: new.processes,
        }
    }
}
