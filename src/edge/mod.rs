//! Where hitcount meets people and other programs: the HTTP endpoints
//! ([`http`], the query API [`api`] and the way in for HTTP clients and
//! browsers [`ingest`], on the hardened loop of [`server`], their bodies
//! read by [`body`]), the command line ([`cli`]), the operators' benchmark
//! ([`mod@bench`]), a throwaway `redis-server` for the demo and the
//! benchmark ([`throwaway`]) and synthetic names ([`workload`]).
//!
//! The `cli` feature, on by default, gates [`api`], [`ingest`], [`body`], [`cli`], [`mod@bench`],
//! [`throwaway`] and [`workload`], and the crates only they use. A library
//! built with `default-features = false` has only [`http`] here, and spawns
//! no processes.

#[cfg(feature = "cli")]
pub(crate) mod api;
#[cfg(feature = "cli")]
pub(crate) mod bench;
#[cfg(feature = "cli")]
pub(crate) mod body;
#[cfg(feature = "cli")]
pub mod cli;
pub mod http;
#[cfg(feature = "cli")]
pub(crate) mod ingest;
pub(crate) mod peers;
pub(crate) mod sending;
pub(crate) mod server;
#[cfg(feature = "cli")]
pub(crate) mod throwaway;
#[cfg(feature = "cli")]
pub mod workload;
