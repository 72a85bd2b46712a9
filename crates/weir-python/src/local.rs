//! `weir._internal.LocalOperator`: every subtask of one operator in this
//! process (`weir_host::local`), for `weir.testing`.
//!
//! Glue only: arguments become core types; sessions on its subtasks are
//! `weir._internal.Session`s (see `session.rs`).

use std::path::Path;

use pyo3::prelude::*;
use weir_host::BackendSpec;
use weir_host::local::{LocalOperator, SharedOperator};
use weir_types::{MaxParallelism, OperatorUid};

use crate::errors::PyWeirError;
use crate::session::PySession;

/// All subtasks of one keyed operator, in this process, on the real engine.
#[pyclass(module = "weir._internal", name = "LocalOperator", frozen)]
pub struct PyLocalOperator {
    inner: SharedOperator,
}

#[pymethods]
impl PyLocalOperator {
    /// `parallelism` empty subtasks of operator `uid` on `backend` ("heap" or
    /// "rocksdb"); RocksDB files and checkpoints go under `work_dir`.
    #[new]
    fn new(
        py: Python<'_>,
        uid: &str,
        parallelism: u32,
        max_parallelism: u32,
        backend: &str,
        work_dir: &str,
    ) -> Result<Self, PyWeirError> {
        let uid = OperatorUid::new(uid)?;
        let max = MaxParallelism::new(max_parallelism)?;
        let backend: BackendSpec = backend.parse()?;
        let operator =
            py.detach(|| LocalOperator::new(uid, parallelism, max, backend, Path::new(work_dir)))?;
        Ok(Self {
            inner: SharedOperator::new(operator),
        })
    }

    /// Restores operator `uid` from the savepoint or checkpoint at `path` at
    /// any parallelism.
    #[staticmethod]
    #[pyo3(signature = (
        path, uid, parallelism, max_parallelism, backend, work_dir,
        allow_non_restored_state = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn restore(
        py: Python<'_>,
        path: &str,
        uid: &str,
        parallelism: u32,
        max_parallelism: u32,
        backend: &str,
        work_dir: &str,
        allow_non_restored_state: bool,
    ) -> Result<Self, PyWeirError> {
        let uid = OperatorUid::new(uid)?;
        let max = MaxParallelism::new(max_parallelism)?;
        let backend: BackendSpec = backend.parse()?;
        let operator = py.detach(|| {
            LocalOperator::restore(
                path,
                uid,
                parallelism,
                max,
                backend,
                Path::new(work_dir),
                allow_non_restored_state,
            )
        })?;
        Ok(Self {
            inner: SharedOperator::new(operator),
        })
    }

    #[getter]
    fn parallelism(&self) -> Result<u32, PyWeirError> {
        Ok(self.inner.with(|operator| Ok(operator.parallelism()))?)
    }

    #[getter]
    fn max_parallelism(&self) -> Result<u32, PyWeirError> {
        Ok(self
            .inner
            .with(|operator| Ok(operator.max_parallelism().get()))?)
    }

    /// The newest epoch any subtask made final, if any.
    fn last_final_epoch(&self) -> Result<Option<u64>, PyWeirError> {
        Ok(self
            .inner
            .with(|operator| Ok(operator.last_final_epoch().map(|e| e.0)))?)
    }

    /// The state session of subtask `index`.
    fn session(&self, index: u32) -> Result<PySession, PyWeirError> {
        Ok(PySession::local(self.inner.session(index)?))
    }

    /// Writes a self-contained savepoint under `dir` (every committed epoch
    /// becomes final first) and returns its directory.
    fn snapshot(&self, py: Python<'_>, dir: &str) -> Result<String, PyWeirError> {
        Ok(py.detach(|| self.inner.with(|operator| operator.snapshot(dir)))?)
    }

    /// Releases the state (RocksDB files, checkpoint directory); idempotent.
    fn close(&self) {
        self.inner.close();
    }
}
