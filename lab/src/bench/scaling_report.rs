//! The figures of [`super::scaling`] and their table: per workload, worker
//! count and round, one Redis next to every master of the cluster, in Redis
//! CPU µs per hit and each master's share, then whether the goals
//! hold (the busiest master ≤ 1/(0.8 × masters) of one Redis per hit, all
//! masters together ≤ 1.25×), judged on the median of the rounds' ratios
//! ([`Verdict`]), and the drain rate they imply with one master per core.

use std::fmt::Write as _;

use super::drain::Side;
use super::scaling_options::ScalingOptions;
use super::scaling_verdict::{judge, lines, Verdict, EFFICIENCY};
use super::usage::Node;
use hitcount::edge::workload::Workload;

/// One workload and worker count, on both, in one round.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScalingRun {
    /// The names drawn.
    pub workload: Workload,
    /// Worker processes.
    pub workers: usize,
    /// The round, from 1.
    pub round: usize,
    /// One Redis, one stream.
    pub single: Side,
    /// The cluster, the stream in shards.
    pub cluster: Side,
}

impl ScalingRun {
    /// The busiest master's CPU per hit over one Redis'.
    pub fn busiest_ratio(&self) -> f64 {
        self.cluster.busiest_per_hit() / self.single.total_per_hit().max(1e-9)
    }

    /// All masters' CPU per hit over one Redis'.
    pub fn total_ratio(&self) -> f64 {
        self.cluster.total_per_hit() / self.single.total_per_hit().max(1e-9)
    }
}

/// Everything one `hitcount bench --cluster` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScalingReport {
    /// Hits per workload.
    pub entries: u64,
    /// Stream shards on the cluster.
    pub shards: u32,
    /// `host:port` of each master, in slot order.
    pub masters: Vec<String>,
    /// Stream shards in each master's slots.
    pub spread: Vec<usize>,
    /// Shard slots the throwaway cluster serves from another master than
    /// the even split says, to balance the masters (`--balance-shards`).
    pub moved_slots: Vec<u16>,
    /// Replicas of the master with the fewest.
    pub replicas: usize,
    /// `--wait-replicas` given to the cluster's workers, when overridden.
    pub wait_replicas: Option<u32>,
    /// Each master's CPU while idle, µs per second (included in the runs).
    pub idle_cpu_us_per_sec: Vec<f64>,
    /// Priced in the steady state (names known, workers warm) rather than
    /// from a cold start.
    pub warm: bool,
    /// Rounds of every workload and worker count.
    pub rounds: usize,
    /// The runs, round after round.
    pub runs: Vec<ScalingRun>,
    /// The goals, per workload and worker count ([`ScalingReport::judge`]).
    pub verdicts: Vec<Verdict>,
}

impl ScalingReport {
    /// An empty report of the cluster's shape.
    pub fn new(
        opts: &ScalingOptions,
        masters: &[Node],
        replicas: usize,
        wait_replicas: Option<u32>,
        idle: Vec<f64>,
    ) -> ScalingReport {
        ScalingReport {
            entries: opts.entries,
            shards: opts.shards,
            masters: masters.iter().map(|n| n.addr.clone()).collect(),
            spread: spread(
                opts.shards,
                &masters.iter().map(|n| n.slots.clone()).collect::<Vec<_>>(),
            ),
            moved_slots: Vec::new(),
            replicas,
            wait_replicas,
            idle_cpu_us_per_sec: idle,
            warm: opts.warm,
            rounds: opts.rounds,
            runs: Vec::new(),
            verdicts: Vec::new(),
        }
    }

    /// Judges the goals on the runs: one [`Verdict`] per workload and
    /// worker count, in the order they first ran.
    pub fn judge(&mut self) {
        let rounds = self
            .runs
            .iter()
            .map(|r| (r.workload, r.workers, r.busiest_ratio(), r.total_ratio()));
        self.verdicts = judge(rounds, self.busiest_goal());
    }

    /// The goal for the busiest master, as a share of one Redis per hit.
    pub fn busiest_goal(&self) -> f64 {
        1.0 / (EFFICIENCY * self.masters.len().max(1) as f64)
    }

