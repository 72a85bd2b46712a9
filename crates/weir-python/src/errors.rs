//! The one exception hierarchy Python sees, and the mapping of core errors onto it.
//!
//! Every core error reaches Python through [`PyWeirError`]: add a variant with
//! `#[from]` for each new core error enum and one arm in its `From` impl that
//! picks the exception class. Messages are the core messages, unchanged.

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use weir_checkpoint::CheckpointError as CoreCheckpointError;
use weir_checkpoint::coordinator::CoordinatorError;
use weir_coordinator::DriverError;
use weir_host::{HostError, RemoteErrorKind};
use weir_state::StateError as CoreStateError;
use weir_types::TypesError;

use crate::values::python_shape;

pyo3::create_exception!(
    weir.exceptions,
    WeirError,
    PyException,
    "Base class of every error Weir raises."
);
pyo3::create_exception!(
    weir.exceptions,
    StateError,
    WeirError,
    "Keyed or operator state was used wrongly (duplicate name, wrong kind, no current key)."
);
pyo3::create_exception!(
    weir.exceptions,
    StateBackendError,
    WeirError,
    "The state backend failed or found its stored data unreadable."
);
pyo3::create_exception!(
    weir.exceptions,
    StateLostError,
    StateBackendError,
    "Working state is gone (state host or executor lost); restore from the latest checkpoint."
);
pyo3::create_exception!(
    weir.exceptions,
    CheckpointError,
    WeirError,
    "A checkpoint or savepoint could not be taken, stored or restored."
);
pyo3::create_exception!(
    weir.exceptions,
    SavepointFormatError,
    CheckpointError,
    "A checkpoint or savepoint on storage is corrupt, truncated or of an unknown format version."
);

/// Name of the exception class for invalid arguments (a `WeirError` and a `ValueError`).
pub(crate) const INVALID_ARGUMENT_ERROR: &str = "InvalidArgumentError";
const INVALID_ARGUMENT_DOC: &str =
    "An argument is out of range or malformed; the message says the fix.";

// `create_exception!` takes a single base, but invalid arguments must also be
// `ValueError`s so callers that catch the builtin keep working; the class is
// built once with `type(name, bases, namespace)` instead.
static INVALID_ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The `InvalidArgumentError(WeirError, ValueError)` class, created on first use.
pub(crate) fn invalid_argument_error(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    INVALID_ARGUMENT
        .get_or_try_init(py, || {
            let bases = PyTuple::new(
                py,
                [py.get_type::<WeirError>(), py.get_type::<PyValueError>()],
            )?;
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "weir.exceptions")?;
            namespace.set_item("__doc__", INVALID_ARGUMENT_DOC)?;
            let class =
                py.get_type::<PyType>()
                    .call1((INVALID_ARGUMENT_ERROR, bases, namespace))?;
            Ok::<_, PyErr>(class.cast_into::<PyType>()?.unbind())
        })
        .map(|class| class.bind(py).clone())
}

