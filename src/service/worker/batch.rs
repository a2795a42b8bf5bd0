//! The window a worker is filling: the entries read since the last apply,
//! their hits aggregated, the ones to dead-letter, and when to close it.

use std::time::{Duration, Instant};

use crate::model::aggregate::Window;
use crate::model::config::WorkerArgs;
use crate::model::event;
use crate::model::metrics::metrics;
use crate::store::commit::{Failure, Rejected};
use crate::store::stream::EntryRef;

/// A window closes early once it holds this many rejected entries, so the
/// commit script's dead-letter XADDs stay short.
const MAX_REJECTED_PER_WINDOW: usize = 500;
/// While the worker is behind (reads come back full of entries older than
/// `--window-ms`), a window may stay open this many times `--window-ms`, so
/// it can reach its size limits.
const BACKLOG_AGE_FACTOR: u32 = 10;

/// Entries read and not yet applied.
#[derive(Debug)]
pub struct Batch {
    window: Window,
    /// Entry ids, space separated: what the window acknowledges.
    ids: String,
    rejected: Vec<Rejected>,
    opened: Option<Instant>,
    /// Oldest entry id time in the window (unix ms), for the delay metric.
    oldest_ms: i64,
}

impl Batch {
    /// An empty batch for the layout's precisions and samples.
    pub fn new(precisions: &[u32], samples: u32) -> Batch {
        Batch {
            window: Window::new(precisions, samples),
            ids: String::new(),
            rejected: Vec::new(),
            opened: None,
            oldest_ms: i64::MAX,
        }
    }

    /// Decodes entries into the window, or the rejected list. Entries
    /// deleted while pending are only acknowledged.
    pub fn add(&mut self, entries: &[EntryRef<'_>], now_ms: i64) {
        if self.opened.is_none() {
            self.opened = Some(Instant::now());
        }
        for e in entries {
            if !self.ids.is_empty() {
                self.ids.push(' ');
            }
            self.ids.push_str(e.id_str());
            if e.fields.is_none() {
                continue;
            }
            match event::decode(e.id, e.pairs()) {
                Ok(hit) => {
                    self.window.add(&hit, now_ms);
                    if let Some(ms) = event::entry_id_ms(e.id) {
                        self.oldest_ms = self.oldest_ms.min(ms);
                    }
                }
                Err(reject) => self.rejected.push(Rejected {
                    id: e.id_str().to_string(),
                    reason: reject.reason(),
                    fields: e.pairs().map(|(f, v)| (f.to_vec(), v.to_vec())).collect(),
                }),
            }
        }
    }

    /// Whether no entry was read into it.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// When its first entry was read.
    pub fn opened(&self) -> Option<Instant> {
        self.opened
    }

    /// Whether to apply it now: at its size limits, or once open
    /// `--window-ms` at the stream's head (`caught_up`), or ten times that
    /// while the worker is behind.
    pub fn is_full(&self, w: &WorkerArgs, caught_up: bool) -> bool {
        self.window.hits() as usize >= w.window_entries
            || self.window.cells_len() >= w.window_cells
            || self.rejected.len() >= MAX_REJECTED_PER_WINDOW
            || self.opened.is_some_and(|t| {
                let age = Duration::from_millis(w.window_ms);
                let elapsed = t.elapsed();
                elapsed >= age && (caught_up || elapsed >= age * BACKLOG_AGE_FACTOR)
            })
    }

    /// The aggregated hits.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Entry ids, space separated.
    pub fn ids(&self) -> &str {
        &self.ids
    }

    /// Entries to dead-letter.
    pub fn rejected(&self) -> &[Rejected] {
        &self.rejected
    }

    /// Counts an applied window in the metrics (once per window, never per
    /// event).
    pub fn count_applied(&self, failures: &[Failure], started: Instant, now_ms: i64) {
        let m = metrics();
        m.windows_applied.inc();
        m.window_size.observe(self.window.hits() as f64);
        m.events_applied.inc_by(self.window.hits());
        m.apply_duration.observe(started.elapsed().as_secs_f64());
        for (precision, n) in self.window.skipped() {
            m.hits_too_old
                .with_label_values(&[&precision.to_string()])
                .inc_by(n);
        }
        for r in &self.rejected {
            m.events_dead_lettered.with_label_values(&[r.reason]).inc();
        }
        if !failures.is_empty() {
            tracing::warn!(cells = failures.len(), first = %failures[0].error, "some counters refused their increments; dead-lettered");
            m.events_dead_lettered
                .with_label_values(&["apply_error"])
                .inc_by(failures.len() as u64);
        }
        if self.oldest_ms != i64::MAX {
            m.end_to_end_delay
                .observe((now_ms - self.oldest_ms).max(0) as f64 / 1000.0);
        }
    }

    /// Empties it, keeping its allocations.
    pub fn clear(&mut self) {
        self.window.clear();
        self.ids.clear();
        self.rejected.clear();
        self.opened = None;
        self.oldest_ms = i64::MAX;
    }
}
