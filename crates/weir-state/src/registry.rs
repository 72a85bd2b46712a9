//! The states a backend has registered, and the checks every access makes.
//!
//! Every backend (and the test model) shares these rules, so "duplicate
//! state", "wrong kind" and "foreign key group" mean the same everywhere.

use weir_types::{KeyGroup, KeyGroupRange, StateDescriptor, StateKind};

use crate::backend::StateId;
use crate::error::{Result, StateError};
use crate::frozen::EntryPayload;

/// Which family of accessors a call belongs to; checked against the state's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Value access: value, reducing and aggregating states.
    Value,
    /// List access: list states.
    List,
    /// Map access: map states.
    Map,
    /// Any kind (e.g. `clear`).
    Any,
}

impl Access {
    /// The access a canonical entry's payload needs.
    pub fn of_payload(payload: &EntryPayload<'_>) -> Self {
        match payload {
            EntryPayload::Value(_) => Access::Value,
            EntryPayload::List(_) => Access::List,
            EntryPayload::MapEntry { .. } => Access::Map,
        }
    }

    /// The name used in errors.
    pub fn name(self) -> &'static str {
        match self {
            Access::Value => "value",
            Access::List => "list",
            Access::Map => "map",
            Access::Any => "any",
        }
    }

    /// Whether a state of `kind` accepts this access.
    pub fn allows(self, kind: StateKind) -> bool {
        match self {
            Access::Value => matches!(
                kind,
                StateKind::Value | StateKind::Reducing | StateKind::Aggregating
            ),
            Access::List => kind == StateKind::List,
            Access::Map => kind == StateKind::Map,
            Access::Any => true,
        }
    }
}

/// The registered states of one backend, indexed by [`StateId`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateRegistry {
    descriptors: Vec<StateDescriptor>,
}

impl StateRegistry {
    /// A registry holding `descriptors` (e.g. read back from a database).
    pub fn from_descriptors(descriptors: Vec<StateDescriptor>) -> Self {
        Self { descriptors }
    }

    /// The id of an identical state already registered under the
    /// descriptor's name, `None` for a new name, or
    /// [`StateError::DuplicateState`] when the name is taken by another
    /// descriptor.
    pub fn lookup(&self, descriptor: &StateDescriptor) -> Result<Option<StateId>> {
        let Some(index) = self
            .descriptors
            .iter()
            .position(|d| d.name == descriptor.name)
        else {
            return Ok(None);
        };
        let existing = &self.descriptors[index];
        if existing == descriptor {
            Ok(Some(Self::id(index)))
        } else {
            Err(StateError::DuplicateState {
                name: descriptor.name.clone(),
                existing: match &existing.user_key_type {
                    Some(user_key) => format!("map state of {user_key} -> {}", existing.value_type),
                    None => format!("{} state of {}", existing.kind, existing.value_type),
                },
            })
        }
    }

    /// Adds a state whose name [`lookup`](Self::lookup) found free.
    pub fn push(&mut self, descriptor: StateDescriptor) -> StateId {
        self.descriptors.push(descriptor);
        Self::id(self.descriptors.len() - 1)
    }

    /// Registers a state: the existing id when identical, a new one for a
    /// new name, an error for a changed descriptor.
    pub fn register(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        match self.lookup(descriptor)? {
            Some(id) => Ok(id),
            None => Ok(self.push(descriptor.clone())),
        }
    }

    /// The descriptor of `state`, checked to allow `access`.
    pub fn get(&self, state: StateId, access: Access) -> Result<&StateDescriptor> {
        // `let else`, not `ok_or`: that builds and drops the error on every
        // access.
        let Some(d) = self.descriptors.get(state.0 as usize) else {
            return Err(StateError::UnknownState(state));
        };
        if access.allows(d.kind) {
            Ok(d)
        } else {
            Err(StateError::WrongKind {
                name: d.name.clone(),
                expected: access.name(),
                actual: d.kind,
            })
        }
    }

    /// All descriptors, indexed by [`StateId`].
    pub fn descriptors(&self) -> &[StateDescriptor] {
        &self.descriptors
    }

    fn id(index: usize) -> StateId {
        StateId(u32::try_from(index).expect("invariant: fewer than 2^32 states"))
    }
}

/// Fails with [`StateError::KeyGroupOutOfRange`] unless `range` holds `key_group`.
pub fn check_key_group(range: KeyGroupRange, key_group: KeyGroup) -> Result<()> {
    if range.contains(key_group) {
        Ok(())
    } else {
        Err(StateError::KeyGroupOutOfRange { key_group, range })
    }
}

#[cfg(test)]
mod tests {
    use weir_types::ValueType;

    use super::*;

    #[test]
    fn identical_registration_returns_the_id_and_a_changed_one_fails() {
        let mut r = StateRegistry::default();
        let v = StateDescriptor::new("v", StateKind::Value, ValueType::Int64).expect("valid");
        let id = r.register(&v).expect("new");
        assert_eq!(r.register(&v).expect("same"), id);
        let changed = StateDescriptor::new("v", StateKind::List, ValueType::Int64).expect("valid");
        let err = r.register(&changed).expect_err("changed");
        assert!(err.to_string().contains("value state of int64"), "{err}");
    }

    #[test]
    fn access_is_checked_against_the_kind() {
        let mut r = StateRegistry::default();
        let red = StateDescriptor::new("r", StateKind::Reducing, ValueType::Int64).expect("valid");
        let id = r.register(&red).expect("new");
        assert!(r.get(id, Access::Value).is_ok());
        assert!(matches!(
            r.get(id, Access::Map),
            Err(StateError::WrongKind { .. })
        ));
        assert!(matches!(
            r.get(StateId(9), Access::Any),
            Err(StateError::UnknownState(_))
        ));
    }
}
