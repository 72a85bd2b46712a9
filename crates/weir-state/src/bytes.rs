//! A byte string stored inline when short, so that a small key or value costs
//! no allocation of its own: writing it makes no heap block, freeing it frees
//! none, and reading it costs no pointer chase (the usual cache miss of a hash
//! lookup).
//!
//! Only storage: it does not know what the bytes mean. The heap backend's
//! tables and the RocksDB backend's in-memory epoch versions keep their keys
//! and values in it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The longest byte string kept inline: 30 keeps the type at 32 bytes (a
/// `Vec` and the variant tag) and holds a small record, such as a struct of
/// a few int64 fields (9 bytes each when nullable). A value just past the
/// inline size costs a heap block of its own and a cache miss on every read,
/// snapshot and restore, so 15 (a 24-byte type) was a false economy once
/// values are more than one number.
const INLINE: usize = 30;

/// Bytes kept inline up to 30 long, on the heap beyond. Compares, orders
/// and hashes as the byte slice it holds.
#[derive(Debug, Clone)]
pub struct SmallBytes(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// Short bytes: `buf[..len]`.
    Inline { len: u8, buf: [u8; INLINE] },
    /// Long bytes, or bytes that were long once (capacity is reused).
    Heap(Vec<u8>),
}

impl Default for SmallBytes {
    fn default() -> Self {
        Self(Repr::Inline {
            len: 0,
            buf: [0; INLINE],
        })
    }
}

impl SmallBytes {
    /// A copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut s = Self::default();
        s.extend(bytes);
        s
    }

    /// Replaces the contents with `bytes`, reusing heap capacity.
    pub fn set(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            Repr::Heap(v) => {
                v.clear();
                v.extend_from_slice(bytes);
            }
            Repr::Inline { len, .. } => {
                *len = 0;
                self.extend(bytes);
            }
        }
    }

    /// Appends `bytes`, moving to the heap when they no longer fit inline.
    pub fn extend(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            Repr::Heap(v) => v.extend_from_slice(bytes),
            Repr::Inline { len, buf } => {
                let old = usize::from(*len);
                let new = old + bytes.len();
                if new <= INLINE {
                    buf[old..new].copy_from_slice(bytes);
                    *len = new as u8;
                } else {
                    let mut v = Vec::with_capacity(new);
                    v.extend_from_slice(&buf[..old]);
                    v.extend_from_slice(bytes);
                    self.0 = Repr::Heap(v);
                }
            }
        }
    }
}

impl Deref for SmallBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }
}

impl AsRef<[u8]> for SmallBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Borrow<[u8]> for SmallBytes {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl From<&[u8]> for SmallBytes {
    fn from(bytes: &[u8]) -> Self {
        Self::from_slice(bytes)
    }
}

impl PartialEq for SmallBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for SmallBytes {}

impl PartialOrd for SmallBytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallBytes {
    fn cmp(&self, other: &Self) -> Ordering {
        (**self).cmp(&**other)
    }
}

impl Hash for SmallBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_size_of_a_vec_and_its_tag() {
        assert_eq!(std::mem::size_of::<SmallBytes>(), 32);
    }

    #[test]
    fn grows_from_inline_to_heap_and_keeps_contents() {
        let mut b = SmallBytes::from_slice(b"0123456789");
        assert!(matches!(b.0, Repr::Inline { .. }));
        b.extend(b"abcdefghijklmnopqrst");
        assert!(matches!(b.0, Repr::Inline { len: 30, .. }));
        b.extend(b"u");
        assert!(matches!(b.0, Repr::Heap(_)));
        assert_eq!(&*b, b"0123456789abcdefghijklmnopqrstu");
        b.set(b"x");
        assert_eq!(&*b, b"x");
        let mut s = SmallBytes::default();
        assert!(s.is_empty());
        s.set(&[7; 40]);
        assert_eq!(&*s, &[7; 40][..]);
    }

    #[test]
    fn compares_by_content_whatever_the_storage() {
        let mut once_long = SmallBytes::from_slice(&[1; 40]);
        once_long.set(b"ab");
        assert!(matches!(once_long.0, Repr::Heap(_)));
        let short = SmallBytes::from_slice(b"ab");
        assert_eq!(once_long, short);
        assert!(SmallBytes::from_slice(b"a") < short);
        assert!(short < SmallBytes::from_slice(b"b"));
        let borrowed: &[u8] = short.borrow();
        assert_eq!(borrowed, b"ab");
    }
}
