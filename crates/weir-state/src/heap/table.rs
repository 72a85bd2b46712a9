//! The heap backend's storage for one state: entries split per key group and,
//! within a key group, into hash buckets of bounded size, each behind an
//! [`Arc`] so a snapshot shares them and the first write after it copies only
//! the bucket it touches (copy-on-write, B1).
//!
//! This module knows nothing of epochs or state kinds: it stores a payload `P`
//! and an epoch tag per (key, namespace) and leaves their meaning to the
//! backend.

use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use hashbrown::hash_table::{Entry, OccupiedEntry};
use weir_types::Epoch;

use crate::bytes::SmallBytes;

/// Entries per bucket above which a key group doubles its bucket count; it
/// bounds what the first write after a snapshot copies.
const MAX_BUCKET_LEN: usize = 1024;

/// The hash seed: fixed, so bucket layouts are reproducible across runs.
const HASH_SEED: u64 = 0x5745_4952_5354_4154;

/// The address of an entry within a state, with its hash computed once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotKey<'a> {
    key: &'a [u8],
    namespace: &'a [u8],
    hash: u64,
}

impl<'a> SlotKey<'a> {
    /// Hashes `key` and `namespace` (length-prefixed, so the split between
    /// them is part of the identity).
    pub(crate) fn new(key: &'a [u8], namespace: &'a [u8]) -> Self {
        let hash = FixedState::with_seed(HASH_SEED).hash_one((key, namespace));
        Self {
            key,
            namespace,
            hash,
        }
    }
}

/// One entry: its key and namespace (concatenated, inline when short), the
/// payload, and the epoch of its last write (none for restored entries).
///
/// Kept small (80 bytes for byte payloads): the tables hold slots inline, so
/// a snapshot's walk and a restore move memory in proportion to the slot's
/// size, and so does the backend's footprint. The hash is therefore not
/// stored (it is computed again when a bucket grows or splits) and the tag
/// is a bare number.
#[derive(Debug, Clone)]
pub(crate) struct Slot<P> {
    bytes: SmallBytes,
    /// The stored data.
    pub(crate) payload: P,
    /// The epoch that last wrote the entry, or [`UNTAGGED`].
    tag: u64,
    key_len: u32,
}

/// The tag of an entry no epoch wrote (a restored one). Epochs count up from
/// zero, one per micro-epoch, so none reaches it.
const UNTAGGED: u64 = u64::MAX;

impl<P> Slot<P> {
    fn new(k: SlotKey<'_>, payload: P, tag: Option<Epoch>) -> Self {
        let mut slot = Self::restored(k.key, k.namespace, payload);
        slot.set_tag(tag);
        slot
    }

    /// The epoch that last wrote the entry; `None` when it came from a restore.
    pub(crate) fn tag(&self) -> Option<Epoch> {
        (self.tag != UNTAGGED).then_some(Epoch(self.tag))
    }

    /// Records `tag` as the epoch that last wrote the entry.
    pub(crate) fn set_tag(&mut self, tag: Option<Epoch>) {
        debug_assert_ne!(tag, Some(Epoch(UNTAGGED)), "an epoch past every real one");
        self.tag = tag.map_or(UNTAGGED, |epoch| epoch.0);
    }

    /// The payload and the tag, the entry dropped.
    pub(crate) fn into_payload_and_tag(self) -> (P, Option<Epoch>) {
        let tag = self.tag();
        (self.payload, tag)
    }

    /// The hash of the entry's key and namespace.
    fn hash(&self) -> u64 {
        SlotKey::new(self.key(), self.namespace()).hash
    }

    /// A restored entry (no epoch wrote it) at `key` and `namespace`, not
    /// hashed yet: [`StateTable::extend_group`] hashes it on the thread that
    /// inserts it.
    pub(crate) fn restored(key: &[u8], namespace: &[u8], payload: P) -> Self {
        let mut bytes = SmallBytes::from_slice(key);
        bytes.extend(namespace);
        Self {
            bytes,
            payload,
            tag: UNTAGGED,
            key_len: u32::try_from(key.len()).expect("keys are shorter than 4 GiB"),
        }
    }

