//! A byte string stored inline when short, so that reading a small key or
//! value costs no pointer chase (the usual cache miss of a hash lookup).
//!
//! Only storage: it does not know what the bytes mean.

use std::ops::Deref;

/// The longest byte string kept inline: 30 keeps the type at 32 bytes (a
/// `Vec` and the variant tag) and holds a small record, such as a struct of
/// a few int64 fields (9 bytes each when nullable). A value just past the
/// inline size costs a heap block of its own and a cache miss on every read,
/// snapshot and restore, so 15 (a 24-byte type) was a false economy once
/// values are more than one number.
const INLINE: usize = 30;

/// Bytes kept inline up to [`INLINE`] long, on the heap beyond.
#[derive(Debug, Clone)]
pub(crate) enum SmallBytes {
    /// Short bytes: `buf[..len]`.
    Inline {
        /// The length.
        len: u8,
        /// The storage.
        buf: [u8; INLINE],
    },
    /// Long bytes, or bytes that were long once (capacity is reused).
    Heap(Vec<u8>),
}

impl Default for SmallBytes {
    fn default() -> Self {
        Self::Inline {
            len: 0,
            buf: [0; INLINE],
        }
    }
}

impl SmallBytes {
    /// A copy of `bytes`.
    pub(crate) fn from_slice(bytes: &[u8]) -> Self {
        let mut s = Self::default();
        s.extend(bytes);
        s
    }

    /// Replaces the contents with `bytes`, reusing heap capacity.
    pub(crate) fn set(&mut self, bytes: &[u8]) {
        match self {
            Self::Heap(v) => {
                v.clear();
                v.extend_from_slice(bytes);
            }
            Self::Inline { len, .. } => {
                *len = 0;
                self.extend(bytes);
            }
        }
    }

    /// Appends `bytes`, moving to the heap when they no longer fit inline.
    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        match self {
            Self::Heap(v) => v.extend_from_slice(bytes),
            Self::Inline { len, buf } => {
                let old = usize::from(*len);
                let new = old + bytes.len();
                if new <= INLINE {
                    buf[old..new].copy_from_slice(bytes);
                    *len = new as u8;
                } else {
                    let mut v = Vec::with_capacity(new);
                    v.extend_from_slice(&buf[..old]);
                    v.extend_from_slice(bytes);
                    *self = Self::Heap(v);
                }
            }
        }
    }
}

impl Deref for SmallBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Inline { len, buf } => &buf[..usize::from(*len)],
            Self::Heap(v) => v,
        }
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
        assert!(matches!(b, SmallBytes::Inline { .. }));
        b.extend(b"abcdefghijklmnopqrst");
        assert!(matches!(b, SmallBytes::Inline { len: 30, .. }));
        b.extend(b"u");
        assert!(matches!(b, SmallBytes::Heap(_)));
        assert_eq!(&*b, b"0123456789abcdefghijklmnopqrstu");
        b.set(b"x");
        assert_eq!(&*b, b"x");
        let mut s = SmallBytes::default();
        assert!(s.is_empty());
        s.set(&[7; 40]);
        assert_eq!(&*s, &[7; 40][..]);
    }
}
