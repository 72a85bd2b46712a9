//! `weir._internal.Session`: one subtask's batched state access with Python
//! values, and `weir._internal.KeyBatch`, the encoded keys of one batch.
//!
//! Glue only: Python values are encoded with the state's type (see
//! `values.rs`) into the Arrow arrays of [`SubtaskSession`], whichever
//! implementation serves the subtask (in-process engine or state host).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::builder::BinaryBuilder;
use arrow_array::{Array, ArrayRef, BinaryArray, UInt16Array};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use weir_host::client::RemoteSession;
use weir_host::{KeyBatch, NativeAggregate, SubtaskSession};
use weir_state::{RedistributionMode, StateId, list_items, push_list_item};
use weir_types::{
    Attempt, Epoch, KeyGroup, MaxParallelism, StateDescriptor, Value, ValueType, encode_key,
    key_group_of,
};

use crate::arrow_ipc::{from_ipc, to_ipc};
use crate::errors::PyWeirError;
use crate::local::PyLocalOperator;
use crate::values::{decode, encode, key_columns, short_repr, to_value, write_key_direct};

/// Locks a host session; a panic in an earlier call poisons nothing the host holds.
fn lock_remote(
    session: &Mutex<RemoteSession>,
) -> Result<MutexGuard<'_, RemoteSession>, PyWeirError> {
    Ok(session
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
}

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
        let len = self.batch.len();
        if let Some(&bad) = rows.iter().find(|&&row| row >= len) {
            return Err(PyWeirError::InvalidArgument(format!(
                "row {bad} is out of range for a key batch of {len} rows"
            )));
        }
        let groups = self.batch.key_groups();
        let keys = self.batch.keys();
        Ok(Self {
            batch: KeyBatch::from_pairs(
                rows.iter()
                    .map(|&row| (KeyGroup(groups.value(row)), keys.value(row))),
            ),
        })
    }

    /// The key group of each row.
    #[getter]
    fn key_groups(&self) -> Vec<u16> {
        self.batch.key_groups().values().to_vec()
    }
}

/// Where a session's state lives.
enum Target {
    /// Subtask `index` of an in-process operator.
    Local {
        operator: Py<PyLocalOperator>,
        index: usize,
    },
    /// A subtask served by the executor's state host (see `host.rs`).
    Remote(Mutex<RemoteSession>),
}

/// What the glue needs to convert a registered keyed state's values.
struct KeyedInfo {
    name: String,
    value_type: ValueType,
    user_key_type: Option<ValueType>,
}

/// One subtask's state access with Python values, in batches.
#[pyclass(module = "weir._internal", name = "Session")]
pub struct PySession {
    target: Target,
    subtask: u32,
    parallelism: u32,
    max_parallelism: MaxParallelism,
    key_types: Option<Vec<ValueType>>,
    keyed: HashMap<u32, KeyedInfo>,
    operator: HashMap<u32, (String, ValueType)>,
}

impl PySession {
    /// A session on subtask `index` of an in-process operator.
    pub(crate) fn local(
        operator: Py<PyLocalOperator>,
        index: usize,
        subtask: u32,
        parallelism: u32,
        max_parallelism: MaxParallelism,
        key_types: Option<Vec<ValueType>>,
    ) -> Self {
        Self {
            target: Target::Local { operator, index },
            subtask,
            parallelism,
            max_parallelism,
            key_types,
            keyed: HashMap::new(),
            operator: HashMap::new(),
        }
    }

    /// A session on a subtask the state host serves; its key types were
    /// given when it attached.
    pub(crate) fn remote(
        session: RemoteSession,
        subtask: u32,
        parallelism: u32,
        max_parallelism: MaxParallelism,
        key_types: Option<Vec<ValueType>>,
    ) -> Self {
        Self {
            target: Target::Remote(Mutex::new(session)),
            subtask,
            parallelism,
            max_parallelism,
            key_types,
            keyed: HashMap::new(),
            operator: HashMap::new(),
        }
    }

