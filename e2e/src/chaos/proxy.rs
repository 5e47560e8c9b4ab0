//! A fault proxy: a TCP proxy on loopback in front of one target address, whose behaviour
//! changes over time as a seeded [`Schedule`] says.
//!
//! Faults work on the byte stream, below TLS and HTTP/2:
//!
//! - [`Fault::Delay`]: every chunk read in either direction waits before it is forwarded;
//! - [`Fault::Hold`]: nothing is forwarded while it lasts, connections stay open (a stalled
//!   peer, a partition that TCP does not notice);
//! - [`Fault::Cut`]: every open connection is closed on both sides; one carrying data is cut in
//!   the middle of a chunk (only a prefix of what was read is forwarded), so the peer sees half a
//!   frame and then the end of the stream;
//! - [`Fault::Refuse`]: new connections are reset at once while it lasts.
//!
//! Reordering and duplication are left out on purpose: TCP delivers bytes in order exactly once,
//! and a reordered or repeated byte range inside a TLS or HTTP/2 stream is a corrupt stream that
//! the peer rejects at once, which is just a cut with extra steps. Reordered or duplicated
//! *messages* would have to be injected above the transport (in the gRPC layer), not here.
//!
//! Replay: the schedule (which fault, when, for how long, where a cut falls) is a pure function
//! of the seed; the traffic it meets depends on the processes' timing, so a replay injects the
//! same faults at the same offsets, not the same bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Error;

/// One fault the proxy can inject.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Forward every chunk after this added latency.
    Delay(Duration),
    /// Forward nothing; keep the connections open.
    Hold,
    /// Close every open connection; one that carries data within the fault's duration forwards
    /// only this fraction (0..1) of that chunk, then closes. One that carries nothing is closed
    /// at the end of the fault's duration.
    Cut {
        /// The part of the chunk forwarded before closing.
        fraction: f64,
    },
    /// Reset new connections.
    Refuse,
}

impl Fault {
    /// A short name, for counting faults by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Delay(_) => "delay",
            Fault::Hold => "hold",
            Fault::Cut { .. } => "cut",
            Fault::Refuse => "refuse",
        }
    }
}

/// One step of a schedule: `fault` from `at` (since the schedule started) for `lasting`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// When it starts, from the start of the schedule.
    pub at: Duration,
    /// The fault.
    pub fault: Fault,
    /// How long it lasts (for a cut: how long an idle connection may wait for data to cut).
    pub lasting: Duration,
}

/// Faults over time, made from a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The steps, in time order, never overlapping.
    pub steps: Vec<Step>,
}

impl Schedule {
    /// A schedule of `span` from `seed`: quiet gaps of 0.2-2 s between faults of 0.2-3 s, each
    /// kind equally likely.
    pub fn generate(seed: u64, span: Duration) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        Schedule::generate_with(&mut rng, span)
    }

    /// The same from a caller's generator (a chaos run draws several schedules from one seed).
    pub fn generate_with(rng: &mut StdRng, span: Duration) -> Schedule {
        let mut steps = Vec::new();
        let mut at = Duration::from_millis(rng.random_range(200..2000));
        while at < span {
            let lasting = Duration::from_millis(rng.random_range(200..3000));
            let fault = match rng.random_range(0..4u8) {
                0 => Fault::Delay(Duration::from_millis(rng.random_range(20..400))),
                1 => Fault::Hold,
                2 => Fault::Cut {
                    fraction: rng.random_range(0.0..1.0),
                },
                _ => Fault::Refuse,
            };
            steps.push(Step { at, fault, lasting });
            at += lasting + Duration::from_millis(rng.random_range(200..2000));
        }
        Schedule { steps }
    }
}

/// What the connections currently do.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Pass,
    Delay(Duration),
    Hold,
    Refuse,
}

/// What a proxy has done, for the run's report.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections accepted and forwarded.
    pub connections: AtomicU64,
    /// Connections reset because of [`Fault::Refuse`].
    pub refused: AtomicU64,
    /// Connections closed by a [`Fault::Cut`].
    pub cut: AtomicU64,
    /// Of those, the ones cut in the middle of a chunk.
    pub cut_mid_chunk: AtomicU64,
    /// Chunks delayed by [`Fault::Delay`].
    pub delayed_chunks: AtomicU64,
    /// Chunks held back by [`Fault::Hold`].
    pub held_chunks: AtomicU64,
}

