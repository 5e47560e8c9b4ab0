//! Detached processes: start each in its own process group with its output in a log file, tell
//! whether it still runs, and stop it (SIGTERM, then SIGKILL after a grace period); wait for a
//! process to be ready (failing early when it exits); free loopback ports for it to listen on.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Error;
use crate::plan::Layout;
use crate::state::{FleetState, ProcessRecord, Role};

/// What to start.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// The fleet's name for the process.
    pub name: &'a str,
    /// What it is.
    pub role: Role,
    /// The executable.
    pub binary: &'a Path,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its log file (created or truncated).
    pub log: PathBuf,
    /// Its admin address, recorded in the state.
    pub admin: Option<String>,
}

/// Starts `launch` detached: its own process group (so signals to the fleet's terminal do not
/// reach it and `fleet down` can signal the whole group), stdin closed, stdout and stderr
/// appended to the log. The process keeps running when the caller exits.
pub fn spawn(launch: Launch<'_>) -> Result<ProcessRecord, Error> {
    let log = std::fs::File::create(&launch.log).map_err(|source| Error::CreateFile {
        path: launch.log.clone(),
        source,
    })?;
    let log2 = log.try_clone().map_err(|source| Error::CreateFile {
        path: launch.log.clone(),
        source,
    })?;
    let child = Command::new(launch.binary)
        .args(launch.args.iter().map(OsStr::new))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            name: launch.name.to_string(),
            binary: launch.binary.to_path_buf(),
            source,
        })?;
    let pid = child.id();
    // Dropping a std Child neither waits for nor kills it: the process runs on, and is reaped
    // by init once this process exits.
    drop(child);
    Ok(ProcessRecord {
        name: launch.name.to_string(),
        role: launch.role,
        pid,
        start_time: proc_stat(pid).map(|s| s.start_time),
        log: launch.log,
        admin: launch.admin,
        command: std::iter::once(launch.binary.display().to_string())
            .chain(launch.args)
            .collect(),
    })
}

/// The fields of `/proc/<pid>/stat` the fleet uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Process state (`R`, `S`, `D`, `Z`, ...).
    pub state: char,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
    /// Its wait status once it exited and was not reaped yet (field 52, Linux 3.5 and later;
    /// `None` on older kernels or when it is not readable).
    pub exit_code: Option<i32>,
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may
/// itself contain spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // `rest` starts at field 3 (state); start time is field 22, the exit code field 52.
    let start_time = fields.nth(18)?.parse().ok()?;
    let exit_code = fields.nth(29).and_then(|f| f.parse().ok());
    Some(ProcStat {
        state,
        start_time,
        exit_code,
    })
}

/// How the process of `record` ended, in words, as far as `/proc` still tells: its exit code
/// or the signal that killed it while it waits to be reaped.
pub fn how_it_ended(record: &ProcessRecord) -> String {
    match proc_stat(record.pid) {
        Some(stat) if record.start_time.is_some_and(|t| t != stat.start_time) => {
            "its pid belongs to another process now".into()
        }
        Some(ProcStat {
            state: 'Z' | 'X',
            exit_code: Some(status),
            ..
        }) => wait_status_words(status),
        Some(stat) => format!("state {}", stat.state),
        None => "gone, its exit status unknown".into(),
    }
}

/// The error for `record`'s process having exited while the fleet waited for it: how it ended
/// and the end of its log.
pub(crate) fn exited_error(record: &ProcessRecord) -> Error {
    Error::ProcessExited {
        name: record.name.clone(),
        how: how_it_ended(record),
        log: record.log.clone(),
        tail: log_tail(&record.log, 20),
    }
}

/// A wait status (as `waitpid` gives it) in words.
fn wait_status_words(status: i32) -> String {
    let signal = status & 0x7f;
    if signal == 0 {
        format!("exit code {}", (status >> 8) & 0xff)
    } else {
        format!("killed by signal {signal}")
    }
}

/// `/proc/<pid>/stat` of a live process, if any.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat(&text)
}

