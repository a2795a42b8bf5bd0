//! StatsD in `hitcount ingest` (`HITCOUNT_STATSD_LISTEN`; empty, the
//! default, is off): UDP datagrams and TCP streams of StatsD lines on one
//! address, each line read by [`crate::model::statsd`] and its hit handed
//! to the [`Producer`], which appends it exactly once (its numbered
//! batches survive a lost reply).
//!
//! UDP is lossy by nature: what was received is counted once, and what was
//! not is measured. Two places drop: the socket's receive buffer, when
//! ingest reads too slowly (the kernel's count for this socket, from
//! `/proc/net/udp`, in `hitcount_statsd_dropped_total{where="socket"}`),
//! and the producer's bounded buffer while Redis is slow or away
//! (`where="queue"`). Lines of a type hitcount does not count are counted
//! by type (`hitcount_statsd_lines_ignored_total`), bad lines by reason
//! (`hitcount_statsd_lines_refused_total`), hits taken in
//! `hitcount_statsd_hits_total`. Drops are logged too, at WARN: at once,
//! then at most once a [`DROPS_LOGGED_EVERY`] with the drops since the
//! last line (and once more as ingest stops), never a line per drop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::edge::peers::Peers;
use crate::edge::server::Limits;
use crate::model::metrics::metrics;
use crate::model::shutdown::Shutdown;
use crate::model::statsd::{self, Line};
use crate::model::tally::Tally;
use crate::service::producer::Producer;

/// Largest datagram (and longest line on TCP): UDP's own bound.
const MAX_PACKET: usize = 65_536;
/// TCP connections served at once, of which 16 from one address (as
/// HTTP's, [`crate::edge::server::Limits`]); more are closed at once.
const MAX_TCP: usize = 256;
/// A TCP stream that sends nothing for this long is closed: idle streams
/// cannot hold the places for ever.
const TCP_IDLE: Duration = Duration::from_secs(60);
/// How often the socket's drops are read from the kernel.
const DROPS_EVERY: Duration = Duration::from_secs(1);
/// Drops are logged at most this often (a running total since the last
/// line): a flood of drops is one line a minute, not one a drop.
const DROPS_LOGGED_EVERY: Duration = Duration::from_secs(60);

/// Drops not logged yet: hits the producer's full buffer dropped, and
/// datagrams the socket's full buffer dropped.
static DROPS: Tally<2> = Tally::new(DROPS_LOGGED_EVERY);

/// Logs the drops since the last line, if any: `totals` of [`DROPS`].
fn log_drops(totals: Option<[u64; 2]>) {
    if let Some([queue_hits, socket_datagrams]) = totals {
        tracing::warn!(
            queue_hits,
            socket_datagrams,
            "statsd: dropped since the last report (queue: the producer's buffer was full, \
             Redis slow or away; socket: ingest read too slowly)"
        );
    }
}

/// Takes StatsD lines on `udp` and `tcp` (bound to one address) until
/// `stop` is triggered, each hit through `producer`.
pub(crate) async fn serve(
    udp: UdpSocket,
    tcp: TcpListener,
    producer: Producer,
    mut stop: Shutdown,
) -> std::io::Result<()> {
    let producer = Arc::new(producer);
    let drops = tokio::spawn(watch_drops(socket_inode(&udp), stop.clone()));
    let streams = tokio::spawn(accept(tcp, producer.clone(), stop.clone()));
    let mut buf = vec![0u8; MAX_PACKET];
    loop {
        let n = tokio::select! {
            () = stop.wait() => break,
            got = udp.recv_from(&mut buf) => match got {
                Ok((n, _)) => n,
                Err(e) => {
                    tracing::debug!(error = %e, "statsd receive failed");
                    continue;
                }
            },
        };
        take(&buf[..n], &producer);
    }
    streams.abort();
    drops.abort();
    log_drops(DROPS.flush());
    Ok(())
}

/// Accepts TCP connections, each read line by line.
async fn accept(tcp: TcpListener, producer: Arc<Producer>, mut stop: Shutdown) {
    let peers = Peers::new(MAX_TCP, Limits::default().max_connections_per_peer);
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.wait() => return,
            got = tcp.accept() => match got {
                Ok(conn) => conn,
                Err(e) => {
                    crate::edge::server::accept_failed("statsd", &e).await;
                    continue;
                }
            },
        };
        let Some(slot) = peers.admit(peer.ip()) else {
            continue;
        };
        let (producer, stop) = (producer.clone(), stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            read_stream(stream, &producer, stop).await;
        });
    }
}

