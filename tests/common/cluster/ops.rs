//! What tests do to a running cluster: kill a master and wait for its
//! replica to take over, and move a slot live from one master to another.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::node::{field_of, info_text, kill_node, query};
use super::{Cluster, CONVERGE_TIMEOUT, MIGRATE_BATCH, POLL};

impl Cluster {
    /// SIGKILLs the master serving `key` and waits until one of its replicas
    /// serves that slot and every surviving node agrees and reports
    /// `cluster_state:ok`; returns the time from the kill until then.
    pub async fn kill_master_of(&self, key: &str) -> Duration {
        let slot = self.slot_of(key);
        let old = self.owner_of(slot);
        let heirs = self.replicas_of(old);
        assert!(
            !heirs.is_empty(),
            "the master {old} of {key:?} has no replica"
        );
        let t0 = Instant::now();
        self.kill(old);
        let deadline = t0 + CONVERGE_TIMEOUT;
        loop {
            match self.failed_over(slot, &heirs) {
                Ok(()) => return t0.elapsed(),
                Err(why) if Instant::now() > deadline => panic!(
                    "no failover of slot {slot} from {old} within {CONVERGE_TIMEOUT:?}: {why}\n{}",
                    self.diagnostics()
                ),
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    fn failed_over(&self, slot: u16, heirs: &[u16]) -> Result<(), String> {
        let mut owners = BTreeSet::new();
        for n in self.running() {
            let info = info_text(n.port, "CLUSTER", "INFO")?;
            if field_of(&info, "cluster_state").as_deref() != Some("ok") {
                return Err(format!("node {} not ok", n.port));
            }
            let view = self.view_from(n.port)?;
            let owner = view.iter().find(|v| v.is_master() && v.owns(slot));
            owners.insert(owner.map(|v| v.port));
        }
        match owners.into_iter().collect::<Vec<_>>()[..] {
            [Some(p)] if heirs.contains(&p) => Ok(()),
            ref other => Err(format!("owners seen: {other:?}")),
        }
    }

    /// SIGKILLs the node on `port` and reaps it.
    pub fn kill(&self, port: u16) {
        let node = self
            .nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node's port");
        kill_node(node);
    }

    /// Moves `slot` live to the master on `to`: IMPORTING/MIGRATING,
    /// `MIGRATE … KEYS` in batches of what `CLUSTER GETKEYSINSLOT` lists
    /// (yielding between batches), then `SETSLOT NODE` on the target, the
    /// source and the other masters; waits until every running node sees
    /// `to` as the owner. Returns how many keys moved.
    pub async fn migrate_slot(&self, slot: u16, to: u16) -> usize {
        self.migrate_slot_paced(slot, to, MIGRATE_BATCH, Duration::ZERO)
            .await
    }

    /// [`Cluster::migrate_slot`] moving `batch` keys per MIGRATE and
    /// sleeping `pause` between batches, so the slot stays half-moved (keys
    /// on both sides, ASK redirects) for as long as a test needs.
    pub async fn migrate_slot_paced(
        &self,
        slot: u16,
        to: u16,
        batch: usize,
        pause: Duration,
    ) -> usize {
        assert!(batch > 0, "a batch moves at least one key");
        let from = self.owner_of(slot);
        if from == to {
            return 0;
        }
        let view = self.view();
        let id = |port: u16| {
            view.iter()
                .find(|v| v.port == port)
                .expect("known")
                .id
                .clone()
        };
        let (from_id, to_id) = (id(from), id(to));
        let setslot = |port: u16, how: &str, node: &str| {
            let cmd = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(node)
                .clone();
            let _: () =
                query(port, &cmd).unwrap_or_else(|e| panic!("SETSLOT {slot} {how} on {port}: {e}"));
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = self.ask_node(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch),
            );
            if keys.is_empty() {
                break;
            }
            let mut cmd = redis::cmd("MIGRATE");
            cmd.arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(2000)
                .arg("KEYS")
                .arg(&keys);
            let reply: String = self.ask_node(from, &cmd);
            assert!(reply == "OK" || reply == "NOKEY", "MIGRATE replied {reply}");
            moved += keys.len();
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(pause).await;
            }
        }
        setslot(to, "NODE", &to_id);
        setslot(from, "NODE", &to_id);
        for m in self.masters().into_iter().filter(|&p| p != to && p != from) {
            setslot(m, "NODE", &to_id);
        }
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while !self.running().all(|n| {
            self.view_from(n.port).is_ok_and(|view| {
                view.iter().any(|v| v.port == to && v.owns(slot))
                    && !view.iter().any(|v| v.port != to && v.owns(slot))
            })
        }) {
            assert!(
                Instant::now() < deadline,
                "slot {slot} not seen on {to} by every node within {CONVERGE_TIMEOUT:?}\n{}",
                self.diagnostics()
            );
            tokio::time::sleep(POLL).await;
        }
        moved
    }
}
