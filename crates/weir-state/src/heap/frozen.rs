//! The heap backend's snapshot view: the key-group tables shared at
//! `snapshot_sync` time. Later writes copy the buckets they touch, so nothing
//! here changes after it is taken.

use std::sync::Arc;

use weir_types::{KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor};

use crate::backend::StateId;
use crate::bytes::SmallBytes;
use crate::error::{Result, StateError};
use crate::frozen::{EntryPayload, FrozenKeyedState, StateEntry};
use crate::heap::data::{StateData, UserMap};
use crate::heap::table::GroupTable;

/// The shared key groups of one state.
enum FrozenData {
    /// Value-like states (`list == false`) or list states.
    Bytes {
        list: bool,
        groups: Vec<Arc<GroupTable<SmallBytes>>>,
    },
    /// Map states.
    Map(Vec<Arc<GroupTable<UserMap>>>),
}

/// An immutable view of a [`HeapKeyedStateBackend`](super::HeapKeyedStateBackend).
pub(crate) struct HeapFrozenState {
    descriptors: Vec<StateDescriptor>,
    range: KeyGroupRange,
    max: MaxParallelism,
    data: Vec<FrozenData>,
}

impl HeapFrozenState {
    /// Shares every table of `data` (described by `descriptors`); copies no
    /// entry.
    pub(crate) fn new(
        descriptors: &[StateDescriptor],
        range: KeyGroupRange,
        max: MaxParallelism,
        data: &[StateData],
    ) -> Self {
        let data = descriptors
            .iter()
            .zip(data)
            .map(|(d, data)| match data {
                StateData::Bytes(t) => FrozenData::Bytes {
                    list: d.kind == weir_types::StateKind::List,
                    groups: t.share(),
                },
                StateData::Map(t) => FrozenData::Map(t.share()),
            })
            .collect();
        Self {
            descriptors: descriptors.to_vec(),
            range,
            max,
            data,
        }
    }
}

impl FrozenKeyedState for HeapFrozenState {
    fn descriptors(&self) -> &[StateDescriptor] {
        &self.descriptors
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn max_parallelism(&self) -> MaxParallelism {
        self.max
    }

    fn for_each_entry(
        &self,
        key_group: KeyGroup,
        visit: &mut dyn FnMut(StateEntry<'_>) -> Result<()>,
    ) -> Result<()> {
        if !self.range.contains(key_group) {
            return Err(StateError::KeyGroupOutOfRange {
                key_group,
                range: self.range,
            });
        }
        let group = (u32::from(key_group.0) - self.range.start()) as usize;
        for (i, data) in self.data.iter().enumerate() {
            let state = StateId(u32::try_from(i).expect("state ids fit in u32"));
            match data {
                FrozenData::Bytes { list, groups } => {
                    for slot in groups[group].iter() {
                        let payload = if *list {
                            EntryPayload::List(&slot.payload[..])
                        } else {
                            EntryPayload::Value(&slot.payload[..])
                        };
                        visit(StateEntry {
                            state,
                            key_group,
                            key: slot.key(),
                            namespace: slot.namespace(),
                            payload,
                        })?;
                    }
                }
                FrozenData::Map(groups) => {
                    for slot in groups[group].iter() {
                        for (user_key, v) in &slot.payload {
                            visit(StateEntry {
                                state,
                                key_group,
                                key: slot.key(),
                                namespace: slot.namespace(),
                                payload: EntryPayload::MapEntry {
                                    user_key,
                                    value: &v.value,
                                },
                            })?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
