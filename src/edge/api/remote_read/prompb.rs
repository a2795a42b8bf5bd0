//! The few messages of Prometheus' `prompb` package that remote read
//! exchanges (`remote.proto`, `types.proto`), derived by hand with their
//! field numbers, so that no `protoc` and no build script is needed.

/// What Prometheus sends: one query per selector of a PromQL expression.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ReadRequest {
    #[prost(message, repeated, tag = "1")]
    pub queries: Vec<Query>,
    /// The answer types Prometheus accepts; SAMPLES (0) is always served.
    #[prost(int32, repeated, tag = "2")]
    pub accepted_response_types: Vec<i32>,
}

/// One selector: a time range (ms) and label matchers.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Query {
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
    // 4: ReadHints (step, function, grouping), not needed: every bucket in
    // range is served.
}

/// `name` compared with `value` by `type`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LabelMatcher {
    #[prost(enumeration = "MatchType", tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub value: String,
}

/// `=`, `!=`, `=~`, `!~`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum MatchType {
    Eq = 0,
    Neq = 1,
    Re = 2,
    Nre = 3,
}

/// The answer: one result per query, in the request's order.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ReadResponse {
    #[prost(message, repeated, tag = "1")]
    pub results: Vec<QueryResult>,
}

/// The series of one query.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct QueryResult {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// One series: its labels sorted by name (`__name__` among them) and its
/// samples, oldest first.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// A label pair.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A value at a time (unix ms).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}
