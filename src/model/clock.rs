//! The wall clock, in the units hitcount stores: unix milliseconds.

/// Wall-clock time in unix ms (0 if the clock is before 1970).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
