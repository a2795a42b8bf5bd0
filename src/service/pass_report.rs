//! What one cleaner pass did ([`crate::service::cleaner`]), family by
//! family: recorded in Redis for `hitcount status`, printed by `hitcount
//! clean`.

use crate::model::keys::Family;

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PassReport {
    /// The pass number of this leader (0 cleans every counter).
    pub pass: u64,
    /// Counters due this pass and looked at.
    pub counters_scanned: u64,
    /// Samples deleted.
    pub samples_removed: u64,
    /// Counters that emptied and left `known:`.
    pub counters_removed: u64,
    /// Statistics hashes due this pass and looked at.
    pub stats_scanned: u64,
    /// Statistics fields deleted (every field of each old bucket).
    pub stats_fields_removed: u64,
    /// Statistics hashes that emptied and left `stats:known:`.
    pub stats_removed: u64,
    /// How long the pass took, in ms.
    pub duration_ms: u64,
}

impl PassReport {
    /// Counts hashes of `family` scanned, fields deleted and hashes
    /// forgotten.
    pub(crate) fn add(&mut self, family: Family, scanned: u64, removed: u64, forgotten: u64) {
        let (s, r, f) = match family {
            Family::Counts => (
                &mut self.counters_scanned,
                &mut self.samples_removed,
                &mut self.counters_removed,
            ),
            Family::Stats => (
                &mut self.stats_scanned,
                &mut self.stats_fields_removed,
                &mut self.stats_removed,
            ),
        };
        *s += scanned;
        *r += removed;
        *f += forgotten;
    }
}
