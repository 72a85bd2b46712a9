//! Starting a state host on demand.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use rustix::process::{Pid, Signal, kill_process};
use weir_coordinator::TlsFiles;

use super::HostClient;
use crate::error::{HostError, Result};
use crate::protocol::{HostAddress, HostDir};

/// The environment variable naming the `weir-host` binary when
/// [`HostOptions::binary`] is not set.
pub const HOST_BIN_ENV: &str = "WEIR_HOST_BIN";
/// The environment variable that hands the job token to the host (not an
/// argument: arguments are visible to every user in `ps`).
pub const HOST_TOKEN_ENV: &str = "WEIR_HOST_TOKEN";
/// The exit code of a host that found another host holding the directory.
pub const EXIT_ALREADY_RUNNING: i32 = 75;

/// How [`ensure_host`] starts a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// The `weir-host` binary; [`HOST_BIN_ENV`] if `None`.
    pub binary: Option<PathBuf>,
    /// The host exits when this process is gone (the Spark executor).
    pub owner_pid: Option<u32>,
    /// The host also listens on TCP at this `host:port` (port 0: any free
    /// port), for tasks on other executors.
    pub listen: Option<String>,
    /// Where the host keeps working files; `<dir>/work` if `None`.
    pub work_dir: Option<PathBuf>,
    /// The job's TLS files: the host serves TCP over TLS and acks to an
    /// `https://` coordinator with them.
    pub tls: Option<TlsFiles>,
    /// How long to wait for a started host to accept connections.
    pub startup_timeout: Duration,
    /// On `Shutdown` the host removes the parent of its directory with its
    /// directory if that leaves it empty: `dir` is one executor's directory
    /// in a run's directory that nothing else removes.
    pub remove_empty_parent: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            binary: None,
            owner_pid: None,
            listen: None,
            work_dir: None,
            tls: None,
            startup_timeout: Duration::from_secs(30),
            remove_empty_parent: false,
        }
    }
}

/// The state host serving a directory on this executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalHost {
    /// Its Unix socket.
    pub address: HostAddress,
    /// Its process id.
    pub pid: u32,
    /// Where it listens on TCP (`host:port`), if it does: the address to
    /// announce for the subtasks it owns.
    pub tcp_address: Option<String>,
}