/// One TCP stream's lines, until it ends, sends nothing for [`TCP_IDLE`]
/// or shutdown (a last line without a newline is taken only when the
/// stream ended cleanly: see [`cut_off`]). A line longer than [`MAX_PACKET`] is refused as
/// `line_too_long` (whether it came whole or a byte at a time) and the
/// lines after it are read.
async fn read_stream(mut stream: TcpStream, producer: &Producer, mut stop: Shutdown) {
    let mut pending: Vec<u8> = Vec::with_capacity(MAX_PACKET);
    let mut buf = vec![0u8; MAX_PACKET];
    // In a line too long, refused already: its bytes up to its end are dropped.
    let mut skipping = false;
    loop {
        let n = tokio::select! {
            () = stop.wait() => return cut_off(&pending),
            got = tokio::time::timeout(TCP_IDLE, stream.read(&mut buf)) => match got {
                Ok(Ok(n)) => n,
                // Reset or idle: a last line without its newline may be
                // only the start of one (`a:5|c` of `a:5|c|@0.1`).
                _ => return cut_off(&pending),
            },
        };
        if n == 0 {
            // Ended cleanly: the last line needs no newline.
            take(&pending, producer);
            return;
        }
        let mut read = &buf[..n];
        if skipping {
            let Some(end) = read.iter().position(|&b| b == b'\n') else {
                continue;
            };
            (read, skipping) = (&read[end + 1..], false);
        }
        pending.extend_from_slice(read);
        if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
            take(&pending[..end], producer);
            pending.drain(..=end);
        }
        if pending.len() > MAX_PACKET {
            metrics().statsd_refusal(TOO_LONG);
            pending.clear();
            skipping = true;
        }
    }
}

/// Why a line longer than [`MAX_PACKET`] is refused.
const TOO_LONG: &str = "line_too_long";

/// A stream's last line, left without its newline by a reset, an idle
/// stream or ingest's shutdown: refused as `cut_off`, never taken whole.
fn cut_off(pending: &[u8]) {
    if !pending.trim_ascii().is_empty() {
        metrics().statsd_refusal("cut_off");
    }
}

/// Every line of `packet`: its hit to the producer, or counted.
fn take(packet: &[u8], producer: &Producer) {
    let m = metrics();
    for line in packet.split(|&b| b == b'\n') {
        if line.is_empty() || line == b"\r" {
            continue;
        }
        if line.len() > MAX_PACKET {
            m.statsd_refusal(TOO_LONG);
            continue;
        }
        match statsd::read(line) {
            Ok(Line::Hit(name, count, value)) => {
                let dropped = producer.stats().dropped.load(Ordering::Relaxed);
                match value {
                    Some(v) => producer.observe_at(name, count, None, v),
                    None => producer.hit_n(name, count),
                }
                if producer.stats().dropped.load(Ordering::Relaxed) > dropped {
                    m.statsd_dropped.with_label_values(&["queue"]).inc();
                    log_drops(DROPS.add([1, 0]));
                } else {
                    m.statsd_hits.inc();
                }
            }
            Ok(Line::Ignored(kind)) => m.statsd_ignored.with_label_values(&[kind]).inc(),
            Err(bad) => m.statsd_refusal(bad.reason()),
        }
    }
}

/// The inode of `udp`'s socket, which names it in `/proc/net/udp`.
fn socket_inode(udp: &UdpSocket) -> Option<u64> {
    use std::os::fd::AsRawFd as _;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", udp.as_raw_fd())).ok()?;
    let link = link.to_str()?;
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Every [`DROPS_EVERY`], adds what the kernel dropped of this socket's
/// datagrams since the last look (its buffer full) to the metric, and
/// logs the drops not logged yet when it is time.
async fn watch_drops(inode: Option<u64>, mut stop: Shutdown) {
    if inode.is_none() {
        tracing::warn!("cannot find the StatsD socket in /proc: its drops are not measured");
    }
    let mut seen = inode.and_then(kernel_drops).unwrap_or(0);
    loop {
        tokio::select! {
            () = stop.wait() => return,
            () = tokio::time::sleep(DROPS_EVERY) => {}
        }
        let mut socket = 0;
        if let Some(now) = inode.and_then(kernel_drops) {
            socket = now.saturating_sub(seen);
            metrics()
                .statsd_dropped
                .with_label_values(&["socket"])
                .inc_by(socket);
            seen = now;
        }
        log_drops(DROPS.add([0, socket]));
    }
}

/// The `drops` column of the socket `inode` in `/proc/net/udp` or `udp6`.
fn kernel_drops(inode: u64) -> Option<u64> {
    ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            text.lines().skip(1).find_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                (cols.get(9)?.parse::<u64>().ok()? == inode).then(|| cols.last()?.parse().ok())?
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel names this process' own socket, with its drops.
    #[tokio::test]
    async fn the_kernel_counts_this_sockets_drops() {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let inode = socket_inode(&udp).expect("a socket inode");
        assert_eq!(kernel_drops(inode), Some(0));
        assert_eq!(kernel_drops(u64::MAX), None);
    }
}
