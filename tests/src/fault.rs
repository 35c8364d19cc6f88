//! A fault proxy: a TCP forwarder per directed link (node `a` reaches node `b` through the
//! proxy of `(a, b)`), whose [`Fault`] a test changes while connections are open.
//!
//! - [`Fault::Cut`]: open connections are closed and new ones closed at once: the peer sees
//!   resets and refused requests (a crashed host, a firewall that rejects);
//! - [`Fault::Drop`]: nothing passes either way, connections stay open: the peer sees
//!   timeouts (a silent partition, every packet lost). Bytes already sent are held and
//!   delivered after the heal, as TCP retransmission would;
//! - [`Fault::Delay`]: every chunk is delivered `base + U(0..=jitter)` after it was read,
//!   in order (latency, not a bandwidth cap); the jitter comes from a seeded [`TestRng`].
//!
//! Each connection is two pumps (one per direction), each a reader that timestamps chunks into
//! a bounded queue ([`QUEUE_CHUNKS`] chunks of at most [`CHUNK_BYTES`]) and a writer that
//! delivers them when the fault allows; a full queue stops the reader, so memory per
//! connection is bounded and back-pressure reaches the sender. [`ProxyStats`] counts
//! connections and bytes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::rng::TestRng;

/// Bytes read from a socket at once.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks queued per direction of a connection before the reader waits.
pub const QUEUE_CHUNKS: usize = 64;

/// What a link does to its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything at once.
    #[default]
    None,
    /// Close every connection; refuse new ones (accept and close).
    Cut,
    /// Forward nothing; keep connections open; deliver what was held after the heal.
    Drop,
    /// Deliver each chunk `base` plus up to `jitter` after it was read, in order.
    Delay { base: Duration, jitter: Duration },
}

/// Counters of one proxy (monotonic since start).
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections forwarded to the target.
    pub connections: AtomicU64,
    /// Connections closed at accept because the link was cut.
    pub refused: AtomicU64,
    /// Bytes delivered to the target.
    pub bytes_to_target: AtomicU64,
    /// Bytes delivered back to the connecting side.
    pub bytes_from_target: AtomicU64,
}

/// A TCP proxy on a loopback port forwarding to one target, with a changeable [`Fault`].
/// Stops (closing its connections) when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    /// The loopback port to connect to instead of the target.
    pub port: u16,
    fault: watch::Sender<Fault>,
    stats: Arc<ProxyStats>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Closing the sender ends every pump (they treat a closed channel as Cut).
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `target` (`host:port`), with no
    /// fault. Delay jitter is drawn from `rng`.
    pub async fn start(target: String, rng: TestRng) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (fault, fault_rx) = watch::channel(Fault::None);
        let stats = Arc::new(ProxyStats::default());
        let rng = Arc::new(Mutex::new(rng));
        let task = tokio::spawn(accept_loop(listener, target, fault_rx, stats.clone(), rng));
        FaultProxy {
            port,
            fault,
            stats,
            task,
        }
    }

    /// Sets the link's fault; takes effect at once on open connections.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// The link's current fault.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// This proxy's counters.
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: String,
    fault: watch::Receiver<Fault>,
    stats: Arc<ProxyStats>,
    rng: Arc<Mutex<TestRng>>,
) {
    while let Ok((inbound, _)) = listener.accept().await {
        if *fault.borrow() == Fault::Cut {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            drop(inbound);
            continue;
        }
        let (target, fault, stats, rng) =
            (target.clone(), fault.clone(), stats.clone(), rng.clone());
        tokio::spawn(async move {
            let Ok(outbound) = TcpStream::connect(&target).await else {
                return;
            };
            stats.connections.fetch_add(1, Ordering::Relaxed);
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (in_rd, in_wr) = inbound.into_split();
            let (out_rd, out_wr) = outbound.into_split();
            let up = pump(
                in_rd,
                out_wr,
                fault.clone(),
                rng.clone(),
                stats.clone(),
                true,
            );
            let down = pump(out_rd, in_wr, fault, rng, stats, false);
            // Either direction ending (EOF, error, cut) ends the connection both ways.
            tokio::select! {
                _ = up => {}
                _ = down => {}
            }
        });
    }
}