/// Makes sure a state host serves `dir` (the directory of this executor's
/// host; every executor needs its own) and says where it listens.
///
/// If none answers, starts the `weir-host` binary (detached into its own
/// process group, output appended to `dir/host.log`) and waits until it
/// accepts connections; a host that does not start in time is told to stop.
/// A lock file in `dir` makes concurrent callers start one host; the host's
/// own lock makes a second host exit at once.
pub fn ensure_host(dir: &Path, token: &str, options: &HostOptions) -> Result<LocalHost> {
    let host_dir = HostDir::new(dir);
    host_dir.prepare()?;
    if let Some(host) = answers(dir, token)? {
        return Ok(host);
    }
    let _spawning = lock_file(&host_dir.spawn_lock())?;
    // Another caller may have started it while this one waited for the lock.
    if let Some(host) = answers(dir, token)? {
        return Ok(host);
    }
    let (pid, exited) = spawn(&host_dir, token, options)?;
    let deadline = Instant::now() + options.startup_timeout;
    loop {
        if let Some(host) = answers(dir, token)? {
            return Ok(host);
        }
        let status = *exited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match status {
            // Another host holds the directory and is leaving or starting:
            // keep asking until the deadline.
            Some(status) if status.code() == Some(EXIT_ALREADY_RUNNING) => {}
            Some(status) => {
                return Err(HostError::InvalidRequest(format!(
                    "the state host exited at start ({status}); its log {} says: {}",
                    host_dir.log().display(),
                    log_tail(&host_dir.log())
                )));
            }
            None => {}
        }
        if Instant::now() >= deadline {
            // It removes its socket and working files on the way out.
            terminate(pid);
            return Err(HostError::InvalidRequest(format!(
                "the state host did not accept connections within {:?}; its log {} says: {}",
                options.startup_timeout,
                host_dir.log().display(),
                log_tail(&host_dir.log())
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host serving `dir`, if one completes a handshake with `token`. A
/// host that refuses the token is an error: it serves another job.
fn answers(dir: &Path, token: &str) -> Result<Option<LocalHost>> {
    let address = HostAddress::of_dir(dir);
    match HostClient::connect_with_timeout(&address, token, Duration::from_secs(10)) {
        Ok(client) => Ok(Some(LocalHost {
            pid: client.host_pid(),
            tcp_address: client.tcp_address().map(str::to_owned),
            address,
        })),
        Err(HostError::Unauthorized) => Err(HostError::Unauthorized),
        // No socket, nobody listening, or a host on its way out.
        Err(_) => Ok(None),
    }
}

/// Asks process `pid` to stop (SIGTERM).
fn terminate(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // Already gone is fine.
        let _ = kill_process(pid, Signal::TERM);
    }
}

/// The exit status of a started host, once the reaper saw it.
type Exited = Arc<Mutex<Option<ExitStatus>>>;

/// Starts the host; returns its pid and where its exit status will appear.
fn spawn(dir: &HostDir, token: &str, options: &HostOptions) -> Result<(u32, Exited)> {
    let binary = match &options.binary {
        Some(binary) => binary.clone(),
        None => std::env::var_os(HOST_BIN_ENV)
            .map(PathBuf::from)
            .ok_or_else(|| {
                HostError::InvalidRequest(format!(
                    "no weir-host binary given: pass its path or set {HOST_BIN_ENV}"
                ))
            })?,
    };
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.log())
        .map_err(|err| HostError::io(format!("opening {}", dir.log().display()), err))?;
    let log_err = log
        .try_clone()
        .map_err(|err| HostError::io(format!("opening {}", dir.log().display()), err))?;
    let mut command = Command::new(&binary);
    command
        .arg("--dir")
        .arg(dir.root())
        .env(HOST_TOKEN_ENV, token)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Its own process group: signals meant for the starting worker's
        // group (a killed Spark task) must not take the host down.
        .process_group(0);
    if let Some(pid) = options.owner_pid {
        command.arg("--owner-pid").arg(pid.to_string());
    }
    if let Some(work) = &options.work_dir {
        command.arg("--work-dir").arg(work);
    }
    if let Some(listen) = &options.listen {
        command.arg("--listen").arg(listen);
    }
    if options.remove_empty_parent {
        command.arg("--remove-empty-parent");
    }
    if let Some(tls) = &options.tls {
        command
            .arg("--tls-ca")
            .arg(&tls.ca)
            .arg("--tls-cert")
            .arg(&tls.cert)
            .arg("--tls-key")
            .arg(&tls.key);
        if let Some(name) = &tls.server_name {
            command.arg("--tls-server-name").arg(name);
        }
    }
    let mut child = command.spawn().map_err(|err| {
        HostError::io(format!("starting the state host {}", binary.display()), err)
    })?;
    let pid = child.id();
    let exited = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&exited);
    // Reaps the host when it exits, so it never lingers as a zombie of the
    // process that started it.
    std::thread::Builder::new()
        .name("weir-host-reaper".into())
        .spawn(move || {
            if let Ok(status) = child.wait() {
                *seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(status);
            }
        })
        .map_err(|err| HostError::io("starting the host reaper thread", err))?;
    Ok((pid, exited))
}

/// Opens and locks `path` exclusively, waiting for the holder.
fn lock_file(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|err| HostError::io(format!("opening {}", path.display()), err))?;
    file.lock()
        .map_err(|err| HostError::io(format!("locking {}", path.display()), err))?;
    Ok(file)
}

/// The last lines of the host's log, for error messages.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
    if tail.is_empty() {
        "(nothing)".to_owned()
    } else {
        tail
    }
}