    /// The table and the verdicts, in Markdown.
    pub fn table(&self) -> String {
        let m = self.masters.len();
        let mut out = String::new();
        let spread: Vec<String> = self.spread.iter().map(usize::to_string).collect();
        let _ = writeln!(
            out,
            "{} hits per workload, {}; {m} masters ({} replicas each{}); {} stream shards over the masters: {}{}{}\n",
            self.entries,
            if self.warm {
                "steady state (names known, workers warm: --warm)"
            } else {
                "cold start (every name new)"
            },
            self.replicas,
            match self.wait_replicas {
                Some(w) => format!(", workers with --wait-replicas {w}"),
                None => String::new(),
            },
            self.shards,
            spread.join("/"),
            match self.moved_slots.as_slice() {
                [] => String::new(),
                moved => format!(
                    " (balanced by serving slot(s) {} from another master than the even split)",
                    moved
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            match self.rounds {
                1 => String::new(),
                n => format!(
                    "; {n} rounds, one Redis and the cluster side by side in each, the goals judged on the median round"
                ),
            },
        );
        out.push_str("| workload | W | round | Redis | stream shards | drained here (hits/s) | Redis CPU µs/hit | share of the cluster's CPU | commands/hit |\n");
        out.push_str("| --- | --: | --: | --- | --: | --: | --: | --: | --: |\n");
        for r in &self.runs {
            let row = |out: &mut String,
                       who: &str,
                       shards: String,
                       rate: String,
                       cpu: f64,
                       share: String,
                       calls: String| {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {who} | {shards} | {rate} | {cpu:.2} | {share} | {calls} |",
                    r.workload.label(),
                    r.workers,
                    r.round
                );
            };
            let s = &r.single;
            row(
                &mut out,
                "one Redis",
                "1".into(),
                rate(s),
                s.total_per_hit(),
                "".into(),
                format!("{:.3}", s.calls_per_hit()),
            );
            let c = &r.cluster;
            let total = c.total_per_hit();
            for (i, cpu) in c.cpu_per_hit().into_iter().enumerate() {
                let share = format!("{:.0} %", 100.0 * cpu / total.max(1e-9));
                let calls = format!("{:.3}", c.used[i].calls as f64 / c.hits.max(1) as f64);
                let known = if i == c.known_on {
                    " (holds known:)"
                } else {
                    ""
                };
                row(
                    &mut out,
                    &format!("master {}{known}", c.nodes[i]),
                    c.shards[i].to_string(),
                    "".into(),
                    cpu,
                    share,
                    calls,
                );
            }
            row(
                &mut out,
                &format!("all {m} masters"),
                self.shards.to_string(),
                rate(c),
                total,
                "100 %".into(),
                format!("{:.3}", c.calls_per_hit()),
            );
        }
        out.push('\n');
        out.push_str(&self.verdict_lines());
        out.push_str(&self.by_command());
        let idle: Vec<String> = self
            .idle_cpu_us_per_sec
            .iter()
            .map(|u| format!("{:.0}", u / 1000.0))
            .collect();
        let _ = writeln!(
            out,
            "- idle masters spent {} ms of CPU per second each (cron, cluster bus), counted in the figures above",
            idle.join("/")
        );
        out
    }
}

impl ScalingReport {
    /// One line per [`Verdict`] ([`lines`]); then, when the busiest
    /// master missed on slots as created, where to look.
    fn verdict_lines(&self) -> String {
        let mut out = lines(&self.verdicts, self.busiest_goal());
        let missed = self.verdicts.iter().any(|v| !v.busiest_met);
        if missed && self.masters.len() > 1 && self.moved_slots.is_empty() {
            let _ = writeln!(
                out,
                "- a master did more than its share: `hitcount status --shards {}` on the cluster lists the slot moves that balance the masters' work (traffic per shard, and known:'s new counters), and `bench --cluster --balance-shards` measures a throwaway cluster with them (docs/cluster.md, \"Balancing\")",
                self.shards
            );
        }
        out
    }

