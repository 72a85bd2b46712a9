//! The state host process: serves subtask state over a Unix socket.
//!
//! [`run`] takes the host directory's lock (one host per directory), binds
//! the socket (mode `0600` inside the `0700` directory), and serves each
//! connection on its own thread; snapshot uploads and acks run on a tokio
//! runtime. It returns when the host has been idle (no connection, no
//! upload) for the idle timeout, or when the owner process is gone.

mod ack;
mod barrier;
mod connection;
mod host;
mod slot;
mod watchdog;

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{HostError, Result};
use crate::protocol::HostDir;

pub use watchdog::ExitReason;

/// How long a starting host waits for the directory's lock: a host that
/// decided to exit releases it moments after removing its socket.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How a host runs. Its `Debug` output leaves out the token.
#[derive(Clone)]
pub struct HostConfig {
    /// The host directory (socket, lock, working files).
    pub dir: HostDir,
    /// The job token every connection must present.
    pub token: String,
    /// Exit after this long without connections or uploads.
    pub idle_timeout: Duration,
    /// Exit when this process is gone (the executor or worker that started
    /// the host).
    pub owner_pid: Option<u32>,
    /// Where subtasks keep working files; `dir/work` by default.
    pub work_dir: Option<PathBuf>,
    /// How often the idle timer and the owner are checked.
    pub poll_interval: Duration,
}

impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("dir", &self.dir)
            .field("idle_timeout", &self.idle_timeout)
            .field("owner_pid", &self.owner_pid)
            .field("work_dir", &self.work_dir)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

/// Why a host did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another host holds the directory's lock.
    #[error("another state host serves {0}")]
    AlreadyRunning(PathBuf),
    /// Anything else.
    #[error(transparent)]
    Host(#[from] HostError),
}

/// Runs a host until it is idle or its owner is gone.
pub fn run(config: HostConfig) -> Result<ExitReason, StartError> {
    if config.token.is_empty() {
        return Err(HostError::InvalidRequest("the job token may not be empty".into()).into());
    }
    config.dir.prepare()?;
    let _lock = acquire_lock(&config.dir)?;
    let socket = config.dir.socket();
    match fs::remove_file(&socket) {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::NotFound => {}
        Err(err) => {
            return Err(
                HostError::io(format!("removing stale socket {}", socket.display()), err).into(),
            );
        }
    }
    let listener = UnixListener::bind(&socket)
        .map_err(|err| HostError::io(format!("binding {}", socket.display()), err))?;
    fs::set_permissions(&socket, fs::Permissions::from_mode(0o600))
        .map_err(|err| HostError::io(format!("restricting {}", socket.display()), err))?;
    let work_dir = config.work_dir.clone().unwrap_or_else(|| config.dir.work());
    // Files of a host that died without cleaning up belong to nobody.
    let _ = fs::remove_dir_all(&work_dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("weir-host-io")
        .enable_all()
        .build()
        .map_err(|err| HostError::io("starting the upload runtime", err))?;
    let host = Arc::new(host::Host::new(
        &config.token,
        work_dir.clone(),
        runtime.handle().clone(),
    ));
    eprintln!(
        "weir-host {}: serving {} (idle timeout {:?}, owner {:?})",
        std::process::id(),
        socket.display(),
        config.idle_timeout,
        config.owner_pid
    );
    let accept_host = Arc::clone(&host);
    std::thread::Builder::new()
        .name("weir-host-accept".into())
        .spawn(move || accept(&accept_host, &listener))
        .map_err(|err| HostError::io("starting the accept thread", err))?;
    let reason = watchdog::watch(&host, &config);
    // Clients must stop finding this host before it lets go of the lock.
    let _ = fs::remove_file(&socket);
    host.drop_slots();
    let _ = fs::remove_dir_all(&work_dir);
    runtime.shutdown_timeout(Duration::from_secs(1));
    eprintln!("weir-host {}: exiting: {reason}", std::process::id());
    Ok(reason)
}

fn accept(host: &Arc<host::Host>, listener: &UnixListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // A failed accept concerns that client only.
            continue;
        };
        let host = Arc::clone(host);
        let spawned = std::thread::Builder::new()
            .name("weir-host-conn".into())
            .spawn(move || connection::serve(&host, stream));
        if let Err(err) = spawned {
            eprintln!("weir-host: cannot start a connection thread: {err}");
        }
    }
}

/// Takes the directory's lock for the life of the host, waiting briefly
/// for a host that is on its way out.
fn acquire_lock(dir: &HostDir) -> Result<File, StartError> {
    let path = dir.host_lock();
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|err| HostError::io(format!("opening {}", path.display()), err))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(StartError::AlreadyRunning(dir.root().to_path_buf()));
            }
            Err(TryLockError::Error(err)) => {
                return Err(HostError::io(format!("locking {}", path.display()), err).into());
            }
        }
    }
}
