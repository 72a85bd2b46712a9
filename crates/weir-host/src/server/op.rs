//! A request on the attached subtask with its payloads decoded. Decoding
//! happens in full before the subtask's lock is taken, so bytes from the
//! wire, however malformed, fail the request and never the subtask.

use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray};
use weir_state::{RedistributionMode, StateId};
use weir_types::{Attempt, Epoch, StateDescriptor};

use super::barrier;
use super::host::Host;
use super::slot::Slot;
use crate::batch::KeyBatch;
use crate::error::{HostError, Result};
use crate::protocol::payload::{self, column};
use crate::protocol::{BarrierRequest, Reply, Request};
use crate::session::{Aggregation, SubtaskSession};

/// A reply header and its payloads.
pub(super) type Answer = (Reply, Vec<Vec<u8>>);

/// A request on the attached subtask, ready to run.
pub(super) enum SlotOp {
    RegisterState(StateDescriptor),
    RegisterOperatorState {
        name: String,
        mode: RedistributionMode,
    },
    Begin {
        epoch: Epoch,
        attempt: Attempt,
        final_epoch: Option<Epoch>,
    },
    Commit {
        epoch: Epoch,
        attempt: Attempt,
    },
    GetValues(StateId, KeyBatch),
    PutValues(StateId, KeyBatch, BinaryArray),
    GetBatch(StateId, KeyBatch),
    PutBatch(StateId, KeyBatch, ArrayRef),
    Aggregate(StateId, KeyBatch, ArrayRef, Aggregation),
    GetLists(StateId, KeyBatch),
    AppendLists(StateId, KeyBatch, BinaryArray),
    ReplaceLists(StateId, KeyBatch, BinaryArray),
    MapEntries(StateId, KeyBatch),
    MapGet(StateId, KeyBatch, BinaryArray),
    MapPut(StateId, KeyBatch, BinaryArray, BinaryArray),
    Clear(StateId, KeyBatch),
    OperatorState(StateId),
    SetOperatorState(StateId, Vec<Vec<u8>>),
    Barrier(Box<BarrierRequest>),
}

impl SlotOp {
    /// Decodes `request` and its `payloads`; a request that is not about
    /// the attached subtask is a protocol error.
    pub(super) fn decode(request: Request, payloads: &[Vec<u8>]) -> Result<Self> {
        let keys = || payload::decode_keys(&payload::nth(payloads, 0)?);
        let second = || payload::nth(payloads, 1);
        let binary = |name: &str| -> Result<BinaryArray> { payload::typed(&second()?, name) };
        let any = |name: &str| payload::array(&second()?, name);
        Ok(match request {
            Request::RegisterState { descriptor } => Self::RegisterState(descriptor),
            Request::RegisterOperatorState { name, mode } => {
                Self::RegisterOperatorState { name, mode }
            }
            Request::Begin {
                epoch,
                attempt,
                final_epoch,
            } => Self::Begin {
                epoch,
                attempt,
                final_epoch,
            },
            Request::Commit { epoch, attempt } => Self::Commit { epoch, attempt },
            Request::GetValues { state } => Self::GetValues(StateId(state), keys()?),
            Request::PutValues { state } => {
                Self::PutValues(StateId(state), keys()?, binary(column::VALUE)?)
            }
            Request::GetBatch { state } => Self::GetBatch(StateId(state), keys()?),
            Request::PutBatch { state } => {
                Self::PutBatch(StateId(state), keys()?, any(column::VALUE)?)
            }
            Request::Aggregate {
                state,
                function,
                count_window,
            } => Self::Aggregate(
                StateId(state),
                keys()?,
                any(column::VALUE)?,
                Aggregation {
                    function,
                    count_window,
                },
            ),
            Request::GetLists { state } => Self::GetLists(StateId(state), keys()?),
            Request::AppendLists { state } => {
                Self::AppendLists(StateId(state), keys()?, binary(column::VALUE)?)
            }
            Request::ReplaceLists { state } => {
                Self::ReplaceLists(StateId(state), keys()?, binary(column::VALUE)?)
            }
            Request::MapEntries { state } => Self::MapEntries(StateId(state), keys()?),
            Request::MapGet { state } => {
                Self::MapGet(StateId(state), keys()?, binary(column::USER_KEY)?)
            }
            Request::MapPut { state } => Self::MapPut(
                StateId(state),
                keys()?,
                binary(column::USER_KEY)?,
                binary(column::VALUE)?,
            ),
            Request::Clear { state } => Self::Clear(StateId(state), keys()?),
            Request::OperatorState { state } => Self::OperatorState(StateId(state)),
            Request::SetOperatorState { state } => Self::SetOperatorState(
                StateId(state),
                payload::decode_items(&payload::nth(payloads, 0)?)?,
            ),
            Request::Barrier(request) => Self::Barrier(request),
            Request::Hello { .. }
            | Request::Attach { .. }
            | Request::Restore(_)
            | Request::Status
            | Request::AbortCheckpoint { .. }
            | Request::StartGeneration { .. }
            | Request::Shutdown => {
                return Err(HostError::Protocol(
                    "a connection-level request reached the subtask handler".into(),
                ));
            }
        })
    }

