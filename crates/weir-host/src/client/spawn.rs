//! Starting a state host on demand.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use super::HostClient;
use crate::error::{HostError, Result};
use crate::protocol::HostDir;

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
    /// The host exits after this long without connections or uploads.
    pub idle_timeout: Duration,
    /// The host exits when this process is gone (e.g. the Spark executor).
    pub owner_pid: Option<u32>,
    /// Where the host keeps working files; `<dir>/work` if `None`.
    pub work_dir: Option<PathBuf>,
    /// How long to wait for a started host to accept connections.
    pub startup_timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            binary: None,
            idle_timeout: Duration::from_secs(600),
            owner_pid: None,
            work_dir: None,
            startup_timeout: Duration::from_secs(30),
        }
    }
}

/// Makes sure a state host serves `dir` and returns its socket path.
///
/// If none answers, starts the `weir-host` binary (detached into its own
/// process group, output appended to `dir/host.log`) and waits until it
/// accepts connections. A lock file in `dir` makes concurrent callers start
/// one host; the host's own lock makes a second host exit at once.
pub fn ensure_host(dir: &Path, token: &str, options: &HostOptions) -> Result<PathBuf> {
    let host_dir = HostDir::new(dir);
    host_dir.prepare()?;
    if answers(dir, token)? {
        return Ok(host_dir.socket());
    }
    let _spawning = lock_file(&host_dir.spawn_lock())?;
    // Another caller may have started it while this one waited for the lock.
    if answers(dir, token)? {
        return Ok(host_dir.socket());
    }
    let exited = spawn(&host_dir, token, options)?;
    let deadline = Instant::now() + options.startup_timeout;
    loop {
        if answers(dir, token)? {
            return Ok(host_dir.socket());
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

/// Whether a host serving `dir` completes a handshake with `token`. A host
/// that refuses the token is an error: it serves another run of the job.
fn answers(dir: &Path, token: &str) -> Result<bool> {
    match HostClient::connect_with_timeout(dir, token, Duration::from_secs(10)) {
        Ok(_) => Ok(true),
        Err(HostError::Unauthorized) => Err(HostError::Unauthorized),
        // No socket, nobody listening, or a host on its way out.
        Err(_) => Ok(false),
    }
}

/// Starts the host; returns where its exit status will appear.
fn spawn(
    dir: &HostDir,
    token: &str,
    options: &HostOptions,
) -> Result<Arc<Mutex<Option<ExitStatus>>>> {
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
        .arg("--idle-timeout-millis")
        .arg(options.idle_timeout.as_millis().to_string())
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
    let mut child = command.spawn().map_err(|err| {
        HostError::io(format!("starting the state host {}", binary.display()), err)
    })?;
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
    Ok(exited)
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
