//! Batched state access of one operator subtask.

use std::num::NonZeroU32;

use arrow_array::{ArrayRef, BinaryArray};
use serde::{Deserialize, Serialize};
use weir_state::{RedistributionMode, StateId};
use weir_types::{
    Attempt, Epoch, KeyGroupRange, MaxParallelism, OperatorUid, StateDescriptor, SubtaskIndex,
    TypesError, ValueType,
};

use crate::batch::KeyBatch;
use crate::error::{HostError, Result};

/// Which keyed state backend holds a subtask's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendSpec {
    /// Hash tables in memory, copy-on-write snapshots.
    Heap,
    /// RocksDB in a directory the engine (or host) picks under its work dir.
    RocksDb,
}

impl std::str::FromStr for BackendSpec {
    type Err = TypesError;

    /// `heap` or `rocksdb`.
    fn from_str(name: &str) -> std::result::Result<Self, TypesError> {
        match name {
            "heap" => Ok(Self::Heap),
            "rocksdb" => Ok(Self::RocksDb),
            _ => Err(TypesError::UnknownName {
                what: "state backend",
                name: name.to_owned(),
                expected: "\"heap\" (state in memory) or \"rocksdb\" (state on local disk)",
            }),
        }
    }
}

/// Identifies a subtask and how its state is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskSpec {
    /// The operator's uid.
    pub uid: OperatorUid,
    /// The subtask index, `< parallelism`.
    pub subtask: SubtaskIndex,
    /// The operator's parallelism.
    pub parallelism: u32,
    /// The number of key groups.
    pub max_parallelism: MaxParallelism,
    /// The keyed state backend.
    pub backend: BackendSpec,
    /// The types of the key columns, recorded in snapshots; `None` until the
    /// first keyed access tells them.
    pub key_types: Option<Vec<ValueType>>,
}

/// The entries of a map state for each key of a batch: the entries of key `i`
/// are rows `offsets[i]..offsets[i + 1]` of `user_keys` and `values`.
#[derive(Debug, Clone, PartialEq)]
pub struct MapEntries {
    /// `keys + 1` offsets into the entry arrays.
    pub offsets: Vec<u32>,
    /// Encoded user keys.
    pub user_keys: BinaryArray,
    /// Encoded values.
    pub values: BinaryArray,
}

/// A built-in aggregate run in Rust over a whole batch (no per-record Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NativeAggregate {
    /// Number of rows.
    Count,
    /// Sum of the input column.
    Sum,
    /// Smallest input.
    Min,
    /// Largest input.
    Max,
    /// Arithmetic mean (the state keeps sum and count).
    Mean,
}

/// A native aggregate as a request names it: the function and, optionally,
/// the tumbling count window it runs in (Flink's `countWindow(n)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aggregation {
    /// What is folded.
    pub function: NativeAggregate,
    /// Rows per window and key; `None` folds one running aggregate per key.
    pub count_window: Option<NonZeroU32>,
}

impl From<NativeAggregate> for Aggregation {
    fn from(function: NativeAggregate) -> Self {
        Self {
            function,
            count_window: None,
        }
    }
}

impl Aggregation {
    /// `function` by name (see [`NativeAggregate`]'s `FromStr`), in tumbling
    /// count windows of `count_window` rows if given.
    pub fn parse(function: &str, count_window: Option<u32>) -> Result<Self> {
        let function = function.parse()?;
        let count_window = count_window
            .map(|rows| {
                NonZeroU32::new(rows).ok_or_else(|| {
                    HostError::InvalidRequest(
                        "a count window of 0 rows never fills: give it at least 1 row".into(),
                    )
                })
            })
            .transpose()?;
        Ok(Self {
            function,
            count_window,
        })
    }
}

impl std::str::FromStr for NativeAggregate {
    type Err = TypesError;

    /// `count`, `sum`, `min`, `max` or `mean`.
    fn from_str(name: &str) -> std::result::Result<Self, TypesError> {
        match name {
            "count" => Ok(Self::Count),
            "sum" => Ok(Self::Sum),
            "min" => Ok(Self::Min),
            "max" => Ok(Self::Max),
            "mean" => Ok(Self::Mean),
            _ => Err(TypesError::UnknownName {
                what: "aggregate function",
                name: name.to_owned(),
                expected: "count, sum, min, max or mean",
            }),
        }
    }
}

