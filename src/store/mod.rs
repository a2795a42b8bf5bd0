//! Redis access: the one connection type and its error classes
//! ([`connect`]), the Lua scripts ([`scripts`]), the counters as any client
//! reads them ([`counters`]) and the query API's read-only queries
//! ([`query`]), `SCAN` over every master ([`scan`]), a cluster's masters
//! and their slots ([`topology`]), the stream and its consumer group ([`stream`]),
//! a window's exactly-once way into the counters ([`commit`]), the
//! stream's recorded shard count ([`shard_count`]) and Redis' clock
//! ([`time`]). Uses the model floor only.

pub mod client;
pub mod commit;
pub mod connect;
pub mod counters;
pub mod error;
pub mod group;
pub mod query;
pub mod scan;
pub mod scripts;
pub mod shard_count;
pub mod stats_query;
pub mod stream;
pub mod time;
pub mod topology;
