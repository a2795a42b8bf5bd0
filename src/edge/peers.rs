//! The connections a server holds, in all and per client, and who may
//! open one more (the HTTP loop of [`super::server`], and StatsD over TCP).
//! Each client (an IPv4 address, or an IPv6 /64: [`client`]) holds a share
//! of the places, and the last quarter is kept for clients that hold none.
//! When every place is taken, a new client's connection closes the one
//! that has waited longest without a request under way (for headers that
//! trickle in, or idle between requests: [`Slot::set_busy`]), so however
//! many addresses hold a slow connection each, a probe from another still
//! gets in.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a connection that closed another to make room waits for its
/// place to come free.
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// The connections open, in all (the semaphore's permits) and per
/// client, and who may open one more.
pub(crate) struct Peers {
    permits: Arc<Semaphore>,
    per_peer: usize,
    /// Permits kept for clients that hold no connection yet.
    reserve: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
    /// The connections with no request under way, oldest first, each with
    /// what closes it.
    waiting: Mutex<BTreeMap<u64, Arc<Notify>>>,
    admitted: AtomicU64,
}

/// One admitted connection; frees its place on drop.
pub(crate) struct Slot {
    peers: Arc<Peers>,
    ip: IpAddr,
    id: u64,
    /// Told when the connection is to close to make room.
    evict: Arc<Notify>,
    /// A request of the connection is under way.
    busy: AtomicBool,
    _permit: OwnedSemaphorePermit,
}

impl Peers {
    /// `max` places, of which `per_peer` for one client (see
    /// [`super::server::Limits`]).
    pub(crate) fn new(max: usize, per_peer: usize) -> Arc<Peers> {
        let max = max.max(1);
        Arc::new(Peers {
            permits: Arc::new(Semaphore::new(max)),
            per_peer: per_peer.max(1),
            reserve: max / 4,
            open: Mutex::new(HashMap::new()),
            waiting: Mutex::new(BTreeMap::new()),
            admitted: AtomicU64::new(0),
        })
    }

    /// A place for one more connection from `ip`, unless it holds its
    /// share already, every place is taken, or only the reserve is left
    /// and `ip` holds one.
    pub(crate) fn admit(self: &Arc<Peers>, ip: IpAddr) -> Option<Slot> {
        let ip = client(ip);
        let mut open = lock(&self.open);
        let held = open.get(&ip).copied().unwrap_or(0);
        let free = self.permits.available_permits();
        if held >= self.per_peer || (held > 0 && free <= self.reserve) {
            return None;
        }
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        Some(self.seat(&mut open, ip, permit))
    }

    /// The slot of a connection from client `ip` that got `permit`.
    fn seat(
        self: &Arc<Peers>,
        open: &mut HashMap<IpAddr, usize>,
        ip: IpAddr,
        permit: OwnedSemaphorePermit,
    ) -> Slot {
        *open.entry(ip).or_default() += 1;
        let slot = Slot {
            peers: self.clone(),
            ip,
            id: self.admitted.fetch_add(1, Ordering::Relaxed),
            evict: Arc::new(Notify::new()),
            busy: false.into(),
            _permit: permit,
        };
        slot.set_busy(false);
        slot
    }

    /// [`Peers::admit`], or, when every place is taken and `ip` holds none,
    /// the place of the connection that has waited longest with no request
    /// under way, which is closed for it: the places so freed go to those
    /// who asked, in turn, within [`ROOM_WAIT`].
    pub(crate) async fn admit_or_make_room(self: &Arc<Peers>, ip: IpAddr) -> Option<Slot> {
        if let Some(slot) = self.admit(ip) {
            return Some(slot);
        }
        let ip = client(ip);
        if lock(&self.open).contains_key(&ip) || self.permits.available_permits() > 0 {
            return None;
        }
        let oldest = lock(&self.waiting).pop_first()?;
        oldest.1.notify_one();
        let permit = tokio::time::timeout(ROOM_WAIT, self.permits.clone().acquire_owned());
        let Ok(Ok(permit)) = permit.await else {
            return None;
        };
        let mut open = lock(&self.open);
        // Its share is checked again: it may have been given places since.
        match open.get(&ip).copied().unwrap_or(0) < self.per_peer {
            true => Some(self.seat(&mut open, ip, permit)),
            false => None,
        }
    }

    /// Resolves once all `max` places are free (every connection closed).
    pub(crate) async fn all_closed(&self, max: u32) {
        let _ = self.permits.acquire_many(max).await;
    }
}

impl Slot {
    /// Marks a request of this connection under way (`busy`), or none: only
    /// a connection with none may be closed to make room.
    pub(crate) fn set_busy(&self, busy: bool) {
        let mut waiting = lock(&self.peers.waiting);
        self.busy.store(busy, Ordering::Relaxed);
        match busy {
            true => waiting.remove(&self.id),
            false => waiting.insert(self.id, self.evict.clone()),
        };
    }

    /// Resolves once this connection is to close to make room.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// Whether a request of this connection is under way.
    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.peers.waiting).remove(&self.id);
        let mut open = lock(&self.peers.open);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The client an address belongs to, as the limits per client count it:
/// an IPv4 address (IPv4-mapped IPv6 included) alone, an IPv6 address by
/// its /64, the network one host is given (it may take any address in
/// it: counted apart, they would each have a share).
pub(crate) fn client(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv6 host may take any address of its /64: its connections are
    /// counted together, an IPv4 address (mapped or not) alone.
    #[test]
    fn one_client_is_an_ipv4_address_or_an_ipv6_slash_64() {
        let peers = Peers::new(256, 2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held: Vec<Slot> = ["2001:db8::1", "2001:db8::ffff:1"]
            .iter()
            .map(|a| peers.admit(ip(a)).expect("admitted"))
            .collect();
        assert!(
            peers.admit(ip("2001:db8::1:2:3:4")).is_none(),
            "the same /64"
        );
        assert!(peers.admit(ip("2001:db8:0:1::1")).is_some(), "another /64");
        assert_eq!(client(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(client(ip("10.0.0.7")), ip("10.0.0.7"));
        drop(held);
        assert!(
            peers.admit(ip("2001:db8::9")).is_some(),
            "places given back"
        );
    }
}