/// Every error the binding hands to Python.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PyWeirError {
    /// Invalid ids, key groups, descriptors, values, keys or encodings.
    #[error(transparent)]
    Types(#[from] TypesError),
    /// An integer argument that does not fit the type the core takes.
    #[error("{argument} must be an integer in {min}..={max}, got {got}")]
    IntegerOutOfRange {
        /// The Python parameter name.
        argument: &'static str,
        /// The rejected value.
        got: i64,
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A key with no columns: Spark's `hash` needs at least one.
    #[error("a key needs at least one column: pass one or more key values")]
    NoKeyColumns,
    /// Key values and column types of different lengths.
    #[error(
        "got {values} key values but {types} column types: pass exactly one type per key column"
    )]
    ColumnCountMismatch {
        /// Number of values.
        values: usize,
        /// Number of types.
        types: usize,
    },
    /// A key value that cannot be read as its declared column type.
    #[error(
        "key column {index} is declared {column_type} but holds {value}: pass {expected}, or None"
    )]
    ColumnValue {
        /// Position of the column.
        index: usize,
        /// The declared Spark type name.
        column_type: String,
        /// `repr()` of the value.
        value: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// Checkpoint storage, metadata, savepoints or restore planning failed.
    #[error(transparent)]
    Checkpoint(#[from] CoreCheckpointError),
    /// The checkpoint coordinator could not start or act.
    #[error(transparent)]
    Coordinator(#[from] DriverError),
    /// Checkpoint options the coordinator refuses; the message says the fix.
    #[error(transparent)]
    CheckpointConfig(#[from] CoordinatorError),
    /// An argument the core cannot take; the message says the fix.
    #[error("{0}")]
    InvalidArgument(String),
    /// Local I/O of the binding itself (threads, runtimes) failed.
    #[error("{0}")]
    Io(String),
    /// The in-process engine or a state host refused or failed a state access.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Python code Weir called (pickle, `__arrow_c_schema__`) raised: passed on as it is.
    #[error("{0}")]
    Python(#[from] PyErr),
}

impl From<PyWeirError> for PyErr {
    fn from(err: PyWeirError) -> PyErr {
        let message = err.to_string();
        match err {
            PyWeirError::Types(types) => types_error(types, message),
            PyWeirError::IntegerOutOfRange { .. }
            | PyWeirError::NoKeyColumns
            | PyWeirError::ColumnCountMismatch { .. }
            | PyWeirError::ColumnValue { .. }
            | PyWeirError::InvalidArgument(_) => invalid_argument(message),
            PyWeirError::Checkpoint(err) => checkpoint_error(&err, message),
            PyWeirError::Coordinator(err) => driver_error(&err, message),
            PyWeirError::CheckpointConfig(err) => coordinator_error(&err, message),
            PyWeirError::Io(_) => CheckpointError::new_err(message),
            PyWeirError::Host(err) => host_error(err, message),
            PyWeirError::Python(err) => err,
        }
    }
}

/// Picks the class for a [`TypesError`]. The match is exhaustive on purpose: a
/// new core variant must be classified here, not fall into a default.
fn types_error(err: TypesError, message: String) -> PyErr {
    match err {
        TypesError::ValueMismatch(mismatch) => StateError::new_err(format!(
            "{message}: pass {}",
            python_shape(&mismatch.part_type)
        )),
        TypesError::KeyTypeMismatch { .. } => StateError::new_err(message),
        TypesError::InvalidMaxParallelism { .. }
        | TypesError::InvalidParallelism { .. }
        | TypesError::InvalidSubtask { .. }
        | TypesError::InvalidKeyGroup { .. }
        | TypesError::InvalidKeyGroupRange { .. }
        | TypesError::InvalidOperatorUid { .. }
        | TypesError::InvalidStateName { .. }
        | TypesError::InvalidDescriptor { .. }
        | TypesError::TypeMismatch { .. }
        | TypesError::UnsupportedArrowType { .. }
        | TypesError::InvalidKey { .. }
        | TypesError::UnknownName { .. } => invalid_argument(message),
        // Bytes that fail to decode were written or stored wrongly: not the caller's argument.
        TypesError::Corrupt { .. } => StateBackendError::new_err(message),
    }
}

/// Picks the class for a [`HostError`]: misuse of state is a `StateError`,
/// broken storage a `StateBackendError`, lost state a `StateLostError`.
fn host_error(err: HostError, message: String) -> PyErr {
    match err {
        HostError::State(state) => state_error(&state, message),
        HostError::Types(types) => types_error(types, message),
        HostError::Checkpoint(checkpoint) => checkpoint_error(&checkpoint, message),
        HostError::Snapshot(_) => CheckpointError::new_err(message),
        HostError::InvalidRequest(_) => invalid_argument(message),
        HostError::StateLost(_) => StateLostError::new_err(message),
        HostError::Remote { kind, .. } => match kind {
            RemoteErrorKind::State => StateError::new_err(message),
            RemoteErrorKind::Types => invalid_argument(message),
            RemoteErrorKind::Snapshot | RemoteErrorKind::Checkpoint => {
                CheckpointError::new_err(message)
            }
            RemoteErrorKind::Io => StateBackendError::new_err(message),
        },
        HostError::Protocol(_) | HostError::Unauthorized | HostError::Io { .. } => {
            StateBackendError::new_err(message)
        }
    }
}

/// Misuse of state (names, kinds, key groups, epochs) is the caller's; stored
/// data that does not read back is the backend's.
fn state_error(err: &CoreStateError, message: String) -> PyErr {
    match err {
        CoreStateError::Types(TypesError::Corrupt { .. })
        | CoreStateError::Corrupt { .. }
        | CoreStateError::ChecksumMismatch { .. }
        | CoreStateError::UnsupportedVersion { .. }
        | CoreStateError::Storage { .. } => StateBackendError::new_err(message),
        CoreStateError::Types(_) => invalid_argument(message),
        _ => StateError::new_err(message),
    }
}

/// Corrupt or unreadable stored checkpoints are format errors; a refused
/// restore (non-restored state, max parallelism change) is the caller's to fix.
fn checkpoint_error(err: &CoreCheckpointError, message: String) -> PyErr {
    match err {
        CoreCheckpointError::NonRestoredState { .. }
        | CoreCheckpointError::MaxParallelismChanged { .. } => invalid_argument(message),
        CoreCheckpointError::NotMetadata { .. }
        | CoreCheckpointError::Truncated { .. }
        | CoreCheckpointError::ChecksumMismatch { .. }
        | CoreCheckpointError::NewerVersion { .. }
        | CoreCheckpointError::MalformedMetadata { .. }
        | CoreCheckpointError::InconsistentMetadata { .. }
        | CoreCheckpointError::CorruptStateFile { .. } => SavepointFormatError::new_err(message),
        CoreCheckpointError::InvalidUrl { .. }
        | CoreCheckpointError::UnknownStorageOption { .. } => invalid_argument(message),
        _ => CheckpointError::new_err(message),
    }
}

fn driver_error(err: &DriverError, message: String) -> PyErr {
    match err {
        DriverError::Storage(err) => checkpoint_error(err, message),
        DriverError::Coordinator(err) => coordinator_error(err, message),
        DriverError::EmptyToken
        | DriverError::Resolve { .. }
        | DriverError::NothingToAdvertise { .. }
        | DriverError::NoSavepointDir { .. } => invalid_argument(message),
        _ => CheckpointError::new_err(message),
    }
}

/// A configuration the coordinator refuses is a bad argument; a refusal
/// of a running coordinator (failed job, restarting) is a checkpoint error.
fn coordinator_error(err: &CoordinatorError, message: String) -> PyErr {
    match err {
        CoordinatorError::JobFailed
        | CoordinatorError::Restarting
        | CoordinatorError::IdsExhausted { .. } => CheckpointError::new_err(message),
        _ => invalid_argument(message),
    }
}

fn invalid_argument(message: String) -> PyErr {
    Python::attach(|py| match invalid_argument_error(py) {
        Ok(class) => PyErr::from_type(class, message),
        Err(err) => err,
    })
}
