//! Hostile and careless input: each case runs the binary as a process against a real redis-server.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod foreign;
mod http;
mod large;
mod quiet;
mod redis_access;
mod small_buffers;
mod stream;

/// A plain (blocking) connection to the test's Redis at `url`.
fn redis(url: &str) -> redis::Connection {
    common::sync_conn(url)
}
