//! `weir._internal.Session`: one subtask's typed state access
//! (`weir_host::typed::TypedSession`), and `weir._internal.KeyBatch`, the
//! encoded keys of one batch.
//!
//! Glue only: Python sequences become iterators of [`PyValue`]s, results are
//! built with [`PyBuilder`], Arrow arrays cross through the Arrow PyCapsule
//! interface (`crate::arrays`).

use std::sync::{Mutex, MutexGuard};

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use weir_host::client::RemoteSession;
use weir_host::local::LocalSession;
use weir_host::typed::{TypedSession, redistribution_mode};
use weir_host::{Aggregation, KeyBatch};
use weir_state::StateId;
use weir_types::{Attempt, Epoch};

use crate::arrays::{PyExportedArray, import_array};
use crate::errors::PyWeirError;
use crate::types::{PyStateDescriptor, PyValueType};
use crate::values::{PyBuilder, PyItems, items, short_repr};

/// The encoded keys (and key groups) of one batch of state accesses.
#[pyclass(module = "weir._internal", name = "KeyBatch", frozen)]
pub struct PyKeyBatch {
    batch: KeyBatch,
}

#[pymethods]
impl PyKeyBatch {
    fn __len__(&self) -> usize {
        self.batch.len()
    }

    /// The rows `rows` (indices, repeats allowed) as a new batch.
    fn select(&self, rows: Vec<usize>) -> Result<Self, PyWeirError> {
        Ok(Self {
            batch: self.batch.select(&rows)?,
        })
    }

    #[getter]
    fn key_groups(&self) -> Vec<u16> {
        self.batch.key_groups().values().to_vec()
    }

    /// The smallest and largest key group of the batch (None when empty).
    fn key_group_bounds(&self) -> Option<(u16, u16)> {
        let groups = self.batch.key_groups().values();
        Some((*groups.iter().min()?, *groups.iter().max()?))
    }
}

/// Where the subtask's state lives.
enum Target {
    Local(TypedSession<LocalSession>),
    Remote(TypedSession<RemoteSession>),
}

impl Target {
    fn typed(&mut self) -> &mut TypedSession {
        match self {
            Target::Local(session) => session,
            Target::Remote(session) => session,
        }
    }
}

/// One subtask's state access with Python values, in batches.
#[pyclass(module = "weir._internal", name = "Session", frozen)]
pub struct PySession {
    /// A mutex because Python objects may be shared across threads; calls
    /// hold the GIL, so it is never contended.
    target: Mutex<Target>,
}

impl PySession {
    /// A session on a subtask of an in-process operator.
    pub(crate) fn local(session: LocalSession) -> Self {
        Self {
            target: Mutex::new(Target::Local(TypedSession::new(session))),
        }
    }

    /// A session on a subtask a state host serves.
    pub(crate) fn remote(session: RemoteSession) -> Self {
        Self {
            target: Mutex::new(Target::Remote(TypedSession::new(session))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Target> {
        // A panic in an earlier call poisons nothing the session holds.
        self.target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the host session without the GIL; an error for in-process sessions.
    pub(crate) fn with_remote<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RemoteSession) -> weir_host::Result<R> + Send,
    ) -> Result<R, PyWeirError> {
        match &mut *self.lock() {
            Target::Remote(session) => {
                let remote = session.session_mut();
                Ok(py.detach(|| f(remote))?)
            }
            Target::Local(_) => Err(PyWeirError::InvalidArgument(
                "this session is in-process (weir.testing); barriers and host status need a \
                 session on a state host"
                    .into(),
            )),
        }
    }
}

/// The columns of a pyarrow `RecordBatch` (which exports itself as a struct
/// array of them).
fn record_batch(obj: &Bound<'_, PyAny>) -> Result<RecordBatch, PyWeirError> {
    let array = import_array(obj)?;
    let Some(columns) = array.as_any().downcast_ref::<StructArray>() else {
        return Err(PyWeirError::InvalidArgument(format!(
            "{} is not a batch of key columns: pass a pyarrow RecordBatch",
            short_repr(obj)
        )));
    };
    Ok(RecordBatch::from(columns))
}

/// Each element of `lists` as a sequence of items.
fn item_lists<'py>(lists: &Bound<'py, PyAny>) -> Result<Vec<PyItems<'py>>, PyWeirError> {
    items(lists)?.map(|list| items(&list.0)).collect()
}