/// Whether the process of `record` still runs: it exists, has (when known) the same start time,
/// so a reused pid does not count, and is not dead. A killed multithreaded process (kube-apiserver,
/// etcd, any tokio program) shows its leader as a zombie while its other threads still exit and
/// hold its file descriptors, listening sockets included; it counts as running until they are
/// gone, so that a restart can bind the same port.
pub fn is_running(record: &ProcessRecord) -> bool {
    match proc_stat(record.pid) {
        None => false,
        Some(stat) if record.start_time.is_some_and(|t| t != stat.start_time) => false,
        Some(stat) if stat.state == 'Z' || stat.state == 'X' => threads(record.pid) > 1,
        Some(_) => true,
    }
}

/// The number of threads `/proc/<pid>/task` lists (0 when it cannot be read).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It was not running any more.
    AlreadyGone,
    /// It exited after SIGTERM.
    Terminated,
    /// It needed SIGKILL.
    Killed,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stopped::AlreadyGone => "not running",
            Stopped::Terminated => "stopped (SIGTERM)",
            Stopped::Killed => "killed (SIGKILL)",
        })
    }
}

/// Stops the process group of `record`: SIGTERM, then SIGKILL when it is still running after
/// `grace`.
pub async fn stop(record: &ProcessRecord, grace: Duration) -> Result<Stopped, Error> {
    if !is_running(record) {
        return Ok(Stopped::AlreadyGone);
    }
    signal_group(record.pid, "TERM")?;
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !is_running(record) {
            return Ok(Stopped::Terminated);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !is_running(record) {
        return Ok(Stopped::Terminated);
    }
    signal_group(record.pid, "KILL")?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_running(record) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Stopped::Killed)
}

/// Sends `signal` (`TERM`, `KILL`) to process group `pgid` with the system `kill` (the
/// workspace forbids `unsafe`, so no direct libc call); a group already gone is no error.
pub fn signal_group(pgid: u32, signal: &str) -> Result<(), Error> {
    let out = Command::new("kill")
        .arg("-s")
        .arg(signal)
        .arg("--")
        .arg(format!("-{pgid}"))
        .output()
        .map_err(|e| Error::Signal {
            pid: pgid,
            signal: signal.to_string(),
            message: format!("running `kill`: {e}"),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The group vanished between the check and the signal: that is what we wanted.
    if stderr.contains("No such process") {
        return Ok(());
    }
    Err(Error::Signal {
        pid: pgid,
        signal: signal.to_string(),
        message: stderr.trim().to_string(),
    })
}

/// The last `lines` lines of the file at `path` (empty when unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    tail(&text, lines)
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts `l` and records it in `state` (saved at once, so `fleet down` finds it).
pub(crate) fn launch(state: &mut FleetState, layout: &Layout, l: Launch<'_>) -> Result<(), Error> {
    let record = spawn(l)?;
    state.processes.push(record);
    state.save(&layout.state())
}

pub(crate) fn exited(state: &FleetState, name: &str) -> Option<Error> {
    let record = state.process(name)?;
    if is_running(record) {
        return None;
    }
    Some(exited_error(record))
}

fn log_hint(state: &FleetState, name: &str) -> String {
    state
        .process(name)
        .map(|p| format!("; see {}", p.log.display()))
        .unwrap_or_default()
}

/// Polls `ready` every 100 ms until it holds; fails with what `ready` returns, or with a
/// timeout naming `what` (and `hint`) after `timeout`.
pub(crate) async fn poll_until<F, Fut>(
    timeout: Duration,
    what: &str,
    hint: &str,
    mut ready: F,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if ready().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs(),
                hint: hint.to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free loopback port (bound, then released for the process to take).
pub fn free_port() -> Result<u16, Error> {
    free_addr().map(|a| a.port())
}

/// How long a port chosen by [`free_addr`] stays reserved against the other atoll processes of
/// the machine (parallel tests each run a fleet): longer than the process it was chosen for takes
/// to bind it (a real-tier controller starts tens of seconds after its cluster's ports are
/// chosen, once its API server is ready).
const PORT_RESERVATION: Duration = Duration::from_secs(600);

/// A free loopback address for a process to listen on (bound, then released for it to take).
///
/// Choosing a port and the process binding it are two steps, so each choice is also reserved
/// with a file in `$TMPDIR/atoll-ports`: no other choice, in this process or another, takes the
/// same port for [`PORT_RESERVATION`] (a kube-controller-manager once failed with "address
/// already in use" on a port chosen so: another choice had most likely taken it meanwhile).
///
/// Taken below the kernel's ephemeral range: a port from that range, once released, can be taken
/// as the local port of any outgoing connection on the machine (a busy real-tier fleet opens
/// many) before the process binds it. Falls back to a kernel-chosen port.
pub fn free_addr() -> Result<SocketAddr, Error> {
    static EPHEMERAL_START: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let ephemeral_start = *EPHEMERAL_START.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32768)
    });
    let dir = std::env::temp_dir().join("atoll-ports");
    let now = SystemTime::now();
    SWEPT.call_once(|| {
        let _ = std::fs::create_dir_all(&dir);
        sweep_stale_reservations(&dir, now);
    });
    let mut rng = rand::rng();
    let candidates =
        std::iter::repeat_with(|| rng.random_range(10_000..ephemeral_start.max(10_001))).take(200);
    if let Some(port) = reserve_free_port(&dir, candidates, now) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(port_err)
}

