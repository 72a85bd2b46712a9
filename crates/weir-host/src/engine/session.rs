//! [`SubtaskSession`] for the in-process [`Subtask`]: each batch method walks
//! its rows in order and calls the backend, reusing one encoding buffer and
//! building results with Arrow builders.

use arrow_array::builder::BinaryBuilder;
use arrow_array::{Array, ArrayRef, BinaryArray};
use weir_state::{RedistributionMode, StateId};
use weir_types::{
    Attempt, EncodeError, Epoch, KeyGroupRange, StateDescriptor, StateKind, ValueType, encode_with,
};

use super::Subtask;
use super::columns::{ArrowColumn, ColumnBuilder};
use crate::batch::KeyBatch;
use crate::error::{HostError, Result};
use crate::session::{Aggregation, MapEntries, SubtaskSession, SubtaskSpec};

/// Fails unless `column` has one row per key.
pub(super) fn check_rows(keys: &KeyBatch, column: &dyn Array, what: &str) -> Result<()> {
    if column.len() == keys.len() {
        Ok(())
    } else {
        Err(HostError::InvalidRequest(format!(
            "a batch of {} keys came with {} {what}; send one per key",
            keys.len(),
            column.len()
        )))
    }
}

/// Fails if `column` has nulls where every row needs a value.
fn check_no_nulls(column: &dyn Array, what: &str) -> Result<()> {
    if column.null_count() == 0 {
        Ok(())
    } else {
        Err(HostError::InvalidRequest(format!("{what} may not be null")))
    }
}

/// A binary builder sized for `rows` values of about `width` bytes.
fn binary_builder(rows: usize, width: usize) -> BinaryBuilder {
    BinaryBuilder::with_capacity(rows, rows.saturating_mul(width))
}

impl Subtask {
    /// The descriptor of `state`, checking it is of one of `kinds`.
    pub(super) fn descriptor_of(
        &self,
        state: StateId,
        kinds: &[StateKind],
        access: &'static str,
    ) -> Result<&StateDescriptor> {
        let descriptor = self.descriptor(state)?;
        if kinds.contains(&descriptor.kind) {
            Ok(descriptor)
        } else {
            Err(weir_state::StateError::WrongKind {
                name: descriptor.name.clone(),
                expected: access,
                actual: descriptor.kind,
            }
            .into())
        }
    }
}

/// The kinds that hold one value per key.
pub(super) const VALUE_KINDS: &[StateKind] = &[
    StateKind::Value,
    StateKind::Reducing,
    StateKind::Aggregating,
];

impl SubtaskSession for Subtask {
    fn spec(&self) -> &SubtaskSpec {
        &self.spec
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn set_key_types(&mut self, types: &[ValueType]) -> Result<()> {
        Subtask::set_key_types(self, types.to_vec())
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        let descriptor = descriptor.clone().validated()?;
        Ok(self.keyed.register_state(&descriptor)?)
    }

    fn register_operator_state(&mut self, name: &str, mode: RedistributionMode) -> Result<StateId> {
        Ok(self.operator.register(name, mode)?)
    }

    fn begin(&mut self, epoch: Epoch, attempt: Attempt, final_epoch: Option<Epoch>) -> Result<()> {
        if let Some(final_epoch) = final_epoch {
            self.finalize_up_to(final_epoch)?;
        }
        self.keyed.begin_epoch(epoch, attempt)?;
        self.operator.begin_epoch(epoch, attempt)?;
        self.last_begun = Some(self.last_begun.map_or(epoch, |e| e.max(epoch)));
        Ok(())
    }

    fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.keyed.commit_epoch(epoch, attempt)?;
        self.operator.commit_epoch(epoch, attempt)?;
        Ok(())
    }

