//! Whether an alarm found in the run's directory is believed. Any rank of the user can write
//! the file, and a damaged one reads as anything: an alarm that names another job or another
//! run, or a time it
//! cannot have been raised at — no time, before the rank joined the job (when the directory held
//! no alarm), or further ahead of this host's clock than hosts' clocks differ — is doubted, and
//! the rank neither records nor acts on it.

use super::alarm::Alarm;

/// How far ahead of this host's clock an alarm's time may be: the clocks of a job's hosts
/// differ by this much at most, or their alarms are not believed.
pub(crate) const MAX_AHEAD_SECONDS: f64 = 60.0;

/// Why an alarm found in the job's directory is not believed: any rank of the user, or a
/// damaged file, can put there what reads as an alarm.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Doubt {
    /// It names another job: not written by a rank of this one.
    OtherJob { named: String },
    /// It names another run of the job: not written by a rank of this one.
    OtherRun { named: String },
    /// Its time is no time.
    NotFinite,
    /// It was raised before this rank's soak started, when no alarm was there.
    BeforeStart { seconds: f64 },
    /// It was raised later than now, by more than [`MAX_AHEAD_SECONDS`].
    Ahead { seconds: f64 },
}

impl std::fmt::Display for Doubt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::text::{duration, foreign};
        match self {
            Doubt::OtherJob { named } => write!(f, "it names job `{}`", foreign(named)),
            Doubt::OtherRun { named } => write!(f, "it names run `{}`", foreign(named)),
            Doubt::NotFinite => write!(f, "its time is not a number of seconds"),
            Doubt::BeforeStart { seconds } => write!(
                f,
                "it says it was raised {} before this rank's soak started, when the job had no alarm",
                duration(*seconds)
            ),
            Doubt::Ahead { seconds } => write!(
                f,
                "it says it was raised {} from now, more than {} ahead of this host's clock",
                duration(*seconds),
                duration(MAX_AHEAD_SECONDS)
            ),
        }
    }
}

impl Alarm {
    /// Why this alarm, found in the directory of run `run` of job `job` by a rank whose soak
    /// started at `started_at` (Unix seconds), is not to be believed at `now`; `None` when it
    /// is. An alarm that names no run is taken as the run's whose directory holds it.
    pub(crate) fn doubt(
        &self,
        (job, run): (&super::JobId, &super::run::RunId),
        started_at: f64,
        now: f64,
    ) -> Option<Doubt> {
        if self.job != job.as_str() {
            return Some(Doubt::OtherJob {
                named: self.job.clone(),
            });
        }
        if let Some(named) = self.run.as_ref().filter(|named| *named != run.as_str()) {
            return Some(Doubt::OtherRun {
                named: named.clone(),
            });
        }
        if !self.at.is_finite() {
            return Some(Doubt::NotFinite);
        }
        if self.at < started_at {
            return Some(Doubt::BeforeStart {
                seconds: started_at - self.at,
            });
        }
        if self.at - now > MAX_AHEAD_SECONDS {
            return Some(Doubt::Ahead {
                seconds: self.at - now,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobId;

    fn alarm_at(at: f64) -> Alarm {
        Alarm {
            job: "4242".into(),
            run: Some("s0.r0".into()),
            rank: Some(1),
            host: "n0".into(),
            soak_id: "20261201T100000-0001".into(),
            failure_kind: "stale_progress".into(),
            reason: "rank 1: no progress for 2m00s".into(),
            at,
        }
    }

    /// An alarm is a file any rank of the user can write: one that named another job, or a time
    /// it cannot have been raised at, was believed and acted on. Each is doubted, and says why;
    /// an alarm of this job raised while the rank ran (a minute of clock difference between
    /// hosts allowed) is believed.
    #[test]
    fn an_alarm_of_another_job_or_an_impossible_time_is_doubted() {
        let job = JobId::parse("4242").unwrap();
        let run = crate::job::run::RunId::parse("s0.r0").unwrap();
        let job = (&job, &run);
        let started = 1_796_479_200.0;
        let now = started + 30.0;
        let at = alarm_at;
        assert_eq!(at(started + 10.0).doubt(job, started, now), None);
        assert_eq!(at(started).doubt(job, started, now), None);
        assert_eq!(
            at(now + 59.0).doubt(job, started, now),
            None,
            "clocks differ"
        );
        let other = Alarm {
            job: "other\n".into(),
            ..at(now)
        };
        let doubt = other.doubt(job, started, now).unwrap();
        assert_eq!(
            doubt,
            Doubt::OtherJob {
                named: "other\n".into()
            }
        );
        assert_eq!(doubt.to_string(), "it names job `other\\n`");
        let other_run = Alarm {
            run: Some("s1.r0".into()),
            ..at(now)
        };
        assert_eq!(
            other_run.doubt(job, started, now),
            Some(Doubt::OtherRun {
                named: "s1.r0".into()
            })
        );
        let no_run = Alarm {
            run: None,
            ..at(now)
        };
        assert_eq!(no_run.doubt(job, started, now), None);
        for nonsense in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                at(nonsense).doubt(job, started, now),
                Some(Doubt::NotFinite)
            );
        }
        let before = at(started - 3600.0).doubt(job, started, now).unwrap();
        assert_eq!(before, Doubt::BeforeStart { seconds: 3600.0 });
        assert!(before.to_string().contains("raised 1h before"), "{before}");
        let ahead = at(now + 120.0).doubt(job, started, now).unwrap();
        assert_eq!(ahead, Doubt::Ahead { seconds: 120.0 });
        assert!(ahead.to_string().contains("2m from now"), "{ahead}");
    }
}
