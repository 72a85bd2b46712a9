//! Python bindings for Weir: the private native module `weir._internal`.
//!
//! Glue only: each file converts arguments for one concept and maps errors onto
//! the exception hierarchy in `errors.rs`; the logic lives in the core crates.
//! This file only registers. Users import the typed wrappers in `python/weir`.

mod arrays;
mod checkpoints;
mod config;
mod coordinator;
mod errors;
mod events;
mod host;
mod key_groups;
mod local;
mod session;
mod tls;
mod types;
mod values;

use pyo3::prelude::*;

use crate::errors::{
    CheckpointError, INVALID_ARGUMENT_ERROR, SavepointFormatError, StateBackendError, StateError,
    StateLostError, WeirError,
};

/// The `weir._internal` extension module.
#[pymodule]
fn _internal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // `setattr`, not `add`: the version is metadata, not part of `__all__`.
    m.setattr("__version__", env!("CARGO_PKG_VERSION"))?;
    let py = m.py();
    m.add("WeirError", py.get_type::<WeirError>())?;
    m.add("StateError", py.get_type::<StateError>())?;
    m.add("StateBackendError", py.get_type::<StateBackendError>())?;
    m.add("StateLostError", py.get_type::<StateLostError>())?;
    m.add("CheckpointError", py.get_type::<CheckpointError>())?;
    m.add(
        "SavepointFormatError",
        py.get_type::<SavepointFormatError>(),
    )?;
    m.add(INVALID_ARGUMENT_ERROR, errors::invalid_argument_error(py)?)?;
    m.add_class::<config::PyCheckpointConfig>()?;
    m.add_class::<tls::PyTlsFiles>()?;
    m.add_class::<coordinator::PyCoordinator>()?;
    events::register(m)?;
    m.add_function(wrap_pyfunction!(coordinator::latest_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(coordinator::claim_owner, m)?)?;
    m.add_function(wrap_pyfunction!(coordinator::report_progress, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::read_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::check_restore, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::restore_tickets, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::run_cli, m)?)?;
    m.add_class::<checkpoints::PyCheckpoint>()?;
    m.add_class::<checkpoints::PyRestoreTicket>()?;
    m.add_function(wrap_pyfunction!(host::run_host, m)?)?;
    m.add_function(wrap_pyfunction!(host::connect_host, m)?)?;
    m.add_function(wrap_pyfunction!(host::start_host, m)?)?;
    m.add_function(wrap_pyfunction!(host::take_barrier, m)?)?;
    m.add_function(wrap_pyfunction!(host::host_status, m)?)?;
    m.add_function(wrap_pyfunction!(host::host_exit_already_running, m)?)?;
    m.add_function(wrap_pyfunction!(host::host_address, m)?)?;
    m.add_function(wrap_pyfunction!(host::shutdown_host, m)?)?;
    m.add_function(wrap_pyfunction!(host::abort_host_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(host::start_host_generation, m)?)?;
    m.add_function(wrap_pyfunction!(host::host_status_at, m)?)?;
    m.add_class::<local::PyLocalOperator>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<session::PyKeyBatch>()?;
    m.add_class::<arrays::PyExportedArray>()?;
    m.add_class::<types::PyValueType>()?;
    m.add_class::<types::PyStateDescriptor>()?;
    m.add_function(wrap_pyfunction!(key_groups::key_groups_of, m)?)?;
    m.add_function(wrap_pyfunction!(key_groups::spark_hash, m)?)?;
    m.add_function(wrap_pyfunction!(key_groups::key_group_for_hash, m)?)?;
    m.add_function(wrap_pyfunction!(key_groups::key_group_range, m)?)?;
    m.add_function(wrap_pyfunction!(key_groups::subtask_for_key_group, m)?)?;
    m.add_function(wrap_pyfunction!(key_groups::subtasks_for_key_groups, m)?)?;
    Ok(())
}