    /// Runs `f` on the host session; an error for in-process sessions.
    pub(crate) fn with_remote<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RemoteSession) -> weir_host::Result<R> + Send,
    ) -> Result<R, PyWeirError>
    where
        R: Send,
    {
        match &self.target {
            Target::Remote(session) => {
                let mut guard = lock_remote(session)?;
                let remote: &mut RemoteSession = &mut guard;
                Ok(py.detach(|| f(remote))?)
            }
            Target::Local { .. } => Err(PyWeirError::InvalidArgument(
                "this session is in-process (weir.testing); barriers and host status need a \
                 session on a state host"
                    .into(),
            )),
        }
    }

    /// Runs `f` on the subtask's session.
    fn run<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut dyn SubtaskSession) -> weir_host::Result<R>,
    ) -> Result<R, PyWeirError> {
        match &self.target {
            Target::Local { operator, index } => operator
                .bind(py)
                .get()
                .with_subtask(*index, |subtask| Ok(f(subtask)?)),
            Target::Remote(session) => Ok(f(&mut *lock_remote(session)?)?),
        }
    }

    /// Records the key columns' types with the subtask (once).
    fn set_key_types(&mut self, py: Python<'_>, types: &[ValueType]) -> Result<(), PyWeirError> {
        match &self.target {
            Target::Local { operator, .. } => {
                operator.bind(py).get().set_key_types(types.to_vec())?;
            }
            Target::Remote(_) => {
                if self.key_types.as_deref() != Some(types) {
                    return Err(PyWeirError::InvalidArgument(format!(
                        "the keys have types {}, but the session attached with key types {}; \
                         pass the key columns' types when connecting to the state host",
                        render(types),
                        self.key_types
                            .as_deref()
                            .map_or_else(|| "none".to_owned(), render)
                    )));
                }
            }
        }
        self.key_types = Some(types.to_vec());
        Ok(())
    }

    fn keyed(&self, state: u32) -> Result<&KeyedInfo, PyWeirError> {
        self.keyed.get(&state).ok_or_else(|| {
            PyWeirError::InvalidArgument(format!(
                "keyed state id {state} is not registered with this session"
            ))
        })
    }

    fn operator_item_type(&self, state: u32) -> Result<&(String, ValueType), PyWeirError> {
        self.operator.get(&state).ok_or_else(|| {
            PyWeirError::InvalidArgument(format!(
                "operator state id {state} is not registered with this session"
            ))
        })
    }

    /// Encodes each element of `values` (None: null) into a binary array.
    fn encode_column(
        values: &Bound<'_, PyAny>,
        ty: &ValueType,
        state: &str,
    ) -> Result<BinaryArray, PyWeirError> {
        let items = sequence(values)?;
        let mut builder = BinaryBuilder::with_capacity(items.len(), items.len() * 8);
        let mut scratch = Vec::new();
        for value in &items {
            if value.is_none() {
                builder.append_null();
            } else {
                scratch.clear();
                encode(value, ty, state, &mut scratch)?;
                builder.append_value(&scratch);
            }
        }
        Ok(builder.finish())
    }

    /// List payloads, one per element of `lists` (each a sequence of items).
    fn encode_lists(
        lists: &Bound<'_, PyAny>,
        ty: &ValueType,
        state: &str,
    ) -> Result<BinaryArray, PyWeirError> {
        let lists = sequence(lists)?;
        let mut builder = BinaryBuilder::with_capacity(lists.len(), lists.len() * 16);
        let mut scratch = Vec::new();
        let mut payload = Vec::new();
        for list in &lists {
            payload.clear();
            for item in sequence(list)? {
                if item.is_none() {
                    return Err(PyWeirError::InvalidArgument(format!(
                        "list state '{state}' cannot hold None items"
                    )));
                }
                scratch.clear();
                encode(&item, ty, state, &mut scratch)?;
                push_list_item(&scratch, &mut payload);
            }
            builder.append_value(&payload);
        }
        Ok(builder.finish())
    }

    fn decode_list<'py>(
        py: Python<'py>,
        payload: &[u8],
        ty: &ValueType,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for item in list_items(payload) {
            let item = item.ok_or(PyWeirError::CorruptListPayload)?;
            list.append(decode(py, item, ty)?)?;
        }
        Ok(list)
    }
}

