//! Every setting of hitcount: its flag, its environment variable, its default
//! and its validation.
//!
//! The environment variable names are a contract (deployments set them), so
//! they are spelled out here once and documented in docs/configuration.md. Each group of
//! settings is a `clap::Args` struct that the subcommands flatten, so a
//! setting means the same thing for `worker`, `get`, `clean` or `status`.
//!
//! One file per group of settings, each with its defaults: how to reach
//! Redis (`connection`), where the counters and the stream live (`layout`),
//! the leader lease and its duties (`leader`), and how a worker reads and
//! windows (`worker`). This file holds the [`ConfigError`] they share; every
//! item is re-exported here, so `crate::model::config::X` names it.
//!
//! Each default is written once, in its setting's clap attribute
//! (`default_value` / `default_value_t`, beside its flag, variable and
//! range; a named constant only where other code reads it too); the
//! struct's `Default` is what an empty command line parses to
//! ([`parsed_defaults`]), and a test per struct checks that it parses.

use std::ops::RangeInclusive;
use std::path::PathBuf;

/// The help heading of the tuning knobs: settings whose defaults are what
/// the figures of docs/performance.md were measured with, which an operator
/// should not need to change. They keep their flags, variables, defaults
/// and ranges (deployments and tests set them), but `-h` leaves them out and
/// `--help` lists them under this heading, so the settings an operator meets
/// first stay few.
pub(crate) const ADVANCED: &str = "Advanced (tuning)";

/// The defaults of a group of settings, for its `Default`: what an empty
/// command line parses to, with no environment variable read, so a default
/// is named only by its clap attribute.
fn parsed_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults")).mut_args(|arg| arg.env(None));
    let matches = cmd
        .try_get_matches_from(["defaults"])
        .expect("an empty command line parses");
    T::from_arg_matches(&matches).expect("defaults convert")
}

mod connection;
mod layout;
mod leader;
mod worker;

// Every public item of the groups (their structs and constants) under
// `config::`, without a list here to keep in step.
pub use connection::*;
pub use layout::*;
pub use leader::*;
pub use worker::*;

/// Each group's `Default`: [`parsed_defaults`].
macro_rules! default_parsed {
    ($($group:ty),*) => {$(
        impl Default for $group {
            fn default() -> Self {
                parsed_defaults()
            }
        }
    )*};
}
default_parsed!(RedisArgs, LayoutArgs, StreamArgs, LeaderArgs, WorkerArgs);

