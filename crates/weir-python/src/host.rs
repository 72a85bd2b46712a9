//! The state host from Python: running a host process (`weir-host`),
//! sessions of Spark tasks on their subtask's owner (local or over TCP), and
//! the driver's control requests (shutdown, checkpoint abort, generation,
//! status).
//!
//! Glue only: `weir_host::server` serves, `weir_host::client` connects,
//! attaches, restores, takes barriers and sends control requests.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use weir_checkpoint::StorageOptions;
use weir_host::client::{DEFAULT_REPLY_TIMEOUT, HostClient, HostOptions, ensure_host};
use weir_host::protocol::{
    AckTarget, BarrierRequest, Expectation, HostAddress, HostDir, HostStatus, JobToken,
    SnapshotFormat, StorageRef,
};
use weir_host::server::{HostConfig, StartError, run};
use weir_host::{HostError, SubtaskSpec};
use weir_types::{CheckpointId, Epoch, MaxParallelism, OperatorUid, SubtaskIndex};

use crate::checkpoints::PyRestoreTicket;
use crate::errors::PyWeirError;
use crate::session::PySession;
use crate::tls::{self, PyTlsFiles};
use crate::types::PyValueType;

/// Exit code of a host that found another host serving its directory.
#[pyfunction]
pub(crate) fn host_exit_already_running() -> i32 {
    weir_host::client::EXIT_ALREADY_RUNNING
}

/// Serves state on the Unix socket in `directory` (and on TCP at `listen`,
/// `host:port`, port 0 for any free one) until process `owner_pid` is gone,
/// SIGTERM/SIGINT, or an authenticated shutdown (blocks, without the GIL).
/// Returns the process exit code: 0, or `host_exit_already_running()` when
/// another host serves the directory. Leaving because its owner is gone or
/// on shutdown, the host removes its directory, and on shutdown with
/// `remove_empty_parent` the directory's parent if that is left empty.
#[pyfunction]
#[pyo3(signature = (
    directory, token, owner_pid = None, work_dir = None, poll_ms = 200, listen = None, tls = None,
    remove_empty_parent = false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_host(
    py: Python<'_>,
    directory: PathBuf,
    token: String,
    owner_pid: Option<u32>,
    work_dir: Option<PathBuf>,
    poll_ms: u64,
    listen: Option<String>,
    tls: Option<PyRef<'_, PyTlsFiles>>,
    remove_empty_parent: bool,
) -> PyResult<i32> {
    let config = HostConfig {
        dir: HostDir::new(directory),
        token: JobToken::new(token),
        owner_pid,
        work_dir,
        poll_interval: Duration::from_millis(poll_ms.max(1)),
        listen,
        tls: tls::load(tls.as_deref())?,
        remove_empty_parent,
    };
    match py.detach(|| run(config)) {
        Ok(_) => Ok(0),
        Err(StartError::AlreadyRunning(_)) => Ok(weir_host::client::EXIT_ALREADY_RUNNING),
        Err(StartError::Host(err)) => Err(PyWeirError::from(err).into()),
    }
}

