//! A subtask's state with typed values: what a language binding programs against.
//!
//! [`TypedSession`] wraps any [`SubtaskSession`] (the in-process engine or a
//! state host) and keeps what the bytes-level session does not: the states
//! registered through it with their types, and the types of the operator's
//! key columns. Values come in as [`ValueSource`]s and go out through
//! [`ValueBuilder`]s, so a binding walks only its own objects; encodings, key
//! typing, registration checks and the errors for values that do not fit are
//! all here. It knows nothing of any particular language.

mod arrow_keys;
mod keys;

use std::collections::HashMap;

use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, UInt16Array};
use weir_state::{RedistributionMode, StateError, StateId, list_items, push_list_item};
use weir_types::{
    Attempt, Epoch, KeyGroupRange, MaxParallelism, SPARK_HASH_SEED, StateDescriptor, StateKind,
    TypesError, ValueBuilder, ValueSource, ValueType, decode_with, encode_with, hash_long,
};

pub use arrow_keys::ArrowKey;
pub use keys::{KeySource, inferred_key_groups};

use crate::batch::KeyBatch;
use crate::error::{HostError, Result};
use crate::session::{Aggregation, SubtaskSession, SubtaskSpec};

/// The `(user key, value)` entries of one key's map state.
pub type Entries<T> = Vec<(T, T)>;

/// An operator state registered through a session: its items' type.
#[derive(Debug)]
struct OperatorState {
    name: String,
    item_type: ValueType,
}

/// One subtask's state access with typed values, over session `S` (any
/// [`SubtaskSession`]; the default erases which).
///
/// Key types: those the session was opened with, or else the types of the
/// first key it encodes, which it records with the session (so snapshots can
/// decode keys). Every later key must have them.
pub struct TypedSession<S: ?Sized = dyn SubtaskSession + Send> {
    keyed: HashMap<StateId, StateDescriptor>,
    operator: HashMap<StateId, OperatorState>,
    key_types: Option<Vec<ValueType>>,
    /// Reused encoding buffer.
    scratch: Vec<u8>,
    session: S,
}

impl<S: SubtaskSession> TypedSession<S> {
    /// Typed access to `session`; key types are the ones its spec names.
    pub fn new(session: S) -> Self {
        Self {
            keyed: HashMap::new(),
            operator: HashMap::new(),
            key_types: session.spec().key_types.clone(),
            scratch: Vec::new(),
            session,
        }
    }
}

impl<S: SubtaskSession + ?Sized> TypedSession<S> {
    /// The underlying session.
    pub fn session_mut(&mut self) -> &mut S {
        &mut self.session
    }

    /// The subtask served.
    pub fn spec(&self) -> &SubtaskSpec {
        self.session.spec()
    }

    /// The key groups the subtask owns.
    pub fn key_group_range(&self) -> KeyGroupRange {
        self.session.key_group_range()
    }

