//! A plain reference model of [`KeyedStateBackend`]: full copies of ordered
//! maps per epoch, no cleverness. Property tests run the same operations on a
//! real backend and on this model and require the same answers.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use weir_state::{
    Access, EntryPayload, FrozenKeyedState, KeyedStateBackend, Result, StateEntry, StateError,
    StateId, StateKey, StateRegistry, check_key_group,
};
use weir_types::{Attempt, Epoch, KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor};

/// What one (state, key group, key, namespace) holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A value.
    Value(Vec<u8>),
    /// A non-empty list payload.
    List(Vec<u8>),
    /// A non-empty map.
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// The address of an entry in the model.
pub type Address = (StateId, KeyGroup, Vec<u8>, Vec<u8>);

/// All the data of a backend.
pub type Tables = BTreeMap<Address, Content>;

#[derive(Debug, Clone)]
struct Version {
    epoch: Epoch,
    attempt: Attempt,
    committed: bool,
    tables: Tables,
}

/// The reference model.
#[derive(Debug, Clone)]
pub struct ModelBackend {
    max: MaxParallelism,
    range: KeyGroupRange,
    states: StateRegistry,
    base: Tables,
    last_final: Option<Epoch>,
    versions: Vec<Version>,
}

impl ModelBackend {
    /// An empty model holding `range`.
    pub fn new(max: MaxParallelism, range: KeyGroupRange) -> Self {
        Self {
            max,
            range,
            states: StateRegistry::default(),
            base: Tables::new(),
            last_final: None,
            versions: Vec::new(),
        }
    }

    fn current(&self) -> &Tables {
        self.versions.last().map_or(&self.base, |v| &v.tables)
    }

    fn writable(&mut self) -> Result<&mut Tables> {
        match self.versions.last_mut() {
            Some(v) if !v.committed => Ok(&mut v.tables),
            _ => Err(StateError::NoOpenEpoch),
        }
    }

    fn check(&self, state: StateId, key: &StateKey<'_>, access: Access) -> Result<()> {
        self.states.get(state, access)?;
        check_key_group(self.range, key.key_group)
    }

    fn addr(state: StateId, key: &StateKey<'_>) -> Address {
        (
            state,
            key.key_group,
            key.key.to_vec(),
            key.namespace.to_vec(),
        )
    }

    fn epoch_error_if_final(&self, epoch: Epoch) -> Result<()> {
        match self.last_final {
            Some(last_final) if epoch <= last_final => {
                Err(StateError::EpochAlreadyFinal { epoch, last_final })
            }
            _ => Ok(()),
        }
    }

    fn require_all_final(&self) -> Result<()> {
        match (self.versions.first(), self.versions.last()) {
            (Some(first), Some(last)) => Err(StateError::EpochsNotFinal {
                first: first.epoch,
                last: last.epoch,
            }),
            _ => Ok(()),
        }
    }

    /// The data as of the current epoch.
    pub fn tables(&self) -> &Tables {
        self.current()
    }
}

impl KeyedStateBackend for ModelBackend {
    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn max_parallelism(&self) -> MaxParallelism {
        self.max
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        self.states.register(descriptor)
    }

    fn descriptors(&self) -> &[StateDescriptor] {
        self.states.descriptors()
    }