/// A value parser for a whole-number setting in `range`, for clap's
/// `value_parser`: anything else is refused at parse time with a message
/// naming the range (`-1 is not in 1..=256`), so a setting's range is
/// stated once, where the setting is. Spaces around the number are ignored.
/// (A leading `-` reaches it as a value, not a flag: see
/// `allow_negative_numbers` on the command line.)
pub(crate) fn ranged<T>(
    range: RangeInclusive<i128>,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<i128> + Clone + Send + Sync + 'static,
{
    move |text: &str| match text.trim().parse::<i128>() {
        Ok(n) if range.contains(&n) => T::try_from(n).map_err(|_| not_in(n, &range)),
        Ok(n) => Err(not_in(n, &range)),
        Err(_) => Err(format!(
            "`{text}` is not a whole number in {}..={}",
            range.start(),
            range.end()
        )),
    }
}

/// A whole-number setting: its flag and environment variable and the
/// values it accepts, stated once for its clap parser ([`Whole::parser`])
/// and for the check of a struct built in code ([`Whole::check`], a library
/// user's struct, which the parser never saw), refused in the same words.
pub(crate) struct Whole {
    /// The flag and environment variable, e.g. `--read-count / HITCOUNT_READ_COUNT`.
    setting: &'static str,
    /// The accepted values.
    range: RangeInclusive<i128>,
}

impl Whole {
    pub(crate) const fn new(setting: &'static str, min: i128, max: i128) -> Self {
        Whole {
            setting,
            range: RangeInclusive::new(min, max),
        }
    }

    /// The clap `value_parser` of the setting: see [`ranged`].
    pub(crate) fn parser<T>(&self) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
    where
        T: TryFrom<i128> + Clone + Send + Sync + 'static,
    {
        ranged(self.range.clone())
    }

    /// Checks a value given in code against the parser's range.
    pub(crate) fn check(&self, value: impl TryInto<i128>) -> Result<(), ConfigError> {
        let value = value.try_into().unwrap_or(i128::MAX);
        if self.range.contains(&value) {
            Ok(())
        } else {
            Err(invalid(self.setting, not_in(value, &self.range)))
        }
    }
}

/// [`ConfigError::Invalid`]: `setting` may not be what it is, for `reason`.
pub(crate) fn invalid(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    let reason = reason.into();
    ConfigError::Invalid { setting, reason }
}

/// Refuses a name hitcount passes to Redis as it is (a key, a key prefix,
/// a consumer group or consumer name) with leading or trailing spaces or a
/// control character anywhere: one set by mistake (a trailing newline from a
/// file or a heredoc) names another key or group than the rest of the
/// deployment's, where no worker reads or every entry is counted again, and
/// a log line holding it would be cut in two. Emptiness is the caller's
/// rule (an empty prefix is the default).
pub(crate) fn plain_name(setting: &'static str, value: &str) -> Result<(), ConfigError> {
    if value.trim() != value || value.contains(char::is_control) {
        return Err(invalid(
            setting,
            format!("{value:?} must not have leading or trailing spaces or control characters"),
        ));
    }
    Ok(())
}

fn not_in(n: i128, range: &RangeInclusive<i128>) -> String {
    format!("{n} is not in {}..={}", range.start(), range.end())
}

/// Errors in the configuration: fatal, reported at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A setting has a value hitcount cannot work with.
    #[error("invalid {setting}: {reason}")]
    Invalid {
        /// The flag and environment variable, e.g. `--precisions / HITCOUNT_PRECISIONS`.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS file could not be read.
    #[error("cannot read {what} file {path}: {reason}")]
    TlsFile {
        /// Which file (CA, certificate, key).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why (said once: not a source, which a chain would say again).
        reason: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::ranged;

    /// Test helper: parses an empty command line into `T`, with every
    /// environment variable of its arguments unset for the parse (tests run in
    /// parallel and the variables of the test environment are left alone), and
    /// asserts that the result equals `T::default()` field by field (through
    /// `Debug`, which names every field), so the clap defaults and the
    /// `Default` impl cannot drift apart and a new field needs no list.
    pub(super) fn assert_clap_defaults<T>()
    where
        T: clap::Args + clap::FromArgMatches + Default + std::fmt::Debug,
    {
        let cmd = T::augment_args(clap::Command::new("t")).mut_args(|arg| arg.env(None));
        let matches = cmd
            .try_get_matches_from(["t"])
            .expect("an empty command line parses");
        let parsed = T::from_arg_matches(&matches).expect("defaults convert");
        assert_eq!(
            format!("{parsed:#?}"),
            format!("{:#?}", T::default()),
            "the clap defaults of {} are its Default",
            std::any::type_name::<T>()
        );
    }

    #[test]
    fn ranged_values_name_their_range() {
        let shards = ranged::<u32>(1..=256);
        assert_eq!(shards("16"), Ok(16));
        assert_eq!(shards(" 256 "), Ok(256));
        assert_eq!(shards("-1").unwrap_err(), "-1 is not in 1..=256");
        assert_eq!(shards("0").unwrap_err(), "0 is not in 1..=256");
        assert_eq!(
            shards("1e3").unwrap_err(),
            "`1e3` is not a whole number in 1..=256"
        );
        let huge = ranged::<u64>(0..=3_600_000);
        assert!(huge("99999999999999999999999999").is_err());
    }
}
