//! hitcount: count hits at scale on Redis.
//!
//! Apps append hit events to a Redis stream; hitcount workers read it as one
//! consumer group, aggregate windows of hits in memory and apply them to
//! time-bucketed counters at several precisions (the layout of *Redis in
//! Action* §5.2), so that any Redis client can read them.

pub mod http;
pub mod metrics;
pub mod aggregate; pub mod event;
pub mod embedded;