/// The first of `candidates` that no live reservation in `dir` holds and that binds on
/// loopback; reserved in `dir` before it is returned.
fn reserve_free_port(
    dir: &Path,
    candidates: impl IntoIterator<Item = u16>,
    now: SystemTime,
) -> Option<u16> {
    candidates
        .into_iter()
        .find(|&port| reserve(dir, port, now) && TcpListener::bind(("127.0.0.1", port)).is_ok())
}

/// Reserves `port` by creating `dir/<port>`; false when a reservation younger than
/// [`PORT_RESERVATION`] holds it. A directory that cannot be written reserves nothing and
/// refuses nothing (the bind check alone is left).
fn reserve(dir: &Path, port: u16, now: SystemTime) -> bool {
    let path = dir.join(port.to_string());
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !reservation_is_stale(&path, now) {
                    return false;
                }
                // Gone stale: removed, and the next create decides between the processes that
                // found it so.
                let _ = std::fs::remove_file(&path);
            }
            Err(_) => return true,
        }
    }
    false
}

/// Whether the reservation file at `path` is older than [`PORT_RESERVATION`].
fn reservation_is_stale(path: &Path, now: SystemTime) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|made| now.duration_since(made).unwrap_or_default() > PORT_RESERVATION)
}

/// Removes the stale reservations of `dir`, so they do not pile up run after run.
fn sweep_stale_reservations(dir: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if reservation_is_stale(&entry.path(), now) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn port_err(e: std::io::Error) -> Error {
    Error::Spawn {
        name: "port allocation".into(),
        binary: PathBuf::from("127.0.0.1:0"),
        source: e,
    }
}

/// Polls `ready` until it holds; fails early when process `name` exited, or after `timeout`.
pub(crate) async fn wait_for_process<F, Fut>(
    state: &FleetState,
    name: &str,
    what: &str,
    timeout: Duration,
    mut ready: F,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    poll_until(timeout, what, &log_hint(state, name), || {
        let ready = ready();
        async move {
            if ready.await {
                return Ok(true);
            }
            exited(state, name).map_or(Ok(false), Err)
        }
    })
    .await
}

/// `GET <path>` over plain HTTP/1.0 (no chunking); the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf);
    let code = parse_status_line(&text)?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((code, body.to_owned()))
}