/// Forwards one direction until EOF, an error or a cut.
async fn pump(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    fault: watch::Receiver<Fault>,
    rng: Arc<Mutex<TestRng>>,
    stats: Arc<ProxyStats>,
    to_target: bool,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE_CHUNKS);
    let mut read_fault = fault.clone();
    let reader = async move {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let n = tokio::select! {
                r = rd.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
                _ = read_fault.wait_for(|f| *f == Fault::Cut) => return,
            };
            if tx.send((Instant::now(), buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    let writer = async move {
        let mut fault = fault;
        let mut last_delivery = Instant::now();
        while let Some((read_at, chunk)) = rx.recv().await {
            // Wait until the fault lets this chunk through (bounded by the test's own
            // deadlines: a Drop lasts as long as the test keeps it).
            let deliver_at = loop {
                let current = *fault.borrow_and_update();
                match current {
                    Fault::None => break Instant::now(),
                    Fault::Cut => return,
                    Fault::Drop => {
                        if fault.changed().await.is_err() {
                            return;
                        }
                    }
                    Fault::Delay { base, jitter } => {
                        let extra = rng.lock().unwrap().duration_up_to(jitter);
                        break read_at + base + extra;
                    }
                }
            };
            // In order: never before the previous chunk.
            last_delivery = last_delivery.max(deliver_at);
            tokio::select! {
                _ = tokio::time::sleep_until(last_delivery) => {}
                _ = fault.wait_for(|f| *f == Fault::Cut) => return,
            }
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
            let counter = if to_target {
                &stats.bytes_to_target
            } else {
                &stats.bytes_from_target
            };
            counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    };
    tokio::select! {
        _ = reader => {}
        _ = writer => {}
    }
}

/// One [`FaultProxy`] per directed link between nodes `1..=n`: node `a` reaches node `b` at
/// `127.0.0.1:<port(a, b)>`.
#[derive(Debug)]
pub struct Links {
    proxies: BTreeMap<(u64, u64), FaultProxy>,
}

impl Links {
    /// Proxies for every ordered pair `(a, b)`, `a != b`, of `1..=n`, where `addr(b)` is node
    /// `b`'s real address. Each proxy's jitter comes from its own generator forked from `rng`.
    pub async fn start(n: u64, addr: impl Fn(u64) -> String, rng: &mut TestRng) -> Links {
        let mut proxies = BTreeMap::new();
        for a in 1..=n {
            for b in (1..=n).filter(|b| *b != a) {
                let fork = TestRng::new(rng.next_u64());
                proxies.insert((a, b), FaultProxy::start(addr(b), fork).await);
            }
        }
        Links { proxies }
    }

    /// The port node `a` uses to reach node `b`.
    pub fn port(&self, a: u64, b: u64) -> u16 {
        self.proxies[&(a, b)].port
    }

    /// The proxy of link `a -> b`.
    pub fn link(&self, a: u64, b: u64) -> &FaultProxy {
        &self.proxies[&(a, b)]
    }

    /// Sets `fault` on link `a -> b` only (one direction).
    pub fn set(&self, a: u64, b: u64, fault: Fault) {
        self.link(a, b).set(fault);
    }

    /// Sets `fault` on every link to and from `node`.
    pub fn isolate(&self, node: u64, fault: Fault) {
        for ((a, b), p) in &self.proxies {
            if *a == node || *b == node {
                p.set(fault);
            }
        }
    }

    /// Clears every fault.
    pub fn heal(&self) {
        for p in self.proxies.values() {
            p.set(Fault::None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; returns its address.
    async fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(within, s.read_exact(&mut got))
            .await
            .ok()?
            .ok()?;
        Some(got)
    }

    #[tokio::test]
    async fn forwards_cuts_drops_and_delays() {
        let p = FaultProxy::start(echo().await, TestRng::new(1)).await;
        let addr = format!("127.0.0.1:{}", p.port);
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let second = Duration::from_secs(1);
        assert_eq!(
            round_trip(&mut s, b"hello", second).await.unwrap(),
            b"hello"
        );

        // Drop: nothing comes back, the connection stays open; after the heal the held bytes
        // arrive in order.
        p.set(Fault::Drop);
        assert_eq!(
            round_trip(&mut s, b"lost?", Duration::from_millis(200)).await,
            None
        );
        p.set(Fault::None);
        let mut got = vec![0u8; 5];
        tokio::time::timeout(second, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"lost?");

        // Delay: each direction adds 50..=60 ms.
        p.set(Fault::Delay {
            base: Duration::from_millis(50),
            jitter: Duration::from_millis(10),
        });
        let t = std::time::Instant::now();
        assert_eq!(round_trip(&mut s, b"slow", second).await.unwrap(), b"slow");
        let rtt = t.elapsed();
        assert!(rtt >= Duration::from_millis(100), "{rtt:?}");

        // Cut: the open connection is closed and a new one is closed at once.
        p.set(Fault::Cut);
        let mut buf = [0u8; 1];
        let r = tokio::time::timeout(second, s.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        let mut fresh = TcpStream::connect(&addr).await.unwrap();
        let r = tokio::time::timeout(second, fresh.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        assert!(p.stats().refused.load(Ordering::Relaxed) >= 1);

        p.set(Fault::None);
        let mut again = TcpStream::connect(&addr).await.unwrap();
        assert_eq!(
            round_trip(&mut again, b"back", second).await.unwrap(),
            b"back"
        );
        assert_eq!(p.stats().connections.load(Ordering::Relaxed), 2);
        assert_eq!(
            p.stats().bytes_to_target.load(Ordering::Relaxed),
            (5 + 5 + 4 + 4) as u64
        );
    }

    #[tokio::test]
    async fn links_isolate_one_node_both_ways() {
        let targets = [echo().await, echo().await, echo().await];
        let links =
            Links::start(3, |b| targets[b as usize - 1].clone(), &mut TestRng::new(2)).await;
        links.isolate(2, Fault::Cut);
        for (a, b) in [(1, 2), (2, 1), (2, 3), (3, 2)] {
            assert_eq!(links.link(a, b).fault(), Fault::Cut, "{a}->{b}");
        }
        assert_eq!(links.link(1, 3).fault(), Fault::None);
        let mut s = TcpStream::connect(("127.0.0.1", links.port(1, 3)))
            .await
            .unwrap();
        assert!(
            round_trip(&mut s, b"x", Duration::from_secs(1))
                .await
                .is_some()
        );
        links.heal();
        assert_eq!(links.link(2, 1).fault(), Fault::None);
    }
}