    /// Registers a keyed state (validated first); registering an equal
    /// descriptor again gives the same id.
    pub fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        let descriptor = descriptor.clone().validated()?;
        let id = self.session.register_state(&descriptor)?;
        self.keyed.insert(id, descriptor);
        Ok(id)
    }

    /// Registers an operator list state whose items have `item_type`.
    pub fn register_operator_state(
        &mut self,
        name: &str,
        mode: RedistributionMode,
        item_type: ValueType,
    ) -> Result<StateId> {
        let id = self.session.register_operator_state(name, mode)?;
        let name = name.to_owned();
        self.operator.insert(id, OperatorState { name, item_type });
        Ok(id)
    }

    /// See [`SubtaskSession::begin`].
    pub fn begin(
        &mut self,
        epoch: Epoch,
        attempt: Attempt,
        final_epoch: Option<Epoch>,
    ) -> Result<()> {
        self.session.begin(epoch, attempt, final_epoch)
    }

    /// See [`SubtaskSession::commit`].
    pub fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.session.commit(epoch, attempt)
    }

    /// Encodes the keys in the rows of a batch's key `columns` (one array
    /// per key column, read in place) as [`TypedSession::keys`] does;
    /// `key_groups` is an integer column of the key groups if given.
    pub fn arrow_keys(
        &mut self,
        columns: &[ArrayRef],
        key_groups: Option<&dyn Array>,
    ) -> Result<KeyBatch> {
        let Some(rows) = columns.first().map(|c| c.len()) else {
            return Err(HostError::InvalidRequest(
                "a batch of keys needs at least one key column".into(),
            ));
        };
        if columns.iter().any(|c| c.len() != rows) {
            return Err(HostError::InvalidRequest(
                "the key columns of a batch differ in length".into(),
            ));
        }
        let groups = key_groups.map(group_numbers).transpose()?;
        if let [column] = columns
            && let Some(ints) = column.as_primitive_opt::<Int64Type>()
            && ints.null_count() == 0
            && matches!(self.key_types.as_deref(), None | Some([ValueType::Int64]))
        {
            return self.int64_keys(ints, groups.as_deref());
        }
        self.keys(
            (0..rows).map(|row| ArrowKey::new(columns, row)),
            groups.as_deref(),
        )
    }

    /// [`arrow_keys`](Self::arrow_keys) of one int64 column without nulls,
    /// the usual key: what the general path makes, without its per-cell
    /// type dispatch and without decoding each encoded key again to hash it.
    fn int64_keys(&mut self, ints: &Int64Array, key_groups: Option<&[u32]>) -> Result<KeyBatch> {
        check_group_count(ints.len(), key_groups)?;
        if self.key_types.is_none() {
            self.learn_key_types(vec![ValueType::Int64])?;
        }
        let max = self.session.spec().max_parallelism;
        let groups: Vec<u16> = match key_groups {
            Some(groups) => groups
                .iter()
                .map(|&group| checked_key_group(group, max))
                .collect::<Result<_>>()?,
            None => ints
                .values()
                .iter()
                .map(|&key| max.key_group_of_hash(hash_long(key, SPARK_HASH_SEED)).0)
                .collect(),
        };
        let mut encoded = BinaryBuilder::with_capacity(ints.len(), ints.len() * INT64_KEY_LEN);
        let mut key = [0u8; INT64_KEY_LEN];
        // A key column's presence byte, then the value (`encode_key_column`).
        key[0] = 1;
        for value in ints.values() {
            key[1..].copy_from_slice(&value.to_le_bytes());
            encoded.append_value(key);
        }
        KeyBatch::new(UInt16Array::from(groups), encoded.finish())
    }

    /// Records `types`, those of the first key encoded, as the operator's key
    /// types (the session refuses them if another subtask learned others).
    fn learn_key_types(&mut self, types: Vec<ValueType>) -> Result<()> {
        self.session.set_key_types(&types)?;
        self.key_types = Some(types);
        Ok(())
    }

    /// Encodes `keys` with their key groups: `key_groups` (one per key,
    /// checked against max parallelism) or else Spark's
    /// `pmod(hash(key columns), max_parallelism)`.
    pub fn keys<K: KeySource>(
        &mut self,
        keys: impl IntoIterator<Item = K, IntoIter: ExactSizeIterator>,
        key_groups: Option<&[u32]>,
    ) -> Result<KeyBatch> {
        let keys = keys.into_iter();
        let rows = keys.len();
        check_group_count(rows, key_groups)?;
        let max = self.session.spec().max_parallelism;
        let mut group_column = Vec::with_capacity(rows);
        let mut key_column = BinaryBuilder::with_capacity(rows, rows * 9);
        let mut scratch = std::mem::take(&mut self.scratch);
        for (row, key) in keys.enumerate() {
            scratch.clear();
            if self.key_types.is_none() {
                self.learn_key_types(keys::inferred_types(&key)?)?;
            }
            let types = self.key_types.as_deref().unwrap_or_default();
            keys::encode_typed_key(&key, types, &mut scratch)?;
            let group = match key_groups {
                Some(groups) => checked_key_group(groups[row], max)?,
                None => keys::encoded_key_group(&scratch, types, max)?.0,
            };
            group_column.push(group);
            key_column.append_value(&scratch);
        }
        self.scratch = scratch;
        KeyBatch::new(UInt16Array::from(group_column), key_column.finish())
    }

    /// The values of a value, reducing or aggregating state, built with
    /// `builder` (null: absent).
    pub fn get_values<B: ValueBuilder>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        builder: &mut B,
    ) -> std::result::Result<Vec<B::Output>, B::Error>
    where
        B::Error: From<HostError>,
    {
        let ty = &keyed(&self.keyed, state)?.value_type;
        let values = self.session.get_values(state, keys)?;
        values
            .iter()
            .map(|value| match value {
                Some(bytes) => decode_with(bytes, ty, builder),
                None => builder.null(),
            })
            .collect()
    }

    /// Writes `values` (one per key; null clears) of a value, reducing or
    /// aggregating state.
    pub fn put_values<V: ValueSource>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        values: impl IntoIterator<Item = V>,
    ) -> Result<()> {
        let descriptor = keyed(&self.keyed, state)?;
        let column = encode_column(
            values,
            &descriptor.value_type,
            &descriptor.name,
            &mut self.scratch,
        )?;
        self.session.put_values(state, keys, &column)
    }

    /// The lists of a list state (empty when absent), each built with
    /// `builder` from its items.
    pub fn get_lists<B: ValueBuilder>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        builder: &mut B,
    ) -> std::result::Result<Vec<B::Output>, B::Error>
    where
        B::Error: From<HostError>,
    {
        let ty = &keyed(&self.keyed, state)?.value_type;
        let payloads = self.session.get_lists(state, keys)?;
        payloads
            .iter()
            .map(|payload| {
                let items = decode_items(payload.unwrap_or_default(), ty, builder)?;
                builder.list(items)
            })
            .collect()
    }

    /// Appends items to the lists of a list state: one sequence per key.
    pub fn append_lists<V: ValueSource, L: IntoIterator<Item = V>>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        lists: impl IntoIterator<Item = L>,
    ) -> Result<()> {
        let payloads = self.list_payloads(state, lists)?;
        self.session.append_lists(state, keys, &payloads)
    }

    /// Replaces the lists of a list state (an empty sequence clears).
    pub fn replace_lists<V: ValueSource, L: IntoIterator<Item = V>>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        lists: impl IntoIterator<Item = L>,
    ) -> Result<()> {
        let payloads = self.list_payloads(state, lists)?;
        self.session.replace_lists(state, keys, &payloads)
    }

    /// Every entry of a map state, per key.
    pub fn map_entries<B: ValueBuilder>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        builder: &mut B,
    ) -> std::result::Result<Vec<Entries<B::Output>>, B::Error>
    where
        B::Error: From<HostError>,
    {
        let (user_key_type, value_type) = map_types(&self.keyed, state)?;
        let entries = self.session.map_entries(state, keys)?;
        entries
            .offsets
            .windows(2)
            .map(|window| {
                (window[0] as usize..window[1] as usize)
                    .map(|row| {
                        Ok((
                            decode_with(entries.user_keys.value(row), user_key_type, builder)?,
                            decode_with(entries.values.value(row), value_type, builder)?,
                        ))
                    })
                    .collect()
            })
            .collect()
    }

    /// Sets one map entry per key (value null: removes it).
    pub fn map_put<V: ValueSource>(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: impl IntoIterator<Item = V>,
        values: impl IntoIterator<Item = V>,
    ) -> Result<()> {
        let (user_key_type, value_type) = map_types(&self.keyed, state)?;
        let name = &keyed(&self.keyed, state)?.name;
        let user_keys = encode_column(user_keys, user_key_type, name, &mut self.scratch)?;
        if user_keys.null_count() > 0 {
            return Err(HostError::InvalidRequest(format!(
                "map state '{name}' cannot have None user keys"
            )));
        }
        let values = encode_column(values, value_type, name, &mut self.scratch)?;
        self.session.map_put(state, keys, &user_keys, &values)
    }

    /// Clears whatever a keyed state holds for each key.
    pub fn clear(&mut self, state: StateId, keys: &KeyBatch) -> Result<()> {
        keyed(&self.keyed, state)?;
        self.session.clear(state, keys)
    }

    /// The values of a value-like state as an Arrow array of its type.
    pub fn get_batch(&mut self, state: StateId, keys: &KeyBatch) -> Result<ArrayRef> {
        keyed(&self.keyed, state)?;
        self.session.get_batch(state, keys)
    }

    /// Writes values given as an Arrow array of the state's type (null clears).
    pub fn put_batch(&mut self, state: StateId, keys: &KeyBatch, values: &ArrayRef) -> Result<()> {
        keyed(&self.keyed, state)?;
        self.session.put_batch(state, keys, values)
    }

    /// See [`SubtaskSession::aggregate`].
    pub fn aggregate(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        inputs: &ArrayRef,
        aggregation: Aggregation,
    ) -> Result<ArrayRef> {
        keyed(&self.keyed, state)?;
        self.session.aggregate(state, keys, inputs, aggregation)
    }

    /// The items of an operator list state, built with `builder`.
    pub fn operator_state<B: ValueBuilder>(
        &mut self,
        state: StateId,
        builder: &mut B,
    ) -> std::result::Result<Vec<B::Output>, B::Error>
    where
        B::Error: From<HostError>,
    {
        let ty = &operator(&self.operator, state)?.item_type;
        let items = self.session.operator_state(state)?;
        items
            .iter()
            .map(|item| decode_with(item, ty, builder))
            .collect()
    }

    /// Replaces the items of an operator list state.
    pub fn set_operator_state<V: ValueSource>(
        &mut self,
        state: StateId,
        items: impl IntoIterator<Item = V>,
    ) -> Result<()> {
        let OperatorState { name, item_type } = operator(&self.operator, state)?;
        let encoded = items
            .into_iter()
            .map(|item| {
                let mut bytes = Vec::new();
                encode_item(&item, item_type, name, "operator state", &mut bytes)?;
                Ok(bytes)
            })
            .collect::<Result<Vec<_>>>()?;
        self.session.set_operator_state(state, encoded)
    }

    /// One list payload per sequence of items.
    fn list_payloads<V: ValueSource, L: IntoIterator<Item = V>>(
        &mut self,
        state: StateId,
        lists: impl IntoIterator<Item = L>,
    ) -> Result<BinaryArray> {
        let StateDescriptor {
            name, value_type, ..
        } = keyed(&self.keyed, state)?;
        let lists = lists.into_iter();
        let mut builder = BinaryBuilder::with_capacity(lists.size_hint().0, 16);
        let mut payload = Vec::new();
        for list in lists {
            payload.clear();
            for item in list {
                self.scratch.clear();
                encode_item(&item, value_type, name, "list state", &mut self.scratch)?;
                push_list_item(&self.scratch, &mut payload);
            }
            builder.append_value(&payload);
        }
        Ok(builder.finish())
    }
}