    fn begin_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.epoch_error_if_final(epoch)?;
        // A newer epoch may not begin while an older attempt is still writing.
        if let Some(v) = self
            .versions
            .last()
            .filter(|v| !v.committed && v.epoch < epoch)
        {
            return Err(StateError::NotOpenEpoch {
                epoch,
                open: v.epoch.to_string(),
            });
        }
        self.versions.retain(|v| v.epoch < epoch);
        let tables = self.current().clone();
        self.versions.push(Version {
            epoch,
            attempt,
            committed: false,
            tables,
        });
        Ok(())
    }

    fn commit_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        match self.versions.last_mut() {
            // Committing the same attempt twice is harmless (a retried request).
            Some(v) if v.epoch == epoch && v.attempt == attempt => {
                v.committed = true;
                Ok(())
            }
            other => Err(StateError::NotOpenEpoch {
                epoch,
                open: other
                    .filter(|v| !v.committed)
                    .map_or_else(|| "none".to_owned(), |v| v.epoch.to_string()),
            }),
        }
    }

    fn finalize_up_to(&mut self, epoch: Epoch) -> Result<()> {
        if let Some(v) = self
            .versions
            .iter()
            .find(|v| v.epoch <= epoch && !v.committed)
        {
            return Err(StateError::EpochNotCommitted { epoch: v.epoch });
        }
        if let Some(pos) = self.versions.iter().rposition(|v| v.epoch <= epoch) {
            let folded: Vec<Version> = self.versions.drain(..=pos).collect();
            if let Some(last) = folded.into_iter().last() {
                self.base = last.tables;
            }
        }
        self.last_final = Some(self.last_final.map_or(epoch, |e| e.max(epoch)));
        Ok(())
    }

    fn discard_from(&mut self, epoch: Epoch) -> Result<()> {
        self.epoch_error_if_final(epoch)?;
        self.versions.retain(|v| v.epoch < epoch);
        Ok(())
    }

    fn last_final_epoch(&self) -> Option<Epoch> {
        self.last_final
    }

    fn get_value(&mut self, state: StateId, key: StateKey<'_>) -> Result<Option<Cow<'_, [u8]>>> {
        self.check(state, &key, Access::Value)?;
        Ok(match self.current().get(&Self::addr(state, &key)) {
            Some(Content::Value(v)) => Some(Cow::Borrowed(v.as_slice())),
            _ => None,
        })
    }

    fn put_value(&mut self, state: StateId, key: StateKey<'_>, value: &[u8]) -> Result<()> {
        self.check(state, &key, Access::Value)?;
        self.writable()?
            .insert(Self::addr(state, &key), Content::Value(value.to_vec()));
        Ok(())
    }

    fn clear(&mut self, state: StateId, key: StateKey<'_>) -> Result<()> {
        self.check(state, &key, Access::Any)?;
        self.writable()?.remove(&Self::addr(state, &key));
        Ok(())
    }

    fn get_list(&mut self, state: StateId, key: StateKey<'_>) -> Result<Option<Cow<'_, [u8]>>> {
        self.check(state, &key, Access::List)?;
        Ok(match self.current().get(&Self::addr(state, &key)) {
            Some(Content::List(v)) => Some(Cow::Borrowed(v.as_slice())),
            _ => None,
        })
    }

    fn append_list(&mut self, state: StateId, key: StateKey<'_>, payload: &[u8]) -> Result<()> {
        self.check(state, &key, Access::List)?;
        let tables = self.writable()?;
        if payload.is_empty() {
            return Ok(());
        }
        match tables
            .entry(Self::addr(state, &key))
            .or_insert_with(|| Content::List(Vec::new()))
        {
            Content::List(items) => items.extend_from_slice(payload),
            _ => unreachable!("list states only hold lists"),
        }
        Ok(())
    }

    fn replace_list(&mut self, state: StateId, key: StateKey<'_>, payload: &[u8]) -> Result<()> {
        self.check(state, &key, Access::List)?;
        let tables = self.writable()?;
        let addr = Self::addr(state, &key);
        if payload.is_empty() {
            tables.remove(&addr);
        } else {
            tables.insert(addr, Content::List(payload.to_vec()));
        }
        Ok(())
    }

    fn map_get(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
    ) -> Result<Option<Cow<'_, [u8]>>> {
        self.check(state, &key, Access::Map)?;
        Ok(match self.current().get(&Self::addr(state, &key)) {
            Some(Content::Map(m)) => m.get(user_key).map(|v| Cow::Borrowed(v.as_slice())),
            _ => None,
        })
    }

    fn map_put(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.check(state, &key, Access::Map)?;
        match self
            .writable()?
            .entry(Self::addr(state, &key))
            .or_insert_with(|| Content::Map(BTreeMap::new()))
        {
            Content::Map(m) => m.insert(user_key.to_vec(), value.to_vec()),
            _ => unreachable!("map states only hold maps"),
        };
        Ok(())
    }

    fn map_remove(&mut self, state: StateId, key: StateKey<'_>, user_key: &[u8]) -> Result<()> {
        self.check(state, &key, Access::Map)?;
        let tables = self.writable()?;
        let addr = Self::addr(state, &key);
        if let Some(Content::Map(m)) = tables.get_mut(&addr) {
            m.remove(user_key);
            if m.is_empty() {
                tables.remove(&addr);
            }
        }
        Ok(())
    }

    fn map_for_each(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        self.check(state, &key, Access::Map)?;
        if let Some(Content::Map(m)) = self.current().get(&Self::addr(state, &key)) {
            for (k, v) in m {
                visit(k, v);
            }
        }
        Ok(())
    }

    fn snapshot_sync(&mut self) -> Result<Box<dyn FrozenKeyedState>> {
        self.require_all_final()?;
        Ok(Box::new(ModelSnapshot {
            max: self.max,
            range: self.range,
            descriptors: self.states.descriptors().to_vec(),
            tables: Arc::new(self.base.clone()),
        }))
    }

    fn ingest(&mut self, entry: StateEntry<'_>) -> Result<()> {
        self.require_all_final()?;
        let key = StateKey {
            key_group: entry.key_group,
            key: entry.key,
            namespace: entry.namespace,
        };
        self.check(entry.state, &key, Access::Any)?;
        let addr = Self::addr(entry.state, &key);
        match entry.payload {
            EntryPayload::Value(v) => {
                self.base.insert(addr, Content::Value(v.to_vec()));
            }
            EntryPayload::List(p) => match self
                .base
                .entry(addr)
                .or_insert_with(|| Content::List(Vec::new()))
            {
                Content::List(items) => items.extend_from_slice(p),
                _ => {
                    return Err(StateError::Corrupt {
                        what: "ingested list",
                    });
                }
            },
            EntryPayload::MapEntry { user_key, value } => {
                insert_map_entry(&mut self.base, addr, user_key, value)?;
            }
        }
        Ok(())
    }
}