    /// Runs the request on `slot` (its lock held).
    pub(super) fn apply(self, host: &Arc<Host>, slot: &mut Slot) -> Result<Answer> {
        let subtask = &mut slot.subtask;
        match self {
            Self::RegisterState(descriptor) => {
                let id = subtask.register_state(&descriptor)?;
                Ok((Reply::State { id: id.0 }, Vec::new()))
            }
            Self::RegisterOperatorState { name, mode } => {
                let id = subtask.register_operator_state(&name, mode)?;
                Ok((Reply::State { id: id.0 }, Vec::new()))
            }
            Self::Begin {
                epoch,
                attempt,
                final_epoch,
            } => {
                subtask.begin(epoch, attempt, final_epoch)?;
                slot.note_final();
                Ok(done())
            }
            Self::Commit { epoch, attempt } => {
                subtask.commit(epoch, attempt)?;
                slot.facts.last_committed = slot.facts.last_committed.max(Some(epoch));
                Ok(done())
            }
            Self::GetValues(state, keys) => values(Arc::new(subtask.get_values(state, &keys)?)),
            Self::PutValues(state, keys, values) => {
                subtask.put_values(state, &keys, &values)?;
                Ok(done())
            }
            Self::GetBatch(state, keys) => values(subtask.get_batch(state, &keys)?),
            Self::PutBatch(state, keys, array) => {
                subtask.put_batch(state, &keys, &array)?;
                Ok(done())
            }
            Self::Aggregate(state, keys, inputs, aggregation) => {
                values(subtask.aggregate(state, &keys, &inputs, aggregation)?)
            }
            Self::GetLists(state, keys) => values(Arc::new(subtask.get_lists(state, &keys)?)),
            Self::AppendLists(state, keys, lists) => {
                subtask.append_lists(state, &keys, &lists)?;
                Ok(done())
            }
            Self::ReplaceLists(state, keys, lists) => {
                subtask.replace_lists(state, &keys, &lists)?;
                Ok(done())
            }
            Self::MapEntries(state, keys) => {
                let entries = subtask.map_entries(state, &keys)?;
                Ok((Reply::Done, payload::encode_map_entries(&entries)?))
            }
            Self::MapGet(state, keys, user_keys) => {
                values(Arc::new(subtask.map_get(state, &keys, &user_keys)?))
            }
            Self::MapPut(state, keys, user_keys, map_values) => {
                subtask.map_put(state, &keys, &user_keys, &map_values)?;
                Ok(done())
            }
            Self::Clear(state, keys) => {
                subtask.clear(state, &keys)?;
                Ok(done())
            }
            Self::OperatorState(state) => {
                let items = subtask.operator_state(state)?;
                Ok((Reply::Done, vec![payload::encode_items(&items)?]))
            }
            Self::SetOperatorState(state, items) => {
                subtask.set_operator_state(state, items)?;
                Ok(done())
            }
            Self::Barrier(request) => Ok((
                Reply::Barrier(barrier::take(host, slot, &request)?),
                Vec::new(),
            )),
        }
    }
}

pub(super) fn done() -> Answer {
    (Reply::Done, Vec::new())
}

fn values(array: ArrayRef) -> Result<Answer> {
    Ok((Reply::Done, vec![payload::encode_values(array)?]))
}