    /// The encoded key.
    pub(crate) fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    /// The encoded namespace.
    pub(crate) fn namespace(&self) -> &[u8] {
        &self.bytes[self.key_len as usize..]
    }

    /// The address of this entry, to find it again later (undo logs).
    pub(crate) fn owned_key(&self) -> OwnedSlotKey {
        OwnedSlotKey {
            bytes: self.bytes.clone(),
            key_len: self.key_len as usize,
        }
    }

    #[inline]
    fn matches(&self, k: SlotKey<'_>) -> bool {
        self.is_at(k.key, k.namespace)
    }

    #[inline]
    fn is_at(&self, key: &[u8], namespace: &[u8]) -> bool {
        short_eq(self.key(), key) && short_eq(self.namespace(), namespace)
    }

    /// Whether `other` has the same key and namespace.
    fn same_address(&self, other: &Self) -> bool {
        self.key_len == other.key_len && short_eq(&self.bytes, &other.bytes)
    }
}

/// Whether `a` and `b` hold the same bytes. Keys are mostly a few bytes
/// long (an encoded number is 9, a namespace is often empty). Compared
/// through the C library's `memcmp`, as slice equality does, they were the
/// largest single cost of a lookup (16% of a native aggregate's samples,
/// with every entry in cache): a call, then masked vector loads, twice per
/// entry. Up to 16 bytes this compares at most two overlapping words.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| -> u64 {
        u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    let half = |bytes: &[u8], at: usize| -> u32 {
        u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
    };
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        _ => a == b,
    }
}

/// Hints the CPU to bring `value`'s cache lines (its first and its last)
/// into cache; a hint, never a fault, whatever the address.
#[inline]
fn prefetch_read<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = std::ptr::from_ref(value).cast::<i8>();
        let last = first.wrapping_add(size_of::<T>().saturating_sub(1));
        // SAFETY: SSE is part of x86-64's baseline, and a prefetch reads
        // nothing the program sees: it cannot fault, whatever the address.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(last);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// A [`SlotKey`] that owns its bytes (kept in undo logs). It keeps no hash:
/// every epoch's first write to an entry makes one, and only a discarded
/// epoch looks its entries up again.
#[derive(Debug, Clone)]
pub(crate) struct OwnedSlotKey {
    bytes: SmallBytes,
    key_len: usize,
}

impl OwnedSlotKey {
    /// Borrows it as a lookup key.
    pub(crate) fn as_key(&self) -> SlotKey<'_> {
        let (key, namespace) = self.bytes.split_at(self.key_len);
        SlotKey::new(key, namespace)
    }
}

type Bucket<P> = HashTable<Slot<P>>;

/// Where an entry lay when a lookup found it: its bucket within the key
/// group and its index in that bucket. A write of the same key soon after
/// goes straight there, with no hash and no probe, if the entry still lies
/// there: inserts, removals and splits in between may move entries, so the
/// write checks the key it finds first, and a hint is never wrong, only
/// stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHint {
    bucket: u32,
    index: u32,
}

/// The entries of one key group of one state.
#[derive(Debug, Clone)]
pub(crate) struct GroupTable<P> {
    /// A power-of-two number of buckets, chosen by hash bits 32.. (hashbrown
    /// uses the low bits and the top 7 inside a bucket).
    buckets: Vec<Arc<Bucket<P>>>,
    len: usize,
}

impl<P: Clone> GroupTable<P> {
    fn new() -> Self {
        Self {
            buckets: vec![Arc::new(HashTable::new())],
            len: 0,
        }
    }

