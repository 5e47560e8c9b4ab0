//! devcluster benchmark: `cargo run --release -p devcluster --example bench [-- N]`.
//!
//! Prints a table of: creates per second over HTTP (memory and SQLite), server-side applies
//! per second that change stored objects (a spec apply and a status apply to each of 1,000
//! Deployments, the shape of the scheduler's and the hub's writes to Descriptions), the
//! latency for one event to reach 1,000 watchers, and the bytes SQLite stores per small object compared to
//! its raw JSON size (`BENCH_ONLY=apply`, `memory` or `sqlite`: that one figure). Requests go over plain keep-alive HTTP/1.1 connections (a minimal
//! client, so that the client costs as little CPU as possible on a shared machine).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use devcluster::{Config, DevCluster};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The allocator of the `devcluster` binary, so that the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    async fn open(addr: std::net::SocketAddr) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(s),
            host: addr.to_string(),
        })
    }

    async fn send(&mut self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<()> {
        self.send_typed(method, path, "application/json", body)
            .await
    }

    async fn send_typed(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> anyhow::Result<()> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        let s = self.reader.get_mut();
        s.write_all(head.as_bytes()).await?;
        s.write_all(body).await?;
        Ok(())
    }

    /// Reads status and headers; returns (status, content length if given).
    async fn read_head(&mut self) -> anyhow::Result<(u16, Option<usize>)> {
        let mut line = String::new();
        self.reader.read_line(&mut line).await?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .context("no status")?
            .parse()?;
        let mut len = None;
        loop {
            line.clear();
            self.reader.read_line(&mut line).await?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = Some(v.trim().parse()?);
            }
        }
        Ok((status, len))
    }

    async fn request(&mut self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<u16> {
        self.request_typed(method, path, "application/json", body)
            .await
    }

    async fn request_typed(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> anyhow::Result<u16> {
        self.send_typed(method, path, content_type, body).await?;
        let (status, len) = self.read_head().await?;
        let Some(len) = len else {
            bail!("response without content-length");
        };
        let mut buf = vec![0u8; len];
        self.reader.read_exact(&mut buf).await?;
        Ok(status)
    }

    /// Reads one chunk of a chunked body (a watch event line).
    async fn read_chunk(&mut self) -> anyhow::Result<Vec<u8>> {
        let mut line = String::new();
        self.reader.read_line(&mut line).await?;
        let size = usize::from_str_radix(line.trim(), 16)?;
        let mut buf = vec![0u8; size + 2];
        self.reader.read_exact(&mut buf).await?;
        buf.truncate(size);
        Ok(buf)
    }
}

/// Resident set size of this process (Linux), 0 when unknown.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn small_object(i: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","labels":{{"app":"bench"}}}},"data":{{"key":"value-{i}"}}}}"#
    )
    .into_bytes()
}

/// Runs `each(connection, i)` for every `i` in `0..n` over `workers` keep-alive connections
/// (connection `w` takes `w`, `w + workers`, ...); returns the seconds it took.
async fn over_connections<F, Fut>(
    addr: std::net::SocketAddr,
    n: usize,
    workers: usize,
    each: F,
) -> anyhow::Result<f64>
where
    F: Fn(Conn, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<Conn>> + Send,
{
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let each = each.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            for i in (w..n).step_by(workers) {
                c = each(c, i).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed().as_secs_f64())
}

async fn create_rate(cluster: &DevCluster, n: usize, workers: usize) -> anyhow::Result<f64> {
    let seconds = over_connections(cluster.addr(), n, workers, |mut c, i| async move {
        let status = c
            .request(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                &small_object(i),
            )
            .await?;
        if status != 201 {
            bail!("create returned {status}");
        }
        Ok(c)
    })
    .await?;
    Ok(n as f64 / seconds)
}

/// A Deployment as one manager applies it, its `value` annotation and replicas set by `round`.
fn applied_deployment(i: usize, round: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"app-{i}","labels":{{"app":"bench"}},"annotations":{{"value":"{round}"}}}},"spec":{{"replicas":{replicas},"selector":{{"matchLabels":{{"app":"app-{i}"}}}},"template":{{"metadata":{{"labels":{{"app":"app-{i}"}}}},"spec":{{"containers":[{{"name":"web","image":"nginx:1.27","ports":[{{"containerPort":80}}],"env":[{{"name":"ROUND","value":"{round}"}}]}}]}}}}}}}}"#,
        replicas = 1 + round % 3
    )
    .into_bytes()
}