/// Connects a Spark task to the state host that owns subtask `subtask` of
/// operator `uid` and attaches it.
///
/// `directory` is this executor's host directory (one per executor); its
/// host is started with `host_command` if none answers, listening on TCP
/// at `listen` (`host:port`, the executor's address, port 0 for any) when
/// given. `owner_address` is the owner's TCP address when the driver knows
/// one; `None`, or this executor's own host's address, means the local host.
/// A remote owner is never started, only connected to; an unreachable one
/// is `StateLostError`. With the job's `tls`, the host serves TCP over TLS
/// and a remote owner is reached over TLS.
///
/// The task belongs to generation `generation` of the job and expects the
/// subtask's state to come from checkpoint `expect_restored_from` (`None`:
/// the job started empty) and to be final at `expect_final_epoch`. A host
/// without that state answers `StateLostError`, unless `restore` (the
/// subtask's ticket from `restore_tickets`) is given and the state starts at
/// its cut: then the host restores it from storage. The key columns' types
/// may be `None` only for a task that accesses no keyed state.
///
/// With `start_host=False` (the driver delivering a barrier) only the host
/// at `owner_address`, which must be given, is connected to; no host starts.
/// A host started with `remove_empty_parent` removes the parent of its
/// directory with the directory, if that leaves it empty, on shutdown.
#[pyfunction]
#[pyo3(signature = (
    directory, token, *, uid, subtask, parallelism, max_parallelism, backend, key_types,
    generation, expect_restored_from, expect_final_epoch, restore, host_command, owner_pid,
    listen = None, owner_address = None, tls = None, start_host = true, remove_empty_parent = false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_host(
    py: Python<'_>,
    directory: PathBuf,
    token: &str,
    uid: &str,
    subtask: u32,
    parallelism: u32,
    max_parallelism: u32,
    backend: &str,
    key_types: Option<Vec<PyRef<'_, PyValueType>>>,
    generation: u64,
    expect_restored_from: Option<u64>,
    expect_final_epoch: Option<u64>,
    restore: Option<PyRef<'_, PyRestoreTicket>>,
    host_command: PathBuf,
    owner_pid: Option<u32>,
    listen: Option<String>,
    owner_address: Option<&str>,
    tls: Option<PyRef<'_, PyTlsFiles>>,
    start_host: bool,
    remove_empty_parent: bool,
) -> PyResult<PySession> {
    let loaded = tls::load(tls.as_deref())?;
    let max_parallelism = MaxParallelism::new(max_parallelism).map_err(PyWeirError::from)?;
    let key_types = key_types.map(|types| types.iter().map(|t| t.inner.clone()).collect());
    let spec = SubtaskSpec {
        uid: OperatorUid::new(uid).map_err(PyWeirError::from)?,
        subtask: SubtaskIndex(subtask),
        parallelism,
        max_parallelism,
        backend: backend.parse().map_err(PyWeirError::from)?,
        key_types,
    };
    let expect = Expectation {
        generation,
        restored_from: expect_restored_from.map(CheckpointId),
        final_epoch: expect_final_epoch.map(Epoch),
    };
    let restore = restore.map(|ticket| ticket.inner.clone());
    let owner = owner_address.map(address).transpose()?;
    if !start_host && owner.is_none() {
        return Err(PyWeirError::InvalidArgument(
            "connecting without starting a host needs the owner's address".to_owned(),
        )
        .into());
    }
    let options = host_options(
        host_command,
        owner_pid,
        listen,
        tls.as_deref(),
        remove_empty_parent,
    );
    let session = py
        .detach(|| {
            let target = match owner {
                Some(owner) if !start_host => owner,
                owner => owner_host(&directory, token, &options, owner)?,
            };
            let connect =
                || HostClient::open(&target, token, DEFAULT_REPLY_TIMEOUT, loaded.as_ref());
            match connect()?.attach(spec.clone(), expect) {
                Err(HostError::StateLost(reason)) => match restore {
                    Some(ticket) if Some(ticket.cut()) == expect.final_epoch => {
                        connect()?.restore(ticket.request(spec, generation)?)
                    }
                    _ => Err(HostError::StateLost(reason)),
                },
                other => other,
            }
        })
        .map_err(PyWeirError::from)?;
    Ok(PySession::remote(session))
}

/// Makes sure a state host serves `directory` (starting `host_command` if
/// none answers, as a task's `connect_host` would) and returns the address
/// of its Unix socket. The host ends with `owner_pid`, on `shutdown_host`,
/// or when told to by its job (`remove_empty_parent`: as in `connect_host`).
#[pyfunction]
#[pyo3(signature = (
    directory, token, *, host_command, owner_pid, listen = None, tls = None, remove_empty_parent = false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_host(
    py: Python<'_>,
    directory: PathBuf,
    token: &str,
    host_command: PathBuf,
    owner_pid: Option<u32>,
    listen: Option<String>,
    tls: Option<PyRef<'_, PyTlsFiles>>,
    remove_empty_parent: bool,
) -> PyResult<String> {
    let options = host_options(
        host_command,
        owner_pid,
        listen,
        tls.as_deref(),
        remove_empty_parent,
    );
    let host = py
        .detach(|| ensure_host(&directory, token, &options))
        .map_err(PyWeirError::from)?;
    Ok(host.address.to_string())
}

