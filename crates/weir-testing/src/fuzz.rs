//! What the fuzz-style property tests share: how many cases they run and
//! how they mutate valid files before feeding them to the readers of files
//! Weir did not necessarily write.

use proptest::prelude::*;
use proptest::sample::Index;

/// How many cases each fuzz property runs: `WEIR_FUZZ_CASES` when set (for
/// a long run), else 1024, which takes well under a second in a release
/// build and suits CI.
pub fn fuzz_cases() -> u32 {
    std::env::var("WEIR_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

/// Damage to a file: bytes overwritten at random places, then maybe a cut.
#[derive(Debug, Clone)]
pub struct Mutation {
    edits: Vec<(Index, u8)>,
    cut: Option<Index>,
}

impl Mutation {
    /// Up to `max_edits` overwritten bytes and, half the time, a cut.
    pub fn strategy(max_edits: usize) -> impl Strategy<Value = Self> {
        (
            proptest::collection::vec((any::<Index>(), any::<u8>()), 0..=max_edits),
            proptest::option::of(any::<Index>()),
        )
            .prop_map(|(edits, cut)| Self { edits, cut })
    }

    /// `bytes` with the damage done.
    pub fn apply(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        if out.is_empty() {
            return out;
        }
        for (at, byte) in &self.edits {
            let i = at.index(out.len());
            out[i] = *byte;
        }
        if let Some(cut) = &self.cut {
            out.truncate(cut.index(out.len()));
        }
        out
    }
}