/// Parses an operator state's redistribution mode: `split`, `union` or `broadcast`.
pub fn redistribution_mode(name: &str) -> Result<RedistributionMode> {
    match name {
        "split" => Ok(RedistributionMode::Split),
        "union" => Ok(RedistributionMode::Union),
        "broadcast" => Ok(RedistributionMode::Broadcast),
        _ => Err(TypesError::UnknownName {
            what: "operator state mode",
            name: name.to_owned(),
            expected: "split, union or broadcast",
        }
        .into()),
    }
}

fn keyed(states: &HashMap<StateId, StateDescriptor>, state: StateId) -> Result<&StateDescriptor> {
    states.get(&state).ok_or_else(|| {
        HostError::InvalidRequest(format!(
            "keyed state id {} is not registered with this session",
            state.0
        ))
    })
}

fn operator(states: &HashMap<StateId, OperatorState>, state: StateId) -> Result<&OperatorState> {
    states.get(&state).ok_or_else(|| {
        HostError::InvalidRequest(format!(
            "operator state id {} is not registered with this session",
            state.0
        ))
    })
}

/// The user key and value types of a map state.
fn map_types(
    states: &HashMap<StateId, StateDescriptor>,
    state: StateId,
) -> Result<(&ValueType, &ValueType)> {
    let descriptor = keyed(states, state)?;
    match &descriptor.user_key_type {
        Some(user_key_type) => Ok((user_key_type, &descriptor.value_type)),
        None => Err(StateError::WrongKind {
            name: descriptor.name.clone(),
            expected: StateKind::Map.as_str(),
            actual: descriptor.kind,
        }
        .into()),
    }
}