/// How a host is started for this executor.
fn host_options(
    host_command: PathBuf,
    owner_pid: Option<u32>,
    listen: Option<String>,
    tls: Option<&PyTlsFiles>,
    remove_empty_parent: bool,
) -> HostOptions {
    HostOptions {
        binary: Some(host_command),
        owner_pid,
        listen,
        tls: tls.map(|files| files.inner.clone()),
        remove_empty_parent,
        ..HostOptions::default()
    }
}

/// Where the owner of a subtask is reached: the local host (started if
/// needed) unless `owner` names a host elsewhere. The local host's own TCP
/// address is reached over its Unix socket.
fn owner_host(
    directory: &std::path::Path,
    token: &str,
    options: &HostOptions,
    owner: Option<HostAddress>,
) -> weir_host::Result<HostAddress> {
    let local_tcp = std::fs::read_to_string(HostDir::new(directory).tcp_address()).ok();
    match owner {
        Some(HostAddress::Tcp(remote)) if local_tcp.as_deref() != Some(remote.as_str()) => {
            Ok(HostAddress::Tcp(remote))
        }
        Some(HostAddress::Unix(socket)) => Ok(HostAddress::Unix(socket)),
        // The local host owns it (or nobody does yet).
        _ => Ok(ensure_host(directory, token, options)?.address),
    }
}

fn address(text: &str) -> Result<HostAddress, PyWeirError> {
    text.parse::<HostAddress>()
        .map_err(|err| PyWeirError::InvalidArgument(err.to_string()))
}

/// Where the host serving `session` listens on TCP (`host:port`), or `None`
/// if it does not: what a task announces as the owner of its subtask.
#[pyfunction]
pub(crate) fn host_address(py: Python<'_>, session: &PySession) -> PyResult<Option<String>> {
    Ok(session.with_remote(py, |remote| Ok(remote.tcp_address().map(str::to_owned)))?)
}

/// Takes checkpoint `checkpoint_id` at epoch `cut` on a host session: the
/// synchronous part now (returns its duration in microseconds), the upload
/// to `storage` and the ack to the coordinator at `ack_url` in the host.
/// Canonical files compress with `compression` (`zstd`, `lz4`, `none`).
#[pyfunction]
#[pyo3(signature = (session, checkpoint_id, cut, storage, storage_options, ack_url, token, incremental=false, base=None, compression="zstd"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn take_barrier(
    py: Python<'_>,
    session: &PySession,
    checkpoint_id: u64,
    cut: u64,
    storage: String,
    storage_options: std::collections::BTreeMap<String, String>,
    ack_url: String,
    token: String,
    incremental: bool,
    base: Option<u64>,
    compression: &str,
) -> PyResult<u64> {
    // Bad options fail here, in the task, with the storage's own message.
    let options = StorageOptions {
        settings: storage_options.clone(),
    };
    weir_checkpoint::StorageLocation::parse(&storage, &options).map_err(PyWeirError::from)?;
    let request = BarrierRequest {
        checkpoint: CheckpointId(checkpoint_id),
        cut: Epoch(cut),
        storage: StorageRef {
            url: storage,
            options: storage_options,
        },
        ack: AckTarget {
            url: ack_url,
            token,
        },
        format: if incremental {
            SnapshotFormat::Incremental {
                base: base.map(CheckpointId),
            }
        } else {
            SnapshotFormat::Canonical
        },
        compression: crate::config::compression(compression)?,
    };
    let reply = session.with_remote(py, |remote| remote.barrier(request))?;
    Ok(reply.sync_micros)
}