    fn bucket_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.buckets.len() - 1)
    }

    fn get(&self, k: SlotKey<'_>) -> Option<&Slot<P>> {
        self.buckets[self.bucket_index(k.hash)].find(k.hash, |s| s.matches(k))
    }

    /// The entry at `k` and where it lies.
    fn find(&self, k: SlotKey<'_>) -> Option<(&Slot<P>, Option<EntryHint>)> {
        let b = self.bucket_index(k.hash);
        let bucket = &self.buckets[b];
        let index = bucket.find_bucket_index(k.hash, |s| s.matches(k))?;
        let hint = match (u32::try_from(b), u32::try_from(index)) {
            (Ok(bucket), Ok(index)) => Some(EntryHint { bucket, index }),
            _ => None,
        };
        Some((bucket.get_bucket(index)?, hint))
    }

    /// Whatever entry lies where `hint` says.
    fn slot_at(&self, hint: EntryHint) -> Option<&Slot<P>> {
        self.buckets
            .get(hint.bucket as usize)?
            .get_bucket(hint.index as usize)
    }

    /// The entry at `key` and `namespace` for writing, if it lies where
    /// `hint` says (copy-on-write: a bucket a snapshot shares is copied
    /// first). The key is checked in the copy too, which need not keep
    /// entries at their indices.
    fn slot_at_mut(
        &mut self,
        hint: EntryHint,
        key: &[u8],
        namespace: &[u8],
    ) -> Option<&mut Slot<P>> {
        Arc::make_mut(self.buckets.get_mut(hint.bucket as usize)?)
            .get_bucket_mut(hint.index as usize)
            .filter(|slot| slot.is_at(key, namespace))
    }

    /// Starts loading the first slot whose control byte matches `k`'s hash
    /// (almost always `k`'s own entry, if it has one) without waiting for it.
    fn prefetch(&self, k: SlotKey<'_>) {
        if let Some(slot) = self.buckets[self.bucket_index(k.hash)]
            .iter_hash(k.hash)
            .next()
        {
            prefetch_read(slot);
        }
    }

    /// The bucket of `k`, copied first if a snapshot shares it.
    fn bucket_mut(&mut self, hash: u64) -> &mut Bucket<P> {
        let i = self.bucket_index(hash);
        Arc::make_mut(&mut self.buckets[i])
    }

    /// Doubles the bucket count, moving (or, for buckets a snapshot shares,
    /// copying) every entry to its new bucket.
    fn split(&mut self) {
        let old = std::mem::take(&mut self.buckets);
        let count = old.len() * 2;
        // Sized for their share, so filling them rehashes nothing (slots keep
        // no hash).
        let share = self.len.div_ceil(count);
        let mut tables: Vec<Bucket<P>> = (0..count)
            .map(|_| HashTable::with_capacity(share))
            .collect();
        for bucket in old {
            for slot in Arc::unwrap_or_clone(bucket) {
                let hash = slot.hash();
                let i = (hash >> 32) as usize & (count - 1);
                tables[i].insert_unique(hash, slot, Slot::hash);
            }
        }
        self.buckets = tables.into_iter().map(Arc::new).collect();
    }

    /// Makes room for `additional` more entries: the buckets they need at
    /// once, each sized for its share, so inserting them neither splits the
    /// key group nor grows a bucket (bar an unlucky hash spread).
    fn reserve(&mut self, additional: usize) {
        let len = self.len + additional;
        while len > self.buckets.len() * MAX_BUCKET_LEN {
            self.split();
        }
        let share = len.div_ceil(self.buckets.len());
        for bucket in &mut self.buckets {
            let bucket = Arc::make_mut(bucket);
            bucket.reserve(share.saturating_sub(bucket.len()), Slot::hash);
        }
    }

    /// Iterates over every entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot<P>> {
        self.buckets.iter().flat_map(|b| b.iter())
    }
}

/// An entry of a [`StateTable`] found for writing (see
/// [`StateTable::entry`]).
pub(crate) struct SlotEntry<'a, P> {
    entry: OccupiedEntry<'a, Slot<P>>,
    len: &'a mut usize,
    /// Whether the lookup inserted it.
    pub(crate) inserted: bool,
}

impl<'a, P> SlotEntry<'a, P> {
    /// The entry.
    pub(crate) fn slot(&mut self) -> &mut Slot<P> {
        self.entry.get_mut()
    }

