//! Every setting of hitcount: its flag, its environment variable, its default
//! and its validation.
//!
//! The environment variable names are a contract (deployments set them), so
//! they are spelled out here once and documented in the README. Each group of
//! settings is a `clap::Args` struct that the subcommands flatten, so a
//! setting means the same thing for `worker`, `get`, `clean` or `status`.
//!
//! One file per group of settings, each with its defaults: how to reach
//! Redis (`connection`), where the counters and the stream live (`layout`),
//! the leader lease and its duties (`leader`), and how a worker reads and
//! windows (`worker`). This file holds the [`ConfigError`] they share; every
//! item is re-exported here, so `crate::model::config::X` names it.

use std::path::PathBuf;

mod connection;
mod layout;
mod leader;
mod worker;

pub use connection::{redact_url, RedisArgs, DEFAULT_REDIS_URL};
pub use layout::{LayoutArgs, StreamArgs, DEFAULT_PRECISIONS, DEFAULT_PRECISIONS_FLAG};
pub use leader::LeaderArgs;
pub use worker::WorkerArgs;

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
    #[error("cannot read {what} file {path}: {source}")]
    TlsFile {
        /// Which file (CA, certificate, key).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}