struct ModelSnapshot {
    max: MaxParallelism,
    range: KeyGroupRange,
    descriptors: Vec<StateDescriptor>,
    tables: Arc<Tables>,
}

impl FrozenKeyedState for ModelSnapshot {
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
        for ((state, kg, key, ns), content) in self.tables.iter() {
            if *kg != key_group {
                continue;
            }
            let entry = |payload| StateEntry {
                state: *state,
                key_group: *kg,
                key,
                namespace: ns,
                payload,
            };
            match content {
                Content::Value(v) => visit(entry(EntryPayload::Value(v)))?,
                Content::List(p) => visit(entry(EntryPayload::List(p)))?,
                Content::Map(m) => {
                    for (user_key, value) in m {
                        visit(entry(EntryPayload::MapEntry { user_key, value }))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Adds one map entry at `addr`, which must hold a map or nothing.
fn insert_map_entry<K: Ord>(
    tables: &mut BTreeMap<K, Content>,
    addr: K,
    user_key: &[u8],
    value: &[u8],
) -> Result<()> {
    match tables
        .entry(addr)
        .or_insert_with(|| Content::Map(BTreeMap::new()))
    {
        Content::Map(m) => {
            m.insert(user_key.to_vec(), value.to_vec());
            Ok(())
        }
        _ => Err(StateError::Corrupt {
            what: "map entry where another kind of state is stored",
        }),
    }
}

/// All the data of a frozen view, keyed by state name so views of backends
/// that numbered their states differently compare equal.
pub type Dump = BTreeMap<(String, KeyGroup, Vec<u8>, Vec<u8>), Content>;

/// Reads a frozen view into [`Dump`] form.
pub fn dump(frozen: &dyn FrozenKeyedState) -> Result<Dump> {
    let mut out = BTreeMap::new();
    for kg in frozen.key_group_range().iter() {
        frozen.for_each_entry(kg, &mut |e| {
            let name = frozen
                .descriptors()
                .get(e.state.0 as usize)
                .ok_or(StateError::UnknownState(e.state))?
                .name
                .clone();
            let addr = (name, e.key_group, e.key.to_vec(), e.namespace.to_vec());
            match e.payload {
                EntryPayload::Value(v) => {
                    out.insert(addr, Content::Value(v.to_vec()));
                }
                EntryPayload::List(p) => {
                    if out.insert(addr, Content::List(p.to_vec())).is_some() {
                        return Err(StateError::Corrupt {
                            what: "list emitted twice",
                        });
                    }
                }
                EntryPayload::MapEntry { user_key, value } => {
                    insert_map_entry(&mut out, addr, user_key, value)?;
                }
            }
            Ok(())
        })?;
    }
    Ok(out)
}