/// The status code of an HTTP response's first line (`HTTP/1.1 200 OK` -> 200).
pub fn parse_status_line(response: &str) -> Option<u16> {
    let line = response.lines().next()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_are_counted_after_the_command_name() {
        let rest = "0 0 0 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1";
        let cases = [
            (
                format!("123 (sleep) S 1 {rest} 987654 100 200"),
                Some(ProcStat {
                    state: 'S',
                    start_time: 987654,
                    exit_code: None,
                }),
            ),
            (
                format!("123 (a (b) c) Z 1 {rest} 55 100 200"),
                Some(ProcStat {
                    state: 'Z',
                    start_time: 55,
                    exit_code: None,
                }),
            ),
            (
                format!("123 (hub) Z 1 {rest} 55 {} 9", "0 ".repeat(29)),
                Some(ProcStat {
                    state: 'Z',
                    start_time: 55,
                    exit_code: Some(9),
                }),
            ),
            ("123 (short) S 1 2".to_string(), None),
            ("garbage".to_string(), None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_proc_stat(&text), want, "{text}");
        }
    }

    #[test]
    fn wait_statuses_read_as_an_exit_code_or_a_signal() {
        assert_eq!(wait_status_words(0), "exit code 0");
        assert_eq!(wait_status_words(2 << 8), "exit code 2");
        assert_eq!(wait_status_words(9), "killed by signal 9");
        assert_eq!(wait_status_words(6 | 0x80), "killed by signal 6");
    }

    #[test]
    fn our_own_process_is_running_and_a_different_start_time_is_not() {
        let pid = std::process::id();
        let stat = proc_stat(pid).unwrap();
        let mut record = ProcessRecord {
            name: "self".into(),
            role: Role::Hub,
            pid,
            start_time: Some(stat.start_time),
            log: "/dev/null".into(),
            admin: None,
            command: vec![],
        };
        assert!(is_running(&record));
        record.start_time = Some(stat.start_time + 1);
        assert!(!is_running(&record), "a reused pid must not count");
    }

    /// Two loopback ports free right now (kernel-chosen, released).
    fn two_free_ports() -> (u16, u16) {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let b = TcpListener::bind("127.0.0.1:0").unwrap();
        (
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        )
    }

    #[test]
    fn a_chosen_port_is_not_chosen_again_while_its_reservation_lasts() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = two_free_ports();
        let now = SystemTime::now();
        assert_eq!(reserve_free_port(dir.path(), [p, q], now), Some(p));
        // Nobody bound p yet, so only its reservation keeps the second choice off it.
        assert_eq!(reserve_free_port(dir.path(), [p, q], now), Some(q));
        assert_eq!(reserve_free_port(dir.path(), [p, q], now), None);
        let later = now + PORT_RESERVATION + Duration::from_secs(1);
        assert_eq!(reserve_free_port(dir.path(), [q, p], later), Some(q));
    }

    #[test]
    fn a_port_someone_listens_on_is_skipped_and_stale_reservations_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = two_free_ports();
        let listener = TcpListener::bind(("127.0.0.1", p)).unwrap();
        let now = SystemTime::now();
        assert_eq!(reserve_free_port(dir.path(), [p, q], now), Some(q));
        drop(listener);
        let old = std::fs::File::options()
            .write(true)
            .open(dir.path().join(q.to_string()))
            .unwrap();
        old.set_modified(now - PORT_RESERVATION - Duration::from_secs(1))
            .unwrap();
        sweep_stale_reservations(dir.path(), now);
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec![p.to_string()]);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let cases = [
            ("a\nb\nc\n", 2, "b\nc"),
            ("a\nb\nc", 5, "a\nb\nc"),
            ("", 3, ""),
        ];
        for (text, n, want) in cases {
            assert_eq!(tail(text, n), want);
        }
    }

    #[tokio::test]
    async fn a_detached_process_is_stopped_with_sigterm_and_a_stubborn_one_with_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let sh = Path::new("/bin/sh");
        let cases = [
            ("polite", "sleep 30", Stopped::Terminated),
            (
                "stubborn",
                "trap '' TERM; while true; do sleep 0.1; done",
                Stopped::Killed,
            ),
        ];
        for (name, script, want) in cases {
            let record = spawn(Launch {
                name,
                role: Role::Agent,
                binary: sh,
                args: vec!["-c".into(), script.into()],
                log: dir.path().join(format!("{name}.log")),
                admin: None,
            })
            .unwrap();
            assert!(is_running(&record), "{name} should run");
            // Let the shell install its trap.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let got = stop(&record, Duration::from_millis(800)).await.unwrap();
            assert_eq!(got, want, "{name}");
            assert!(!is_running(&record), "{name} should be gone");
            assert_eq!(
                stop(&record, Duration::from_millis(100)).await.unwrap(),
                Stopped::AlreadyGone
            );
        }
    }
}
