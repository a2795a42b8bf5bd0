//! On real local Redis Clusters (`common::cluster`): the harness itself,
//! the worker, the leader's duties, the command line, balancing and the
//! bench, each test on a cluster of its own. One binary, so one link, and
//! the tests of all files run side by side.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod bench_cluster;
mod cluster;
mod cluster_balance;
mod cluster_clean;
mod cluster_harness;
mod cluster_import;
mod cluster_one_node;
mod cluster_remote_read;
mod cluster_worker;