impl Counters {
    /// Each counter with its name in the run's report.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        loaded(&[
            ("connections", &self.connections),
            ("refused", &self.refused),
            ("cut", &self.cut),
            ("cut mid-chunk", &self.cut_mid_chunk),
            ("held chunks", &self.held_chunks),
            ("delayed chunks", &self.delayed_chunks),
        ])
    }
}

/// The values of named counters, for the run's report.
pub(crate) fn loaded(counters: &[(&'static str, &AtomicU64)]) -> Vec<(&'static str, u64)> {
    counters
        .iter()
        .map(|(name, counter)| (*name, counter.load(Ordering::Relaxed)))
        .collect()
}

struct Shared {
    mode: watch::Sender<Mode>,
    /// Bumped by every cut; a connection is cut when it sees a value above the one it started
    /// with. The latest cut's fraction and how long it waits for data are kept next to it.
    cuts: watch::Sender<Cut>,
    counters: Counters,
}

/// The latest cut: its number, fraction and how long an idle connection waits for data to cut.
#[derive(Clone, Copy, Debug, Default)]
struct Cut {
    number: u64,
    fraction: f64,
    wait: Duration,
}

/// A running fault proxy; dropping it stops accepting (open connections end with their peers).
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: ProxyTasks,
}

/// A proxy's background tasks: the one serving and the one playing a schedule, if any. Both
/// stop when it is dropped.
pub(crate) struct ProxyTasks {
    serving: JoinHandle<()>,
    player: Option<JoinHandle<()>>,
}

impl ProxyTasks {
    pub(crate) fn new(serving: JoinHandle<()>) -> ProxyTasks {
        ProxyTasks {
            serving,
            player: None,
        }
    }

    /// Stops the schedule being played, if any.
    pub(crate) fn stop_playing(&mut self) {
        if let Some(p) = self.player.take() {
            p.abort();
        }
    }

    /// Takes `player`, a schedule's task, in place of the one being played.
    pub(crate) fn play(&mut self, player: JoinHandle<()>) {
        self.stop_playing();
        self.player = Some(player);
    }

    /// Plays timed steps ([`timed_steps`]) from now on, in place of the schedule being played:
    /// `set(Some(fault))` when a step starts, `set(None)` when it ends.
    pub(crate) fn play_steps<F: Send + 'static>(
        &mut self,
        steps: Vec<(Duration, Duration, F)>,
        set: impl Fn(Option<F>) + Send + 'static,
    ) {
        self.play(tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            for (at, lasting, fault) in steps {
                tokio::time::sleep_until(start + at).await;
                set(Some(fault));
                tokio::time::sleep(lasting).await;
                set(None);
            }
        }));
    }
}

/// Steps (start, length, what `draw` gave) over `span`: the first starts `first` ms in, each
/// lasts `lasting` ms and the next starts `gap` ms after it ends, all drawn from `rng` in that
/// order (so that a seed keeps its schedule).
pub(crate) fn timed_steps<F>(
    rng: &mut StdRng,
    span: Duration,
    first: std::ops::Range<u64>,
    lasting: std::ops::Range<u64>,
    gap: std::ops::Range<u64>,
    mut draw: impl FnMut(&mut StdRng) -> F,
) -> Vec<(Duration, Duration, F)> {
    let mut steps = Vec::new();
    let mut at = Duration::from_millis(rng.random_range(first));
    while at < span {
        let lasting = Duration::from_millis(rng.random_range(lasting.clone()));
        let fault = draw(rng);
        steps.push((at, lasting, fault));
        at += lasting + Duration::from_millis(rng.random_range(gap.clone()));
    }
    steps
}

impl Drop for ProxyTasks {
    fn drop(&mut self) {
        self.serving.abort();
        self.stop_playing();
    }
}

/// A listener on `listen` (port 0: a free one) and the address it got.
pub(crate) async fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| Error::StartProxy { listen, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| Error::StartProxy { listen, source })?;
    Ok((listener, addr))
}

/// How a proxy finds its target for each new connection: a fixed address, or one read afresh
/// (a server that may come back on a port only known once it started).
pub type Resolve = Arc<dyn Fn() -> Option<SocketAddr> + Send + Sync>;

