//! The JSON headers of requests and replies.
//!
//! Requests mirror [`SubtaskSession`](crate::SubtaskSession) one to one
//! (batches travel as Arrow payloads, see [`payload`](super::payload)), plus
//! requests only a host serves: the handshake, attach, restore, barrier,
//! and the driver's control requests (status, abort, generation, shutdown).

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use weir_checkpoint::{StorageLocation, StorageOptions, SubtaskRestore};
use weir_snapshot::{Compression, KeyedStateHandle, StateFile};
use weir_state::RedistributionMode;
use weir_types::{
    Attempt, CheckpointId, Epoch, KeyGroupRange, OperatorUid, StateDescriptor, SubtaskIndex,
};

use crate::engine::SnapshotFormat;
use crate::error::{HostError, RemoteErrorKind, Result};
use crate::session::{NativeAggregate, SubtaskSpec};

/// The protocol version; the handshake refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;

/// A request header. Payloads per request are documented on each variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The first message of every connection; nothing else is read from a
    /// peer before its token checked out.
    Hello {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// The job's secret token.
        token: JobToken,
    },
    /// Serve this subtask on this connection from now on. The host answers
    /// `StateLost` if it does not hold the state `expect` describes.
    Attach {
        /// The subtask.
        spec: SubtaskSpec,
        /// What the task expects the host to hold.
        expect: Expectation,
    },
    /// Replace the subtask's state by stored state, then serve it on this
    /// connection (like `Attach`).
    Restore(Box<RestoreRequest>),
    /// [`SubtaskSession::register_state`](crate::SubtaskSession::register_state).
    RegisterState {
        /// The descriptor.
        descriptor: StateDescriptor,
    },
    /// [`SubtaskSession::register_operator_state`](crate::SubtaskSession::register_operator_state).
    RegisterOperatorState {
        /// The state's name.
        name: String,
        /// How it is redistributed on rescaling.
        mode: RedistributionMode,
    },
    /// [`SubtaskSession::begin`](crate::SubtaskSession::begin).
    Begin {
        /// The epoch.
        epoch: Epoch,
        /// The attempt.
        attempt: Attempt,
        /// The newest final epoch, if any.
        final_epoch: Option<Epoch>,
    },
    /// [`SubtaskSession::commit`](crate::SubtaskSession::commit).
    Commit {
        /// The epoch.
        epoch: Epoch,
        /// The attempt.
        attempt: Attempt,
    },
    /// Payload: keys. Reply payload: `value` (binary).
    GetValues {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `value` (binary).
    PutValues {
        /// The state.
        state: u32,
    },
    /// Payload: keys. Reply payload: `value` (the state's type).
    GetBatch {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `value` (the state's type).
    PutBatch {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `value` (inputs). Reply payload: `value` (results).
    Aggregate {
        /// The state.
        state: u32,
        /// The built-in aggregate.
        function: NativeAggregate,
        /// Rows per tumbling count window; absent: a running aggregate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count_window: Option<NonZeroU32>,
    },
    /// Payload: keys. Reply payload: `value` (list payloads).
    GetLists {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `value` (list payloads).
    AppendLists {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `value` (list payloads).
    ReplaceLists {
        /// The state.
        state: u32,
    },
    /// Payload: keys. Reply payloads: `offset`, then `user_key` + `value`.
    MapEntries {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `user_key`. Reply payload: `value`.
    MapGet {
        /// The state.
        state: u32,
    },
    /// Payloads: keys, `user_key` + `value`.
    MapPut {
        /// The state.
        state: u32,
    },
    /// Payload: keys.
    Clear {
        /// The state.
        state: u32,
    },
    /// Reply payload: `item`.
    OperatorState {
        /// The state.
        state: u32,
    },
    /// Payload: `item`.
    SetOperatorState {
        /// The state.
        state: u32,
    },
    /// Take checkpoint `checkpoint` of the attached subtask at its cut.
    Barrier(Box<BarrierRequest>),
    /// Cancel the uploads of a checkpoint that will never complete and
    /// delete the files they wrote; answered with [`Reply::Aborted`] once
    /// the files are gone.
    AbortCheckpoint {
        /// The checkpoint.
        checkpoint: CheckpointId,
    },
    /// What the host holds and does.
    Status,
    /// From now on serve generation `generation` of the job: drop the state
    /// of every older generation and refuse its tasks. Attach and restore
    /// carry their generation too, so a host learns of a new generation from
    /// its first task even if the driver never told it.
    StartGeneration {
        /// The generation (a run's restarts count up from 0).
        generation: u64,
    },
    /// Cancel every upload (deleting what it wrote), drop all state and
    /// exit. Answered before the host exits.
    Shutdown,
}

/// The job's secret token. Its `Debug` output leaves the secret out, so no
/// log line or error message carries it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobToken(String);

impl JobToken {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for JobToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobToken(..)")
    }
}

/// What a task expects the host to hold for its subtask. A host without
/// that state answers `StateLost` instead of serving empty state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Expectation {
    /// The generation of the job the task belongs to; a host that serves a
    /// newer one refuses the task, a host that served an older one drops
    /// that generation's state first.
    #[serde(default)]
    pub generation: u64,
    /// The checkpoint or savepoint this run of the job restored from; `None`
    /// for a job that started empty.
    pub restored_from: Option<CheckpointId>,
    /// The newest final epoch the task will pass to `begin`; `None` before
    /// any epoch of this run (or after the restore) became final.
    pub final_epoch: Option<Epoch>,
}

impl Expectation {
    /// The first epoch of a job that starts empty (generation 0).
    pub fn fresh() -> Self {
        Self::default()
    }

    /// Whether the task starts without state: nothing restored, nothing final.
    pub fn starts_empty(&self) -> bool {
        self.restored_from.is_none() && self.final_epoch.is_none()
    }
}

/// Where state files live: a URL and the options to open it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StorageRef {
    /// `file:///..`, a plain path, `s3://bucket/prefix` or `memory://..`.
    pub url: String,
    /// Settings for remote stores (see [`StorageOptions`]).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

impl StorageRef {
    /// A location without options.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            options: BTreeMap::new(),
        }
    }

    /// Opens the location.
    pub fn open(&self) -> Result<StorageLocation> {
        let options = StorageOptions {
            settings: self.options.clone(),
        };
        Ok(StorageLocation::parse(&self.url, &options)?)
    }
}

/// Restore one subtask from stored state (one entry of a `RestorePlan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The subtask, as it runs now.
    pub spec: SubtaskSpec,
    /// The generation of the job the restore starts (see [`Expectation::generation`]).
    #[serde(default)]
    pub generation: u64,
    /// The checkpoint or savepoint restored; later attaches expect it.
    pub restored_from: CheckpointId,
    /// Its cut: the restored state is final at this epoch.
    pub cut: Epoch,
    /// The directory the handles' paths are relative to: the job directory
    /// of a checkpoint, or the savepoint directory.
    pub storage: StorageRef,
    /// The key groups the subtask owns.
    pub key_group_range: KeyGroupRange,
    /// The keyed handles overlapping them.
    pub keyed: Vec<KeyedStateHandle>,
    /// The operator state files it redistributes.
    pub operator_state: Vec<StateFile>,
    /// Whether the parallelism changed (see [`SubtaskRestore::rescaled`]).
    pub rescaled: bool,
}

impl RestoreRequest {
    /// A request from a restore plan's entry for `spec`.
    pub fn new(
        spec: SubtaskSpec,
        generation: u64,
        restored_from: CheckpointId,
        cut: Epoch,
        storage: StorageRef,
        restore: SubtaskRestore,
    ) -> Self {
        Self {
            spec,
            generation,
            restored_from,
            cut,
            storage,
            key_group_range: restore.key_group_range,
            keyed: restore.keyed,
            operator_state: restore.operator_state,
            rescaled: restore.rescaled,
        }
    }

    /// The restore plan's entry again.
    pub fn subtask_restore(&self) -> SubtaskRestore {
        SubtaskRestore {
            subtask: self.spec.subtask,
            key_group_range: self.key_group_range,
            keyed: self.keyed.clone(),
            operator_state: self.operator_state.clone(),
            rescaled: self.rescaled,
        }
    }
}

/// Take a checkpoint of the attached subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierRequest {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// Its cut: epochs up to it are final and in the snapshot; the next
    /// epoch must not have begun.
    pub cut: Epoch,
    /// The job directory the state files go under (`chk-<n>/<uid>/<subtask>`).
    pub storage: StorageRef,
    /// Where the ack goes.
    pub ack: AckTarget,
    /// How the keyed state is stored: canonical files (savepoints; the
    /// default) or RocksDB's own files, uploaded incrementally.
    #[serde(default)]
    pub format: SnapshotFormat,
    /// How canonical files compress their blocks (the job's
    /// `snapshot_compression`).
    #[serde(default)]
    pub compression: Compression,
}