/// Batched keyed and operator state of one subtask, the same whether the
/// state lives in this process or in a state host.
///
/// Values are encoded bytes in nullable `BinaryArray`s: a null read means
/// "absent", a null write means "clear". Every batch method takes one row per
/// access, in order; later rows see the writes of earlier ones.
pub trait SubtaskSession {
    /// The subtask this session serves.
    fn spec(&self) -> &SubtaskSpec;

    /// The key groups this subtask owns.
    fn key_group_range(&self) -> KeyGroupRange;

    /// Records the key columns' types (kept in snapshots) if none are
    /// recorded; fails if other types are. By default the types are fixed
    /// when the session opens, so this only checks them.
    fn set_key_types(&mut self, types: &[ValueType]) -> Result<()> {
        let known = self.spec().key_types.as_deref();
        if known == Some(types) {
            return Ok(());
        }
        Err(HostError::InvalidRequest(format!(
            "the keys have types {}, but the session opened with key types {}; pass the key \
             columns' types when connecting to the state host",
            render_types(types),
            known.map_or_else(|| "none".to_owned(), render_types)
        )))
    }

    /// Registers a keyed state (idempotent for an identical descriptor).
    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId>;

    /// Registers an operator (non-keyed) list state.
    fn register_operator_state(&mut self, name: &str, mode: RedistributionMode) -> Result<StateId>;

    /// Folds epochs `<= final_epoch` into the base, then starts `attempt` of
    /// `epoch` (discarding the writes of an earlier attempt of it).
    fn begin(&mut self, epoch: Epoch, attempt: Attempt, final_epoch: Option<Epoch>) -> Result<()>;

    /// Ends `attempt` of `epoch`; its writes stay until finalized or discarded.
    fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()>;

    /// Values of a value, reducing or aggregating state.
    fn get_values(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray>;

    /// Writes (null: clears) values of a value, reducing or aggregating state.
    fn put_values(&mut self, state: StateId, keys: &KeyBatch, values: &BinaryArray) -> Result<()>;

    /// Values decoded into an Arrow array of the state's type (vectorized path).
    fn get_batch(&mut self, state: StateId, keys: &KeyBatch) -> Result<ArrayRef>;

    /// Writes values given as an Arrow array of the state's type (null: clears).
    fn put_batch(&mut self, state: StateId, keys: &KeyBatch, values: &ArrayRef) -> Result<()>;

    /// Folds `inputs` (one per row) into the state with a built-in aggregate
    /// and returns the aggregate after each row; in a count window, the
    /// window's aggregate at the row that fills it and null elsewhere.
    fn aggregate(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        inputs: &ArrayRef,
        aggregation: Aggregation,
    ) -> Result<ArrayRef>;

    /// List payloads of a list state (null: empty list).
    fn get_lists(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray>;

    /// Appends list payloads to a list state.
    fn append_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()>;

    /// Replaces the lists of a list state (null or empty payload: clears).
    fn replace_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()>;

    /// Every entry of a map state, per key.
    fn map_entries(&mut self, state: StateId, keys: &KeyBatch) -> Result<MapEntries>;

    /// One entry of a map state per row (null: absent).
    fn map_get(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
    ) -> Result<BinaryArray>;

    /// Sets one entry of a map state per row (null value: removes it).
    fn map_put(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
        values: &BinaryArray,
    ) -> Result<()>;

    /// Clears whatever `state` holds for each key (any kind).
    fn clear(&mut self, state: StateId, keys: &KeyBatch) -> Result<()>;

    /// The items of an operator list state.
    fn operator_state(&mut self, state: StateId) -> Result<Vec<Vec<u8>>>;

    /// Replaces the items of an operator list state.
    fn set_operator_state(&mut self, state: StateId, items: Vec<Vec<u8>>) -> Result<()>;
}

/// Types as `int64, string` for messages.
pub(crate) fn render_types(types: &[ValueType]) -> String {
    types
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