impl Proxy {
    /// Starts a proxy on `127.0.0.1:<free port>` in front of `target`, passing everything.
    pub async fn start(target: SocketAddr) -> Result<Proxy, Error> {
        Proxy::start_resolving(Arc::new(move || Some(target))).await
    }

    /// The same, asking `resolve` for the target of each new connection (none: the connection
    /// is closed).
    pub async fn start_resolving(resolve: Resolve) -> Result<Proxy, Error> {
        Proxy::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), resolve).await
    }

    /// The same on a given address.
    pub async fn start_on(listen: SocketAddr, resolve: Resolve) -> Result<Proxy, Error> {
        let (listener, addr) = bind(listen).await?;
        let shared = Arc::new(Shared {
            mode: watch::channel(Mode::Pass).0,
            cuts: watch::channel(Cut::default()).0,
            counters: Counters::default(),
        });
        let accept = tokio::spawn(accept_loop(listener, resolve, shared.clone()));
        Ok(Proxy {
            addr,
            shared,
            tasks: ProxyTasks::new(accept),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has done so far.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Injects `fault` now, for `lasting`; then everything passes again.
    pub fn inject(&self, fault: Fault, lasting: Duration) {
        let shared = self.shared.clone();
        tokio::spawn(async move { apply(&shared, fault, lasting).await });
    }

    /// Back to passing everything, now (also ends a schedule being played).
    pub fn heal(&mut self) {
        self.tasks.stop_playing();
        self.shared.mode.send_replace(Mode::Pass);
    }

    /// Plays `schedule` from now on, in the background (replacing one being played).
    pub fn play(&mut self, schedule: Schedule) {
        self.heal();
        let shared = self.shared.clone();
        self.tasks.play(tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            for step in schedule.steps {
                tokio::time::sleep_until(start + step.at).await;
                apply(&shared, step.fault, step.lasting).await;
            }
        }));
    }
}

async fn apply(shared: &Shared, fault: Fault, lasting: Duration) {
    match fault {
        Fault::Cut { fraction } => {
            shared.cuts.send_modify(|cut| {
                cut.number += 1;
                cut.fraction = fraction;
                cut.wait = lasting;
            });
            tokio::time::sleep(lasting).await;
        }
        Fault::Delay(d) => hold_mode(shared, Mode::Delay(d), lasting).await,
        Fault::Hold => hold_mode(shared, Mode::Hold, lasting).await,
        Fault::Refuse => hold_mode(shared, Mode::Refuse, lasting).await,
    }
}

async fn hold_mode(shared: &Shared, mode: Mode, lasting: Duration) {
    shared.mode.send_replace(mode);
    tokio::time::sleep(lasting).await;
    shared.mode.send_replace(Mode::Pass);
}

async fn accept_loop(listener: TcpListener, resolve: Resolve, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of file descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if *shared.mode.borrow() == Mode::Refuse {
            shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            reset(client);
            continue;
        }
        let shared = shared.clone();
        let resolve = resolve.clone();
        tokio::spawn(async move {
            let Some(target) = resolve() else {
                reset(client);
                return;
            };
            let Ok(server) = TcpStream::connect(target).await else {
                // The target is down: the client sees what it would see without the proxy.
                reset(client);
                return;
            };
            shared.counters.connections.fetch_add(1, Ordering::Relaxed);
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            connection(client, server, shared).await;
        });
    }
}

/// Closes with a RST rather than a FIN, as a refused or crashed peer does.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

#[derive(Debug, PartialEq)]
enum Ended {
    /// The source closed its side: the other direction goes on.
    Eof,
    /// A cut, or an I/O error: both sides close.
    Closed,
}