/// The columns of `key` as the operator's declared key types: a tuple for
/// several columns, the value itself for one.
fn typed_key_columns(
    key: &Bound<'_, PyAny>,
    types: &[ValueType],
) -> Result<Vec<Value>, PyWeirError> {
    // A key that is no key at all says so; a key of other types names them.
    let mismatch = || match key_columns(key) {
        Err(invalid) => invalid,
        Ok((_, found)) => PyWeirError::KeyTypeMismatch {
            key: short_repr(key),
            types: render(&found),
            known: render(types),
        },
    };
    let column = |obj: &Bound<'_, PyAny>, ty: &ValueType| {
        if obj.is_none() {
            return Err(PyWeirError::InvalidKey {
                key: short_repr(key),
                reason: "a key (column) may not be None: map missing keys to a value in the key selector",
            });
        }
        to_value(obj, ty).map_err(|_| mismatch())
    };
    match types {
        [ty] => Ok(vec![column(key, ty)?]),
        _ => {
            let tuple = key.cast::<pyo3::types::PyTuple>().map_err(|_| mismatch())?;
            if tuple.len() != types.len() {
                return Err(mismatch());
            }
            tuple
                .iter()
                .zip(types)
                .map(|(obj, ty)| column(&obj, ty))
                .collect()
        }
    }
}

/// A given key group, checked against max parallelism.
fn checked_key_group(group: u32, max: MaxParallelism) -> Result<u16, PyWeirError> {
    if group >= max.get() {
        return Err(PyWeirError::Types(
            weir_types::TypesError::InvalidKeyGroup {
                key_group: group,
                max: max.get(),
            },
        ));
    }
    // Below max parallelism, which is at most 32768.
    Ok(u16::try_from(group).unwrap_or(u16::MAX))
}

/// The elements of a Python sequence (a list is read without copying twice).
fn sequence<'py>(obj: &Bound<'py, PyAny>) -> Result<Vec<Bound<'py, PyAny>>, PyWeirError> {
    if let Ok(list) = obj.cast::<PyList>() {
        return Ok(list.iter().collect());
    }
    let items: PyResult<Vec<_>> = obj
        .try_iter()
        .map_err(|_| PyWeirError::InvalidArgument("expected a sequence".into()))?
        .collect();
    items.map_err(|err| PyWeirError::InvalidArgument(format!("cannot iterate: {err}")))
}

fn parse_mode(mode: &str) -> Result<RedistributionMode, PyWeirError> {
    match mode {
        "split" => Ok(RedistributionMode::Split),
        "union" => Ok(RedistributionMode::Union),
        "broadcast" => Ok(RedistributionMode::Broadcast),
        other => Err(PyWeirError::InvalidArgument(format!(
            "operator state mode {other:?} is unknown: use \"split\", \"union\" or \"broadcast\""
        ))),
    }
}

