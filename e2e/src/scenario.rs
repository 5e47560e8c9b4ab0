//! Disruptions for the end-to-end scenarios: kill one process of a running fleet (SIGKILL to its
//! process group) and start it again with the same binary, command line and environment. The
//! new pid is written to `D/fleet.json`, so `fleet down` still stops everything.
//!
//! A cluster (`parent`, `child-<i>`) started with `--port 0` is started again on the port it had,
//! read from its kubeconfig, so that every client's kubeconfig stays valid.

use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;
use crate::plan::Layout;
use crate::process;
use crate::state::{FleetState, ProcessRecord, Role};

/// How a process was started, read from `/proc` while it ran: enough to start it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The fleet's name for the process (`hub`, `agent-child-1`, ...).
    pub name: String,
    /// What it is.
    pub role: Role,
    /// The executable.
    pub binary: PathBuf,
    /// Its arguments (without `argv[0]`), with `--port 0` already pinned to the port it had.
    pub args: Vec<String>,
    /// Its environment.
    pub env: Vec<(OsString, OsString)>,
    /// Its log file (the new process appends to it).
    pub log: PathBuf,
    /// Its admin address, if any.
    pub admin: Option<String>,
}

/// The NUL-separated fields of `/proc/<pid>/cmdline` (or `environ`), as byte strings.
pub fn split_nul(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The `KEY=value` entries of `/proc/<pid>/environ` (entries without `=` are skipped).
pub fn parse_environ(bytes: &[u8]) -> Vec<(OsString, OsString)> {
    split_nul(bytes)
        .into_iter()
        .filter_map(|entry| {
            let eq = entry.iter().position(|b| *b == b'=')?;
            let (key, value) = entry.split_at(eq);
            Some((
                OsString::from_vec(key.to_vec()),
                OsString::from_vec(value.get(1..).unwrap_or_default().to_vec()),
            ))
        })
        .collect()
}

/// The port of the first `server:` URL in a kubeconfig's text (`http://127.0.0.1:4321` -> 4321).
pub fn kubeconfig_port(text: &str) -> Option<u16> {
    text.lines().find_map(|line| {
        let url = line
            .trim()
            .strip_prefix("server:")?
            .trim()
            .trim_matches('"');
        let authority = url.split("://").nth(1)?.split('/').next()?;
        authority.rsplit_once(':')?.1.parse().ok()
    })
}

/// The value after `flag` in `args` (`--kubeconfig K` -> `K`; `--kubeconfig=K` too).
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(&prefix)
        }
    })
}

