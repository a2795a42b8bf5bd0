//! The long-running parts, built on the store: the [`worker`] of a stream
//! shard, the [`shards`] a process reads, what every worker of a stream
//! must agree on ([`agreement`]), and what a worker
//! does for stopped workers ([`recovery`]), the consumer name
//! [`registration`], the [`leader`] lease and its [`duties`] ([`cleaner`]
//! with its [`purge`] of old samples and, on a cluster, [`forget`] of
//! emptied counters; [`trim`]), all under a [`fence`]), the group [`sampler`], what `hitcount status` gathers
//! ([`status`]), the check of Redis' eviction policy ([`memory_watch`]) and how a cluster's masters share the shards
//! ([`shard_spread`]), the [`supervisor`] of background tasks, the
//! fire-and-forget [`producer`], what `ingest` appends ([`ingest`]), the exactly-once [`import`] of files, and the query API's cached bucket
//! [`ranking`]s.

pub(crate) mod agreement;
pub(crate) mod cleaner;
pub(crate) mod duties;
pub(crate) mod fence;
pub(crate) mod forget;
pub mod health;
#[cfg(feature = "cli")]
pub(crate) mod import;
#[cfg(feature = "cli")]
pub(crate) mod ingest;
pub(crate) mod leader;
pub(crate) mod memory_watch;
pub(crate) mod pass_report;
pub mod producer;
pub(crate) mod purge;
#[cfg(feature = "cli")]
pub(crate) mod ranking;
pub(crate) mod recovery;
pub(crate) mod registration;
pub(crate) mod rescore;
pub(crate) mod sampler;
#[cfg(feature = "cli")]
pub(crate) mod shard_spread;
pub mod shards;
#[cfg(feature = "cli")]
pub(crate) mod status;
pub(crate) mod supervisor;
pub(crate) mod trim;
pub mod worker;
