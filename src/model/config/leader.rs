//! The leader lease and the leader's duties ([`LeaderArgs`]): the lease key
//! and length and the cleaner's interval, shared by `worker`, `clean` and
//! `status`.

use std::time::Duration;

use clap::Args;

use super::{invalid, plain_name, ConfigError, Whole};

/// Accepted `--lease-ms`: from 300 ms, where a renewal (every third) still
/// fits in a round trip with room to spare on a busy machine, to 10 minutes.
const LEASE_MS: Whole = Whole::new("--lease-ms / HITCOUNT_LEASE_MS", 300, 600_000);
/// Accepted `--clean-interval`, in seconds: up to a day.
const CLEAN_INTERVAL: Whole = Whole::new("--clean-interval / HITCOUNT_CLEAN_INTERVAL", 1, 86_400);

/// The leader lease and the leader's duties (cleaning counters, trimming the
/// stream).
#[derive(Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Key of the leader lease. The key prefix (HITCOUNT_PREFIX) is put in
    /// front of it, as for every other key: `app1:hitcount:leader`.
    #[arg(long, env = "HITCOUNT_LEADER_KEY", default_value = "hitcount:leader")]
    pub leader_key: String,
    /// Length of the lease in ms, 300..=600000. The leader renews it every
    /// third of this; if the leader dies, another worker takes over within
    /// about this long.
    #[arg(long, env = "HITCOUNT_LEASE_MS", default_value_t = 15_000,
          value_parser = LEASE_MS.parser::<u64>())]
    pub lease_ms: u64,
    /// Seconds between the starts of two cleaner passes, 1..=86400 (the
    /// seeds clean once a minute); a pass longer than this is followed by a
    /// 1 s pause. A counter of precision P is cleaned about every P
    /// seconds, on every pass when P is shorter.
    #[arg(long = "clean-interval", env = "HITCOUNT_CLEAN_INTERVAL",
          default_value_t = 60, value_parser = CLEAN_INTERVAL.parser::<u64>())]
    pub clean_interval_secs: u64,
}

impl LeaderArgs {
    /// Checks the settings: the whole numbers in their ranges (the command
    /// line's parser refuses the rest already; a struct built in code has
    /// not met it) and the key: not empty, no leading or trailing spaces or
    /// control characters ([`plain_name`]: a stray newline would make a
    /// second lease, and two leaders).
    pub fn validate(&self) -> Result<(), ConfigError> {
        LEASE_MS.check(self.lease_ms)?;
        CLEAN_INTERVAL.check(self.clean_interval_secs)?;
        let setting = "--leader-key / HITCOUNT_LEADER_KEY";
        if self.leader_key.is_empty() {
            return Err(invalid(setting, "must not be empty"));
        }
        plain_name(setting, &self.leader_key)
    }

    /// The lease length.
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The time between two cleaner passes.
    pub(crate) fn clean_interval(&self) -> Duration {
        Duration::from_secs(self.clean_interval_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_defaults_match_default() {
        crate::model::config::tests::assert_clap_defaults::<LeaderArgs>();
    }

    /// A lease key with a stray newline is a second lease: two leaders.
    #[test]
    fn a_leader_key_with_stray_spaces_or_control_characters_is_refused() {
        LeaderArgs::default().validate().unwrap();
        for bad in ["hitcount:leader\n", " hitcount:leader", "a\rb"] {
            let args = LeaderArgs {
                leader_key: bad.into(),
                ..LeaderArgs::default()
            };
            let err = args.validate().unwrap_err().to_string();
            assert!(
                err.starts_with("invalid --leader-key / HITCOUNT_LEADER_KEY: "),
                "{err}"
            );
        }
    }
}