async fn connection(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, shared.clone());
    let down = pump(server_read, client_write, shared.clone());
    tokio::pin!(up, down);
    // Dropping both pumps drops all four halves: both sockets close.
    tokio::select! {
        end = &mut up => if end == Ended::Eof { down.await; },
        end = &mut down => if end == Ended::Eof { up.await; },
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, shared: Arc<Shared>) -> Ended {
    let mut cuts = shared.cuts.subscribe();
    let mut mode = shared.mode.subscribe();
    // Only cuts made after the connection opened apply to it.
    cuts.mark_unchanged();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) => {
                    let _ = to.shutdown().await;
                    return Ended::Eof;
                }
                Ok(n) => n,
                Err(_) => return Ended::Closed,
            },
            changed = cuts.changed() => {
                if changed.is_ok() {
                    // Nothing in flight: wait (as long as the cut lasts) for data to cut in
                    // the middle.
                    return cut_at_next_chunk(&mut from, &mut to, &shared, &cuts).await;
                }
                return Ended::Closed;
            }
        };
        let chunk = buf.get(..n).unwrap_or_default();
        // Apply the current mode to this chunk.
        loop {
            let current = *mode.borrow_and_update();
            match current {
                Mode::Pass | Mode::Refuse => break,
                Mode::Delay(d) => {
                    shared
                        .counters
                        .delayed_chunks
                        .fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(d).await;
                    break;
                }
                Mode::Hold => {
                    shared.counters.held_chunks.fetch_add(1, Ordering::Relaxed);
                    tokio::select! {
                        changed = mode.changed() => if changed.is_err() { return Ended::Closed; },
                        changed = cuts.changed() => {
                            let _ = changed;
                            return cut_chunk(chunk, &mut to, &shared, &cuts).await;
                        }
                    }
                }
            }
        }
        if cuts.has_changed().unwrap_or(true) {
            return cut_chunk(chunk, &mut to, &shared, &cuts).await;
        }
        if to.write_all(chunk).await.is_err() {
            return Ended::Closed;
        }
    }
}

async fn cut_at_next_chunk(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    shared: &Shared,
    cuts: &watch::Receiver<Cut>,
) -> Ended {
    let mut buf = vec![0u8; 16 * 1024];
    let wait = cuts.borrow().wait;
    match tokio::time::timeout(wait, from.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => cut_chunk(buf.get(..n).unwrap_or_default(), to, shared, cuts).await,
        _ => {
            shared.counters.cut.fetch_add(1, Ordering::Relaxed);
            Ended::Closed
        }
    }
}

/// Forwards the cut's fraction of `chunk` (at least one byte short of all of it), then closes.
async fn cut_chunk(
    chunk: &[u8],
    to: &mut OwnedWriteHalf,
    shared: &Shared,
    cuts: &watch::Receiver<Cut>,
) -> Ended {
    let fraction = cuts.borrow().fraction.clamp(0.0, 1.0);
    let keep = prefix_len(chunk.len(), fraction);
    if keep > 0 {
        let _ = to.write_all(chunk.get(..keep).unwrap_or_default()).await;
        shared
            .counters
            .cut_mid_chunk
            .fetch_add(1, Ordering::Relaxed);
    }
    shared.counters.cut.fetch_add(1, Ordering::Relaxed);
    Ended::Closed
}

