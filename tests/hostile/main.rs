//! Hostile and careless input: each case runs the binary as a process against a real redis-server.

#[path = "../common/mod.rs"]
mod common;

mod large;
