//! `hitcount status`: the stream, its groups and consumers, every shard and
//! the process reading it, the leader, the known counters and the last
//! cleaner pass, for a human or (`--json`) for scripts. The service floor
//! gathers it ([`crate::service::status`], [`crate::service::shard_spread`]);
//! the text is made here.

use std::fmt::Write as _;

use super::Common;
use crate::model::config::LeaderArgs;
use crate::model::event::printable;
use crate::service::shard_spread::{MasterShards, ShardMove};
use crate::service::status::{Leader, Shard, Status};
use crate::store::counters::format_utc;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) common: super::Pick<Common, Uses>,
    #[command(flatten)]
    leader: super::Pick<LeaderArgs, LeaderUses>,
}

/// Of the leader's settings `status` needs only the lease's key.
pub(super) struct LeaderUses;

impl super::Uses for LeaderUses {
    const SHOWN: &'static [&'static str] = &["leader_key"];
}

/// The settings of [`Common`] `status` shows: the stream, its group and shards, and the keys' prefix.
pub(super) struct Uses;

impl super::Uses for Uses {
    const SHOWN: &'static [&'static str] = &["prefix", "stream", "group", "dead_stream", "shards"];
}

pub(crate) async fn run(mut args: Args) -> anyhow::Result<()> {
    args.common.validate()?;
    args.leader.validate()?;
    let mut conn = super::connect(&args.common.redis).await?;
    let shards = super::reach::shards_read(&mut conn, &mut args.common).await?;
    let leader_key = shards[0].leader(&args.leader.leader_key);
    let mut status = crate::service::status::gather(&mut conn, &shards, &leader_key).await?;
    let (layout, stream) = (&args.common.layout, &args.common.stream);
    status.unread = crate::store::shard_count::stranded(&mut conn, layout, stream).await?;
    let count = stream.shards.max(1);
    let unread =
        (!status.unread.is_empty()).then(|| crate::store::shard_count::describe(&status.unread));
    if unread.is_some() {
        let warning = crate::store::shard_count::unread_warning(&status.unread, count);
        tracing::warn!("{warning}");
    }
    if args.json {
        outln!("{}", super::json_text(&status, true)?);
    } else {
        let mut text = render(&status, crate::model::clock::unix_ms());
        if let Some(unread) = unread {
            text.push_str(&format!(
                "unread: {unread} are not read with {count} shard(s): sent with another shard count\n"
            ));
        }
        super::out(&text)?;
    }
    Ok(())
}

/// Said of a stream that does not exist, rather than zeros that look idle.
const MISSING: &str = "nothing was sent to it, or it was deleted (a typo in --stream / \
                       HITCOUNT_STREAM?); what follows is the key prefix's, not this stream's";

/// The status for a human.
fn render(s: &Status, now_ms: i64) -> String {
    let mut out = String::new();
    let last_id = s.last_generated_id.as_deref().unwrap_or("none");
    let first_id = s.first_entry_id.as_deref().unwrap_or("none");
    let stream = if !s.exists {
        format!("does not exist: {MISSING}")
    } else if s.shards.len() > 1 {
        format!("{} entries in {} shards", s.length, s.shards.len())
    } else {
        format!("{} entries (oldest {first_id}, last {last_id})", s.length)
    };
    let _ = writeln!(out, "stream {}: {stream}", s.stream);
    if s.groups.is_empty() && s.exists {
        let _ = writeln!(out, "  no consumer group");
    }
    for g in &s.groups {
        let lag = g.lag.map_or("unknown".to_string(), |l| l.to_string());
        let last = if s.shards.len() > 1 {
            "all shards".to_string()
        } else {
            format!("last delivered {}", g.last_delivered_id)
        };
        let _ = writeln!(
            out,
            "group {}: lag {lag} (estimate), backlog age {:.1} s, pending {}, {last}",
            printable(&g.name),
            g.backlog_age_secs,
            g.pending
        );
        for c in &g.consumers {
            let _ = writeln!(
                out,
                "  consumer {}: pending {}, idle {:.1} s",
                printable(&c.name),
                c.pending,
                c.idle_ms as f64 / 1000.0
            );
        }
    }
    if s.shards.len() > 1 && s.exists {
        render_shards(&mut out, &s.shards);
    }
    render_masters(&mut out, &s.masters, &s.evening_moves);
    let _ = writeln!(out, "leader: {}", printable(&holder(s.leader.as_ref())));
    let _ = writeln!(out, "known counters: {}", s.known_counters);
    if s.known_stats > 0 {
        let _ = writeln!(out, "known statistics: {}", s.known_stats);
    }
    let p = &s.last_pass;
    // The record may have been written by something else: its numbers are
    // shown only as numbers, its text escaped.
    match p.get("at_ms").and_then(|v| v.parse::<i64>().ok()) {
        Some(at) if at >= 0 => {
            let get = |k: &str| {
                let n = p.get(k).and_then(|v| v.parse::<u64>().ok());
                n.map_or("?".to_string(), |n| n.to_string())
            };
            let _ = writeln!(
                out,
                "last cleaner pass: {} UTC ({:.0} s ago) by {}: took {} ms, {} counters scanned, \
                 {} samples removed, {} counters removed, {} stream entries trimmed",
                format_utc(at.div_euclid(1000)),
                (now_ms - at).max(0) as f64 / 1000.0,
                printable(p.get("leader").map_or("?", String::as_str)),
                get("duration_ms"),
                get("counters_scanned"),
                get("samples_removed"),
                get("counters_removed"),
                get("trimmed"),
            );
        }
        _ => {
            let _ = writeln!(out, "last cleaner pass: none recorded");
        }
    }
    out
}