/// What the host of a session holds and does, as JSON.
#[pyfunction]
pub(crate) fn host_status(py: Python<'_>, session: &PySession) -> PyResult<String> {
    let status = session.with_remote(py, |remote| remote.status())?;
    render_status(&status)
}

fn render_status(status: &HostStatus) -> PyResult<String> {
    serde_json::to_string(status)
        .map_err(|e| PyWeirError::Io(format!("cannot render the host status: {e}")).into())
}

/// Runs one control request against the host at `address` (a Unix socket
/// path or `host:port`, over TLS with `tls`), connecting with `token` and
/// waiting at most `timeout_s` for each answer.
fn control<R: Send>(
    py: Python<'_>,
    address_text: &str,
    token: &str,
    timeout_s: f64,
    tls: Option<PyRef<'_, PyTlsFiles>>,
    request: impl FnOnce(weir_host::Result<HostClient>) -> weir_host::Result<R> + Send,
) -> PyResult<R> {
    let target = address(address_text)?;
    let tls = tls::load(tls.as_deref())?;
    let timeout = Duration::try_from_secs_f64(timeout_s)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| {
            PyWeirError::InvalidArgument(format!(
                "timeout_s must be a positive number of seconds, got {timeout_s}"
            ))
        })?;
    Ok(py
        .detach(|| request(HostClient::open(&target, token, timeout, tls.as_ref())))
        .map_err(PyWeirError::from)?)
}

/// Stops the host at `address`: it cancels its uploads (deleting what they
/// wrote) before answering, then drops its state, removes its files and
/// exits. Returns `False` if no host answers there (already gone).
#[pyfunction]
#[pyo3(signature = (address, token, *, timeout_s = 60.0, tls = None))]
pub(crate) fn shutdown_host(
    py: Python<'_>,
    address: &str,
    token: &str,
    timeout_s: f64,
    tls: Option<PyRef<'_, PyTlsFiles>>,
) -> PyResult<bool> {
    control(py, address, token, timeout_s, tls, |connected| {
        match connected {
            Ok(client) => client.shutdown().map(|()| true),
            // Nothing listens there any more: nothing to stop.
            Err(HostError::StateLost(_) | HostError::Io { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    })
}

/// Cancels the uploads of checkpoint `checkpoint_id` in the host at
/// `address` and returns once they deleted what they wrote, with how many
/// were canceled.
#[pyfunction]
#[pyo3(signature = (address, token, checkpoint_id, *, timeout_s = 60.0, tls = None))]
pub(crate) fn abort_host_checkpoint(
    py: Python<'_>,
    address: &str,
    token: &str,
    checkpoint_id: u64,
    timeout_s: f64,
    tls: Option<PyRef<'_, PyTlsFiles>>,
) -> PyResult<usize> {
    control(py, address, token, timeout_s, tls, |connected| {
        connected?.abort_checkpoint(CheckpointId(checkpoint_id))
    })
}

/// Makes the host at `address` serve generation `generation` of the job:
/// it drops the state of older generations and refuses their tasks.
#[pyfunction]
#[pyo3(signature = (address, token, generation, *, timeout_s = 60.0, tls = None))]
pub(crate) fn start_host_generation(
    py: Python<'_>,
    address: &str,
    token: &str,
    generation: u64,
    timeout_s: f64,
    tls: Option<PyRef<'_, PyTlsFiles>>,
) -> PyResult<()> {
    control(py, address, token, timeout_s, tls, |connected| {
        connected?.start_generation(generation)
    })
}

/// What the host at `address` holds and does, as JSON.
#[pyfunction]
#[pyo3(signature = (address, token, *, timeout_s = 60.0, tls = None))]
pub(crate) fn host_status_at(
    py: Python<'_>,
    address: &str,
    token: &str,
    timeout_s: f64,
    tls: Option<PyRef<'_, PyTlsFiles>>,
) -> PyResult<String> {
    let status = control(py, address, token, timeout_s, tls, |connected| {
        connected?.status()
    })?;
    render_status(&status)
}