/// The status another manager applies to it for `round`.
fn applied_status(i: usize, round: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"app-{i}"}},"status":{{"observedGeneration":{round},"replicas":1,"readyReplicas":1,"conditions":[{{"type":"Available","status":"True","reason":"Round{round}"}}]}}}}"#
    )
    .into_bytes()
}

/// Server-side applies per second that change the stored object: `n` Deployments are created
/// by apply (not timed), then each gets a changed spec apply and a changed status apply
/// (timed), over `workers` connections.
async fn apply_rate(
    cluster: &DevCluster,
    n: usize,
    workers: usize,
    watched: bool,
) -> anyhow::Result<f64> {
    let mut rate = 0.0;
    // Watched, a round more before the timed one: the watch history is full (10,000 events) by
    // then, so each write costs what it costs from then on (an event in, an event out).
    let rounds = if watched { 3 } else { 2 };
    for round in 0..rounds {
        if watched && round == 1 {
            watch_deployments(cluster).await?;
        }
        let seconds = over_connections(cluster.addr(), n, workers, move |mut c, i| async move {
            let path = format!(
                "/apis/apps/v1/namespaces/default/deployments/app-{i}?fieldManager=spec-writer&force=true"
            );
            let status = c
                .request_typed("PATCH", &path, APPLY, &applied_deployment(i, round))
                .await?;
            if status != 200 && status != 201 {
                bail!("spec apply returned {status}");
            }
            if round > 0 {
                let path = format!(
                    "/apis/apps/v1/namespaces/default/deployments/app-{i}/status?fieldManager=status-writer&force=true"
                );
                let status = c
                    .request_typed("PATCH", &path, APPLY, &applied_status(i, round))
                    .await?;
                if status != 200 {
                    bail!("status apply returned {status}");
                }
            }
            Ok(c)
        })
        .await?;
        // Round 0 creates; the last round is the timed one: two applies per object.
        rate = 2.0 * n as f64 / seconds;
    }
    Ok(rate)
}

/// A plain watch of the Deployments, read to its end in the background (its events are
/// serialised for it, as for the watchers of a real fleet).
async fn watch_deployments(cluster: &DevCluster) -> anyhow::Result<()> {
    let mut c = Conn::open(cluster.addr()).await?;
    c.send(
        "GET",
        "/apis/apps/v1/namespaces/default/deployments?watch=true",
        b"",
    )
    .await?;
    let (status, _) = c.read_head().await?;
    if status != 200 {
        bail!("watch returned {status}");
    }
    tokio::spawn(async move { while c.read_chunk().await.is_ok() {} });
    Ok(())
}

/// The content type of a server-side apply.
const APPLY: &str = "application/apply-patch+yaml";

async fn fan_out(watchers: usize) -> anyhow::Result<(Duration, Duration, Duration)> {
    let cluster = DevCluster::start_default().await?;
    let addr = cluster.addr();
    let mut setup = Conn::open(addr).await?;
    setup
        .request(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &small_object(0),
        )
        .await?;
    let rv = cluster.state().store.current_rv();
    let path = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}");
    let mut conns = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let mut c = Conn::open(addr).await?;
        c.send("GET", &path, b"").await?;
        let (status, _) = c.read_head().await?;
        if status != 200 {
            bail!("watch returned {status}");
        }
        conns.push(c);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(watchers + 1));
    for mut c in conns {
        let tx = tx.clone();
        let barrier = barrier.clone();
        tokio::spawn(async move {
            barrier.wait().await;
            if c.read_chunk().await.is_ok() {
                let _ = tx.send(Instant::now());
            }
        });
    }
    barrier.wait().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    setup
        .request(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &small_object(1),
        )
        .await?;
    let mut lat = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let t = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await?
            .context("watcher ended")?;
        lat.push(t.duration_since(start));
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    Ok((p(0.5), p(0.99), p(1.0)))
}