    fn get_values(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray> {
        let mut out = binary_builder(keys.len(), 8);
        self.keyed
            .get_values(state, keys, &mut self.found, |value| {
                out.append_option(value);
                Ok::<_, HostError>(())
            })?;
        Ok(out.finish())
    }

    fn put_values(&mut self, state: StateId, keys: &KeyBatch, values: &BinaryArray) -> Result<()> {
        check_rows(keys, values, "values")?;
        self.descriptor_of(state, VALUE_KINDS, "value")?;
        let Self { keyed, found, .. } = self;
        let found = found.take_for(state, keys.len());
        for i in 0..keys.len() {
            keyed.prefetch_ahead(state, keys, i, found);
            if values.is_null(i) {
                keyed.clear(state, keys.key(i))?;
            } else {
                keyed.put_value_at(state, keys, i, found, values.value(i))?;
            }
        }
        Ok(())
    }

    fn get_batch(&mut self, state: StateId, keys: &KeyBatch) -> Result<ArrayRef> {
        let descriptor = self.descriptor_of(state, VALUE_KINDS, "value")?;
        let (name, ty) = (descriptor.name.clone(), descriptor.value_type.clone());
        let mut out = ColumnBuilder::new(&name, &ty, keys.len())?;
        self.keyed
            .get_values(state, keys, &mut self.found, |value| {
                match value {
                    Some(bytes) => out.append_encoded(bytes, &ty)?,
                    None => out.append_null(),
                }
                Ok::<_, HostError>(())
            })?;
        out.finish()
    }

    fn put_batch(&mut self, state: StateId, keys: &KeyBatch, values: &ArrayRef) -> Result<()> {
        check_rows(keys, values.as_ref(), "values")?;
        let descriptor = self.descriptor_of(state, VALUE_KINDS, "value")?;
        let (name, ty) = (descriptor.name.clone(), descriptor.value_type.clone());
        let column = ArrowColumn::new(&name, &ty, values.as_ref())?;
        let Self {
            keyed,
            scratch,
            found,
            ..
        } = self;
        let found = found.take_for(state, keys.len());
        for i in 0..keys.len() {
            keyed.prefetch_ahead(state, keys, i, found);
            if values.is_null(i) {
                keyed.clear(state, keys.key(i))?;
                continue;
            }
            scratch.clear();
            encode_with(&column.row(i), &ty, scratch).map_err(EncodeError::into_type_mismatch)?;
            keyed.put_value_at(state, keys, i, found, scratch)?;
        }
        Ok(())
    }

    fn aggregate(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        inputs: &ArrayRef,
        aggregation: Aggregation,
    ) -> Result<ArrayRef> {
        super::aggregate::run(self, state, keys, inputs, aggregation)
    }

    fn get_lists(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray> {
        let mut out = binary_builder(keys.len(), 16);
        for i in 0..keys.len() {
            out.append_option(self.keyed.get_list(state, keys.key(i))?);
        }
        Ok(out.finish())
    }

    fn append_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()> {
        check_rows(keys, payloads, "list payloads")?;
        for i in 0..keys.len() {
            // A null payload appends nothing, like an empty one.
            if payloads.is_valid(i) && !payloads.value(i).is_empty() {
                self.keyed
                    .append_list(state, keys.key(i), payloads.value(i))?;
            }
        }
        Ok(())
    }

    fn replace_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()> {
        check_rows(keys, payloads, "list payloads")?;
        for i in 0..keys.len() {
            let payload = if payloads.is_valid(i) {
                payloads.value(i)
            } else {
                &[]
            };
            self.keyed.replace_list(state, keys.key(i), payload)?;
        }
        Ok(())
    }

    fn map_entries(&mut self, state: StateId, keys: &KeyBatch) -> Result<MapEntries> {
        let mut offsets = Vec::with_capacity(keys.len() + 1);
        offsets.push(0u32);
        let mut user_keys = binary_builder(keys.len(), 8);
        let mut values = binary_builder(keys.len(), 8);
        let mut count: u64 = 0;
        for i in 0..keys.len() {
            self.keyed.map_for_each(state, keys.key(i), &mut |k, v| {
                user_keys.append_value(k);
                values.append_value(v);
                count += 1;
            })?;
            let offset = u32::try_from(count).map_err(|_| {
                HostError::InvalidRequest(
                    "a map batch has more than 2^32 entries; send fewer keys per batch".into(),
                )
            })?;
            offsets.push(offset);
        }
        Ok(MapEntries {
            offsets,
            user_keys: user_keys.finish(),
            values: values.finish(),
        })
    }

    fn map_get(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
    ) -> Result<BinaryArray> {
        check_rows(keys, user_keys, "user keys")?;
        check_no_nulls(user_keys, "map user keys")?;
        let mut out = binary_builder(keys.len(), 8);
        for i in 0..keys.len() {
            out.append_option(self.keyed.map_get(state, keys.key(i), user_keys.value(i))?);
        }
        Ok(out.finish())
    }

    fn map_put(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
        values: &BinaryArray,
    ) -> Result<()> {
        check_rows(keys, user_keys, "user keys")?;
        check_rows(keys, values, "values")?;
        check_no_nulls(user_keys, "map user keys")?;
        for i in 0..keys.len() {
            let (key, user_key) = (keys.key(i), user_keys.value(i));
            if values.is_null(i) {
                self.keyed.map_remove(state, key, user_key)?;
            } else {
                self.keyed.map_put(state, key, user_key, values.value(i))?;
            }
        }
        Ok(())
    }

    fn clear(&mut self, state: StateId, keys: &KeyBatch) -> Result<()> {
        for i in 0..keys.len() {
            self.keyed.clear(state, keys.key(i))?;
        }
        Ok(())
    }

    fn operator_state(&mut self, state: StateId) -> Result<Vec<Vec<u8>>> {
        Ok(self.operator.get(state)?.to_vec())
    }

    fn set_operator_state(&mut self, state: StateId, items: Vec<Vec<u8>>) -> Result<()> {
        Ok(self.operator.update(state, items)?)
    }
}