    /// The entry, for as long as the table's borrow.
    pub(crate) fn into_slot(self) -> &'a mut Slot<P> {
        self.entry.into_mut()
    }

    /// Takes the entry out of the table.
    pub(crate) fn remove(self) -> Slot<P> {
        *self.len -= 1;
        self.entry.remove().0
    }
}

/// All the entries of one state: one [`GroupTable`] per key group of the
/// backend's range, each shared with snapshots through an [`Arc`].
#[derive(Debug, Clone)]
pub(crate) struct StateTable<P> {
    groups: Vec<Arc<GroupTable<P>>>,
}

impl<P: Clone> StateTable<P> {
    /// An empty table for `key_groups` key groups.
    pub(crate) fn new(key_groups: usize) -> Self {
        Self {
            groups: (0..key_groups)
                .map(|_| Arc::new(GroupTable::new()))
                .collect(),
        }
    }

    /// The entry at `k` in key group index `group`.
    pub(crate) fn get(&self, group: usize, k: SlotKey<'_>) -> Option<&Slot<P>> {
        self.groups[group].get(k)
    }

    /// The entry at `k` in key group index `group`, and where it lies (for
    /// [`get_mut_at`](Self::get_mut_at)).
    pub(crate) fn find(
        &self,
        group: usize,
        k: SlotKey<'_>,
    ) -> Option<(&Slot<P>, Option<EntryHint>)> {
        self.groups[group].find(k)
    }

    /// The entry at `key` and `namespace` in key group index `group` for
    /// writing (copy-on-write), if it still lies where `hint` says.
    pub(crate) fn get_mut_at(
        &mut self,
        group: usize,
        hint: EntryHint,
        key: &[u8],
        namespace: &[u8],
    ) -> Option<&mut Slot<P>> {
        // Checked before any copy, so a stale hint copies nothing a
        // snapshot shares.
        if !self.groups[group].slot_at(hint)?.is_at(key, namespace) {
            return None;
        }
        Arc::make_mut(&mut self.groups[group]).slot_at_mut(hint, key, namespace)
    }

    /// Asks the CPU to load whatever entry lies where `hint` says: no hash,
    /// and the bucket's control bytes are those its lookup read.
    pub(crate) fn prefetch_at(&self, group: usize, hint: EntryHint) {
        if let Some(slot) = self.groups[group].slot_at(hint) {
            prefetch_read(slot);
        }
    }

    /// Asks the CPU to load the entry at `k` ahead of its lookup. A batch's
    /// keys are random, so each lookup's first touch of its entry waits for
    /// memory; prefetching a few rows ahead overlaps those waits.
    pub(crate) fn prefetch(&self, group: usize, k: SlotKey<'_>) {
        self.groups[group].prefetch(k);
    }

    /// The entry at `k` for writing (copy-on-write).
    pub(crate) fn get_mut(&mut self, group: usize, k: SlotKey<'_>) -> Option<&mut Slot<P>> {
        let g = Arc::make_mut(&mut self.groups[group]);
        g.bucket_mut(k.hash).find_mut(k.hash, |s| s.matches(k))
    }

    /// The entry at `k`, inserted with `make()` and tag `None` if absent;
    /// the flag says whether it was inserted.
    pub(crate) fn get_or_insert(
        &mut self,
        group: usize,
        k: SlotKey<'_>,
        make: impl FnOnce() -> P,
    ) -> (&mut Slot<P>, bool) {
        let entry = self.entry(group, k, make);
        let inserted = entry.inserted;
        (entry.into_slot(), inserted)
    }

