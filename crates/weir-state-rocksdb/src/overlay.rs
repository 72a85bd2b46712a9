//! The writes of one not yet final epoch, held in memory above the database.
//!
//! Reads look through the overlays newest first, then the database; on
//! `finalize_up_to` the overlays of the final epochs are replayed oldest first
//! into a single `WriteBatch` (whose operations apply in order), and
//! `discard_from` just drops them. This
//! module holds data only; the backend decides which overlay to use.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use weir_state::{SmallBytes, StateId};

/// The last write of an epoch to one row key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// The row holds these bytes (a value, a map value or a whole list payload).
    Put(SmallBytes),
    /// The row is gone.
    Delete,
    /// These list items follow whatever lower layers hold.
    Append(SmallBytes),
}

/// One epoch's writes to one state.
///
/// Invariant: every write in `writes` happened after any clear of a prefix in
/// `cleared` that covers it (clearing a prefix drops the writes under it), so
/// a write answers a read before the clears do.
#[derive(Debug, Clone, Default)]
pub(crate) struct StateOverlay {
    /// Rows and values are inline when short, so an epoch's writes cost
    /// about one allocation per B-tree node, not two per row, to make and
    /// to free (once the epoch is folded: small epochs on the task's
    /// thread, large ones on the fold thread).
    writes: BTreeMap<SmallBytes, Write>,
    cleared: BTreeSet<Vec<u8>>,
}

impl StateOverlay {
    /// The write to `row`, if this epoch wrote it.
    pub fn get(&self, row: &[u8]) -> Option<&Write> {
        self.writes.get(row)
    }

    /// How many rows this epoch wrote.
    pub fn rows(&self) -> usize {
        self.writes.len()
    }

    /// Whether this epoch cleared every map entry under `prefix`.
    pub fn is_cleared(&self, prefix: &[u8]) -> bool {
        self.cleared.contains(prefix)
    }

    /// Sets `row` to `value`.
    pub fn put(&mut self, row: &[u8], value: &[u8]) {
        self.writes
            .insert(row.into(), Write::Put(SmallBytes::from_slice(value)));
    }

    /// Removes `row`.
    pub fn delete(&mut self, row: &[u8]) {
        self.writes.insert(row.into(), Write::Delete);
    }

    /// Appends list `items` (a list payload) to `row`.
    pub fn append(&mut self, row: &[u8], items: &[u8]) {
        match self.writes.get_mut(row) {
            None => {
                self.writes
                    .insert(row.into(), Write::Append(SmallBytes::from_slice(items)));
            }
            Some(Write::Put(existing) | Write::Append(existing)) => existing.extend(items),
            Some(write @ Write::Delete) => *write = Write::Put(SmallBytes::from_slice(items)),
        }
    }

    /// Removes every map entry under `prefix` (a map's row key for one key
    /// and namespace), in this epoch and below.
    pub fn clear_prefix(&mut self, prefix: &[u8]) {
        let doomed: Vec<Vec<u8>> = self
            .writes_under(prefix)
            .map(|(row, _)| row.to_vec())
            .collect();
        for row in doomed {
            self.writes.remove(row.as_slice());
        }
        self.cleared.insert(prefix.to_vec());
    }

    /// This epoch's writes to rows starting with `prefix`, in key order.
    pub fn writes_under<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Write)> + 'a {
        self.writes
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(row, _)| row.starts_with(prefix))
            .map(|(row, write)| (&row[..], write))
    }

    /// Every write, in key order.
    pub fn writes(&self) -> impl Iterator<Item = (&[u8], &Write)> {
        self.writes.iter().map(|(row, write)| (&row[..], write))
    }

    /// Every cleared prefix.
    pub fn cleared(&self) -> impl Iterator<Item = &[u8]> {
        self.cleared.iter().map(Vec::as_slice)
    }

    /// This epoch's writes to rows in `[start, end)`, in key order.
    pub fn writes_between<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Write)> + 'a {
        self.writes
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .map(|(row, write)| (&row[..], write))
    }

    /// The cleared prefixes in `[start, end)`.
    pub fn cleared_between<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.cleared
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .map(Vec::as_slice)
    }
}

/// One epoch's writes to every state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overlay {
    states: BTreeMap<StateId, StateOverlay>,
}

impl Overlay {
    /// The writes to `state`, if any.
    pub fn state(&self, state: StateId) -> Option<&StateOverlay> {
        self.states.get(&state)
    }

    /// The writes to `state`, created on first use.
    pub fn state_mut(&mut self, state: StateId) -> &mut StateOverlay {
        self.states.entry(state).or_default()
    }

    /// Every state this overlay wrote.
    pub fn states(&self) -> impl Iterator<Item = (StateId, &StateOverlay)> {
        self.states.iter().map(|(id, overlay)| (*id, overlay))
    }

    /// How many rows this epoch wrote, over every state.
    pub fn rows(&self) -> usize {
        self.states.values().map(StateOverlay::rows).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_folds_into_put_delete_and_earlier_appends() {
        let mut o = StateOverlay::default();
        let bytes = SmallBytes::from_slice;
        o.append(b"a", b"1");
        o.append(b"a", b"2");
        assert_eq!(o.get(b"a"), Some(&Write::Append(bytes(b"12"))));
        o.put(b"b", b"x");
        o.append(b"b", b"y");
        assert_eq!(o.get(b"b"), Some(&Write::Put(bytes(b"xy"))));
        o.delete(b"c");
        o.append(b"c", b"z");
        assert_eq!(o.get(b"c"), Some(&Write::Put(bytes(b"z"))));
    }

    #[test]
    fn clear_prefix_drops_earlier_writes_but_not_later_ones() {
        let mut o = StateOverlay::default();
        o.put(b"pu1", b"1");
        o.put(b"q", b"keep");
        o.clear_prefix(b"p");
        o.put(b"pu2", b"2");
        assert_eq!(o.get(b"pu1"), None);
        assert!(o.is_cleared(b"p"));
        let under: Vec<_> = o.writes_under(b"p").map(|(r, _)| r.to_vec()).collect();
        assert_eq!(under, vec![b"pu2".to_vec()]);
        assert_eq!(
            o.get(b"q"),
            Some(&Write::Put(SmallBytes::from_slice(b"keep")))
        );
    }
}
