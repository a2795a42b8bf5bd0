//! End to end on one Redis: each file of this directory is one of its
//! modules, the tests of a topic against a real redis-server (or against
//! none), driving the real binary as a process or the service in-process;
//! `dashboard` drives the page in a real headless Chromium. One binary, so
//! one link, and the tests of all files run side by side: those that
//! measure wall time (SLOWLOG, visibility and failover bounds) or load the
//! machine take `common::exclusive()` first, so that no two of them overlap.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod acl;
mod architecture;
mod carry;
mod chaos;
mod cli;
mod core;
mod dashboard;
mod faults;
mod import;
mod ingest;
mod ingest_browser;
mod leader;
mod logs;
mod newcomer;
mod operator;
mod prometheus;
mod remote_read;
mod remote_read_deploy;
mod safe_default;
mod serve;
mod shards_observed;
mod slowlog;
mod slowlog_claim;
mod stats;
mod statsd;
mod tls;
mod visibility;
