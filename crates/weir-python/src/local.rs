//! `weir._internal.LocalOperator`: every subtask of one operator in this
//! process (`weir_host::local::LocalOperator`), for `weir.testing`.
//!
//! Glue only: arguments become core types; sessions on its subtasks are
//! `weir._internal.Session`s (see `session.rs`).

use std::path::Path;
use std::sync::Mutex;

use pyo3::prelude::*;
use weir_host::BackendSpec;
use weir_host::engine::Subtask;
use weir_host::local::LocalOperator;
use weir_types::{MaxParallelism, OperatorUid, ValueType};

use crate::errors::PyWeirError;
use crate::session::PySession;

/// All subtasks of one keyed operator, in this process, on the real engine.
#[pyclass(module = "weir._internal", name = "LocalOperator", frozen)]
pub struct PyLocalOperator {
    /// `None` once closed. A mutex because Python objects may be shared
    /// across threads; calls hold the GIL, so it is never contended.
    inner: Mutex<Option<LocalOperator>>,
}

/// The backend named `name`.
pub(crate) fn parse_backend(name: &str) -> Result<BackendSpec, PyWeirError> {
    match name {
        "heap" => Ok(BackendSpec::Heap),
        "rocksdb" => Ok(BackendSpec::RocksDb),
        other => Err(PyWeirError::InvalidArgument(format!(
            "state backend {other:?} is unknown: use \"heap\" (state in memory) or \"rocksdb\" \
             (state on local disk)"
        ))),
    }
}

impl PyLocalOperator {
    fn wrap(operator: LocalOperator) -> Self {
        Self {
            inner: Mutex::new(Some(operator)),
        }
    }

    /// Runs `f` on the operator; fails once it is closed.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(&mut LocalOperator) -> Result<R, PyWeirError>,
    ) -> Result<R, PyWeirError> {
        let mut guard = self.inner.lock().map_err(|_| {
            PyWeirError::InvalidArgument(
                "the local operator failed in an earlier call; create a new one".into(),
            )
        })?;
        let operator = guard.as_mut().ok_or_else(|| {
            PyWeirError::InvalidArgument(
                "the local operator is closed; create a new one to keep going".into(),
            )
        })?;
        f(operator)
    }

    /// Runs `f` on subtask `index`, for a session.
    pub(crate) fn with_subtask<R>(
        &self,
        index: usize,
        f: impl FnOnce(&mut Subtask) -> Result<R, PyWeirError>,
    ) -> Result<R, PyWeirError> {
        self.with(|operator| f(operator.subtask_mut(index)?))
    }

    /// Records the key types on every subtask, so all agree before a snapshot.
    pub(crate) fn set_key_types(&self, types: Vec<ValueType>) -> Result<(), PyWeirError> {
        self.with(|operator| Ok(operator.set_key_types(types)?))
    }
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
        let backend = parse_backend(backend)?;
        let operator =
            py.detach(|| LocalOperator::new(uid, parallelism, max, backend, Path::new(work_dir)))?;
        Ok(Self::wrap(operator))
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
        let backend = parse_backend(backend)?;
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
        Ok(Self::wrap(operator))
    }

    /// The number of subtasks.
    #[getter]
    fn parallelism(&self) -> Result<u32, PyWeirError> {
        self.with(|operator| Ok(operator.parallelism()))
    }

    /// The number of key groups.
    #[getter]
    fn max_parallelism(&self) -> Result<u32, PyWeirError> {
        self.with(|operator| Ok(operator.max_parallelism().get()))
    }

    /// The newest epoch every subtask made final, if any.
    fn last_final_epoch(&self) -> Result<Option<u64>, PyWeirError> {
        self.with(|operator| {
            let mut last = None;
            for index in 0..operator.parallelism() as usize {
                let epoch = operator.subtask_mut(index)?.last_final_epoch();
                last = last.max(epoch.map(|e| e.0));
            }
            Ok(last)
        })
    }

    /// The state session of subtask `index`.
    fn session(slf: &Bound<'_, Self>, index: u32) -> Result<PySession, PyWeirError> {
        let (parallelism, max, key_types) = slf.get().with(|operator| {
            let parallelism = operator.parallelism();
            let max = operator.max_parallelism();
            let subtask = operator.subtask_mut(index as usize)?;
            let key_types = weir_host::SubtaskSession::spec(subtask).key_types.clone();
            Ok((parallelism, max, key_types))
        })?;
        Ok(PySession::local(
            slf.clone().unbind(),
            index as usize,
            index,
            parallelism,
            max,
            key_types,
        ))
    }

    /// Writes a self-contained savepoint under `dir` (every committed epoch
    /// becomes final first) and returns its directory.
    fn snapshot(&self, py: Python<'_>, dir: &str) -> Result<String, PyWeirError> {
        py.detach(|| self.with(|operator| Ok(operator.snapshot(dir)?)))
    }

    /// Releases the state (RocksDB files, checkpoint directory); idempotent.
    fn close(&self) {
        // A poisoned lock still holds the operator: drop it all the same.
        let mut guard = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = None;
    }
}
