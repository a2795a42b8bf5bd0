//! Where hitcount meets people and other programs: the HTTP endpoints
//! ([`http`] and the query API [`api`], on the hardened loop of
//! [`server`]), the command line ([`cli`]), and, for the demo, the
//! benchmark and the tests, a throwaway `redis-server` ([`embedded`]), the
//! benchmark itself ([`mod@bench`]) and synthetic names ([`workload`]).
//!
//! The `cli` feature, on by default, gates [`api`], [`cli`], [`embedded`],
//! [`mod@bench`] and [`workload`], and the crates only they use. A library
//! built with `default-features = false` has only [`http`] here, and spawns
//! no processes.

#[cfg(feature = "cli")]
pub(crate) mod api;
#[cfg(feature = "cli")]
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
pub mod embedded;
pub mod http;
pub(crate) mod server;
#[cfg(feature = "cli")]
pub mod workload;
