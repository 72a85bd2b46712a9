//! The coordinator's events as frozen native classes, one per
//! `weir_coordinator::DriverEvent` variant: constructible, comparable and
//! matchable from Python, so a driver can be tested without a coordinator.
//!
//! Glue only: ids become ints, kinds their names (`"checkpoint"`,
//! `"savepoint"`), abort reasons their messages.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use weir_coordinator::DriverEvent;

/// Declares one event class: its fields are read-only attributes, its
/// constructor takes them in order, `__match_args__` allows positional
/// patterns, and the repr shows every field.
macro_rules! event_class {
    ($(#[$doc:meta])* $rust:ident = $name:literal { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[pyclass(module = "weir._internal", name = $name, frozen, eq, get_all)]
        #[derive(Debug, Clone, PartialEq)]
        pub(crate) struct $rust {
            $(pub(crate) $field: $ty,)*
        }

        #[pymethods]
        impl $rust {
            #[new]
            fn new($($field: $ty),*) -> Self {
                Self { $($field),* }
            }

            #[classattr]
            fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
                Ok(PyTuple::new(py, [$(stringify!($field)),*])?.unbind())
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                let fields: Vec<String> = vec![$(format!(
                    "{}={}",
                    stringify!($field),
                    self.$field.clone().into_pyobject(py)?.repr()?
                )),*];
                Ok(format!("{}({})", $name, fields.join(", ")))
            }
        }
    };
}

event_class!(
    /// A checkpoint or savepoint started; it takes the next final epoch as
    /// its cut, so run a barrier-only epoch if no data epoch follows.
    CheckpointTriggered = "CheckpointTriggered" { id: u64, kind: String }
);
event_class!(
    /// Send barrier `(id, cut)` with the next task of every stateful
    /// subtask; they upload their state under `storage`.
    BarrierInjected = "BarrierInjected" { id: u64, kind: String, cut: u64, storage: String }
);
event_class!(
    /// The checkpoint or savepoint at `path` is complete.
    CheckpointCompleted = "CheckpointCompleted" { id: u64, kind: String, cut: u64, path: String }
);
event_class!(
    /// These checkpoints left retention and are deleted; never restore from them.
    CheckpointSubsumed = "CheckpointSubsumed" { ids: Vec<u64> }
);
event_class!(
    /// The checkpoint or savepoint will never complete: cancel its uploads.
    CheckpointAborted = "CheckpointAborted" { id: u64, kind: String, reason: String }
);
event_class!(
    /// Too many consecutive checkpoint failures: restart the job.
    JobFailed = "JobFailed" { reason: String, consecutive_failures: u32, latest_completed: Option<u64> }
);
event_class!(
    /// Deleting old checkpoint files failed; they stay until the next run.
    CleanupFailed = "CleanupFailed" { message: String }
);
event_class!(
    /// Another run took the job directory over: the job must fail.
    LeaseLost = "LeaseLost" { message: String }
);

/// Registers every event class.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CheckpointTriggered>()?;
    m.add_class::<BarrierInjected>()?;
    m.add_class::<CheckpointCompleted>()?;
    m.add_class::<CheckpointSubsumed>()?;
    m.add_class::<CheckpointAborted>()?;
    m.add_class::<JobFailed>()?;
    m.add_class::<CleanupFailed>()?;
    m.add_class::<LeaseLost>()?;
    Ok(())
}

/// The Python object of `event`.
pub(crate) fn to_python(py: Python<'_>, event: DriverEvent) -> PyResult<Bound<'_, PyAny>> {
    let object = match event {
        DriverEvent::CheckpointTriggered { id, kind } => Bound::new(
            py,
            CheckpointTriggered {
                id: id.0,
                kind: kind.as_str().to_owned(),
            },
        )?
        .into_any(),
        DriverEvent::BarrierInjected {
            id,
            kind,
            cut,
            storage,
        } => Bound::new(
            py,
            BarrierInjected {
                id: id.0,
                kind: kind.as_str().to_owned(),
                cut: cut.0,
                storage,
            },
        )?
        .into_any(),
        DriverEvent::CheckpointCompleted {
            id,
            kind,
            cut,
            path,
        } => Bound::new(
            py,
            CheckpointCompleted {
                id: id.0,
                kind: kind.as_str().to_owned(),
                cut: cut.0,
                path,
            },
        )?
        .into_any(),
        DriverEvent::CheckpointSubsumed { ids } => Bound::new(
            py,
            CheckpointSubsumed {
                ids: ids.into_iter().map(|id| id.0).collect(),
            },
        )?
        .into_any(),
        DriverEvent::CheckpointAborted { id, kind, reason } => Bound::new(
            py,
            CheckpointAborted {
                id: id.0,
                kind: kind.as_str().to_owned(),
                reason: reason.to_string(),
            },
        )?
        .into_any(),
        DriverEvent::JobFailed {
            reason,
            consecutive_failures,
            latest_completed,
        } => Bound::new(
            py,
            JobFailed {
                reason: reason.to_string(),
                consecutive_failures,
                latest_completed: latest_completed.map(|id| id.0),
            },
        )?
        .into_any(),
        DriverEvent::CleanupFailed { message } => {
            Bound::new(py, CleanupFailed { message })?.into_any()
        }
        DriverEvent::LeaseLost { message } => Bound::new(py, LeaseLost { message })?.into_any(),
    };
    Ok(object)
}