    /// The entry at `k` for writing, inserted with `make()` and tag `None`
    /// if absent; found with one probe, which also serves removing it.
    pub(crate) fn entry(
        &mut self,
        group: usize,
        k: SlotKey<'_>,
        make: impl FnOnce() -> P,
    ) -> SlotEntry<'_, P> {
        let g = self.group_for_insert(group);
        let i = g.bucket_index(k.hash);
        // Borrow the bucket and the count apart: inserts and removals update both.
        let GroupTable { buckets, len } = g;
        let bucket = Arc::make_mut(&mut buckets[i]);
        match bucket.entry(k.hash, |s| s.matches(k), Slot::hash) {
            Entry::Occupied(entry) => SlotEntry {
                entry,
                len,
                inserted: false,
            },
            Entry::Vacant(v) => {
                *len += 1;
                SlotEntry {
                    entry: v.insert(Slot::new(k, make(), None)),
                    len,
                    inserted: true,
                }
            }
        }
    }

    /// Inserts or replaces the entry at `k` with `payload` and `tag`.
    pub(crate) fn set(&mut self, group: usize, k: SlotKey<'_>, payload: P, tag: Option<Epoch>) {
        let g = self.group_for_insert(group);
        let i = g.bucket_index(k.hash);
        // Borrow the bucket and the count apart: a vacant entry updates both.
        let bucket = Arc::make_mut(&mut g.buckets[i]);
        match bucket.entry(k.hash, |s| s.matches(k), Slot::hash) {
            Entry::Occupied(mut o) => {
                let slot = o.get_mut();
                slot.payload = payload;
                slot.set_tag(tag);
            }
            Entry::Vacant(v) => {
                g.len += 1;
                v.insert(Slot::new(k, payload, tag));
            }
        }
    }

    /// Takes key group `group` out as a table of that one key group (index
    /// 0), leaving it empty here, so another thread can fill it while this
    /// table goes on; nothing may write the group here until
    /// [`attach_group`](Self::attach_group) puts it back.
    pub(crate) fn detach_group(&mut self, group: usize) -> Self {
        let taken = std::mem::replace(&mut self.groups[group], Arc::new(GroupTable::new()));
        Self {
            groups: vec![taken],
        }
    }

    /// Puts back as key group `group` the one key group of `detached` (from
    /// [`detach_group`](Self::detach_group)).
    pub(crate) fn attach_group(&mut self, group: usize, detached: Self) {
        let [taken] = <[_; 1]>::try_from(detached.groups)
            .unwrap_or_else(|_| unreachable!("a detached table holds one key group"));
        self.groups[group] = taken;
    }

    /// Inserts `slots` into key group `group`, each replacing an entry with
    /// its key; the key group is sized for all of them first.
    pub(crate) fn extend_group(
        &mut self,
        group: usize,
        slots: impl ExactSizeIterator<Item = Slot<P>>,
    ) {
        let g = Arc::make_mut(&mut self.groups[group]);
        g.reserve(slots.len());
        for slot in slots {
            let hash = slot.hash();
            let i = g.bucket_index(hash);
            // Borrow the bucket and the count apart: a vacant entry updates both.
            let bucket = Arc::make_mut(&mut g.buckets[i]);
            match bucket.entry(hash, |s| s.same_address(&slot), Slot::hash) {
                Entry::Occupied(mut o) => *o.get_mut() = slot,
                Entry::Vacant(v) => {
                    g.len += 1;
                    v.insert(slot);
                }
            }
        }
    }

    /// Key group `group` for writing, split first if it may grow past its
    /// bucket bound.
    fn group_for_insert(&mut self, group: usize) -> &mut GroupTable<P> {
        let g = Arc::make_mut(&mut self.groups[group]);
        if g.len >= g.buckets.len() * MAX_BUCKET_LEN {
            g.split();
        }
        g
    }

    /// Removes and returns the entry at `k`.
    pub(crate) fn remove(&mut self, group: usize, k: SlotKey<'_>) -> Option<Slot<P>> {
        // Look first so a miss copies nothing a snapshot shares.
        self.get(group, k)?;
        let g = Arc::make_mut(&mut self.groups[group]);
        let slot = g
            .bucket_mut(k.hash)
            .find_entry(k.hash, |s| s.matches(k))
            .ok()
            .map(|o| o.remove().0);
        g.len -= usize::from(slot.is_some());
        slot
    }

    /// Shares every key group with a snapshot (no entry is copied).
    pub(crate) fn share(&self) -> Vec<Arc<GroupTable<P>>> {
        self.groups.clone()
    }

    /// The number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        i.to_le_bytes().to_vec()
    }

    #[test]
    fn short_eq_agrees_with_slice_equality() {
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            assert!(short_eq(&a, &a.clone()), "equal, {len} bytes");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!short_eq(&a, &b), "byte {at} of {len} differs");
            }
            let longer: Vec<u8> = a.iter().copied().chain([0]).collect();
            assert!(!short_eq(&a, &longer), "{len} against {} bytes", len + 1);
        }
    }

    #[test]
    fn a_slot_of_bytes_takes_80_bytes() {
        assert_eq!(std::mem::size_of::<Slot<SmallBytes>>(), 80);
    }

    #[test]
    fn tags_round_trip_and_restored_entries_have_none() {
        let mut slot = Slot::restored(b"k", b"", 0_u8);
        assert_eq!(slot.tag(), None);
        slot.set_tag(Some(Epoch(7)));
        assert_eq!(slot.tag(), Some(Epoch(7)));
        assert_eq!(slot.into_payload_and_tag(), (0, Some(Epoch(7))));
    }

    #[test]
    fn key_and_namespace_boundary_is_part_of_identity() {
        let mut t = StateTable::<u8>::new(1);
        t.get_or_insert(0, SlotKey::new(b"ab", b"c"), || 1);
        t.get_or_insert(0, SlotKey::new(b"a", b"bc"), || 2);
        assert_eq!(t.len(), 2);
        let s = t.get(0, SlotKey::new(b"ab", b"c")).expect("present");
        assert_eq!(
            (s.key(), s.namespace(), s.payload),
            (&b"ab"[..], &b"c"[..], 1)
        );
    }

    #[test]
    fn groups_split_and_keep_every_entry() {
        let mut t = StateTable::<u32>::new(1);
        let n = MAX_BUCKET_LEN as u32 * 5;
        for i in 0..n {
            let (s, inserted) = t.get_or_insert(0, SlotKey::new(&key(i), b""), || i);
            assert!(inserted);
            assert_eq!(s.payload, i);
        }
        assert!(t.groups[0].buckets.len() >= 4);
        assert_eq!(t.len(), n as usize);
        for i in 0..n {
            let k = key(i);
            assert_eq!(t.get(0, SlotKey::new(&k, b"")).map(|s| s.payload), Some(i));
        }
        assert!(
            t.groups[0]
                .buckets
                .iter()
                .all(|b| b.len() <= MAX_BUCKET_LEN * 2)
        );
    }

    #[test]
    fn shared_groups_do_not_see_later_writes() {
        let mut t = StateTable::<u32>::new(2);
        for i in 0..3000 {
            t.get_or_insert((i % 2) as usize, SlotKey::new(&key(i), b""), || i);
        }
        let shared = t.share();
        let k7 = key(7);
        let k8 = key(8);
        t.get_mut(1, SlotKey::new(&k7, b""))
            .expect("present")
            .payload = 70;
        t.remove(0, SlotKey::new(&k8, b""));
        for i in 3000..6000 {
            t.get_or_insert((i % 2) as usize, SlotKey::new(&key(i), b""), || i);
        }
        let view = |g: usize, k: &[u8]| shared[g].get(SlotKey::new(k, b"")).map(|s| s.payload);
        assert_eq!(view(1, &k7), Some(7));
        assert_eq!(view(0, &k8), Some(8));
        assert_eq!(shared.iter().map(|g| g.iter().count()).sum::<usize>(), 3000);
        assert_eq!(t.len(), 5999);
    }

    #[test]
    fn remove_of_absent_entry_copies_nothing() {
        let mut t = StateTable::<u32>::new(1);
        t.get_or_insert(0, SlotKey::new(b"a", b""), || 1);
        let shared = t.share();
        assert!(t.remove(0, SlotKey::new(b"b", b"")).is_none());
        assert!(Arc::ptr_eq(&shared[0], &t.groups[0]));
    }
}