/// The coordinator's HTTP endpoint and the job token it wants.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckTarget {
    /// Base URL, e.g. `http://127.0.0.1:40123`; `/ack` and `/decline` are
    /// appended. Only `http` is supported (the coordinator listens on a
    /// loopback or cluster-internal address).
    pub url: String,
    /// The job's token, sent as `Authorization: Bearer <token>`.
    pub token: String,
}

impl std::fmt::Debug for AckTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckTarget")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A reply header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The handshake succeeded.
    Hello {
        /// The host's protocol version.
        version: u32,
        /// The host's process id.
        host_pid: u32,
        /// Where the host listens on TCP (`host:port`), if it does: the
        /// address other executors reach this host's subtasks at.
        tcp_address: Option<String>,
    },
    /// The subtask is attached (after `Attach` or `Restore`).
    Attached {
        /// The key groups it owns.
        key_group_range: KeyGroupRange,
    },
    /// Done; nothing to return beyond payloads, if any.
    Done,
    /// A registered state.
    State {
        /// Its id.
        id: u32,
    },
    /// The synchronous part of a checkpoint is done.
    Barrier(BarrierReply),
    /// The host's status.
    Status(Box<HostStatus>),
    /// A checkpoint's uploads were canceled and their files deleted.
    Aborted {
        /// How many uploads were canceled.
        canceled: usize,
    },
    /// The request failed.
    Error(WireError),
}

