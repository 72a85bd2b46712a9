//! `weir._internal.CheckpointConfig`: the core `CheckpointConfig`, frozen
//! and validated once, in Rust, when it is made.
//!
//! Glue only: milliseconds become durations, names become enums, and the
//! core's validation decides; nothing is checked here but signs.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use weir_checkpoint::coordinator::{CheckpointConfig, snapshot_compression};
use weir_snapshot::Compression;

use crate::errors::PyWeirError;

/// Flink's checkpoint options with Flink's defaults, validated on creation.
///
/// `interval_ms` between checkpoint starts (at least 10); `mode`
/// `"exactly_once"` or `"at_least_once"`; `timeout_ms` aborts a checkpoint
/// (at least 10); `min_pause_ms` between one's end and the next start (only
/// with `max_concurrent == 1`); `tolerable_failures` in a row before the job
/// fails; `retained` completed checkpoints kept; `externalized_cleanup`:
/// `"retain_on_cancellation"` keeps the job directory's checkpoints when the
/// job is cancelled, `"delete_on_cancellation"` deletes them (never
/// savepoints; checkpoints always survive failures and normal ends);
/// `snapshot_compression` of canonical snapshot files (every heap
/// checkpoint, every savepoint): `"zstd"` (default), `"lz4"` or `"none"`.
#[pyclass(module = "weir._internal", name = "CheckpointConfig", frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyCheckpointConfig {
    pub(crate) inner: CheckpointConfig,
}

/// `value` as a count (`u32`), or an error naming `argument`.
fn count(argument: &'static str, value: i64) -> Result<u32, PyWeirError> {
    u32::try_from(value).map_err(|_| PyWeirError::IntegerOutOfRange {
        argument,
        got: value,
        min: 0,
        max: i64::from(u32::MAX),
    })
}

/// `value` milliseconds as a duration, or an error naming `argument`.
fn millis(argument: &'static str, value: i64) -> Result<Duration, PyWeirError> {
    u64::try_from(value)
        .map(Duration::from_millis)
        .map_err(|_| PyWeirError::IntegerOutOfRange {
            argument,
            got: value,
            min: 0,
            max: i64::MAX,
        })
}

/// The snapshot compression named `name`, or an error listing the names.
pub(crate) fn compression(name: &str) -> Result<Compression, PyWeirError> {
    snapshot_compression(name).map_err(PyWeirError::from)
}

fn as_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[pymethods]
impl PyCheckpointConfig {
    #[new]
    #[pyo3(signature = (
        interval_ms, *, mode = "exactly_once", timeout_ms = 600_000, min_pause_ms = 0,
        max_concurrent = 1, tolerable_failures = 0, retained = 1,
        externalized_cleanup = "retain_on_cancellation", snapshot_compression = "zstd"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        interval_ms: i64,
        mode: &str,
        timeout_ms: i64,
        min_pause_ms: i64,
        max_concurrent: i64,
        tolerable_failures: i64,
        retained: i64,
        externalized_cleanup: &str,
        snapshot_compression: &str,
    ) -> PyResult<Self> {
        let inner = CheckpointConfig {
            interval: millis("interval_ms", interval_ms)?,
            mode: mode.parse().map_err(PyWeirError::from)?,
            timeout: millis("timeout_ms", timeout_ms)?,
            min_pause: millis("min_pause_ms", min_pause_ms)?,
            max_concurrent: count("max_concurrent", max_concurrent)?,
            tolerable_failures: count("tolerable_failures", tolerable_failures)?,
            retained: count("retained", retained)?,
            externalized_cleanup: externalized_cleanup.parse().map_err(PyWeirError::from)?,
            snapshot_compression: compression(snapshot_compression)?,
        }
        .validate()
        .map_err(PyWeirError::from)?;
        Ok(Self { inner })
    }

    #[getter]
    fn interval_ms(&self) -> u64 {
        as_millis(self.inner.interval)
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.inner.mode.as_str()
    }

    #[getter]
    fn timeout_ms(&self) -> u64 {
        as_millis(self.inner.timeout)
    }

    #[getter]
    fn min_pause_ms(&self) -> u64 {
        as_millis(self.inner.min_pause)
    }

    #[getter]
    fn max_concurrent(&self) -> u32 {
        self.inner.max_concurrent
    }

    #[getter]
    fn tolerable_failures(&self) -> u32 {
        self.inner.tolerable_failures
    }

    #[getter]
    fn retained(&self) -> u32 {
        self.inner.retained
    }

    #[getter]
    fn externalized_cleanup(&self) -> &'static str {
        self.inner.externalized_cleanup.as_str()
    }

    #[getter]
    fn snapshot_compression(&self) -> &'static str {
        self.inner.snapshot_compression.as_str()
    }

    /// Pickles as the arguments that rebuild (and revalidate) it.
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("mode", self.mode())?;
        kwargs.set_item("timeout_ms", self.timeout_ms())?;
        kwargs.set_item("min_pause_ms", self.min_pause_ms())?;
        kwargs.set_item("max_concurrent", self.max_concurrent())?;
        kwargs.set_item("tolerable_failures", self.tolerable_failures())?;
        kwargs.set_item("retained", self.retained())?;
        kwargs.set_item("externalized_cleanup", self.externalized_cleanup())?;
        kwargs.set_item("snapshot_compression", self.snapshot_compression())?;
        Ok((PyTuple::new(py, [self.interval_ms()])?, kwargs))
    }

    fn __repr__(&self) -> String {
        format!(
            "CheckpointConfig(interval_ms={}, mode='{}', timeout_ms={}, min_pause_ms={}, \
             max_concurrent={}, tolerable_failures={}, retained={}, externalized_cleanup='{}', \
             snapshot_compression='{}')",
            self.interval_ms(),
            self.mode(),
            self.timeout_ms(),
            self.min_pause_ms(),
            self.max_concurrent(),
            self.tolerable_failures(),
            self.retained(),
            self.externalized_cleanup(),
            self.snapshot_compression()
        )
    }
}