/// The key groups in an integer column (no nulls).
fn group_numbers(column: &dyn Array) -> Result<Vec<u32>> {
    let invalid = || {
        HostError::InvalidRequest(format!(
            "key groups come as a non-null integer column, not {} with {} nulls",
            column.data_type(),
            column.null_count()
        ))
    };
    if column.null_count() > 0 {
        return Err(invalid());
    }
    (0..column.len())
        .map(|row| {
            ArrowKey::Cell { array: column, row }
                .int64()
                .and_then(|g| u32::try_from(g).ok())
                .ok_or_else(invalid)
        })
        .collect()
}

/// Fails unless `key_groups`, if given, has one key group per key.
fn check_group_count(rows: usize, key_groups: Option<&[u32]>) -> Result<()> {
    match key_groups {
        Some(groups) if groups.len() != rows => Err(HostError::InvalidRequest(format!(
            "got {rows} keys but {} key groups: pass one key group per key",
            groups.len()
        ))),
        _ => Ok(()),
    }
}

/// An encoded one-column int64 key: the presence byte and 8 bytes.
const INT64_KEY_LEN: usize = 9;

/// A given key group, checked against max parallelism.
fn checked_key_group(group: u32, max: MaxParallelism) -> Result<u16> {
    u16::try_from(group)
        .ok()
        .filter(|&g| u32::from(g) < max.get())
        .ok_or_else(|| {
            TypesError::InvalidKeyGroup {
                key_group: group,
                max: max.get(),
            }
            .into()
        })
}

