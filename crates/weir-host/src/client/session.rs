//! [`SubtaskSession`] served by a state host.

use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray};
use weir_state::{RedistributionMode, StateId};
use weir_types::{Attempt, Epoch, KeyGroupRange, StateDescriptor};

use super::HostClient;
use crate::batch::KeyBatch;
use crate::error::{HostError, Result};
use crate::protocol::payload::{self, column};
use crate::protocol::{BarrierReply, BarrierRequest, HostStatus, Reply, Request};
use crate::session::{Aggregation, MapEntries, SubtaskSession, SubtaskSpec};

/// One subtask's state in a state host, used through a connection.
#[derive(Debug)]
pub struct RemoteSession {
    client: HostClient,
    spec: SubtaskSpec,
    range: KeyGroupRange,
}

impl RemoteSession {
    pub(crate) fn new(client: HostClient, spec: SubtaskSpec, range: KeyGroupRange) -> Self {
        Self {
            client,
            spec,
            range,
        }
    }

    /// Takes checkpoint `request.checkpoint` at its cut: the synchronous part
    /// runs before this returns; the upload and the ack to the coordinator
    /// run in the host afterwards. Call it before `begin` of the epoch after
    /// the cut.
    pub fn barrier(&mut self, request: BarrierRequest) -> Result<BarrierReply> {
        match self
            .client
            .call(&Request::Barrier(Box::new(request)), Vec::new())?
        {
            (Reply::Barrier(reply), _) => Ok(reply),
            (reply, _) => Err(HostError::Protocol(format!(
                "unexpected reply to barrier: {reply:?}"
            ))),
        }
    }

    /// What the host holds and does.
    pub fn status(&mut self) -> Result<HostStatus> {
        self.client.status()
    }

    /// Where the host serving this session listens on TCP, if it does:
    /// the address a task announces as the owner of this subtask.
    pub fn tcp_address(&self) -> Option<&str> {
        self.client.tcp_address()
    }

    /// The connection, to attach another subtask or close it.
    pub fn into_client(self) -> HostClient {
        self.client
    }

    fn registered(&mut self, request: &Request) -> Result<StateId> {
        match self.client.call(request, Vec::new())? {
            (Reply::State { id }, _) => Ok(StateId(id)),
            (reply, _) => Err(HostError::Protocol(format!(
                "unexpected reply to a registration: {reply:?}"
            ))),
        }
    }

    /// Sends `request` with `keys` and optional further columns; returns the
    /// reply's payloads.
    fn keyed(
        &mut self,
        request: Request,
        keys: &KeyBatch,
        columns: Vec<(&str, ArrayRef)>,
    ) -> Result<Vec<Vec<u8>>> {
        let mut payloads = vec![payload::encode_keys(keys)?];
        if !columns.is_empty() {
            payloads.push(payload::encode(columns)?);
        }
        self.client.call_done(&request, payloads)
    }

    /// The `value` column of the reply's first payload.
    fn value_of(payloads: &[Vec<u8>]) -> Result<ArrayRef> {
        payload::array(&payload::nth(payloads, 0)?, column::VALUE)
    }

    fn binary_of(payloads: &[Vec<u8>]) -> Result<BinaryArray> {
        payload::typed(&payload::nth(payloads, 0)?, column::VALUE)
    }
}

fn binary(array: &BinaryArray) -> ArrayRef {
    Arc::new(array.clone())
}

impl SubtaskSession for RemoteSession {
    fn spec(&self) -> &SubtaskSpec {
        &self.spec
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        self.registered(&Request::RegisterState {
            descriptor: descriptor.clone(),
        })
    }

    fn register_operator_state(&mut self, name: &str, mode: RedistributionMode) -> Result<StateId> {
        self.registered(&Request::RegisterOperatorState {
            name: name.to_owned(),
            mode,
        })
    }

    fn begin(&mut self, epoch: Epoch, attempt: Attempt, final_epoch: Option<Epoch>) -> Result<()> {
        let request = Request::Begin {
            epoch,
            attempt,
            final_epoch,
        };
        self.client.call_done(&request, Vec::new()).map(|_| ())
    }

    fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.client
            .call_done(&Request::Commit { epoch, attempt }, Vec::new())
            .map(|_| ())
    }

    fn get_values(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray> {
        let reply = self.keyed(Request::GetValues { state: state.0 }, keys, Vec::new())?;
        Self::binary_of(&reply)
    }

    fn put_values(&mut self, state: StateId, keys: &KeyBatch, values: &BinaryArray) -> Result<()> {
        let request = Request::PutValues { state: state.0 };
        self.keyed(request, keys, vec![(column::VALUE, binary(values))])
            .map(|_| ())
    }

    fn get_batch(&mut self, state: StateId, keys: &KeyBatch) -> Result<ArrayRef> {
        let reply = self.keyed(Request::GetBatch { state: state.0 }, keys, Vec::new())?;
        Self::value_of(&reply)
    }

    fn put_batch(&mut self, state: StateId, keys: &KeyBatch, values: &ArrayRef) -> Result<()> {
        let request = Request::PutBatch { state: state.0 };
        self.keyed(request, keys, vec![(column::VALUE, Arc::clone(values))])
            .map(|_| ())
    }

    fn aggregate(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        inputs: &ArrayRef,
        aggregation: Aggregation,
    ) -> Result<ArrayRef> {
        let request = Request::Aggregate {
            state: state.0,
            function: aggregation.function,
            count_window: aggregation.count_window,
        };
        let reply = self.keyed(request, keys, vec![(column::VALUE, Arc::clone(inputs))])?;
        Self::value_of(&reply)
    }

    fn get_lists(&mut self, state: StateId, keys: &KeyBatch) -> Result<BinaryArray> {
        let reply = self.keyed(Request::GetLists { state: state.0 }, keys, Vec::new())?;
        Self::binary_of(&reply)
    }

    fn append_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()> {
        let request = Request::AppendLists { state: state.0 };
        self.keyed(request, keys, vec![(column::VALUE, binary(payloads))])
            .map(|_| ())
    }

    fn replace_lists(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        payloads: &BinaryArray,
    ) -> Result<()> {
        let request = Request::ReplaceLists { state: state.0 };
        self.keyed(request, keys, vec![(column::VALUE, binary(payloads))])
            .map(|_| ())
    }

    fn map_entries(&mut self, state: StateId, keys: &KeyBatch) -> Result<MapEntries> {
        let reply = self.keyed(Request::MapEntries { state: state.0 }, keys, Vec::new())?;
        payload::decode_map_entries(&reply)
    }

    fn map_get(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
    ) -> Result<BinaryArray> {
        let request = Request::MapGet { state: state.0 };
        let reply = self.keyed(request, keys, vec![(column::USER_KEY, binary(user_keys))])?;
        Self::binary_of(&reply)
    }

    fn map_put(
        &mut self,
        state: StateId,
        keys: &KeyBatch,
        user_keys: &BinaryArray,
        values: &BinaryArray,
    ) -> Result<()> {
        let request = Request::MapPut { state: state.0 };
        let columns = vec![
            (column::USER_KEY, binary(user_keys)),
            (column::VALUE, binary(values)),
        ];
        self.keyed(request, keys, columns).map(|_| ())
    }

    fn clear(&mut self, state: StateId, keys: &KeyBatch) -> Result<()> {
        self.keyed(Request::Clear { state: state.0 }, keys, Vec::new())
            .map(|_| ())
    }

    fn operator_state(&mut self, state: StateId) -> Result<Vec<Vec<u8>>> {
        let reply = self
            .client
            .call_done(&Request::OperatorState { state: state.0 }, Vec::new())?;
        payload::decode_items(&payload::nth(&reply, 0)?)
    }

    fn set_operator_state(&mut self, state: StateId, items: Vec<Vec<u8>>) -> Result<()> {
        let payloads = vec![payload::encode_items(&items)?];
        self.client
            .call_done(&Request::SetOperatorState { state: state.0 }, payloads)
            .map(|_| ())
    }
}
