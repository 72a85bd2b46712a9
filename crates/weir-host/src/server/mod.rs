//! The state host process: serves subtask state over a Unix socket and,
//! when asked, over TCP.
//!
//! [`run`] takes the host directory's lock (one host per directory; the
//! caller gives each executor its own directory), binds the socket (mode
//! `0600` inside the `0700` directory) and the TCP address, publishes the
//! bound TCP address in the directory, and serves each connection on its own
//! thread; snapshot uploads and acks run on a tokio runtime. A host lives as
//! long as its job: it returns when its owner process is gone, on SIGTERM or
//! SIGINT, or on an authenticated `Shutdown`, and removes its socket,
//! address file and working files on the way out. When its owner is gone or
//! its job shut it down it leaves for good and removes its directory too;
//! after a signal the directory keeps its log.

mod ack;
mod barrier;
mod connection;
mod host;
mod listen;
mod op;
mod slot;
mod watchdog;

use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_coordinator::Tls;

use crate::error::{HostError, Result};
use crate::protocol::{HostDir, JobToken};

use listen::{Listener, Published};
pub use watchdog::ExitReason;

/// How long a starting host waits for the directory's lock: a host that
/// decided to exit releases it moments after removing its socket.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How long an exiting host waits for its canceled uploads to delete what
/// they wrote.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// How long an exiting host waits for connections still using a subtask
/// (a task's session ending, its epoch being rolled back) to let go of it,
/// so the subtask's database is closed before the working files go.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How a host runs. Its `Debug` output leaves out the token.
#[derive(Clone)]
pub struct HostConfig {
    /// The host directory (socket, address, lock, working files).
    pub dir: HostDir,
    /// The job token every connection must present.
    pub token: JobToken,
    /// Exit when this process is gone (the executor that started the host).
    pub owner_pid: Option<u32>,
    /// Where subtasks keep working files; `dir/work` by default.
    pub work_dir: Option<PathBuf>,
    /// How often the owner is checked.
    pub poll_interval: Duration,
    /// Also listen on TCP at this `host:port` (port 0: any free port) for
    /// tasks on other executors; `None`: the Unix socket only.
    pub listen: Option<String>,
    /// Serve TCP over TLS, and ack to an `https://` coordinator, with the
    /// job's TLS files.
    pub tls: Option<Tls>,
    /// On leaving for good (see [`ExitReason::is_final`]) the host removes
    /// its directory; with this, on `Shutdown` (the end of its job) also the
    /// directory's parent if that leaves it empty (a run's directory of
    /// per-executor host directories).
    pub remove_empty_parent: bool,
}

impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("dir", &self.dir)
            .field("owner_pid", &self.owner_pid)
            .field("work_dir", &self.work_dir)
            .field("poll_interval", &self.poll_interval)
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("remove_empty_parent", &self.remove_empty_parent)
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

/// Runs a host until its owner is gone, a signal or a `Shutdown` request.
pub fn run(config: HostConfig) -> Result<ExitReason, StartError> {
    if config.token.expose().is_empty() {
        return Err(HostError::InvalidRequest("the job token may not be empty".into()).into());
    }
    config.dir.prepare()?;
    let _lock = acquire_lock(&config.dir)?;
    // From here on, every way out removes what the host created.
    let mut published = Published::default();
    let work_dir = config.work_dir.clone().unwrap_or_else(|| config.dir.work());
    // Files of a host that died without cleaning up belong to nobody.
    let _ = std::fs::remove_dir_all(&work_dir);
    published.dir(work_dir.clone());
    let mut listeners = vec![Listener::unix(&config.dir, &mut published)?];
    if let Some(address) = &config.listen {
        listeners.push(Listener::tcp(address, config.tls.as_ref())?);
    }
    let tcp_address = listeners
        .iter()
        .find_map(Listener::tcp_address)
        .map(|a| a.to_string());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("weir-host-io")
        .enable_all()
        .build()
        .map_err(|err| HostError::io("starting the upload runtime", err))?;
    let host = Arc::new(host::Host::new(
        config.token.clone(),
        work_dir,
        runtime.handle().clone(),
        tcp_address.clone(),
        config.tls.clone(),
    ));
    watchdog::stop_on_signals(&host, &runtime)?;
    if let Some(address) = &tcp_address {
        published.address(&config.dir, address)?;
    }
    eprintln!(
        "weir-host {}: serving {}{} (owner {:?})",
        std::process::id(),
        config.dir.socket().display(),
        tcp_address
            .as_ref()
            .map_or_else(String::new, |a| format!(" and TCP {a}")),
        config.owner_pid
    );
    let listeners: Vec<Arc<Listener>> = listeners.into_iter().map(Arc::new).collect();
    for listener in &listeners {
        let (listener, host) = (Arc::clone(listener), Arc::clone(&host));
        std::thread::Builder::new()
            .name("weir-host-accept".into())
            .spawn(move || listener.accept_loop(&host))
            .map_err(|err| HostError::io("starting an accept thread", err))?;
    }
    let reason = watchdog::watch(&host, &config);
    eprintln!("weir-host {}: exiting: {reason}", std::process::id());
    host.set_stopping();
    for listener in &listeners {
        listener.wake();
    }
    // Clients must stop finding this host before it lets go of the lock.
    published.remove_files();
    let canceled = host.cancel_uploads(None, CANCEL_WAIT);
    if canceled > 0 {
        eprintln!("weir-host: canceled {canceled} uploads");
    }
    host.drop_slots(RELEASE_WAIT);
    drop(published);
    runtime.shutdown_timeout(Duration::from_secs(1));
    // Only the end of the job removes the run's directory: after an
    // executor died the job goes on, and the directory may be the driver's
    // private one that the next executor's host directory goes into.
    let parent = config.remove_empty_parent && reason == ExitReason::Shutdown;
    if reason.is_final()
        && let Err(err) = config.dir.remove(parent)
    {
        eprintln!("weir-host {}: {err}", std::process::id());
    }
    Ok(reason)
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
