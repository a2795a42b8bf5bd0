//! hitcount: count hits at scale on Redis.
//!
//! Apps append hit events to a Redis stream (see [`model::event`] for the
//! two wire forms); hitcount workers read it as one consumer group,
//! aggregate windows of hits in memory ([`model::aggregate`]) and apply them
//! to time-bucketed counters at several precisions, in the layout of *Redis
//! in Action* §5.2 ([`model::keys`]), so that any Redis client can read them
//! ([`store::counters`]).
//!
//! ```text
//!  apps ──XADD──▶ stream `hits` ──XREADGROUP──▶ worker ─┬─ commit (fence, record, dead letters)
//!  (producer)                     (one group)   worker  ├─ apply chunks: HINCRBY count:P:N, ZADD known:
//!                                                       │  (and stats:P:N, stats:known: for hits with a value)
//!                                               worker  └─ XACK
//! ```
//!
//! # Layout
//!
//! Four floors, one folder each. A floor uses the floors below it and never
//! one above; no two modules import each other (`tests/e2e/architecture.rs`
//! checks both, and that this drawing matches the tree).
//!
//! ```text
//!  edge/     http.rs        /metrics, /healthz, /readyz
//!    │       server.rs      the hardened HTTP/1 loop every endpoint shares
//!    │       peers.rs       the places per client; the longest idle closed for room
//!    │       body.rs        a request's body: a size, a deadline, a budget (`cli`)
//!    │       sending.rs     large answers while sent: a budget of bytes
//!    │       api/           `hitcount serve`: read-only JSON API; params.rs  ┐
//!    │                      assets.rs: the dashboard page (assets/)          │
//!    │                      stats.rs: /api/v1/stats/{name}; top.rs: /top     │
//!    │                      remote_read/: Prometheus' remote read, /read;    │
//!    │                      turn.rs: what the requests read at once          │
//!    │       ingest/        `hitcount ingest`: POST /api/v1/hits; judge.rs   │
//!    │                      (a body's hits), browser.rs (CORS,               │
//!    │                      /hitcount.js), rate.rs (per client),             │
//!    │                      statsd.rs (StatsD over UDP and TCP), failed.rs   │
//!    │                      (answers when Redis fails a body's hits)         │
//!    │       cli/           the binary's subcommands, one file each, and     │ behind the
//!    │                      their text (status.rs: status, shard spread)     │ `cli` feature
//!    │       bench/         `hitcount bench`: ceiling.rs, workers.rs, report.rs (default)
//!    │       throwaway.rs   a throwaway redis-server (demo, bench)           │
//!    │       workload.rs    synthetic names                                  ┘
//!    ▼
//!  service/  worker/        the loop: mod.rs, read.rs, apply.rs, sync.rs, batch.rs (the window), sum/ (the process' sum)
//!    │       shards.rs      which stream shards this process reads: leases, one worker each
//!    │       agreement.rs   the shard count and layout every worker shares, checked while it runs
//!    │       recovery.rs    claims, and windows finished for stopped workers
//!    │       registration.rs one live process per consumer name
//!    │       leader.rs  duties.rs  cleaner.rs  trim.rs   the lease and its duties;
//!    │       fence.rs  purge.rs  forget.rs   their fence, deletes, known: on a cluster
//!    │       rescore.rs     known:'s scores kept 0, so that it pages by name
//!    │       pass_report.rs what a cleaner pass did
//!    │       sampler.rs  status.rs  health.rs  supervisor.rs  producer.rs
//!    │       ingest.rs      what `ingest` appends: each id once (`cli`)
//!    │       memory_watch.rs Redis' maxmemory-policy, checked every minute
//!    │       import/        `import`: a file's lines in batches (batch.rs), each appended
//!    │                      with the file's progress, so every line counts once; where
//!    │                      a file goes on, checked by its bytes' hash (resume.rs)
//!    │       shard_spread.rs which master serves which shards, the slots to move
//!    │                      (status.rs, shard_spread.rs gather: no text on this floor)
//!    │       ranking.rs     `top`: one cached ranking scan per (order, precision, bucket)
//!    │       cleaner/ sampler/ trim/  their tests against a real Redis (`redis_tests.rs`,
//!    │                      `cluster_tests.rs`), as edge's http/ and store's commit/, scripts/
//!    ▼
//!  store/    client.rs      one node or a cluster: the one connection type, Conn
//!    │       detect.rs      a cluster node or not: INFO cluster (+info); why a connect failed
//!    │       connect.rs     reconnecting, backoff;  error.rs: error classes;
//!    │                      hint.rs: what to change about a fatal one
//!    │       memory.rs      writes refused for maxmemory (OOM), an evicting policy
//!    │       scripts/       every Lua script (*.lua) and its loader
//!    │       stream.rs  group.rs  counters.rs  time.rs (Redis' clock)
//!    │       hashes.rs      a hash read whole in HSCAN pages, whatever it holds
//!    │       shard_count.rs the stream's recorded shard count, entries another leaves unread
//!    │       layout_record.rs the stream's recorded counter layout: one for every worker
//!    │       commit/        mod.rs, plan.rs, apply.rs, replies.rs, carry.rs, records.rs, stats.rs
//!    │       query.rs       read-only: names page by page, samples, a bucket's ranking
//!    │       stats_query.rs read-only: a statistics hash, bucket by bucket
//!    │       scan.rs        SCAN over one node or every master of a cluster
//!    │       topology.rs    a cluster's masters and their slots (CLUSTER SLOTS)
//!    ▼
//!  model/    event/ (msgpack.rs, plain.rs, reader.rs, json.rs)  aggregate.rs  carry.rs  keys.rs  known.rs  slots.rs
//!            access_log.rs (a web server's log line, read as a hit; name templates)
//!            stats.rs (values: summary, quantile scale)  stats_hash.rs (reading stats:)
//!            config/ (connection.rs, layout.rs, leader.rs, worker.rs)  metrics/ (labels.rs,
//!            register.rs)  shutdown.rs  clock.rs  ids.rs (entry ids, compact)  statsd.rs (a
//!            StatsD line as a hit)  tally.rs (counts logged once a minute)  no Redis here
//!
//!  beside the floors: testing.rs (what the unit tests start: redis-server, a cluster),
//!                     hot_path.rs (what `benches/hot_path.rs` times; `bench` feature)
//! ```
//!
//! - [`model`], the pure floor: the hit and its wire forms ([`model::event`]),
//!   hits to increments and statistics of their values
//!   ([`model::aggregate`], [`model::stats`]), which increments wait to be
//!   summed over several windows ([`model::carry`], their entries' ids held
//!   compactly by [`model::ids`]), every key name
//!   ([`model::keys`]) and Redis Cluster hash slots ([`model::slots`]), every setting and its default, written once
//!   ([`model::config`]), which `known:` ZADDs may be left out
//!   ([`model::known`]), the metrics ([`model::metrics`]), the shutdown
//!   signal ([`model::shutdown`]), the clock ([`model::clock`]) and the
//!   statistics of measured values ([`model::stats`], read back by
//!   [`model::stats_hash`]); and an access log's line read as a hit
//!   ([`model::access_log`]).
//! - [`store`], Redis access: one node or a cluster and the one connection
//!   type ([`store::client`]), the reconnect loop ([`store::connect`]),
//!   error classes ([`store::error`]), the Lua
//!   scripts ([`store::scripts`]), the stream ([`store::stream`]) and its
//!   consumer group's state ([`store::group`]), a window's exactly-once way
//!   into the counters and statistics ([`store::commit`]), reading counters
//!   ([`store::counters`]) and the query API's read-only queries
//!   ([`store::query`], [`store::stats_query`]).
//! - [`service`], what runs: the [`service::worker`] loop and the window it
//!   fills ([`service::worker::batch`]), the stream shards a process reads
//!   ([`service::shards`]), claiming from and finishing for
//!   stopped workers ([`service::recovery`]), one live process per consumer
//!   name ([`service::registration`]), the leader lease
//!   ([`service::leader`]) and its [`service::duties`]
//!   ([`service::cleaner`], [`service::purge`], [`service::forget`],
//!   [`service::trim`], all under a [`service::fence`]), the group's lag
//!   ([`service::sampler`]), what `hitcount status` gathers
//!   ([`service::status`]) and how a cluster's masters share the shards
//!   ([`service::shard_spread`]) (the CLI makes their text), the probes' view of a worker
//!   ([`service::health`]), background tasks that may not die silently
//!   ([`service::supervisor`]), the fire-and-forget
//!   [`service::producer`], a file's exactly-once, resumable import
//!   ([`service::import`]), and the query API's cached bucket rankings
//!   ([`service::ranking`]).
//! - [`edge`], where people and programs meet it: the probes and
//!   `/metrics` ([`edge::http`]) on the hardened HTTP loop they share
//!   ([`edge::server`]) and, behind the `cli` feature (on by
//!   default; a library user leaves it out with `default-features =
//!   false`), the read-only JSON query API, Prometheus' remote
//!   read and the dashboard page of `hitcount serve` ([`edge::api`]), the `hitcount` subcommands, the throwaway `redis-server`, the
//!   operators' benchmark and its synthetic names. The test kit and the
//!   project's measurement harness live apart, in the `hitcount-lab`
//!   package (`lab/`), which drives the binary as a process.
//!
//! # The library
//!
//! What a Rust program needs is public; everything else is the crate's own
//! (`pub(crate)`), so that the compiler reports what nothing uses.
//! - Send hits: [`service::producer::Producer`] (the wire forms, to write
//!   them yourself: [`model::event`]).
//! - Name the keys: [`model::keys::Keys`], from the settings of
//!   [`model::config`].
//! - Read counters and statistics: [`store::connect::client`] gives a
//!   client whose `open` gives a [`store::connect::Conn`]; then
//!   [`store::counters`] and [`store::stats_query`] (values:
//!   [`model::stats`], [`model::stats_hash`]).
//! - Run a worker in-process: [`service::shards::run`] with
//!   [`service::worker::Settings`], a [`service::health::Health`] (which
//!   tells what the probes would: `liveness_problem`, `readiness_problems`) and a
//!   [`model::shutdown`] signal, whose trigger tells why it stopped on its
//!   own ([`model::shutdown::Trigger::fatal`]); [`edge::http`] serves its
//!   probes and metrics. The leader's duties (cleaning, trimming) stay with
//!   `hitcount worker` processes.
//!
//! With `default-features = false` the library leaves out the `cli`
//! feature's commands and their dependencies (`scripts/test` builds it so).
//! - Place stream shards on a cluster's masters: [`model::slots`].

#![warn(missing_docs, unreachable_pub)]
// Without the `cli` feature the leader's duties, the sampler and the rest
// that only the binary's `worker` runs are built but unused; the default
// build is the one in which the compiler reports dead code.
#![cfg_attr(not(feature = "cli"), allow(dead_code))]

pub mod edge;
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod hot_path;
pub mod model;
pub mod service;
pub mod store;
// A real Redis comes from the test kit, built with the `cli` feature.
#[cfg(all(test, feature = "cli"))]
mod testing;
// The test files shared with the integration tests name the crate so.
#[cfg(test)]
extern crate self as hitcount;