    /// Where each node's time went: per run and node, the commands Redis
    /// counted the most time in (`INFO commandstats`), in µs and calls per
    /// hit. A script's time includes its own commands', listed again.
    fn by_command(&self) -> String {
        let mut out = String::new();
        for r in &self.runs {
            let _ = writeln!(
                out,
                "- {}, W={}{}, µs per hit by command (calls per hit), scripts including theirs:",
                r.workload.label(),
                r.workers,
                match self.rounds {
                    1 => String::new(),
                    _ => format!(", round {}", r.round),
                }
            );
            let single = r
                .single
                .used
                .iter()
                .map(|u| ("one Redis".to_string(), u, &r.single));
            let masters = r
                .cluster
                .used
                .iter()
                .enumerate()
                .map(|(i, u)| (format!("master {}", r.cluster.nodes[i]), u, &r.cluster));
            for (who, used, side) in single.chain(masters) {
                let hits = side.hits.max(1) as f64;
                let top: Vec<String> = used
                    .top(TOP_COMMANDS)
                    .into_iter()
                    .map(|(name, calls, usec)| {
                        format!(
                            "{name} {:.2} ({:.3})",
                            usec as f64 / hits,
                            calls as f64 / hits
                        )
                    })
                    .collect();
                let _ = writeln!(out, "  - {who}: {}", top.join(", "));
            }
        }
        out
    }
}

/// Commands listed per node by [`ScalingReport::by_command`]: ten, so
/// that a leader's cleaner pass falling in a short run (HKEYS, HLEN, HDEL,
/// ZRANGE, INFO: 2,000 hits met 2,500 HKEYS once) does not push the
/// counting path's own commands off the list.
const TOP_COMMANDS: usize = 10;

fn rate(s: &Side) -> String {
    format!("{:.0}", s.hits as f64 / s.secs.max(1e-9))
}

/// How many of `shards` stream shards (`STREAM:{0}` …, each hashed by its
/// tag alone) fall in each master's slot ranges (inclusive).
pub fn spread(shards: u32, masters: &[Vec<(u16, u16)>]) -> Vec<usize> {
    let owner = |slot: u16| {
        masters
            .iter()
            .position(|ranges| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
    };
    hitcount::model::slots::shards_by_master(shards, masters.len(), owner)
        .iter()
        .map(Vec::len)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::usage::Usage;

    /// The even split of `hitcount bench --cluster` (and of most clusters
    /// made by `redis-cli --cluster create`).
    fn even(masters: usize) -> Vec<Vec<(u16, u16)>> {
        (0..masters)
            .map(|i| {
                vec![(
                    (i * 16384 / masters) as u16,
                    ((i + 1) * 16384 / masters - 1) as u16,
                )]
            })
            .collect()
    }

    /// A side whose nodes spent `cpu_us` over `hits` hits.
    fn side(hits: u64, cpu_us: &[f64]) -> Side {
        Side {
            hits,
            secs: 1.0,
            nodes: cpu_us.iter().map(|_| "127.0.0.1:1".to_string()).collect(),
            shards: vec![1; cpu_us.len()],
            used: cpu_us
                .iter()
                .map(|&cpu_us| Usage {
                    cpu_us,
                    calls: 0,
                    commands: Default::default(),
                })
                .collect(),
            known_on: 0,
        }
    }

    #[test]
    fn goals_are_judged_on_the_median_round_of_each_workload_and_worker_count() {
        let masters = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let mut report = ScalingReport {
            entries: 100,
            shards: 16,
            masters,
            spread: vec![6, 6, 4],
            moved_slots: Vec::new(),
            replicas: 0,
            wait_replicas: Some(0),
            idle_cpu_us_per_sec: vec![0.0; 3],
            warm: false,
            rounds: 3,
            runs: Vec::new(),
            verdicts: Vec::new(),
        };
        // One Redis spends 100 µs per 100 hits; the busiest master 46, 31
        // and 39 in the three rounds of one worker, 50 in every round of two.
        for (round, busiest) in [(1, 46.0), (2, 31.0), (3, 39.0)] {
            for (workers, busiest) in [(1, busiest), (2, 50.0)] {
                report.runs.push(ScalingRun {
                    workload: Workload::Hot,
                    workers,
                    round,
                    single: side(100, &[100.0]),
                    cluster: side(100, &[busiest, 30.0, 30.0]),
                });
            }
        }
        report.judge();
        assert_eq!(report.verdicts.len(), 2);
        let one = &report.verdicts[0];
        assert_eq!((one.workers, one.busiest.len()), (1, 3));
        assert!((one.busiest_median - 0.39).abs() < 1e-9);
        assert!((one.total_median - 0.99).abs() < 1e-9);
        assert!(one.busiest_met && one.total_met);
        let two = &report.verdicts[1];
        assert!(!two.busiest_met && two.total_met);
        let table = report.table();
        assert!(
            table.contains("W=1: busiest master 0.39× one Redis per hit, median of 3 rounds (0.46, 0.31, 0.39) (goal ≤ 0.42: met)"),
            "{table}"
        );
        assert!(table.contains("W=2: busiest master 0.50×"), "{table}");
        assert!(table.contains("(goal ≤ 0.42: missed)"), "{table}");
        // Missed on slots as created: the pointer to the balancing moves.
        assert!(table.contains("lists the slot moves"), "{table}");
    }

    #[test]
    fn few_shards_spread_unevenly_over_three_masters() {
        // docs/cluster.md's list of how tags 0..N-1 fall on three masters.
        assert_eq!(spread(3, &even(3)), vec![0, 2, 1]);
        assert_eq!(spread(8, &even(3)), vec![2, 4, 2]);
        assert_eq!(spread(16, &even(3)), vec![6, 6, 4]);
        assert_eq!(spread(32, &even(3)), vec![13, 11, 8]);
        // The first counts that fall evenly.
        assert!((3..54).all(|n| {
            let s = spread(n, &even(3));
            s.iter().max() != s.iter().min()
        }));
        assert_eq!(spread(54, &even(3)), vec![18, 18, 18]);
    }
}