/// What a barrier did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierReply {
    /// `false` when this subtask had already taken this checkpoint (a retried
    /// task): nothing was done again.
    pub started: bool,
    /// Duration of the synchronous part, in microseconds.
    pub sync_micros: u64,
}

/// A host's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    /// The host's process id.
    pub pid: u32,
    /// Where the host listens on TCP, if it does.
    pub tcp_address: Option<String>,
    /// The newest generation of the job the host served.
    pub generation: u64,
    /// Open connections, this one included.
    pub connections: usize,
    /// Every subtask the host holds, by uid and index.
    pub subtasks: Vec<SubtaskStatus>,
    /// Snapshot uploads (and their acks) not finished yet.
    pub pending_uploads: usize,
    /// Uploads acked to the coordinator since the host started.
    pub acked_uploads: u64,
    /// Uploads that failed (declined) since the host started.
    pub failed_uploads: u64,
    /// State bytes (Arrow payloads of requests and replies) exchanged with
    /// tasks on other executors, over TCP, since the host started.
    #[serde(default)]
    pub tcp_payload_bytes: u64,
    /// The last upload or ack failure, for the user.
    pub last_failure: Option<String>,
}

/// One subtask's part of [`HostStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskStatus {
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The checkpoint its state was restored from, if any.
    pub restored_from: Option<CheckpointId>,
    /// The newest epoch folded into its base.
    pub final_epoch: Option<Epoch>,
    /// The newest epoch committed (final or not).
    pub last_committed: Option<Epoch>,
    /// Checkpoints whose synchronous part it took, newest last (bounded).
    pub checkpoints: Vec<CheckpointId>,
    /// Its snapshot uploads not finished yet.
    pub pending_uploads: usize,
    /// Bytes of its local working directory (RocksDB files).
    pub local_bytes: u64,
}

/// An error crossing the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// Which error.
    pub kind: WireErrorKind,
    /// The explanation.
    pub message: String,
}

/// The kinds of [`WireError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireErrorKind {
    /// [`HostError::StateLost`].
    StateLost,
    /// [`HostError::InvalidRequest`].
    InvalidRequest,
    /// [`HostError::Protocol`].
    Protocol,
    /// [`HostError::Unauthorized`].
    Unauthorized,
    /// A host-side error of another kind ([`HostError::Remote`]).
    Remote(RemoteErrorKind),
}

impl From<&HostError> for WireError {
    fn from(err: &HostError) -> Self {
        let kind = match err {
            HostError::StateLost(_) => WireErrorKind::StateLost,
            HostError::InvalidRequest(_) => WireErrorKind::InvalidRequest,
            HostError::Protocol(_) => WireErrorKind::Protocol,
            HostError::Unauthorized => WireErrorKind::Unauthorized,
            HostError::State(_) => WireErrorKind::Remote(RemoteErrorKind::State),
            HostError::Types(_) => WireErrorKind::Remote(RemoteErrorKind::Types),
            HostError::Snapshot(_) => WireErrorKind::Remote(RemoteErrorKind::Snapshot),
            HostError::Checkpoint(_) => WireErrorKind::Remote(RemoteErrorKind::Checkpoint),
            HostError::Io { .. } => WireErrorKind::Remote(RemoteErrorKind::Io),
            HostError::Remote { kind, .. } => WireErrorKind::Remote(*kind),
        };
        // The variants with their own wire kind carry only their payload, so
        // the client rebuilds the same message; the rest keep the full text.
        let message = match err {
            HostError::StateLost(m) | HostError::InvalidRequest(m) | HostError::Protocol(m) => {
                m.clone()
            }
            other => other.to_string(),
        };
        Self { kind, message }
    }
}

