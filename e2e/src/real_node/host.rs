//! What a real node changes on the host and has to put back: system commands run to completion,
//! the host sysctls kubelet rewrites at start, the cgroup root of the node, mounts under the
//! node's directory, and processes found by their command line or cgroup.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::process::{is_running, signal_group};
use crate::state::ProcessRecord;

/// Runs `program args` to completion; its stdout when it succeeds.
pub fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    let command = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::RunCommand {
            command: command.clone(),
            status: "not started".into(),
            stderr: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::RunCommand {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `tool` is on `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// Whether this process runs as root (real uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|uids| uids.split_whitespace().next())
            == Some("0")
    })
}

/// The host-global sysctls kubelet sets once at start (`setupKernelTunables`); no setting
/// stops it short of making kubelet exit (`protectKernelDefaults`).
pub const KUBELET_SYSCTLS: [&str; 6] = [
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
];

fn sysctl_path(name: &str) -> PathBuf {
    Path::new("/proc/sys").join(name.replace('.', "/"))
}

/// The current values of `names`.
pub fn read_sysctls(names: &[&str]) -> Result<Vec<(String, String)>, Error> {
    names
        .iter()
        .map(|name| {
            let path = sysctl_path(name);
            std::fs::read_to_string(&path)
                .map(|v| (name.to_string(), v.trim().to_string()))
                .map_err(|source| Error::ReadFile { path, source })
        })
        .collect()
}

/// Writes back each `(name, value)` that differs now.
pub fn restore_sysctls(values: &[(String, String)]) -> Result<(), Error> {
    for (name, value) in values {
        let path = sysctl_path(name);
        if std::fs::read_to_string(&path).is_ok_and(|now| now.trim() == value) {
            continue;
        }
        std::fs::write(&path, value).map_err(|source| Error::WriteSysctl {
            name: name.clone(),
            value: value.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The host's own values of [`KUBELET_SYSCTLS`], shared by every real node of the machine in
/// `record`: the first node records them, later ones (whose kubelets may start after another's
/// changed them) read that record.
pub fn host_sysctls_before(record: &Path) -> Result<Vec<(String, String)>, Error> {
    if let Ok(text) = std::fs::read_to_string(record) {
        let values = parse_sysctl_record(&text);
        if values.len() == KUBELET_SYSCTLS.len() {
            return Ok(values);
        }
    }
    let values = read_sysctls(&KUBELET_SYSCTLS)?;
    let text: String = values.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(record)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another node recorded them meanwhile: its record is the older one.
            let text = std::fs::read_to_string(record).map_err(|source| Error::ReadFile {
                path: record.to_path_buf(),
                source,
            })?;
            Ok(parse_sysctl_record(&text))
        }
        Err(source) => Err(Error::CreateFile {
            path: record.to_path_buf(),
            source,
        }),
        Ok(()) => Ok(values),
    }
}

/// The `name=value` lines of a sysctl record.
pub fn parse_sysctl_record(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The cgroup directories of a node's cgroup root `name`: one per cgroup v1 hierarchy (the
/// `unified` one left out), or the single one of a cgroup v2 host.
pub fn cgroup_roots(name: &str) -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").is_file() {
        return vec![base.join(name)];
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut roots: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name() != "unified")
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path().join(name))
        .collect();
    roots.sort();
    roots
}

/// Creates the cgroup roots (kubelet refuses a `cgroupRoot` that does not exist), the cpuset
/// one with its parent's CPUs and memory nodes (an empty cpuset takes no tasks).
pub fn create_cgroup_roots(roots: &[PathBuf]) -> Result<(), Error> {
    for root in roots {
        std::fs::create_dir_all(root).map_err(|source| Error::CreateFile {
            path: root.clone(),
            source,
        })?;
        let is_v1_cpuset = root.parent().is_some_and(|p| p.ends_with("cpuset"));
        if is_v1_cpuset {
            for file in ["cpuset.cpus", "cpuset.mems"] {
                copy_from_parent(root, file)?;
            }
        }
    }
    Ok(())
}

fn copy_from_parent(dir: &Path, file: &str) -> Result<(), Error> {
    let from = dir.parent().unwrap_or(dir).join(file);
    let value = std::fs::read_to_string(&from).map_err(|source| Error::ReadFile {
        path: from.clone(),
        source,
    })?;
    let to = dir.join(file);
    std::fs::write(&to, value.trim()).map_err(|source| Error::CreateFile { path: to, source })
}

/// Every directory under (and including) each of `roots`, deepest first.
fn cgroup_dirs(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut pending: Vec<PathBuf> = roots.iter().filter(|r| r.is_dir()).cloned().collect();
    while let Some(dir) = pending.pop() {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            pending.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        dirs.push(dir);
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs
}

/// The pids of every process in the cgroup trees under `roots`.
pub fn pids_in_cgroups(roots: &[PathBuf]) -> Vec<u32> {
    let mut pids: Vec<u32> = cgroup_dirs(roots)
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Removes the cgroup trees under `roots`, deepest first (a cgroup is removed with `rmdir`
/// once it has no tasks; its files go with it). What is still there is returned.
pub fn remove_cgroups(roots: &[PathBuf]) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for dir in cgroup_dirs(roots) {
            let _ = std::fs::remove_dir(&dir);
        }
        let left: Vec<PathBuf> = roots.iter().filter(|r| r.exists()).cloned().collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The mount points under `dir` in `/proc/self/mountinfo` text, deepest first.
pub fn mounts_under(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let mut mounts: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|m| PathBuf::from(unescape_mount_path(m)))
        .filter(|m| m.starts_with(dir))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    mounts.dedup();
    mounts
}

/// A mountinfo path with its octal escapes (`\040` for a space) decoded.
fn unescape_mount_path(escaped: &str) -> String {
    let mut out = String::new();
    let mut rest = escaped;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Unmounts everything mounted under `dir` (deepest first; lazily when busy); what is still
/// mounted is returned.
pub fn unmount_under(dir: &Path) -> Vec<PathBuf> {
    for _ in 0..3 {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mounts = mounts_under(&mountinfo, dir);
        if mounts.is_empty() {
            return mounts;
        }
        for mount in &mounts {
            let path = mount.to_string_lossy();
            if run("umount", &[&path]).is_err() {
                let _ = run("umount", &["-l", &path]);
            }
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts_under(&mountinfo, dir)
}

/// The pids of the processes whose command line contains `needle` (this process left out).
pub fn pids_with_command_line(needle: &str) -> Vec<u32> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(needle)
            })
        })
        .collect()
}

/// Sends SIGKILL to `pid` itself (not its group).
pub fn kill_pid(pid: u32) {
    let _ = run("kill", &["-s", "KILL", &pid.to_string()]);
}

/// Stops the process group of `record` without a runtime (teardown runs in `Drop`): SIGTERM,
/// SIGKILL after `grace`; whether it is gone.
pub fn stop_blocking(record: &ProcessRecord, grace: Duration) -> bool {
    if !is_running(record) {
        return true;
    }
    let _ = signal_group(record.pid, "TERM");
    if wait_gone(record, grace) {
        return true;
    }
    let _ = signal_group(record.pid, "KILL");
    wait_gone(record, Duration::from_secs(5))
}

fn wait_gone(record: &ProcessRecord, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while is_running(record) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// The resident set size of `pid` in KiB (`VmRSS`), if it runs.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    crate::chaos::parse_vm_rss_kib(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_under_a_directory_are_listed_deepest_first_with_escapes_decoded() {
        let mountinfo = "\
22 1 254:0 / / rw - ext4 /dev/vda rw
30 22 254:0 /tmp/n/kubelet /tmp/n/kubelet rw - ext4 /dev/vda rw
31 30 0:50 / /tmp/n/kubelet/pods/u/volumes/kube-api-access rw - tmpfs tmpfs rw
32 22 0:51 / /tmp/n\\040x rw - tmpfs tmpfs rw
33 22 0:52 / /tmp/nn rw - tmpfs tmpfs rw
";
        assert_eq!(
            mounts_under(mountinfo, Path::new("/tmp/n")),
            vec![
                PathBuf::from("/tmp/n/kubelet/pods/u/volumes/kube-api-access"),
                PathBuf::from("/tmp/n/kubelet"),
            ]
        );
        assert_eq!(
            mounts_under(mountinfo, Path::new("/tmp/n x")),
            vec![PathBuf::from("/tmp/n x")]
        );
    }

    #[test]
    fn a_sysctl_record_is_read_back_as_written() {
        let text = "kernel.panic=1\nvm.overcommit_memory = 0\n\n";
        assert_eq!(
            parse_sysctl_record(text),
            vec![
                ("kernel.panic".to_string(), "1".to_string()),
                ("vm.overcommit_memory".to_string(), "0".to_string()),
            ]
        );
        assert_eq!(
            sysctl_path("kernel.keys.root_maxkeys"),
            PathBuf::from("/proc/sys/kernel/keys/root_maxkeys")
        );
    }
}