/// How many bytes of a chunk of `len` a cut at `fraction` forwards: never the whole chunk, so
/// that the peer always sees a message cut short.
pub fn prefix_len(len: usize, fraction: f64) -> usize {
    if len == 0 {
        return 0;
    }
    let keep = (len as f64 * fraction).floor() as usize;
    keep.min(len - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The message and request proxies' schedules: a function of the generator, in time order,
    /// never overlapping, within the span.
    #[test]
    fn timed_steps_are_a_function_of_the_generator_and_fit_their_span() {
        let span = Duration::from_secs(120);
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            timed_steps(&mut rng, span, 1000..4000, 1000..4000, 1000..5000, |r| {
                r.random_range(0..3u8)
            })
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let steps = draw(7);
        assert!(steps.len() >= 10, "{steps:?}");
        for pair in steps.windows(2) {
            assert!(pair[0].0 + pair[0].1 < pair[1].0, "{pair:?}");
        }
        assert!(steps.iter().all(|s| s.0 < span));
    }

    /// An echo server on a free port: what it reads it writes back.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A server that sends `payload` as soon as a client connects, then waits.
    async fn sender(payload: Vec<u8>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let payload = payload.clone();
                tokio::spawn(async move {
                    let _ = s.write_all(&payload).await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                });
            }
        });
        addr
    }

    async fn round_trip(addr: SocketAddr, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut c = TcpStream::connect(addr).await?;
        c.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got).await?;
        Ok(got)
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let span = Duration::from_secs(60);
        let a = Schedule::generate(7, span);
        assert_eq!(a, Schedule::generate(7, span));
        assert_ne!(a, Schedule::generate(8, span));
        assert!(a.steps.len() >= 10, "{a:?}");
        // In order, not overlapping, within the span, every kind present over a minute.
        for pair in a.steps.windows(2) {
            assert!(pair[0].at + pair[0].lasting < pair[1].at, "{pair:?}");
        }
        assert!(a.steps.iter().all(|s| s.at < span));
        for kind in ["delay", "hold", "cut", "refuse"] {
            assert!(a.steps.iter().any(|s| s.fault.kind() == kind), "{kind}");
        }
    }

    #[test]
    fn a_cut_never_forwards_a_whole_chunk() {
        let cases = [
            (0, 0.5, 0),
            (1, 0.9, 0),
            (10, 0.0, 0),
            (10, 0.55, 5),
            (10, 1.0, 9),
        ];
        for (len, fraction, want) in cases {
            assert_eq!(prefix_len(len, fraction), want, "{len} {fraction}");
        }
    }

    #[tokio::test]
    async fn bytes_pass_unchanged_by_default() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        assert_eq!(round_trip(proxy.addr(), b"hello").await.unwrap(), b"hello");
        assert_eq!(proxy.counters().connections.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_hold_stops_forwarding_and_keeps_the_connection() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        c.write_all(b"a").await.unwrap();
        let mut one = [0u8; 1];
        c.read_exact(&mut one).await.unwrap();

        proxy.inject(Fault::Hold, Duration::from_millis(600));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = Instant::now();
        c.write_all(b"b").await.unwrap();
        // Nothing comes back while the hold lasts...
        let early = tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut one)).await;
        assert!(early.is_err(), "a byte passed a hold");
        // ...and the same connection delivers it after.
        c.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"b");
        assert!(
            sent.elapsed() >= Duration::from_millis(500),
            "{:?}",
            sent.elapsed()
        );
        assert!(proxy.counters().held_chunks.load(Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn a_delay_adds_latency_to_each_chunk() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        proxy.inject(
            Fault::Delay(Duration::from_millis(200)),
            Duration::from_secs(5),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        let start = Instant::now();
        assert_eq!(round_trip(proxy.addr(), b"x").await.unwrap(), b"x");
        // One chunk each way.
        assert!(
            start.elapsed() >= Duration::from_millis(400),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_cut_closes_the_connection_in_the_middle_of_a_chunk() {
        let payload = vec![7u8; 1000];
        let proxy = Proxy::start(sender(payload).await).await.unwrap();
        // Hold first, so that the payload is in the proxy when the cut comes.
        proxy.inject(Fault::Hold, Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.inject(Fault::Cut { fraction: 0.5 }, Duration::from_millis(100));
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), c.read_to_end(&mut got)).await;
        // The stream ended (EOF, or a reset) with only part of the payload.
        assert!(read.is_ok(), "the connection stayed open after a cut");
        assert!(
            !got.is_empty() && got.len() < 1000,
            "{} bytes passed a cut",
            got.len()
        );
        assert!(proxy.counters().cut_mid_chunk.load(Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn an_idle_connection_is_cut_too_and_new_ones_work_after() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut idle = TcpStream::connect(proxy.addr()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.inject(Fault::Cut { fraction: 0.3 }, Duration::from_millis(10));
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(3), idle.read(&mut buf))
            .await
            .expect("the idle connection was not cut");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        assert_eq!(round_trip(proxy.addr(), b"again").await.unwrap(), b"again");
    }

    #[tokio::test]
    async fn refused_connections_are_reset_while_the_fault_lasts() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        proxy.inject(Fault::Refuse, Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(round_trip(proxy.addr(), b"no").await.is_err());
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(round_trip(proxy.addr(), b"yes").await.unwrap(), b"yes");
        assert_eq!(proxy.counters().refused.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_played_schedule_injects_its_steps_and_heal_ends_it() {
        let mut proxy = Proxy::start(echo().await).await.unwrap();
        proxy.play(Schedule {
            steps: vec![Step {
                at: Duration::from_millis(0),
                fault: Fault::Refuse,
                lasting: Duration::from_secs(30),
            }],
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(round_trip(proxy.addr(), b"no").await.is_err());
        proxy.heal();
        assert_eq!(round_trip(proxy.addr(), b"ok").await.unwrap(), b"ok");
    }
}
