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
use weir_types::StateKind;

use crate::hashed_rows::HashedRows;

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
#[derive(Debug, Clone)]
pub(crate) struct StateOverlay {
    writes: Rows,
    cleared: BTreeSet<Vec<u8>>,
}

/// Rows and values are inline when short, so an epoch's writes cost about
/// one allocation per B-tree node or vector growth, not two per row, to
/// make and to free (once the epoch is folded: small epochs on the task's
/// thread, large ones on the fold thread).
#[derive(Debug, Clone)]
enum Rows {
    /// Value and list states: rows found by hash (see `hashed_rows.rs`).
    Hashed(HashedRows),
    /// Map states: reads and clears of a key's map work on row prefixes.
    Ordered(BTreeMap<SmallBytes, Write>),
}

impl StateOverlay {
    /// The writes of an epoch to a state of `kind`.
    pub fn new(kind: StateKind) -> Self {
        let writes = match kind {
            StateKind::Map => Rows::Ordered(BTreeMap::new()),
            _ => Rows::Hashed(HashedRows::default()),
        };
        Self {
            writes,
            cleared: BTreeSet::new(),
        }
    }

    /// The write to `row`, if this epoch wrote it.
    pub fn get(&self, row: &[u8]) -> Option<&Write> {
        match &self.writes {
            Rows::Hashed(rows) => rows.get(row),
            Rows::Ordered(rows) => rows.get(row),
        }
    }

    fn get_mut(&mut self, row: &[u8]) -> Option<&mut Write> {
        match &mut self.writes {
            Rows::Hashed(rows) => rows.get_mut(row),
            Rows::Ordered(rows) => rows.get_mut(row),
        }
    }

    fn insert(&mut self, row: &[u8], write: Write) {
        match &mut self.writes {
            Rows::Hashed(rows) => rows.insert(row, write),
            Rows::Ordered(rows) => {
                rows.insert(row.into(), write);
            }
        }
    }

    /// How many rows this epoch wrote.
    pub fn rows(&self) -> usize {
        match &self.writes {
            Rows::Hashed(rows) => rows.len(),
            Rows::Ordered(rows) => rows.len(),
        }
    }

    /// Whether this epoch cleared every map entry under `prefix`.
    pub fn is_cleared(&self, prefix: &[u8]) -> bool {
        self.cleared.contains(prefix)
    }

    /// Sets `row` to `value`.
    pub fn put(&mut self, row: &[u8], value: &[u8]) {
        self.insert(row, Write::Put(SmallBytes::from_slice(value)));
    }

    /// Removes `row`.
    pub fn delete(&mut self, row: &[u8]) {
        self.insert(row, Write::Delete);
    }

    /// Appends list `items` (a list payload) to `row`.
    pub fn append(&mut self, row: &[u8], items: &[u8]) {
        match self.get_mut(row) {
            None => self.insert(row, Write::Append(SmallBytes::from_slice(items))),
            Some(Write::Put(existing) | Write::Append(existing)) => existing.extend(items),
            Some(write @ Write::Delete) => *write = Write::Put(SmallBytes::from_slice(items)),
        }
    }

    /// Removes every map entry under `prefix` (a map's row key for one key
    /// and namespace), in this epoch and below. Map states only.
    pub fn clear_prefix(&mut self, prefix: &[u8]) {
        let Rows::Ordered(rows) = &mut self.writes else {
            unreachable!("only map states clear row prefixes");
        };
        let doomed: Vec<SmallBytes> = rows
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(row, _)| row.starts_with(prefix))
            .map(|(row, _)| row.clone())
            .collect();
        for row in doomed {
            rows.remove(&row);
        }
        self.cleared.insert(prefix.to_vec());
    }

    /// This epoch's writes to rows starting with `prefix`, in key order.
    /// Map states only.
    pub fn writes_under<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Write)> + 'a {
        let Rows::Ordered(rows) = &self.writes else {
            unreachable!("only map states read row prefixes");
        };
        rows.range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(row, _)| row.starts_with(prefix))
            .map(|(row, write)| (&row[..], write))
    }

    /// Every write, in key order.
    pub fn writes(&self) -> Box<dyn Iterator<Item = (&[u8], &Write)> + '_> {
        match &self.writes {
            Rows::Hashed(rows) => Box::new(rows.in_order()),
            Rows::Ordered(rows) => Box::new(rows.iter().map(|(row, write)| (&row[..], write))),
        }
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
    ) -> Box<dyn Iterator<Item = (&'a [u8], &'a Write)> + 'a> {
        match &self.writes {
            Rows::Hashed(rows) => Box::new(rows.between(start, end)),
            Rows::Ordered(rows) => Box::new(
                rows.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
                    .map(|(row, write)| (&row[..], write)),
            ),
        }
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

    /// The writes to `state`, a state of `kind`, created on first use.
    pub fn state_mut(&mut self, state: StateId, kind: StateKind) -> &mut StateOverlay {
        self.states
            .entry(state)
            .or_insert_with(|| StateOverlay::new(kind))
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
        let mut o = StateOverlay::new(StateKind::List);
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
        let mut o = StateOverlay::new(StateKind::Map);
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
