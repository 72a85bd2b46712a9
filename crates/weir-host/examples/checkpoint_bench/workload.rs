//! The benchmark's state: `n` int64 keys, one value state holding 16 bytes
//! per key, and the epochs that load it and later change a fraction of it.
//!
//! Values are a function of (key, round), so any restored key can be checked
//! against the round that last wrote it.

use std::path::Path;

use arrow_array::BinaryArray;
use weir_host::engine::Subtask;
use weir_host::{BackendSpec, KeyBatch, SubtaskSession, SubtaskSpec};
use weir_state::StateId;
use weir_types::{
    Attempt, Epoch, KeyGroup, MaxParallelism, OperatorUid, StateDescriptor, StateKind,
    SubtaskIndex, Value, ValueType, encode_key, encode_value, key_group_of,
};

use crate::error::{BenchError, Result};

/// Rows per `put_values` call, like a micro-batch of a running job.
const BATCH_ROWS: usize = 65_536;

/// The round number of the initial load (rounds of changes count from 1).
pub const LOAD_ROUND: u64 = 0;

/// The one value state every benchmark uses.
pub fn descriptor() -> Result<StateDescriptor> {
    Ok(StateDescriptor::new(
        "avg",
        StateKind::Value,
        ValueType::Binary,
    )?)
}

/// The key columns' types.
pub fn key_types() -> Vec<ValueType> {
    vec![ValueType::Int64]
}

/// The operator every benchmark runs.
pub fn operator() -> Result<OperatorUid> {
    Ok(OperatorUid::new("bench")?)
}

/// The only subtask of the benchmark operator on `backend`, opened under
/// `work` with the value state registered.
pub fn subtask(
    backend: BackendSpec,
    max: MaxParallelism,
    work: &Path,
) -> Result<(Subtask, StateId)> {
    let spec = SubtaskSpec {
        uid: operator()?,
        subtask: SubtaskIndex(0),
        parallelism: 1,
        max_parallelism: max,
        backend,
        key_types: None,
    };
    let mut subtask = Subtask::open(spec, work)?;
    let state = subtask.register_state(&descriptor()?)?;
    subtask.set_key_types(key_types())?;
    Ok((subtask, state))
}

/// Keys `0..n` encoded once: key groups and a flat buffer of fixed-width keys.
pub struct Keys {
    groups: Vec<u16>,
    encoded: Vec<u8>,
    width: usize,
}

impl Keys {
    /// Encodes keys `0..n` for `max` key groups.
    pub fn new(n: u64, max: MaxParallelism) -> Result<Self> {
        let types = key_types();
        let mut encoded = Vec::new();
        let mut groups = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        let mut width = None;
        for i in 0..n {
            let key = [Value::Int64(spread(i))];
            let before = encoded.len();
            encode_key(&key, &types, &mut encoded)?;
            let len = encoded.len() - before;
            if *width.get_or_insert(len) != len {
                return Err(BenchError::Usage(format!(
                    "int64 keys encode to different widths ({len} and {width:?}); the key \
                     buffer assumes one width"
                )));
            }
            groups.push(key_group_of(&key, max).0);
        }
        Ok(Self {
            groups,
            encoded,
            width: width.unwrap_or(0),
        })
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// The key group of key `i`.
    pub fn group(&self, i: usize) -> KeyGroup {
        KeyGroup(self.groups[i])
    }

    /// The encoded key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.encoded[i * self.width..(i + 1) * self.width]
    }

    /// A batch of the keys at `indices`.
    pub fn batch(&self, indices: &[usize]) -> KeyBatch {
        KeyBatch::from_pairs(indices.iter().map(|&i| (self.group(i), self.key(i))))
    }
}

/// Key `i`'s value: scattered over the int64 range, so keys are not
/// sorted by their number (as user keys are not).
fn spread(i: u64) -> i64 {
    i64::from_le_bytes(mix(i ^ 0x9e37_79b9_7f4a_7c15).to_le_bytes())
}