fn dict_of<'py>(
    py: Python<'py>,
    entries: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in entries {
        dict.set_item(key, value)?;
    }
    Ok(dict)
}

#[pymethods]
impl PySession {
    #[getter]
    fn subtask(&self) -> u32 {
        self.lock().typed().spec().subtask.0
    }

    #[getter]
    fn parallelism(&self) -> u32 {
        self.lock().typed().spec().parallelism
    }

    #[getter]
    fn max_parallelism(&self) -> u32 {
        self.lock().typed().spec().max_parallelism.get()
    }

    /// The key groups `(start, end)` this subtask owns, end exclusive.
    fn key_group_range(&self) -> (u32, u32) {
        let range = self.lock().typed().key_group_range();
        (range.start(), range.end())
    }

    /// Registers a keyed state; returns its id.
    fn register_state(&self, descriptor: &PyStateDescriptor) -> Result<u32, PyWeirError> {
        Ok(self.lock().typed().register_state(&descriptor.inner)?.0)
    }

    /// Registers an operator list state (`mode`: split, union, broadcast)
    /// whose items have `item_type`; returns its id.
    fn register_operator_state(
        &self,
        name: &str,
        mode: &str,
        item_type: &PyValueType,
    ) -> Result<u32, PyWeirError> {
        let mode = redistribution_mode(mode)?;
        let id =
            self.lock()
                .typed()
                .register_operator_state(name, mode, item_type.inner.clone())?;
        Ok(id.0)
    }

    /// Folds epochs up to `final_epoch` and starts `attempt` of `epoch`.
    #[pyo3(signature = (epoch, attempt, final_epoch = None))]
    fn begin(&self, epoch: u64, attempt: u32, final_epoch: Option<u64>) -> Result<(), PyWeirError> {
        let final_epoch = final_epoch.map(Epoch);
        Ok(self
            .lock()
            .typed()
            .begin(Epoch(epoch), Attempt(attempt), final_epoch)?)
    }

    /// Ends `attempt` of `epoch`.
    fn commit(&self, epoch: u64, attempt: u32) -> Result<(), PyWeirError> {
        Ok(self.lock().typed().commit(Epoch(epoch), Attempt(attempt))?)
    }

    /// Encodes keys with their key groups (computed unless given).
    #[pyo3(signature = (keys, key_groups = None))]
    fn keys(
        &self,
        keys: &Bound<'_, PyAny>,
        key_groups: Option<Vec<u32>>,
    ) -> Result<PyKeyBatch, PyWeirError> {
        let batch = self
            .lock()
            .typed()
            .keys(items(keys)?, key_groups.as_deref())?;
        Ok(PyKeyBatch { batch })
    }

    /// Encodes the keys in the rows of a batch of key columns (any object
    /// with `__arrow_c_array__`: a pyarrow `RecordBatch`), in order; the
    /// column named `key_group_column`, if given, holds their key groups
    /// instead.
    #[pyo3(signature = (batch, key_group_column = None))]
    fn arrow_keys(
        &self,
        batch: &Bound<'_, PyAny>,
        key_group_column: Option<&str>,
    ) -> Result<PyKeyBatch, PyWeirError> {
        let batch = record_batch(batch)?;
        let schema = batch.schema();
        let (groups, columns): (Vec<_>, Vec<_>) = schema
            .fields()
            .iter()
            .zip(batch.columns().iter().cloned())
            .partition(|(field, _)| Some(field.name().as_str()) == key_group_column);
        let columns: Vec<ArrayRef> = columns.into_iter().map(|(_, c)| c).collect();
        let groups = groups.first().map(|(_, c)| c.as_ref());
        let batch = self.lock().typed().arrow_keys(&columns, groups)?;
        Ok(PyKeyBatch { batch })
    }