/// Encodes each value (null: a null row) of state `state` of type `ty`.
fn encode_column<V: ValueSource>(
    values: impl IntoIterator<Item = V>,
    ty: &ValueType,
    state: &str,
    scratch: &mut Vec<u8>,
) -> Result<BinaryArray> {
    let values = values.into_iter();
    let rows = values.size_hint().0;
    let mut builder = BinaryBuilder::with_capacity(rows, rows * 8);
    for value in values {
        if value.is_null() {
            builder.append_null();
        } else {
            scratch.clear();
            encode_with(&value, ty, scratch).map_err(|e| e.into_value_mismatch(state, ty))?;
            builder.append_value(&scratch);
        }
    }
    Ok(builder.finish())
}

/// Encodes one item of a list or operator state, which may not be null.
fn encode_item<V: ValueSource>(
    item: &V,
    ty: &ValueType,
    state: &str,
    what: &str,
    out: &mut Vec<u8>,
) -> Result<()> {
    if item.is_null() {
        return Err(HostError::InvalidRequest(format!(
            "{what} '{state}' cannot hold None items"
        )));
    }
    encode_with(item, ty, out).map_err(|e| e.into_value_mismatch(state, ty))?;
    Ok(())
}

/// Decodes the items of a list payload.
fn decode_items<B: ValueBuilder>(
    payload: &[u8],
    ty: &ValueType,
    builder: &mut B,
) -> std::result::Result<Vec<B::Output>, B::Error>
where
    B::Error: From<HostError>,
{
    list_items(payload)
        .map(|item| {
            let item = item.ok_or(HostError::State(StateError::Corrupt {
                what: "a stored list payload",
            }))?;
            decode_with(item, ty, builder)
        })
        .collect()
}
