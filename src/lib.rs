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
//!                                               worker  └─ XACK
//! ```
//!
//! # Layout
//!
//! Four floors, one folder each. A floor uses the floors below it and never
//! one above; no two modules import each other (`tests/architecture.rs`
//! checks both, and that this list matches the tree).
//!
//! ```text
//!  edge/     http.rs  cli/ (one file per subcommand)  embedded.rs  bench/  workload.rs
//!    │         probes, metrics   the binary's commands   a throwaway redis-server
//!    ▼
//!  service/  worker/ (mod.rs, batch.rs)  recovery.rs  registration.rs  leader.rs
//!    │       duties.rs  cleaner.rs  trim.rs  sampler.rs  status.rs  supervisor.rs
//!    │       producer.rs
//!    ▼
//!  store/    connect.rs (the connection type, error classes, backoff)  scripts/ (*.lua)
//!    │       stream.rs  commit.rs  counters.rs
//!    ▼
//!  model/    event.rs  aggregate.rs  keys.rs  config.rs  known.rs  metrics.rs
//!            shutdown.rs  clock.rs                       (no Redis here)
//! ```
//!
//! - [`model`], the pure floor: the hit and its wire forms ([`model::event`]),
//!   hits to increments ([`model::aggregate`]), every key name
//!   ([`model::keys`]), every setting and default ([`model::config`]), which
//!   `known:` ZADDs may be left out ([`model::known`]), the metrics
//!   ([`model::metrics`]), the shutdown signal ([`model::shutdown`]) and the
//!   clock ([`model::clock`]).
//! - [`store`], Redis access: connections, error classes and backoff
//!   ([`store::connect`]), the Lua scripts ([`store::scripts`]), the stream
//!   and its group ([`store::stream`]), a window's exactly-once way into the
//!   counters ([`store::commit`]), reading counters ([`store::counters`]).
//! - [`service`], what runs: the [`service::worker`] loop and the window it
//!   fills ([`service::worker::batch`]), claiming from and finishing for
//!   stopped workers ([`service::recovery`]), one live process per consumer
//!   name ([`service::registration`]), the leader lease
//!   ([`service::leader`]) and its [`service::duties`]
//!   ([`service::cleaner`], [`service::trim`]), the group's lag
//!   ([`service::sampler`]), what `hitcount status` shows
//!   ([`service::status`]), background tasks that may not die silently
//!   ([`service::supervisor`]), and the fire-and-forget
//!   [`service::producer`].
//! - [`edge`], where people and programs meet it: the probes and
//!   `/metrics` ([`edge::http`]), the `hitcount` subcommands
//!   ([`edge::cli`]), and, behind the `cli` feature (on by default), the
//!   demo's and the tests' throwaway `redis-server` ([`edge::embedded`]),
//!   `hitcount bench` ([`edge::bench`]) and synthetic names
//!   ([`edge::workload`]).

pub mod edge;
pub mod model;
pub mod service;
pub mod store;
