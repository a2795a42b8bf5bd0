//! The worker's hot path without Redis, as `benches/hot_path.rs` times it:
//! hits aggregated into a window, and a window's apply step built. Built
//! with the `bench` feature only; no part of the library's API.

use crate::model::aggregate::{Cell, Window};
use crate::model::config::DEFAULT_PRECISIONS;
use crate::model::event::Hit;
use crate::model::keys::Keys;
use crate::store::commit::apply::apply_commands;
use crate::store::commit::apply::expire_markers;
use crate::store::commit::{Sum, ACK_IDS, CHUNK_CELLS};
use crate::store::stream;

/// Samples kept per counter, the default.
const SAMPLES: u32 = 120;

/// A window at the default precisions.
pub struct Aggregation(Window);

impl Default for Aggregation {
    fn default() -> Self {
        Aggregation(Window::new(&DEFAULT_PRECISIONS, SAMPLES))
    }
}

impl Aggregation {
    /// Adds one hit, judged old or not against `now_ms`.
    pub fn add(&mut self, hit: &Hit<'_>, now_ms: i64) {
        self.0.add(hit, now_ms);
    }

    /// How many count cells the window holds.
    pub fn cells_len(&self) -> usize {
        self.0.cells_len()
    }

    /// The window's count cells, as the apply step takes them.
    pub fn cells(&self) -> Cells<'_> {
        Cells(self.0.cells().collect())
    }
}

/// A window's count cells.
pub struct Cells<'a>(Vec<Cell<'a>>);

/// Builds the apply step of window `w-1` (`cells`, entries `ids`, the
/// previous window `w-0` finished) as the worker sends it; returns the
/// packed pipeline's length in bytes.
pub fn apply_step_len(keys: &Keys, cells: &Cells<'_>, ids: &str) -> usize {
    let sum = Sum {
        id: "w-1",
        group: None,
        cells: &cells.0,
        stats: &[],
        chunk: CHUNK_CELLS,
    };
    let mut pipe = redis::pipe();
    for c in apply_commands(keys, &[sum]) {
        pipe.add_command(c);
    }
    for c in expire_markers(&[keys.applied_marker("w-0")]) {
        pipe.add_command(c);
    }
    stream::ack_into(&mut pipe, keys, ids, ACK_IDS);
    pipe.get_packed_pipeline().len()
}