/// `args` with `--port 0` (or `--port=0`) replaced by `--port <port>`; other arguments unchanged.
pub fn pin_port(args: &[String], port: u16) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut iter = args.iter().peekable();
    while let Some(a) = iter.next() {
        if a == "--port" && iter.peek().is_some_and(|v| *v == "0") {
            iter.next();
            out.push("--port".to_string());
            out.push(port.to_string());
        } else if a == "--port=0" {
            out.push(format!("--port={port}"));
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// Reads how the running process of `record` was started.
pub fn snapshot(record: &ProcessRecord) -> Result<Snapshot, Error> {
    let err = |source| Error::ReadCommandLine {
        name: record.name.clone(),
        pid: record.pid,
        source,
    };
    let proc_dir = PathBuf::from(format!("/proc/{}", record.pid));
    let cmdline = std::fs::read(proc_dir.join("cmdline")).map_err(err)?;
    let environ = std::fs::read(proc_dir.join("environ")).map_err(err)?;
    let mut binary = replaced_binary(std::fs::read_link(proc_dir.join("exe")).map_err(err)?);
    let mut args: Vec<String> = split_nul(&cmdline)
        .into_iter()
        .skip(1)
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .collect();
    // A real node's daemon was started by `nsenter --net=<its namespace>`, which exec'd: its
    // own command line no longer says where it runs, the recorded one does.
    if record.role == Role::RealNode
        && let Some((first, rest)) = record.command.split_first()
    {
        binary = PathBuf::from(first);
        args = rest.to_vec();
    }
    Ok(Snapshot {
        name: record.name.clone(),
        role: record.role,
        binary,
        args: pin_cluster_port(record.role, args),
        env: parse_environ(&environ),
        log: record.log.clone(),
        admin: record.admin.clone(),
    })
}

/// The path of a running process's executable as `/proc/<pid>/exe` names it, without the
/// ` (deleted)` the kernel appends when the file was replaced since (a rebuild while the fleet
/// runs): the restart then starts the binary now at that path.
pub fn replaced_binary(exe: PathBuf) -> PathBuf {
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(path) => PathBuf::from(path),
        None => exe,
    }
}

/// A cluster's arguments with `--port 0` pinned to the port in its kubeconfig (unchanged for
/// other roles, or when the kubeconfig cannot be read).
fn pin_cluster_port(role: Role, args: Vec<String>) -> Vec<String> {
    if !matches!(role, Role::Parent | Role::Child) {
        return args;
    }
    let port = flag_value(&args, "--kubeconfig")
        .and_then(|k| std::fs::read_to_string(k).ok())
        .as_deref()
        .and_then(kubeconfig_port);
    match port {
        Some(port) => pin_port(&args, port),
        None => args,
    }
}

/// How to start a process that is no longer running, from the command line `fleet up` recorded
/// in the state file; the environment is this process's own (as for `fleet up`). `None` when no
/// command line was recorded.
pub fn recorded(record: &ProcessRecord) -> Option<Snapshot> {
    let (binary, args) = record.command.split_first()?;
    Some(Snapshot {
        name: record.name.clone(),
        role: record.role,
        binary: PathBuf::from(binary),
        args: pin_cluster_port(record.role, args.to_vec()),
        env: std::env::vars_os().collect(),
        log: record.log.clone(),
        admin: record.admin.clone(),
    })
}

fn load(dir: &Path) -> Result<FleetState, Error> {
    FleetState::load(&Layout::new(dir).state())
}

fn running_record(state: &FleetState, name: &str) -> Result<ProcessRecord, Error> {
    let known = || {
        state
            .processes
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let record = state
        .process(name)
        .ok_or_else(|| Error::InvalidArgument {
            what: "process".into(),
            message: format!("the fleet has no process named {name}; known: {}", known()),
        })?
        .clone();
    if !process::is_running(&record) {
        return Err(Error::InvalidArgument {
            what: "process".into(),
            message: format!(
                "{name} (pid {}) is not running; see {}",
                record.pid,
                record.log.display()
            ),
        });
    }
    Ok(record)
}

/// Kills the process `name` of the fleet in `dir` with SIGKILL to its process group, as a
/// crash would, and returns how to start it again ([`start_again`]). Returns once it is gone.
pub async fn kill(dir: &Path, name: &str) -> Result<Snapshot, Error> {
    let state = load(dir)?;
    let record = running_record(&state, name)?;
    let snap = snapshot(&record)?;
    process::signal_group(record.pid, "KILL")?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while process::is_running(&record) {
        if Instant::now() >= deadline {
            return Err(Error::Signal {
                pid: record.pid,
                signal: "KILL".into(),
                message: "the process is still running 5 s after SIGKILL".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(snap)
}

/// Where a restarted process shows it is up: its admin `/healthz`, else the port it serves
/// (devcluster's `--port`, kube-apiserver's `--secure-port`, etcd's first client URL).
fn readiness_probe(snap: &Snapshot) -> Option<(SocketAddr, bool)> {
    if let Some(addr) = snap.admin.as_deref().and_then(|a| a.parse().ok()) {
        return Some((addr, true));
    }
    let port: u16 = flag_value(&snap.args, "--port")
        .or_else(|| flag_value(&snap.args, "--secure-port"))
        .or_else(|| {
            let url = flag_value(&snap.args, "--listen-client-urls")?;
            url.split(',').next()?.rsplit_once(':').map(|(_, p)| p)
        })?
        .parse()
        .ok()?;
    (port != 0).then(|| (SocketAddr::from(([127, 0, 0, 1], port)), false))
}

/// Starts `snap` again (same binary, arguments and environment; output appended to its log,
/// after a marker line), records the new pid in `D/fleet.json`, and waits up to `timeout` until
/// it answers: `/healthz` on its admin address, or a TCP connection to its `--port`.
pub async fn start_again(
    dir: &Path,
    snap: &Snapshot,
    timeout: Duration,
) -> Result<ProcessRecord, Error> {
    let record = spawn_again(dir, snap)?;
    wait_answering(dir, snap, &record, timeout).await?;
    Ok(record)
}

/// The first half of [`start_again`]: starts `snap` and records its pid in `D/fleet.json`,
/// without waiting for it to answer. Callers that restart several processes at once serialise
/// this part (it rewrites the state file) and wait outside that lock: a kube-apiserver waits for
/// its etcd, which another restart may be about to start.
pub fn spawn_again(dir: &Path, snap: &Snapshot) -> Result<ProcessRecord, Error> {
    let create_err = |source| Error::CreateFile {
        path: snap.log.clone(),
        source,
    };
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&snap.log)
        .map_err(create_err)?;
    writeln!(log, "---- {} started again by atoll-e2e ----", snap.name).map_err(create_err)?;
    let log2 = log.try_clone().map_err(create_err)?;
    let child = Command::new(&snap.binary)
        .args(&snap.args)
        .env_clear()
        .envs(snap.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            name: snap.name.clone(),
            binary: snap.binary.clone(),
            source,
        })?;
    let pid = child.id();
    drop(child);
    let record = ProcessRecord {
        name: snap.name.clone(),
        role: snap.role,
        pid,
        start_time: process::proc_stat(pid).map(|s| s.start_time),
        log: snap.log.clone(),
        admin: snap.admin.clone(),
        command: std::iter::once(snap.binary.display().to_string())
            .chain(snap.args.iter().cloned())
            .collect(),
    };
    let layout = Layout::new(dir);
    let mut state = load(dir)?;
    match state.process_mut(&snap.name) {
        Some(p) => *p = record.clone(),
        None => state.processes.push(record.clone()),
    }
    state.save(&layout.state())?;
    Ok(record)
}

/// The second half of [`start_again`]: waits up to `timeout` until the process of `record`
/// answers (see [`start_again`]); fails early when it exits.
pub async fn wait_answering(
    dir: &Path,
    snap: &Snapshot,
    record: &ProcessRecord,
    timeout: Duration,
) -> Result<(), Error> {
    let state = load(dir)?;
    let deadline = Instant::now() + timeout;
    let probe = readiness_probe(snap);
    // A real kube-apiserver is ready when its /readyz says so, through the cluster's kubeconfig.
    let apiserver = match (snap.role, flag_value(&snap.args, "--etcd-servers")) {
        (Role::Parent, Some(_)) => Some(state.parent_kubeconfig.clone()),
        (Role::Child, Some(_)) => state
            .children
            .iter()
            .find(|c| c.name == snap.name)
            .map(|c| c.kubeconfig.clone()),
        _ => None,
    };
    let apiserver = match apiserver {
        Some(kubeconfig) => Some(crate::fleet::client_for(&kubeconfig).await?),
        None => None,
    };
    loop {
        let up = match (&apiserver, probe) {
            (Some(client), _) => crate::real_tier::readyz(client).await,
            (None, Some((addr, true))) => {
                crate::fleet::http_status(addr, "/healthz").await == Some(200)
            }
            (None, Some((addr, false))) => tokio::net::TcpStream::connect(addr).await.is_ok(),
            (None, None) => true,
        };
        if up {
            return Ok(());
        }
        if !process::is_running(record) {
            return Err(process::exited_error(record));
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("{} to answer after its restart", snap.name),
                seconds: timeout.as_secs(),
                hint: format!("; see {}", snap.log.display()),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`kill`] then [`start_again`]: a crash and a restart with the same command line. A process
/// that is not running any more (it crashed) is started from its recorded command line.
pub async fn restart(dir: &Path, name: &str, timeout: Duration) -> Result<ProcessRecord, Error> {
    let state = load(dir)?;
    if let Some(record) = state.process(name)
        && !process::is_running(record)
    {
        let snap = recorded(record).ok_or_else(|| Error::InvalidArgument {
            what: "process".into(),
            message: format!(
                "{name} is not running and the state file has no command line for it (started \
                 by an older fleet); run `fleet down` and `fleet up` again"
            ),
        })?;
        return start_again(dir, &snap, timeout).await;
    }
    let snap = kill(dir, name).await?;
    start_again(dir, &snap, timeout).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_zero_port_is_pinned_and_every_other_argument_kept() {
        let cases = [
            (
                vec!["--port", "0", "--nodes", "3"],
                vec!["--port", "4321", "--nodes", "3"],
            ),
            (vec!["--port=0", "-v"], vec!["--port=4321", "-v"]),
            (vec!["--port", "8080"], vec!["--port", "8080"]),
            (vec!["--nodes", "0"], vec!["--nodes", "0"]),
            (vec!["--port"], vec!["--port"]),
        ];
        for (args, want) in cases {
            assert_eq!(pin_port(&strings(&args), 4321), strings(&want), "{args:?}");
        }
    }

    #[test]
    fn the_kubeconfig_server_port_is_found_in_any_quoting() {
        let cases = [
            (
                "clusters:\n- cluster:\n    server: http://127.0.0.1:40123\n",
                Some(40123),
            ),
            ("    server: \"https://127.0.0.1:6443/base\"\n", Some(6443)),
            ("    server: https://example.com\n", None),
            ("apiVersion: v1\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(kubeconfig_port(text), want, "{text}");
        }
    }

    #[test]
    fn a_binary_replaced_since_its_start_is_restarted_from_its_path() {
        let cases = [
            ("/t/debug/atoll-agent (deleted)", "/t/debug/atoll-agent"),
            ("/t/debug/atoll-agent", "/t/debug/atoll-agent"),
        ];
        for (exe, want) in cases {
            assert_eq!(replaced_binary(PathBuf::from(exe)), PathBuf::from(want));
        }
    }

    #[test]
    fn flag_values_are_read_in_both_spellings() {
        let args = strings(&["--kubeconfig", "/a", "--admin-listen=1.2.3.4:5", "--x"]);
        let cases = [
            ("--kubeconfig", Some("/a")),
            ("--admin-listen", Some("1.2.3.4:5")),
            ("--x", None),
            ("--missing", None),
        ];
        for (flag, want) in cases {
            assert_eq!(flag_value(&args, flag), want, "{flag}");
        }
    }

    #[test]
    fn environ_entries_split_at_the_first_equals_sign() {
        let got = parse_environ(b"A=1\0B=x=y\0NOEQ\0C=\0");
        let want: Vec<(OsString, OsString)> = [("A", "1"), ("B", "x=y"), ("C", "")]
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_killed_or_crashed_process_starts_again_with_its_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.logs()).unwrap();
        let log = layout.log("sleeper");
        let record = process::spawn(process::Launch {
            name: "sleeper",
            role: Role::Agent,
            binary: Path::new("/bin/sh"),
            args: vec![
                "-c".into(),
                "echo \"run $0\"; sleep 30".into(),
                "first".into(),
            ],
            log: log.clone(),
            admin: None,
        })
        .unwrap();
        FleetState {
            processes: vec![record.clone()],
            ..Default::default()
        }
        .save(&layout.state())
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;

        let snap = kill(dir.path(), "sleeper").await.unwrap();
        assert!(!process::is_running(&record), "killed");
        assert_eq!(snap.args[2], "first");
        assert!(kill(dir.path(), "sleeper").await.is_err(), "already dead");
        let again = start_again(dir.path(), &snap, Duration::from_secs(5))
            .await
            .unwrap();
        assert_ne!(again.pid, record.pid);
        assert!(process::is_running(&again));
        let state = FleetState::load(&layout.state()).unwrap();
        assert_eq!(state.process("sleeper").map(|p| p.pid), Some(again.pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.matches("run first").count(), 2, "{text}");
        assert!(text.contains("started again"), "{text}");

        // Crashed on its own: `restart` starts it from the recorded command line.
        process::stop(&again, Duration::from_secs(2)).await.unwrap();
        let third = restart(dir.path(), "sleeper", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(process::is_running(&third));
        assert_eq!(third.command, again.command);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.matches("run first").count(), 3, "{text}");
        process::stop(&third, Duration::from_secs(2)).await.unwrap();
    }
}
