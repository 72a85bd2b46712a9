//! Operator state (S8): named list states per subtask, not keyed, with a
//! redistribution mode that says how a restore at another parallelism spreads
//! them (see [`redistribute`]).
//!
//! Epoch versions follow the keyed-state contract (see
//! [`KeyedStateBackend`](crate::KeyedStateBackend)) through the same
//! [`EpochLog`]: a retried epoch sees the items as before its first attempt.
//! Operator state is small (source positions, rules, buffers), so an epoch
//! keeps a full copy of the items as they were when it began instead of an
//! undo log. Registrations are not versioned: a discarded epoch's new state
//! stays registered, with no items.

mod redistribute;
mod snapshot;

use weir_types::{Attempt, Epoch};

use crate::backend::StateId;
use crate::epoch::EpochLog;
use crate::error::{Result, StateError};

pub use redistribute::redistribute;
pub use snapshot::{
    OPERATOR_STATE_VERSION, OperatorListSnapshot, OperatorStateSnapshot, RedistributionMode,
};

type Items = Vec<Vec<u8>>;

/// The operator state of one subtask.
#[derive(Debug, Clone, Default)]
pub struct OperatorStateStore {
    /// Name and mode of each registered state, indexed by [`StateId`].
    registered: Vec<(String, RedistributionMode)>,
    /// Current items of each state (shorter than `registered` after a discard
    /// that predates a registration; missing means empty).
    items: Vec<Items>,
    epochs: EpochLog,
    /// The items as each pending epoch found them, in the log's order.
    before: Vec<Vec<Items>>,
}