/// The table of shards: one line each.
fn render_shards(out: &mut String, shards: &[Shard]) {
    let _ = writeln!(
        out,
        "{:>5}  {:<12} {:>9} {:>9} {:>9} {:>11} {:>9}  owner",
        "shard", "stream", "entries", "lag", "pending", "backlog", "consumers"
    );
    for sh in shards {
        let lag = sh.lag.map_or("?".to_string(), |l| l.to_string());
        let owner = holder(sh.owner.as_ref());
        let owner = printable(&owner);
        let _ = writeln!(
            out,
            "{:>5}  {:<12} {:>9} {:>9} {:>9} {:>9.1} s {:>9}  {owner}",
            sh.shard,
            sh.stream,
            sh.length,
            lag,
            sh.pending,
            sh.backlog_age_secs,
            sh.consumers.len()
        );
    }
}

/// Who holds a lease (the leader's, a shard's) and for how long yet.
fn holder(lease: Option<&Leader>) -> String {
    lease.map_or("none".to_string(), |l| match l.lease_left_ms {
        Some(ms) => format!("{} (lease left {:.1} s)", l.token, ms as f64 / 1000.0),
        None => format!(
            "{} (holds no lease: the next worker to try takes it over)",
            l.token
        ),
    })
}

/// Which master serves which shards and their traffic, and how to balance
/// them.
fn render_masters(out: &mut String, masters: &[MasterShards], moves: &[ShardMove]) {
    if masters.is_empty() {
        return;
    }
    let counts: Vec<String> = masters.iter().map(|m| m.shards.len().to_string()).collect();
    let _ = writeln!(out, "shards per master: {}", counts.join("/"));
    let flowed = masters.iter().any(|m| m.traffic > 0);
    for m in masters {
        let list: Vec<String> = m.shards.iter().map(u32::to_string).collect();
        let share = match flowed {
            true => format!(" ({:.0} % of the traffic)", m.traffic_share * 100.0),
            false => " (no traffic yet)".to_string(),
        };
        let _ = writeln!(
            out,
            "  master {}: shards {}{share}",
            m.master,
            list.join(", ")
        );
    }
    if moves.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  a master's work is its shards' traffic, and the master of known: also takes \
         every new counter's ZADD; to balance them, move these slots (docs/cluster.md, \
         \"Balancing\"):"
    );
    for m in moves {
        let _ = writeln!(
            out,
            "    slot {} (shard {}) from {} to {}",
            m.slot, m.shard, m.from, m.to
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::status::{over_shards, test_shard as shard};

    #[test]
    fn the_table_has_a_line_per_shard_with_its_owner() {
        let mut shards = vec![
            shard(0, Some(3), 1, 0.0, &[("a", 1, 5)]),
            shard(1, None, 0, 0.0, &[]),
            shard(2, None, 0, 0.0, &[]),
        ];
        shards[0].owner = Some(Leader {
            token: "pod-a/42".into(),
            lease_left_ms: Some(8000),
        });
        shards[1].owner = Some(Leader {
            token: "set-by-hand".into(),
            lease_left_ms: None,
        });
        let s = Status {
            stream: "hits".into(),
            exists: true,
            length: 20,
            groups: vec![over_shards("hitcount", &shards)],
            shards,
            ..Status::default()
        };
        let out = render(&s, 0);
        assert!(out.contains("stream hits: 20 entries in 3 shards"), "{out}");
        assert!(
            out.contains(
                "group hitcount: lag unknown (estimate), backlog age 0.0 s, pending 1, all shards"
            ),
            "{out}"
        );
        let lines: Vec<&str> = out.lines().filter(|l| l.contains("hits:{")).collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].ends_with("pod-a/42 (lease left 8.0 s)"), "{out}");
        assert!(
            lines[1]
                .ends_with("set-by-hand (holds no lease: the next worker to try takes it over)"),
            "{out}"
        );
        assert!(lines[2].ends_with("none"), "{out}");
    }

    #[test]
    fn a_stream_that_does_not_exist_says_so_in_one_line() {
        let s = Status {
            stream: "typo".into(),
            known_counters: 7,
            ..Status::default()
        };
        let out = render(&s, 0);
        let first = out.lines().next().unwrap();
        assert!(first.starts_with("stream typo: does not exist: "), "{out}");
        assert!(first.contains("--stream"), "{out}");
        assert!(
            !out.contains("0 entries") && !out.contains("no consumer group"),
            "{out}"
        );
        assert!(out.contains("known counters: 7"), "{out}");
        let shards: Vec<Shard> = (0..4)
            .map(|k| Shard {
                shard: k,
                stream: format!("typo:{{{k}}}"),
                ..Shard::default()
            })
            .collect();
        let s = Status {
            stream: "typo".into(),
            shards,
            ..Status::default()
        };
        let out = render(&s, 0);
        assert!(out.starts_with("stream typo: does not exist: "), "{out}");
        assert!(!out.contains("typo:{0}"), "no table of empty shards: {out}");
        assert!(!out.contains("group "), "{out}");
    }

    fn master(port: u16, shards: &[u32], traffic: u64, traffic_share: f64) -> MasterShards {
        MasterShards {
            master: format!("10.0.0.1:{port}"),
            shards: shards.to_vec(),
            traffic,
            traffic_share,
        }
    }

    #[test]
    fn which_master_serves_which_shards_and_what_to_move() {
        let held = [
            master(7000, &[3, 7, 10, 11, 14, 15], 0, 6.0 / 18.0),
            master(7001, &[0, 1, 2, 4, 5, 6, 8], 0, 7.0 / 18.0),
            master(7002, &[9, 12, 13, 16, 17], 0, 5.0 / 18.0),
        ];
        let moves = [ShardMove {
            shard: 2,
            slot: 5649,
            from: "10.0.0.1:7001".into(),
            to: "10.0.0.1:7002".into(),
        }];
        let mut out = String::new();
        render_masters(&mut out, &held, &moves);
        assert!(out.contains("shards per master: 6/7/5\n"), "{out}");
        assert!(
            out.contains("  master 10.0.0.1:7000: shards 3, 7, 10, 11, 14, 15 (no traffic yet)\n"),
            "{out}"
        );
        assert!(
            out.contains("    slot 5649 (shard 2) from 10.0.0.1:7001 to 10.0.0.1:7002\n"),
            "{out}"
        );
        // Nothing to move: no advice.
        let mut out = String::new();
        render_masters(&mut out, &held, &[]);
        assert!(!out.contains("move these slots"), "{out}");
        // Not on a cluster: nothing at all.
        let mut out = String::new();
        render_masters(&mut out, &[], &moves);
        assert!(out.is_empty(), "{out}");
    }

    #[test]
    fn once_hits_flowed_each_master_shows_its_share() {
        let held = [
            master(7000, &[3, 7, 10, 11, 14, 15], 1000, 0.5),
            master(7001, &[0, 1, 2, 4, 5], 500, 0.25),
            master(7002, &[6, 8, 9, 12, 13], 500, 0.25),
        ];
        let mut out = String::new();
        render_masters(&mut out, &held, &[]);
        assert!(
            out.contains(
                "  master 10.0.0.1:7000: shards 3, 7, 10, 11, 14, 15 (50 % of the traffic)\n"
            ),
            "{out}"
        );
        assert!(!out.contains("no traffic yet"), "{out}");
    }
}
