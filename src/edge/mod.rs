//! Where hitcount meets people and other programs: the HTTP endpoints
//! ([`http`]), the command line ([`cli`]), and, for the demo, the benchmark
//! and the tests, a throwaway `redis-server` ([`embedded`]), the benchmark
//! itself ([`bench`]) and synthetic names ([`workload`]).

pub mod bench;
pub mod cli;
pub mod embedded;
pub mod http;
pub mod workload;
