//! The goals of `hitcount bench --cluster`, judged: per workload and
//! worker count, the busiest master's and all masters' CPU per hit over
//! one Redis' in every round, and their medians against the goals (the
//! busiest master ≤ 1/(0.8 × masters) of one Redis per hit, all masters
//! together ≤ 1.25×). [`super::scaling_report`] gathers the rounds and
//! prints the lines.

use std::fmt::Write as _;

use hitcount::edge::workload::Workload;

/// The busiest master may spend at most 1/(EFFICIENCY × masters) of one
/// Redis' CPU per hit: 80 % of linear scaling.
pub const EFFICIENCY: f64 = 0.8;
/// All masters together may spend at most this many times one Redis' CPU
/// per hit: what cluster routing may cost.
pub const MAX_OVERHEAD: f64 = 1.25;

/// The goals judged on one workload and worker count: the ratios of every
/// round and their medians. One drain on a shared machine can miss or meet
/// by chance (one Redis' own cost per hit moves by a quarter from one run
/// to the next here), so the goals are judged on the median round, and
/// every round is shown.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    /// The names drawn.
    pub workload: Workload,
    /// Worker processes.
    pub workers: usize,
    /// The busiest master's CPU per hit over one Redis', per round.
    pub busiest: Vec<f64>,
    /// All masters' CPU per hit over one Redis', per round.
    pub total: Vec<f64>,
    /// The median of `busiest`.
    pub busiest_median: f64,
    /// The median of `total`.
    pub total_median: f64,
    /// `busiest_median` ≤ 1/(0.8 × masters).
    pub busiest_met: bool,
    /// `total_median` ≤ [`MAX_OVERHEAD`].
    pub total_met: bool,
}

impl Verdict {
    /// How many times one Redis' rate the cluster drains when each master
    /// has a core and Redis CPU is what bounds: the busiest master sets the
    /// pace.
    pub fn projected_speedup(&self) -> f64 {
        1.0 / self.busiest_median.max(1e-9)
    }
}

/// The median of `xs` (the mean of the middle two when even; 0 when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One [`Verdict`] per workload and worker count, in the order they first
/// come in `rounds`: (workload, workers, busiest ratio, total ratio), one
/// per round. `goal` is the busiest master's.
pub fn judge(rounds: impl Iterator<Item = (Workload, usize, f64, f64)>, goal: f64) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = Vec::new();
    for (workload, workers, busiest, total) in rounds {
        let at = verdicts
            .iter()
            .position(|v| v.workload == workload && v.workers == workers);
        let v = match at {
            Some(i) => &mut verdicts[i],
            None => {
                verdicts.push(Verdict {
                    workload,
                    workers,
                    busiest: Vec::new(),
                    total: Vec::new(),
                    busiest_median: 0.0,
                    total_median: 0.0,
                    busiest_met: false,
                    total_met: false,
                });
                verdicts.last_mut().expect("just pushed")
            }
        };
        v.busiest.push(busiest);
        v.total.push(total);
    }
    for v in &mut verdicts {
        v.busiest_median = median(&v.busiest);
        v.total_median = median(&v.total);
        v.busiest_met = v.busiest_median <= goal;
        v.total_met = v.total_median <= MAX_OVERHEAD;
    }
    verdicts
}

/// One line per verdict: the medians against the goals (`goal` the
/// busiest master's), each round's ratio when there were several, and
/// the drain rate they imply with one master per core.
pub fn lines(verdicts: &[Verdict], goal: f64) -> String {
    let mut out = String::new();
    let met = |ok: bool| if ok { "met" } else { "missed" };
    let rounds = |xs: &[f64]| match xs.len() {
        1 => String::new(),
        n => format!(
            ", median of {n} rounds ({})",
            xs.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    for v in verdicts {
        let _ = writeln!(
            out,
            "- {}, W={}: busiest master {:.2}× one Redis per hit{} (goal ≤ {goal:.2}: {}); all masters {:.2}×{} (goal ≤ {MAX_OVERHEAD:.2}: {}); one master per core would drain {:.1}× one Redis",
            v.workload.label(),
            v.workers,
            v.busiest_median,
            rounds(&v.busiest),
            met(v.busiest_met),
            v.total_median,
            rounds(&v.total),
            met(v.total_met),
            v.projected_speedup(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[0.5]), 0.5);
        assert_eq!(median(&[0.46, 0.31, 0.39]), 0.39);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