/// SplitMix64's finalizer: a cheap bijective scramble.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 16 payload bytes of key `i` as written in `round` (an 8-byte running
/// number like a sum, and the round like a count), encoded as the state's type.
pub fn value(i: usize, round: u64, out: &mut Vec<u8>) -> Result<()> {
    let mut payload = Vec::with_capacity(16);
    payload.extend_from_slice(&(mix(i as u64) % 1_000_000 + round).to_le_bytes());
    payload.extend_from_slice(&round.to_le_bytes());
    encode_value(&Value::Binary(payload), &ValueType::Binary, out)?;
    Ok(())
}

/// Which keys round `round` (>= 1) changes: every key whose index is
/// `round` modulo `1 / fraction`, so successive rounds change different keys.
pub fn changed_keys(n: usize, every: usize, round: u64) -> impl Iterator<Item = usize> {
    let offset = usize::try_from(round).unwrap_or(0) % every;
    (offset..n).step_by(every)
}

/// The last round `<= round` that wrote key `i` when round `r` changed the
/// keys of [`changed_keys`]`(n, every, r)`.
pub fn last_writer(i: usize, every: usize, round: u64) -> u64 {
    (1..=round)
        .rev()
        .find(|&r| usize::try_from(r).unwrap_or(0) % every == i % every)
        .unwrap_or(LOAD_ROUND)
}

/// Writes `indices` (in batches) with their values of `round` through a
/// subtask session.
pub fn put(
    subtask: &mut Subtask,
    state: StateId,
    keys: &Keys,
    indices: impl Iterator<Item = usize>,
    round: u64,
) -> Result<()> {
    let mut chunk = Vec::with_capacity(BATCH_ROWS);
    let mut encoded = Vec::new();
    let mut flush = |chunk: &mut Vec<usize>, subtask: &mut Subtask| -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let mut offsets = Vec::with_capacity(chunk.len() + 1);
        encoded.clear();
        offsets.push(0);
        for &i in chunk.iter() {
            value(i, round, &mut encoded)?;
            offsets.push(encoded.len());
        }
        let values: BinaryArray = offsets
            .windows(2)
            .map(|w| Some(&encoded[w[0]..w[1]]))
            .collect();
        subtask.put_values(state, &keys.batch(chunk), &values)?;
        chunk.clear();
        Ok(())
    };
    for i in indices {
        chunk.push(i);
        if chunk.len() == BATCH_ROWS {
            flush(&mut chunk, subtask)?;
        }
    }
    flush(&mut chunk, subtask)
}

/// One whole epoch through the session: begin, write, commit (not final).
pub fn epoch(
    subtask: &mut Subtask,
    state: StateId,
    keys: &Keys,
    indices: impl Iterator<Item = usize>,
    round: u64,
) -> Result<()> {
    // Epoch 1 is the load (round 0); round r runs in epoch r + 1.
    let epoch = Epoch(round + 1);
    subtask.begin(epoch, Attempt(0), None)?;
    put(subtask, state, keys, indices, round)?;
    subtask.commit(epoch, Attempt(0))?;
    Ok(())
}

/// Checks that `subtask` holds, for a sample of its keys among `indices`, the
/// value written by `expected_round(i)`.
pub fn verify(
    subtask: &mut Subtask,
    state: StateId,
    keys: &Keys,
    indices: &[usize],
    expected_round: impl Fn(usize) -> u64,
) -> Result<()> {
    let got = subtask.get_values(state, &keys.batch(indices))?;
    let mut want = Vec::new();
    for (row, &i) in indices.iter().enumerate() {
        want.clear();
        value(i, expected_round(i), &mut want)?;
        let actual = (!arrow_array::Array::is_null(&got, row)).then(|| got.value(row));
        if actual != Some(want.as_slice()) {
            return Err(BenchError::Mismatch(format!(
                "key #{i}: expected the value of round {}, found {actual:?}",
                expected_round(i)
            )));
        }
    }
    Ok(())
}

/// Up to `count` key indices spread over `0..n` that `owned` accepts.
pub fn sample(n: usize, count: usize, owned: impl Fn(usize) -> bool) -> Vec<usize> {
    let step = (n / count.max(1)).max(1);
    (0..n).step_by(step).filter(|&i| owned(i)).collect()
}
