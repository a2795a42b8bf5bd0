//! Hostile and careless input: each case runs the binary as a process against a real redis-server.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod foreign;
mod http;
mod large;
mod quiet;
mod redis_access;
mod stream;

/// A plain (blocking) connection to the test's Redis at `url`.
fn redis(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connecting to the test's redis-server")
}
