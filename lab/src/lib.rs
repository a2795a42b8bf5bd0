//! hitcount's lab: what the project uses to test and measure hitcount,
//! never shipped with it (`publish = false`).
//!
//! # Layout
//!
//! Three floors; each uses the floors below it, never one above, and no
//! two modules import each other.
//!
//! ```text
//!  cli.rs     `hitcount-lab bench`: flags, finding the `hitcount` binary, the table
//!    ▼
//!  bench/     the measurement harness: product.rs (`hitcount bench --json`
//!    │        as a process), seeds.rs, latency.rs, report.rs; on a cluster
//!    │        scaling.rs, drain.rs, usage.rs, workers.rs, scaling_options.rs,
//!    │        scaling_report.rs, scaling_verdict.rs (the goals); serve.rs;
//!    │        ingest.rs, statsd.rs; listening.rs (`serve`, `ingest` started);
//!    │        import.rs (`hitcount import` of an access log)
//!    ▼
//!  kit/       the test kit: a throwaway redis-server (mod.rs, config.rs,
//!             process.rs), TLS certificates (tls.rs), a local Redis
//!             Cluster (cluster.rs)
//! ```
//!
//! The lab drives the `hitcount` binary as a process and otherwise uses
//! only the product library's public API (the key layout, the settings
//! types, the hit's wire forms, hash slots, the producer, a connection,
//! reading counters and the synthetic names).

#![warn(missing_docs, unreachable_pub)]

pub mod bench;
pub mod cli;
pub mod kit;
