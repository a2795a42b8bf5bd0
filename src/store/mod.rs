//! Redis access: the one connection type and its error classes
//! ([`connect`]; what an operator should change about a fatal one,
//! [`hint`]), which kind of Redis a URL names ([`detect`]), the Lua scripts ([`scripts`]), the counters as any client
//! reads them ([`counters`]) and the query API's read-only queries
//! ([`query`]), `SCAN` over every master ([`scan`]), a cluster's masters
//! and their slots ([`topology`]), the stream and its consumer group ([`stream`]),
//! a window's exactly-once way into the counters ([`commit`]), the
//! stream's recorded shard count ([`shard_count`]) and counter layout
//! ([`layout_record`]), Redis' clock
//! ([`time`]) and Redis' memory: writes refused for `maxmemory`, an
//! evicting policy ([`memory`]). Uses the model floor only.

pub(crate) mod client;
pub(crate) mod commit;
pub mod connect;
pub mod counters;
pub(crate) mod detect;
pub(crate) mod error;
pub(crate) mod group;
pub(crate) mod hashes;
pub(crate) mod hint;
pub(crate) mod layout_record;
pub(crate) mod memory;
pub(crate) mod query;
pub(crate) mod scan;
pub mod scripts;
pub(crate) mod shard_count;
pub mod stats_query;
pub(crate) mod stream;
pub(crate) mod time;
pub(crate) mod topology;