impl From<WireError> for HostError {
    fn from(err: WireError) -> Self {
        match err.kind {
            WireErrorKind::StateLost => HostError::StateLost(err.message),
            WireErrorKind::InvalidRequest => HostError::InvalidRequest(err.message),
            WireErrorKind::Protocol => HostError::Protocol(err.message),
            WireErrorKind::Unauthorized => HostError::Unauthorized,
            WireErrorKind::Remote(kind) => HostError::Remote {
                kind,
                message: err.message,
            },
        }
    }
}

/// Encodes a header.
pub fn encode_header<T: Serialize>(header: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(header)
        .map_err(|err| HostError::Protocol(format!("cannot encode a message header: {err}")))
}

/// Decodes a header.
pub fn decode_header<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|err| {
        HostError::Protocol(format!(
            "cannot decode a message header ({err}); are client and host the same Weir version?"
        ))
    })
}

#[cfg(test)]
mod tests {
    use weir_types::{MaxParallelism, StateKind, ValueType};

    use super::*;
    use crate::session::BackendSpec;

    fn spec() -> SubtaskSpec {
        SubtaskSpec {
            uid: OperatorUid::new("avg").expect("valid"),
            subtask: SubtaskIndex(1),
            parallelism: 2,
            max_parallelism: MaxParallelism::new(128).expect("valid"),
            backend: BackendSpec::Heap,
            key_types: Some(vec![ValueType::Int64]),
        }
    }

    #[test]
    fn requests_round_trip_as_json() {
        let requests = [
            Request::Hello {
                version: PROTOCOL_VERSION,
                token: JobToken::new("t"),
            },
            Request::Attach {
                spec: spec(),
                expect: Expectation {
                    generation: 2,
                    restored_from: Some(CheckpointId(4)),
                    final_epoch: Some(Epoch(9)),
                },
            },
            Request::RegisterState {
                descriptor: StateDescriptor::new("count", StateKind::Value, ValueType::Int64)
                    .expect("valid"),
            },
            Request::Aggregate {
                state: 2,
                function: NativeAggregate::Mean,
                count_window: None,
            },
            Request::Aggregate {
                state: 2,
                function: NativeAggregate::Sum,
                count_window: NonZeroU32::new(10),
            },
            Request::Barrier(Box::new(BarrierRequest {
                checkpoint: CheckpointId(3),
                cut: Epoch(7),
                storage: StorageRef::new("/tmp/x"),
                ack: AckTarget {
                    url: "http://127.0.0.1:1".into(),
                    token: "t".into(),
                },
                format: SnapshotFormat::Incremental {
                    base: Some(CheckpointId(2)),
                },
                compression: Compression::None,
            })),
            Request::Status,
            Request::StartGeneration { generation: 3 },
            Request::Shutdown,
        ];
        for request in requests {
            let bytes = encode_header(&request).expect("encodes");
            assert_eq!(decode_header::<Request>(&bytes).expect("decodes"), request);
        }
        let json: serde_json::Value =
            serde_json::from_slice(&encode_header(&Request::Clear { state: 1 }).expect("encodes"))
                .expect("JSON");
        assert_eq!(json, serde_json::json!({"op": "clear", "state": 1}));
    }

    #[test]
    fn errors_keep_their_kind_across_the_wire() {
        for err in [
            HostError::StateLost("gone".into()),
            HostError::InvalidRequest("bad".into()),
            HostError::Protocol("odd".into()),
            HostError::Unauthorized,
        ] {
            let text = err.to_string();
            let wire = WireError::from(&err);
            let bytes = encode_header(&Reply::Error(wire)).expect("encodes");
            let Reply::Error(back) = decode_header::<Reply>(&bytes).expect("decodes") else {
                panic!("an error reply");
            };
            assert_eq!(HostError::from(back).to_string(), text);
        }
        let io = HostError::io("opening x", std::io::Error::other("disk full"));
        let back = HostError::from(WireError::from(&io));
        assert!(
            matches!(back, HostError::Remote { kind: RemoteErrorKind::Io, ref message } if message == "opening x: disk full")
        );
    }

    #[test]
    fn tokens_stay_out_of_debug_output() {
        let target = AckTarget {
            url: "http://h".into(),
            token: "s3cret".into(),
        };
        assert!(!format!("{target:?}").contains("s3cret"));
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            token: JobToken::new("s3cret"),
        };
        assert!(!format!("{hello:?}").contains("s3cret"));
        let bytes = encode_header(&hello).expect("encodes");
        let json: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(json["token"], "s3cret", "the wire form is the plain token");
    }
}
