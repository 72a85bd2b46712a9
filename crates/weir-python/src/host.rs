//! The executor-local state host from Python: running a host process
//! (`python -m weir.host`), and sessions of Spark tasks on one.
//!
//! Glue only: `weir_host::server` serves, `weir_host::client` connects,
//! attaches, restores and takes barriers.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use weir_checkpoint::StorageOptions;
use weir_host::client::{HostClient, HostOptions, ensure_host};
use weir_host::protocol::{AckTarget, BarrierRequest, Expectation, HostDir, StorageRef};
use weir_host::server::{HostConfig, StartError, run};
use weir_host::{HostError, SubtaskSpec};
use weir_types::{CheckpointId, Epoch, MaxParallelism, OperatorUid, SubtaskIndex};

use crate::checkpoints::PyRestoreTicket;
use crate::errors::PyWeirError;
use crate::session::PySession;
use crate::types::PyValueType;

/// Exit code of a host that found another host serving its directory.
#[pyfunction]
pub(crate) fn host_exit_already_running() -> i32 {
    weir_host::client::EXIT_ALREADY_RUNNING
}

/// Serves state on the Unix socket in `directory` until idle for
/// `idle_timeout_ms` or until process `owner_pid` is gone (blocks, without
/// the GIL). Returns the process exit code: 0, or
/// `host_exit_already_running()` when another host serves the directory.
#[pyfunction]
#[pyo3(signature = (directory, token, idle_timeout_ms, owner_pid = None, work_dir = None, poll_ms = 200))]
pub(crate) fn run_host(
    py: Python<'_>,
    directory: PathBuf,
    token: String,
    idle_timeout_ms: u64,
    owner_pid: Option<u32>,
    work_dir: Option<PathBuf>,
    poll_ms: u64,
) -> PyResult<i32> {
    let config = HostConfig {
        dir: HostDir::new(directory),
        token,
        idle_timeout: Duration::from_millis(idle_timeout_ms),
        owner_pid,
        work_dir,
        poll_interval: Duration::from_millis(poll_ms.max(1)),
    };
    match py.detach(|| run(config)) {
        Ok(_) => Ok(0),
        Err(StartError::AlreadyRunning(_)) => Ok(weir_host::client::EXIT_ALREADY_RUNNING),
        Err(StartError::Host(err)) => Err(PyWeirError::from(err).into()),
    }
}

/// Connects a Spark task to the state host serving `directory` (starting
/// one with `host_command` if none answers) and attaches subtask `subtask`
/// of operator `uid`.
///
/// The task expects the subtask's state to come from checkpoint
/// `expect_restored_from` (`None`: the job started empty) and to be final at
/// `expect_final_epoch`. A host without that state answers `StateLostError`,
/// unless `restore` (the subtask's ticket from `restore_tickets`) is given
/// and the state starts at its cut: then the host restores it from storage.
/// The key columns' types may be `None` only for a task that accesses no
/// keyed state.
#[pyfunction]
#[pyo3(signature = (
    directory, token, *, uid, subtask, parallelism, max_parallelism, backend, key_types,
    expect_restored_from, expect_final_epoch, restore, host_command, idle_timeout_s,
    owner_pid
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
    expect_restored_from: Option<u64>,
    expect_final_epoch: Option<u64>,
    restore: Option<PyRef<'_, PyRestoreTicket>>,
    host_command: PathBuf,
    idle_timeout_s: f64,
    owner_pid: Option<u32>,
) -> PyResult<PySession> {
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
        restored_from: expect_restored_from.map(CheckpointId),
        final_epoch: expect_final_epoch.map(Epoch),
    };
    let restore = restore.map(|ticket| ticket.inner.clone());
    let options = HostOptions {
        binary: Some(host_command),
        idle_timeout: Duration::from_secs_f64(idle_timeout_s),
        owner_pid,
        ..HostOptions::default()
    };
    let session = py
        .detach(|| {
            ensure_host(&directory, token, &options)?;
            let client = HostClient::connect(&directory, token)?;
            match client.attach(spec.clone(), expect) {
                Err(HostError::StateLost(reason)) => match restore {
                    Some(ticket) if Some(ticket.cut()) == expect.final_epoch => {
                        HostClient::connect(&directory, token)?.restore(ticket.request(spec)?)
                    }
                    _ => Err(HostError::StateLost(reason)),
                },
                other => other,
            }
        })
        .map_err(PyWeirError::from)?;
    Ok(PySession::remote(session))
}

/// Takes checkpoint `checkpoint_id` at epoch `cut` on a host session: the
/// synchronous part now (returns its duration in microseconds), the upload
/// to `storage` and the ack to the coordinator at `ack_url` in the host.
#[pyfunction]
#[pyo3(signature = (session, checkpoint_id, cut, storage, storage_options, ack_url, token))]
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
    };
    let reply = session.with_remote(py, |remote| remote.barrier(request))?;
    Ok(reply.sync_micros)
}

/// What the host of a session holds and does, as JSON.
#[pyfunction]
pub(crate) fn host_status(py: Python<'_>, session: &PySession) -> PyResult<String> {
    let status = session.with_remote(py, |remote| remote.status())?;
    serde_json::to_string(&status)
        .map_err(|e| PyWeirError::Io(format!("cannot render the host status: {e}")).into())
}