fn parse_aggregate(function: &str) -> Result<NativeAggregate, PyWeirError> {
    match function {
        "count" => Ok(NativeAggregate::Count),
        "sum" => Ok(NativeAggregate::Sum),
        "min" => Ok(NativeAggregate::Min),
        "max" => Ok(NativeAggregate::Max),
        "mean" => Ok(NativeAggregate::Mean),
        other => Err(PyWeirError::InvalidArgument(format!(
            "aggregate function {other:?} is unknown: use count, sum, min, max or mean"
        ))),
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, PyWeirError> {
    serde_json::from_str(json)
        .map_err(|err| PyWeirError::InvalidArgument(format!("malformed {what} {json:?}: {err}")))
}

#[pymethods]
impl PySession {
    /// This subtask's index.
    #[getter]
    fn subtask(&self) -> u32 {
        self.subtask
    }

    /// The operator's parallelism.
    #[getter]
    fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// The number of key groups.
    #[getter]
    fn max_parallelism(&self) -> u32 {
        self.max_parallelism.get()
    }

    /// The key groups `(start, end)` this subtask owns, end exclusive.
    fn key_group_range(&self, py: Python<'_>) -> Result<(u32, u32), PyWeirError> {
        let range = self.run(py, |s| Ok(s.key_group_range()))?;
        Ok((range.start(), range.end()))
    }

    /// Registers a keyed state from its descriptor JSON; returns its id.
    fn register_state(
        &mut self,
        py: Python<'_>,
        descriptor_json: &str,
    ) -> Result<u32, PyWeirError> {
        let descriptor: StateDescriptor = parse_json("state descriptor", descriptor_json)?;
        let descriptor = descriptor.validated()?;
        let id = self.run(py, |s| s.register_state(&descriptor))?.0;
        self.keyed.insert(
            id,
            KeyedInfo {
                name: descriptor.name,
                value_type: descriptor.value_type,
                user_key_type: descriptor.user_key_type,
            },
        );
        Ok(id)
    }

    /// Registers an operator list state (`mode`: split, union, broadcast) whose
    /// items have the type `item_type_json`; returns its id.
    fn register_operator_state(
        &mut self,
        py: Python<'_>,
        name: &str,
        mode: &str,
        item_type_json: &str,
    ) -> Result<u32, PyWeirError> {
        let mode = parse_mode(mode)?;
        let item_type: ValueType = parse_json("state type", item_type_json)?;
        let id = self.run(py, |s| s.register_operator_state(name, mode))?.0;
        self.operator.insert(id, (name.to_owned(), item_type));
        Ok(id)
    }

    /// Folds epochs up to `final_epoch` and starts `attempt` of `epoch`.
    #[pyo3(signature = (epoch, attempt, final_epoch = None))]
    fn begin(
        &self,
        py: Python<'_>,
        epoch: u64,
        attempt: u32,
        final_epoch: Option<u64>,
    ) -> Result<(), PyWeirError> {
        self.run(py, |s| {
            s.begin(Epoch(epoch), Attempt(attempt), final_epoch.map(Epoch))
        })
    }

    /// Ends `attempt` of `epoch`.
    fn commit(&self, py: Python<'_>, epoch: u64, attempt: u32) -> Result<(), PyWeirError> {
        self.run(py, |s| s.commit(Epoch(epoch), Attempt(attempt)))
    }

    /// Encodes keys (int, str, bytes, bool, float, or tuples of those) with
    /// their key groups (Spark's `pmod(hash(key), max_parallelism)` unless given).
    #[pyo3(signature = (keys, key_groups = None))]
    fn keys(
        &mut self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        key_groups: Option<Vec<u32>>,
    ) -> Result<PyKeyBatch, PyWeirError> {
        let keys = sequence(keys)?;
        if let Some(groups) = &key_groups
            && groups.len() != keys.len()
        {
            return Err(PyWeirError::InvalidArgument(format!(
                "got {} keys but {} key groups: pass one key group per key",
                keys.len(),
                groups.len()
            )));
        }
        let max = self.max_parallelism;
        let mut group_column = Vec::with_capacity(keys.len());
        let mut key_column = BinaryBuilder::with_capacity(keys.len(), keys.len() * 9);
        let mut scratch = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            scratch.clear();
            // With the key groups given and the key types known, the columns are
            // only needed for their encoding: write it straight from the key.
            if let (Some(groups), Some(types)) = (&key_groups, &self.key_types)
                && write_key_direct(key, types, &mut scratch)
            {
                group_column.push(checked_key_group(groups[row], max)?);
                key_column.append_value(&scratch);
                continue;
            }
            // The first key of an operator without declared key types decides them.
            let columns = match &self.key_types {
                Some(known) => typed_key_columns(key, known)?,
                None => {
                    let (columns, types) = key_columns(key)?;
                    self.set_key_types(py, &types)?;
                    columns
                }
            };
            let types = self.key_types.as_deref().unwrap_or_default();
            let group = match &key_groups {
                Some(groups) => checked_key_group(groups[row], max)?,
                None => key_group_of(&columns, max).0,
            };
            scratch.clear();
            encode_key(&columns, types, &mut scratch)?;
            group_column.push(group);
            key_column.append_value(&scratch);
        }
        Ok(PyKeyBatch {
            batch: KeyBatch::new(UInt16Array::from(group_column), key_column.finish())?,
        })
    }

    /// The values of a value, reducing or aggregating state (None: absent).
    fn get_values<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> PyResult<Bound<'py, PyList>> {
        let ty = &self.keyed(state)?.value_type;
        let values = self.run(py, |s| s.get_values(StateId(state), &keys.batch))?;
        let items = values
            .iter()
            .map(|value| match value {
                Some(bytes) => decode(py, bytes, ty),
                None => Ok(py.None().into_bound(py)),
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Writes values (None: clears) of a value, reducing or aggregating state.
    fn put_values(
        &self,
        py: Python<'_>,
        state: u32,
        keys: &PyKeyBatch,
        values: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let info = self.keyed(state)?;
        let column = Self::encode_column(values, &info.value_type, &info.name)?;
        self.run(py, |s| s.put_values(StateId(state), &keys.batch, &column))
    }

    /// The lists of a list state (empty when absent).
    fn get_lists<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> PyResult<Bound<'py, PyList>> {
        let ty = &self.keyed(state)?.value_type;
        let payloads = self.run(py, |s| s.get_lists(StateId(state), &keys.batch))?;
        let out = PyList::empty(py);
        for payload in payloads.iter() {
            out.append(Self::decode_list(py, payload.unwrap_or_default(), ty)?)?;
        }
        Ok(out)
    }

    /// Appends items to the lists of a list state (one sequence per key).
    fn append_lists(
        &self,
        py: Python<'_>,
        state: u32,
        keys: &PyKeyBatch,
        lists: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let info = self.keyed(state)?;
        let payloads = Self::encode_lists(lists, &info.value_type, &info.name)?;
        self.run(py, |s| {
            s.append_lists(StateId(state), &keys.batch, &payloads)
        })
    }

    /// Replaces the lists of a list state (an empty sequence clears).
    fn replace_lists(
        &self,
        py: Python<'_>,
        state: u32,
        keys: &PyKeyBatch,
        lists: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let info = self.keyed(state)?;
        let payloads = Self::encode_lists(lists, &info.value_type, &info.name)?;
        self.run(py, |s| {
            s.replace_lists(StateId(state), &keys.batch, &payloads)
        })
    }

    /// Every entry of a map state, one dict per key.
    fn map_entries<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> PyResult<Bound<'py, PyList>> {
        let info = self.keyed(state)?;
        let user_key_type = info
            .user_key_type
            .as_ref()
            .ok_or_else(|| PyWeirError::NotAMap(info.name.clone()))?;
        let entries = self.run(py, |s| s.map_entries(StateId(state), &keys.batch))?;
        let out = PyList::empty(py);
        for window in entries.offsets.windows(2) {
            let dict = PyDict::new(py);
            for row in window[0] as usize..window[1] as usize {
                dict.set_item(
                    decode(py, entries.user_keys.value(row), user_key_type)?,
                    decode(py, entries.values.value(row), &info.value_type)?,
                )?;
            }
            out.append(dict)?;
        }
        Ok(out)
    }

    /// Sets one map entry per row (value None: removes it).
    fn map_put(
        &self,
        py: Python<'_>,
        state: u32,
        keys: &PyKeyBatch,
        user_keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let info = self.keyed(state)?;
        let user_key_type = info
            .user_key_type
            .as_ref()
            .ok_or_else(|| PyWeirError::NotAMap(info.name.clone()))?;
        let user_keys = Self::encode_column(user_keys, user_key_type, &info.name)?;
        if user_keys.null_count() > 0 {
            return Err(PyWeirError::InvalidArgument(format!(
                "map state '{}' cannot have None user keys",
                info.name
            )));
        }
        let values = Self::encode_column(values, &info.value_type, &info.name)?;
        self.run(py, |s| {
            s.map_put(StateId(state), &keys.batch, &user_keys, &values)
        })
    }

    /// Clears whatever a keyed state holds for each key.
    fn clear(&self, py: Python<'_>, state: u32, keys: &PyKeyBatch) -> Result<(), PyWeirError> {
        self.keyed(state)?;
        self.run(py, |s| s.clear(StateId(state), &keys.batch))
    }

    /// The values of a value-like state as an Arrow IPC stream (one column).
    fn get_batch<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
    ) -> Result<Bound<'py, PyBytes>, PyWeirError> {
        self.keyed(state)?;
        let array = self.run(py, |s| s.get_batch(StateId(state), &keys.batch))?;
        Ok(PyBytes::new(py, &to_ipc("value", array)?))
    }

    /// Writes values given as an Arrow IPC stream of one column (null clears).
    fn put_batch(
        &self,
        py: Python<'_>,
        state: u32,
        keys: &PyKeyBatch,
        values: &[u8],
    ) -> Result<(), PyWeirError> {
        self.keyed(state)?;
        let array: ArrayRef = from_ipc(values)?;
        self.run(py, |s| s.put_batch(StateId(state), &keys.batch, &array))
    }

    /// Folds inputs (an IPC stream of one column) with a built-in aggregate;
    /// returns the aggregate after each row as an IPC stream.
    fn aggregate<'py>(
        &self,
        py: Python<'py>,
        state: u32,
        keys: &PyKeyBatch,
        inputs: &[u8],
        function: &str,
    ) -> Result<Bound<'py, PyBytes>, PyWeirError> {
        self.keyed(state)?;
        let function = parse_aggregate(function)?;
        let inputs = from_ipc(inputs)?;
        let out = self.run(py, |s| {
            s.aggregate(StateId(state), &keys.batch, &inputs, function)
        })?;
        Ok(PyBytes::new(py, &to_ipc("value", Arc::clone(&out))?))
    }

    /// The items of an operator list state.
    fn operator_state<'py>(&self, py: Python<'py>, state: u32) -> PyResult<Bound<'py, PyList>> {
        let (_, ty) = self.operator_item_type(state)?;
        let items = self.run(py, |s| s.operator_state(StateId(state)))?;
        let out = PyList::empty(py);
        for item in items {
            out.append(decode(py, &item, ty)?)?;
        }
        Ok(out)
    }

    /// Replaces the items of an operator list state.
    fn set_operator_state(
        &self,
        py: Python<'_>,
        state: u32,
        items: &Bound<'_, PyAny>,
    ) -> Result<(), PyWeirError> {
        let (name, ty) = self.operator_item_type(state)?;
        let mut encoded = Vec::new();
        for item in sequence(items)? {
            if item.is_none() {
                return Err(PyWeirError::InvalidArgument(format!(
                    "operator state '{name}' cannot hold None items"
                )));
            }
            let mut bytes = Vec::new();
            encode(&item, ty, name, &mut bytes)?;
            encoded.push(bytes);
        }
        self.run(py, |s| s.set_operator_state(StateId(state), encoded))
    }
}

/// Types as `int64, string` for messages.
fn render(types: &[ValueType]) -> String {
    types
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