    /// The values of a value, reducing or aggregating state (None: absent).
    fn get_values<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> Result<Bound<'py, PyList>, PyWeirError> {
        let values =
            self.lock()
                .typed()
                .get_values(StateId(state), &keys.batch, &mut PyBuilder(py))?;
        Ok(PyList::new(py, values)?)
    }

    /// Writes values (None: clears) of a value, reducing or aggregating state.
    fn put_values(
        &self,
        state: u32,
        keys: &PyKeyBatch,
        values: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let values = items(values)?;
        Ok(self
            .lock()
            .typed()
            .put_values(StateId(state), &keys.batch, values)?)
    }

    /// The lists of a list state (empty when absent).
    fn get_lists<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> Result<Bound<'py, PyList>, PyWeirError> {
        let lists =
            self.lock()
                .typed()
                .get_lists(StateId(state), &keys.batch, &mut PyBuilder(py))?;
        Ok(PyList::new(py, lists)?)
    }

    /// Appends items to the lists of a list state (one sequence per key).
    fn append_lists(
        &self,
        state: u32,
        keys: &PyKeyBatch,
        lists: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let lists = item_lists(lists)?;
        Ok(self
            .lock()
            .typed()
            .append_lists(StateId(state), &keys.batch, lists)?)
    }

    /// Replaces the lists of a list state (an empty sequence clears).
    fn replace_lists(
        &self,
        state: u32,
        keys: &PyKeyBatch,
        lists: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let lists = item_lists(lists)?;
        Ok(self
            .lock()
            .typed()
            .replace_lists(StateId(state), &keys.batch, lists)?)
    }

    /// Every entry of a map state, one dict per key.
    fn map_entries<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> Result<Bound<'py, PyList>, PyWeirError> {
        let entries =
            self.lock()
                .typed()
                .map_entries(StateId(state), &keys.batch, &mut PyBuilder(py))?;
        let dicts = entries
            .into_iter()
            .map(|entries| dict_of(py, entries))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, dicts)?)
    }

    /// Sets one map entry per row (value None: removes it).
    fn map_put(
        &self,
        state: u32,
        keys: &PyKeyBatch,
        user_keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let (user_keys, values) = (items(user_keys)?, items(values)?);
        Ok(self
            .lock()
            .typed()
            .map_put(StateId(state), &keys.batch, user_keys, values)?)
    }

    /// Clears whatever a keyed state holds for each key.
    fn clear(&self, state: u32, keys: &PyKeyBatch) -> Result<(), PyWeirError> {
        Ok(self.lock().typed().clear(StateId(state), &keys.batch)?)
    }

    /// The values of a value-like state, as an array `pyarrow.array` imports.
    fn get_batch(&self, state: u32, keys: &PyKeyBatch) -> Result<PyExportedArray, PyWeirError> {
        let array = self.lock().typed().get_batch(StateId(state), &keys.batch)?;
        Ok(PyExportedArray::new(array))
    }

    /// Writes values given as an Arrow array (null clears).
    fn put_batch(
        &self,
        state: u32,
        keys: &PyKeyBatch,
        values: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let array = import_array(values)?;
        Ok(self
            .lock()
            .typed()
            .put_batch(StateId(state), &keys.batch, &array)?)
    }

    /// Folds inputs (an Arrow array) with a built-in aggregate, in count
    /// windows of `window` rows if given; returns each row's result.
    #[pyo3(signature = (state, keys, inputs, function, window=None))]
    fn aggregate(
        &self,
        state: u32,
        keys: &PyKeyBatch,
        inputs: &Bound<'_, PyAny>,
        function: &str,
        window: Option<u32>,
    ) -> Result<PyExportedArray, PyWeirError> {
        let aggregation = Aggregation::parse(function, window)?;
        let inputs = import_array(inputs)?;
        let out =
            self.lock()
                .typed()
                .aggregate(StateId(state), &keys.batch, &inputs, aggregation)?;
        Ok(PyExportedArray::new(out))
    }

    /// The items of an operator list state.
    fn operator_state<'py>(
        &self,
        py: Python<'py>,
        state: u32,
    ) -> Result<Bound<'py, PyList>, PyWeirError> {
        let items = self
            .lock()
            .typed()
            .operator_state(StateId(state), &mut PyBuilder(py))?;
        Ok(PyList::new(py, items)?)
    }

    /// Replaces the items of an operator list state.
    fn set_operator_state(&self, state: u32, values: &Bound<'_, PyAny>) -> Result<(), PyWeirError> {
        let values = items(values)?;
        Ok(self
            .lock()
            .typed()
            .set_operator_state(StateId(state), values)?)
    }
}
