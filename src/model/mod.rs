//! The pure floor: what a hit is and what it becomes, with no Redis in
//! sight. The event and its two wire forms (and StatsD lines as hits), aggregation into cells, every
//! key name, every setting with its default, the metrics, the shutdown
//! signal and the clock. Everything above builds on these; nothing here
//! names a Redis type (a test checks it).

#[cfg(feature = "cli")]
pub(crate) mod access_log;
pub(crate) mod aggregate;
pub(crate) mod carry;
pub(crate) mod clock;
pub mod config;
pub mod event;
pub(crate) mod ids;
pub mod keys;
pub(crate) mod known;
pub(crate) mod metrics;
pub mod shutdown;
pub mod slots;
pub mod stats;
pub mod stats_hash;
#[cfg(feature = "cli")]
pub(crate) mod statsd;