/// Creates/s of `n` small objects over `workers` connections into a devcluster with a data
/// dir, and the bytes its database takes once the server stopped.
async fn sqlite_create_rate(n: usize, workers: usize) -> anyhow::Result<(f64, u64)> {
    let dir = tempfile::tempdir()?;
    let sql = DevCluster::start(Config {
        data_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    })
    .await?;
    let rate = create_rate(&sql, n, workers).await?;
    drop(sql);
    let mut db_bytes = 0u64;
    for entry in std::fs::read_dir(dir.path())? {
        db_bytes += entry?.metadata()?.len();
    }
    Ok((rate, db_bytes))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let workers = 8;
    let apply_n = 5000;
    if let Ok(only @ ("apply" | "apply-watched")) = std::env::var("BENCH_ONLY").as_deref() {
        let applies = DevCluster::start_default().await?;
        let rss_before = rss_bytes();
        let apply_per_s = apply_rate(&applies, apply_n, workers, only == "apply-watched").await?;
        let grown = rss_bytes().saturating_sub(rss_before) as f64 / (1 << 20) as f64;
        println!(
            "server-side applies/s that change the object ({only}): {apply_per_s:.0}, RSS grew {grown:.1} MiB"
        );
        return Ok(());
    }

    if std::env::var("BENCH_ONLY").as_deref() == Ok("sqlite") {
        let (sql_rate, _) = sqlite_create_rate(n, workers).await?;
        println!("creates/s, SQLite: {sql_rate:.0}");
        return Ok(());
    }

    let mem = DevCluster::start_default().await?;
    let rss_before = rss_bytes();
    let mem_rate = create_rate(&mem, n, workers).await?;
    let rss_per_object = rss_bytes().saturating_sub(rss_before) as f64 / n as f64;
    drop(mem);
    if std::env::var("BENCH_ONLY").as_deref() == Ok("memory") {
        println!("creates/s, memory: {mem_rate:.0}");
        return Ok(());
    }
    // After the memory figure: the allocator keeps what the applies freed, which would hide
    // the creates' growth.
    let applies = DevCluster::start_default().await?;
    let apply_per_s = apply_rate(&applies, apply_n, workers, false).await?;
    drop(applies);

    let (sql_rate, db_bytes) = sqlite_create_rate(n, workers).await?;
    let raw: usize = (0..n).map(|i| small_object(i).len()).sum();

    let (p50, p99, max) = fan_out(1000).await?;

    println!();
    println!("| measure | result | target |");
    println!("|---|---|---|");
    println!(
        "| creates/s, memory ({n} ConfigMaps, {workers} connections) | {mem_rate:.0} | 20000 |"
    );
    println!(
        "| creates/s, SQLite ({n} ConfigMaps, {workers} connections) | {sql_rate:.0} | 5000 |"
    );
    println!(
        "| server-side applies/s that change the object ({apply_n} Deployments: spec, then status, {workers} connections) | {apply_per_s:.0} | |"
    );
    println!(
        "| one event to 1000 watchers: p50 / p99 / max | {:.1} ms / {:.1} ms / {:.1} ms | p99 < 50 ms |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    println!(
        "| memory per stored object (RSS growth / objects, incl. managedFields and history) | {rss_per_object:.0} B | |"
    );
    println!(
        "| SQLite bytes per object (db+wal) vs raw JSON sent | {:.0} B vs {:.0} B | |",
        db_bytes as f64 / n as f64,
        raw as f64 / n as f64
    );
    Ok(())
}
