//! hitcount: count hits at scale on Redis.
//!
//! Apps append hit events to a Redis stream (see [`event`] for the two wire
//! forms); hitcount workers read it as one consumer group, aggregate windows
//! of hits in memory ([`aggregate`]) and apply them to time-bucketed counters
//! at several precisions, in the layout of *Redis in Action* §5.2 ([`keys`]),
//! so that any Redis client can read them ([`counters`]).
//!
//! ```text
//!  apps ──XADD──▶ stream `hits` ──XREADGROUP──▶ worker ─┬─ commit (fence, record, dead letters)
//!  (producer)                     (one group)   worker  ├─ apply chunks: HINCRBY count:P:N, ZADD known:
//!                                               worker  └─ XACK
//! ```
//!
//! # Layout
//! - [`config`]: every setting, its flag and environment variable.
//! - [`keys`]: every Redis key name. [`scripts`]: every Lua script.
//! - [`event`]: the hit event and its wire forms. [`aggregate`]: hits to
//!   increments, pure.
//! - [`stream`]: reading the stream. [`commit`]: a window's exactly-once way
//!   into the counters; [`known`]: which `known:` ZADDs it may leave out.
//!   [`recovery`]: claiming from and finishing for stopped workers.
//!   [`registration`]: one live process per consumer name. [`batch`]: the
//!   window being filled. [`worker`]: the loop tying them together;
//!   [`supervisor`]: its background tasks, none of which may die silently.
//! - [`leader`]: the lease that elects one worker for the leader's
//!   [`duties`]: [`cleaner`] (old samples out of counters) and [`trim`] (the
//!   stream below what every group still needs). [`status`]: what
//!   `hitcount status` shows.
//! - [`producer`]: the fire-and-forget library. [`counters`]: reading counters.
//! - [`connect`]: connections, TLS, error classes, backoff.
//! - [`metrics`], [`http`]: Prometheus metrics and probes; [`sampler`]: the
//!   consumer group's lag, pending entries and backlog age. [`shutdown`].
//! - [`embedded`]: a throwaway redis-server for the demo, bench and tests.
//! - [`bench`]: `hitcount bench`, throughput next to the Redis ceiling.
//! - [`workload`]: synthetic names for load and benchmarks.
//! - [`cli`]: the `hitcount` subcommands.

pub mod aggregate;
pub mod batch;
pub mod bench;
pub mod cleaner;
pub mod cli;
pub mod commit;
pub mod config;
pub mod connect;
pub mod counters;
pub mod duties;
pub mod embedded;
pub mod event;
pub mod http;
pub mod keys;
pub mod known;
pub mod leader;
pub mod metrics;
pub mod producer;
pub mod recovery;
pub mod registration;
pub mod sampler;
pub mod scripts;
pub mod shutdown;
pub mod status;
pub mod stream;
pub mod supervisor;
pub mod trim;
pub mod worker;
pub mod workload;