impl OperatorStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding `snapshot` as its base (restore); the states are
    /// registered in the snapshot's order.
    pub fn restore(snapshot: &OperatorStateSnapshot) -> Result<Self> {
        let mut store = Self::new();
        for state in &snapshot.states {
            if store.find(&state.name).is_some() {
                return Err(StateError::Corrupt {
                    what: "operator state snapshot with a repeated name",
                });
            }
            let id = store.register(&state.name, state.mode)?;
            store.items[id.0 as usize].clone_from(&state.items);
        }
        Ok(store)
    }

    /// Registers the list state `name`, or returns its id if it is already
    /// registered with `mode`; another mode is an error.
    pub fn register(&mut self, name: &str, mode: RedistributionMode) -> Result<StateId> {
        if let Some(id) = self.find(name) {
            let existing = self.registered[id.0 as usize].1;
            if existing != mode {
                return Err(StateError::OperatorStateMode {
                    name: name.to_owned(),
                    existing: existing.as_str(),
                });
            }
            return Ok(id);
        }
        let id = StateId(self.registered.len() as u32);
        self.registered.push((name.to_owned(), mode));
        self.items.resize_with(self.registered.len(), Vec::new);
        Ok(id)
    }

    /// The items of `state`, in order.
    pub fn get(&self, state: StateId) -> Result<&[Vec<u8>]> {
        self.check(state)?;
        Ok(self
            .items
            .get(state.0 as usize)
            .map_or(&[][..], |items| items.as_slice()))
    }

    /// Appends one item to `state` in the open epoch.
    pub fn add(&mut self, state: StateId, item: &[u8]) -> Result<()> {
        self.writable(state)?.push(item.to_vec());
        Ok(())
    }

    /// Replaces the items of `state` in the open epoch (empty clears it).
    pub fn update(&mut self, state: StateId, items: Vec<Vec<u8>>) -> Result<()> {
        *self.writable(state)? = items;
        Ok(())
    }

    /// Starts `attempt` of `epoch`, dropping the writes of `epoch` and later
    /// epochs first (see the keyed-state contract).
    pub fn begin_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        let decision = self.epochs.begin(epoch, attempt)?;
        self.drop_newest(decision.epochs.len());
        self.before.push(self.items.clone());
        Ok(())
    }

    /// Marks the current attempt of `epoch` as finished.
    pub fn commit_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.epochs.commit(epoch, attempt)
    }

    /// Makes every epoch `<= epoch` part of the base; they must be committed.
    pub fn finalize_up_to(&mut self, epoch: Epoch) -> Result<()> {
        let decision = self.epochs.finalize_up_to(epoch)?;
        self.before.drain(..decision.epochs.len());
        Ok(())
    }

    /// Drops the writes of `epoch` and every later epoch.
    pub fn discard_from(&mut self, epoch: Epoch) -> Result<()> {
        let decision = self.epochs.discard_from(epoch)?;
        self.drop_newest(decision.epochs.len());
        Ok(())
    }

    /// The last finalized epoch, if any.
    pub fn last_final_epoch(&self) -> Option<Epoch> {
        self.epochs.last_final()
    }

    /// Every registered state and its items, sorted by name; only when every
    /// epoch is final, so the snapshot is exactly the base.
    pub fn snapshot(&self) -> Result<OperatorStateSnapshot> {
        self.epochs.check_all_final()?;
        let mut states: Vec<OperatorListSnapshot> = self
            .registered
            .iter()
            .enumerate()
            .map(|(i, (name, mode))| OperatorListSnapshot {
                name: name.clone(),
                mode: *mode,
                items: self.items.get(i).cloned().unwrap_or_default(),
            })
            .collect();
        states.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(OperatorStateSnapshot { states })
    }

    fn find(&self, name: &str) -> Option<StateId> {
        self.registered
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| StateId(i as u32))
    }

    fn check(&self, state: StateId) -> Result<()> {
        if (state.0 as usize) < self.registered.len() {
            Ok(())
        } else {
            Err(StateError::UnknownState(state))
        }
    }

    fn writable(&mut self, state: StateId) -> Result<&mut Items> {
        self.check(state)?;
        self.epochs.write_epoch()?;
        self.items.resize_with(self.registered.len(), Vec::new);
        Ok(&mut self.items[state.0 as usize])
    }

    /// Restores the items the oldest of the `count` newest epochs found.
    fn drop_newest(&mut self, count: usize) {
        let from = self.before.len() - count;
        if let Some(items) = self.before.drain(from..).next() {
            self.items = items;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(store: &OperatorStateStore, id: StateId) -> Vec<&[u8]> {
        store
            .get(id)
            .expect("registered")
            .iter()
            .map(|i| i.as_slice())
            .collect()
    }

    #[test]
    fn retried_epoch_sees_items_as_before_first_attempt() {
        let mut s = OperatorStateStore::new();
        let id = s
            .register("offsets", RedistributionMode::Split)
            .expect("registers");
        s.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
        s.add(id, b"a").expect("adds");
        s.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
        s.begin_epoch(Epoch(2), Attempt(0)).expect("begins");
        s.add(id, b"b").expect("adds");
        s.commit_epoch(Epoch(2), Attempt(0)).expect("commits");
        s.begin_epoch(Epoch(3), Attempt(0)).expect("begins");
        s.update(id, vec![b"z".to_vec()]).expect("updates");

        s.begin_epoch(Epoch(2), Attempt(1)).expect("retries");
        assert_eq!(items(&s, id), [&b"a"[..]]);
        s.add(id, b"c").expect("adds");
        s.commit_epoch(Epoch(2), Attempt(1)).expect("commits");
        s.finalize_up_to(Epoch(2)).expect("finalizes");
        let snap = s.snapshot().expect("all final");
        assert_eq!(
            snap.get("offsets").expect("present").items,
            vec![b"a".to_vec(), b"c".to_vec()]
        );
    }

    #[test]
    fn discard_keeps_registration_but_drops_items() {
        let mut s = OperatorStateStore::new();
        s.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
        let id = s
            .register("rules", RedistributionMode::Broadcast)
            .expect("registers");
        s.add(id, b"r").expect("adds");
        s.discard_from(Epoch(1)).expect("discards");
        assert!(items(&s, id).is_empty());
        assert!(matches!(s.add(id, b"x"), Err(StateError::NoOpenEpoch)));
        let snap = s.snapshot().expect("nothing pending");
        assert_eq!(snap.states.len(), 1);
        assert!(snap.states[0].items.is_empty());
    }

    #[test]
    fn errors_for_modes_ids_epochs_and_snapshots() {
        let mut s = OperatorStateStore::new();
        let id = s
            .register("a", RedistributionMode::Union)
            .expect("registers");
        assert_eq!(
            s.register("a", RedistributionMode::Union).expect("same"),
            id
        );
        assert!(matches!(
            s.register("a", RedistributionMode::Split),
            Err(StateError::OperatorStateMode {
                existing: "union",
                ..
            })
        ));
        assert!(matches!(
            s.get(StateId(5)),
            Err(StateError::UnknownState(_))
        ));
        assert!(matches!(
            s.update(id, Vec::new()),
            Err(StateError::NoOpenEpoch)
        ));
        s.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
        assert!(matches!(
            s.snapshot(),
            Err(StateError::EpochsNotFinal { .. })
        ));
        assert!(matches!(
            s.finalize_up_to(Epoch(1)),
            Err(StateError::EpochNotCommitted { .. })
        ));
        s.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
        s.finalize_up_to(Epoch(1)).expect("finalizes");
        assert_eq!(s.last_final_epoch(), Some(Epoch(1)));
        assert!(matches!(
            s.begin_epoch(Epoch(1), Attempt(1)),
            Err(StateError::EpochAlreadyFinal { .. })
        ));
    }

    #[test]
    fn restore_after_redistribution_round_trips() {
        let mut old = Vec::new();
        for sub in 0..3u8 {
            let mut s = OperatorStateStore::new();
            let split = s.register("split", RedistributionMode::Split).expect("ok");
            let union = s.register("union", RedistributionMode::Union).expect("ok");
            let bcast = s
                .register("bcast", RedistributionMode::Broadcast)
                .expect("ok");
            s.begin_epoch(Epoch(1), Attempt(0)).expect("begins");
            s.update(split, vec![vec![sub, 0], vec![sub, 1]])
                .expect("ok");
            s.add(union, &[sub]).expect("ok");
            s.add(bcast, b"same").expect("ok");
            s.commit_epoch(Epoch(1), Attempt(0)).expect("commits");
            s.finalize_up_to(Epoch(1)).expect("finalizes");
            old.push(s.snapshot().expect("all final"));
        }
        let new = redistribute(&old, 2).expect("redistributes");
        let stores: Vec<_> = new
            .iter()
            .map(|snap| OperatorStateStore::restore(snap).expect("restores"))
            .collect();
        let split_items: Vec<Vec<u8>> = stores
            .iter()
            .flat_map(|s| {
                s.snapshot()
                    .expect("base only")
                    .get("split")
                    .expect("has")
                    .items
                    .clone()
            })
            .collect();
        let expected: Vec<Vec<u8>> = (0..3u8).flat_map(|s| [vec![s, 0], vec![s, 1]]).collect();
        assert_eq!(split_items, expected);
        for (store, snap) in stores.iter().zip(&new) {
            assert_eq!(&store.snapshot().expect("base only"), snap);
            assert_eq!(snap.get("union").expect("has").items.len(), 3);
            assert_eq!(
                snap.get("bcast").expect("has").items,
                vec![b"same".to_vec()]
            );
        }
        let dup = OperatorStateSnapshot {
            states: vec![new[0].states[0].clone(), new[0].states[0].clone()],
        };
        assert!(OperatorStateStore::restore(&dup).is_err());
    }
}
