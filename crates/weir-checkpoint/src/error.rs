//! The error type of this crate.

use std::fmt;
use std::time::Duration;

use weir_types::{CheckpointId, JobId, KeyGroupRange, OperatorUid, SubtaskIndex, TypesError};

use crate::metadata::CheckpointKind;

/// Result alias for this crate.
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

/// What went wrong while encoding, storing, reading or planning checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The bytes do not start like a Weir `_metadata` file.
    #[error("{location} is not a weir checkpoint or savepoint: {reason}")]
    NotMetadata {
        /// Where the bytes came from.
        location: String,
        /// What was wrong with them.
        reason: &'static str,
    },
    /// The file ends before its header says it does.
    #[error("{location} is truncated: expected {expected} bytes, found {found}")]
    Truncated {
        /// Where the bytes came from.
        location: String,
        /// The total length the header announces (or the header's minimum).
        expected: u64,
        /// The length found.
        found: u64,
    },
    /// The body does not match the checksum in the header.
    #[error("{location} is corrupt: crc32 is {actual:08x}, the header says {expected:08x}")]
    ChecksumMismatch {
        /// Where the bytes came from.
        location: String,
        /// The checksum recorded in the header.
        expected: u32,
        /// The checksum of the bytes found.
        actual: u32,
    },
    /// Written by a newer Weir with a format this one cannot read.
    #[error(
        "{location} has format version {found}, written by a newer weir; this weir reads versions up to {supported}: upgrade weir to read it"
    )]
    NewerVersion {
        /// Where the bytes came from.
        location: String,
        /// The version in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The header is well formed but its body does not parse.
    #[error("{location} has a checksummed body that does not parse: {source}")]
    MalformedMetadata {
        /// Where the bytes came from.
        location: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The metadata parses but contradicts itself.
    #[error("metadata of checkpoint {checkpoint} is inconsistent: {problem}")]
    InconsistentMetadata {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// What contradicts what.
        problem: MetadataProblem,
    },
    /// A storage URL that cannot be opened as given.
    #[error("storage url {url:?} is invalid: {reason}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// What is wrong and how to write it.
        reason: &'static str,
    },
    /// An option key the store does not know (likely a typo).
    #[error("storage option {key:?} is unknown for {url}")]
    UnknownStorageOption {
        /// The URL being opened.
        url: String,
        /// The unknown key.
        key: String,
    },
    /// The object store refused its configuration.
    #[error("cannot open storage {url}: {source}")]
    OpenStore {
        /// The URL being opened.
        url: String,
        /// The store's complaint.
        #[source]
        source: object_store::Error,
    },
    /// A local checkpoint directory could not be created or resolved.
    #[error("cannot create local storage directory {path}: {source}")]
    LocalDirectory {
        /// The directory.
        path: String,
        /// The operating system's complaint.
        #[source]
        source: std::io::Error,
    },
    /// Storage is unreachable or failed an operation.
    #[error("storage {operation} of {path} failed: {source}")]
    Store {
        /// The operation (`get`, `put`, `list`, `delete`).
        operation: &'static str,
        /// The path concerned.
        path: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// A path that would leave its directory (paths come from files), or
    /// another failure of the snapshot crate.
    #[error(transparent)]
    Snapshot(#[from] weir_snapshot::SnapshotError),
    /// No `_metadata` where a completed checkpoint or savepoint should be.
    #[error(
        "{location} does not exist: the checkpoint or savepoint never completed or was deleted"
    )]
    MissingMetadata {
        /// Where it was looked for.
        location: String,
    },
    /// A state file the metadata references is missing.
    #[error("state file {path} is missing from {location}")]
    MissingStateFile {
        /// The file's relative path.
        path: String,
        /// The directory it is relative to.
        location: String,
    },
    /// A state file whose bytes do not match its handle.
    #[error(
        "state file {path} is corrupt: {size} bytes with crc32 {crc32:08x}, the handle says {expected_size} bytes with crc32 {expected_crc32:08x}"
    )]
    CorruptStateFile {
        /// The file's relative path.
        path: String,
        /// Size recorded in the handle.
        expected_size: u64,
        /// Size found.
        size: u64,
        /// Checksum recorded in the handle.
        expected_crc32: u32,
        /// Checksum found.
        crc32: u32,
    },
    /// A create-only write found the object present (a checkpoint or
    /// savepoint with this number exists already).
    #[error("{path} exists already; completed checkpoints and savepoints are never overwritten")]
    AlreadyExists {
        /// The relative path.
        path: String,
    },
    /// Metadata handed to the storage of another job.
    #[error("metadata of job {found} cannot be stored as job {expected}")]
    WrongJob {
        /// The storage's job.
        expected: JobId,
        /// The metadata's job.
        found: JobId,
    },
    /// A checkpoint where a savepoint is required, or the reverse.
    #[error("{found} {checkpoint} is not a {expected}")]
    WrongKind {
        /// The checkpoint or savepoint number.
        checkpoint: CheckpointId,
        /// The kind it is.
        found: CheckpointKind,
        /// The kind required.
        expected: CheckpointKind,
    },
    /// A state file too large for "jobmanager" storage.
    #[error(
        "state file {path} of checkpoint {checkpoint} is {size} bytes, above the {limit}-byte limit of jobmanager storage: configure a checkpoint directory (file system or s3 storage) or raise the limit"
    )]
    InlineStateTooLarge {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// The file's relative path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Incremental state offered to "jobmanager" storage.
    #[error(
        "checkpoint {checkpoint} is incremental, which jobmanager storage cannot hold: configure a checkpoint directory or disable incremental checkpoints"
    )]
    IncrementalInline {
        /// The checkpoint.
        checkpoint: CheckpointId,
    },
    /// A savepoint holds state for operators the job no longer has.
    #[error(
        "the snapshot holds state for operators {uids} that the job does not have: restore them under the same uid, or allow non-restored state to drop it"
    )]
    NonRestoredState {
        /// The operators without a counterpart.
        uids: UidList,
    },
    /// The job declares another max parallelism than the state has.
    #[error(
        "operator {uid} has max parallelism {job} but its state was written with {stored}: max parallelism is fixed for the life of a state, so set it back to {stored}"
    )]
    MaxParallelismChanged {
        /// The operator.
        uid: OperatorUid,
        /// The max parallelism in the snapshot.
        stored: u32,
        /// The max parallelism the job declares.
        job: u32,
    },
    /// The job lists one operator twice.
    #[error("the job lists operator {uid} twice")]
    DuplicateJobOperator {
        /// The operator.
        uid: OperatorUid,
    },
    /// An id, range or descriptor failed validation.
    #[error(transparent)]
    Types(#[from] TypesError),
    /// Another live run holds the job directory's lease.
    #[error(
        "job directory {job_dir} is in use by run {owner} (pid {pid} on {host}, last heartbeat {heartbeat_age:?} ago): \
         only one run may use a job directory at a time; stop that run or give this job another name or checkpoint \
         directory (a run that died frees it once its heartbeat is {stale_after:?} old, at once if it ran on this host)"
    )]
    LeaseHeld {
        /// The job directory.
        job_dir: String,
        /// The holder's run id.
        owner: String,
        /// The holder's host.
        host: String,
        /// The holder's process id.
        pid: u32,
        /// How old the holder's last heartbeat is.
        heartbeat_age: Duration,
        /// How old a heartbeat must be for the lease to be taken over.
        stale_after: Duration,
    },
    /// This run no longer holds the job directory's lease.
    #[error(
        "this run lost the lease on job directory {job_dir}: {reason}; another run may be using the directory, so this one must stop"
    )]
    LeaseLost {
        /// The job directory.
        job_dir: String,
        /// What happened.
        reason: String,
    },
    /// A lease or lineage record that does not parse.
    #[error(
        "{path} is not a readable weir record ({source}); if no run uses this job directory, delete it"
    )]
    MalformedRecord {
        /// Where the record is.
        path: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// Encoding the metadata failed (a non-string map key or similar bug).
    #[error("cannot encode metadata of checkpoint {checkpoint}: {source}")]
    Encode {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// The serializer's complaint.
        #[source]
        source: serde_json::Error,
    },
}

impl CheckpointError {
    /// True for errors that mean "this directory is not a completed
    /// checkpoint" (missing, cut off, corrupt or unreadable metadata), as
    /// opposed to storage failures.
    pub fn is_incomplete_checkpoint(&self) -> bool {
        matches!(
            self,
            Self::MissingMetadata { .. }
                | Self::NotMetadata { .. }
                | Self::Truncated { .. }
                | Self::ChecksumMismatch { .. }
                | Self::NewerVersion { .. }
                | Self::MalformedMetadata { .. }
                | Self::InconsistentMetadata { .. }
                | Self::Types(_)
        )
    }
}

/// Operator uids, displayed comma-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidList(pub Vec<OperatorUid>);

impl fmt::Display for UidList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, uid) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{uid}")?;
        }
        Ok(())
    }
}

/// One way a decoded `_metadata` can contradict itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataProblem {
    /// The body's version differs from the header's.
    #[error("the body says format version {body}, the header {header}")]
    VersionMismatch {
        /// Version in the header.
        header: u32,
        /// Version in the body.
        body: u32,
    },
    /// Two entries for one operator.
    #[error("operator {uid} appears twice")]
    DuplicateOperator {
        /// The uid.
        uid: OperatorUid,
    },
    /// A subtask index not below the operator's parallelism, or listed twice.
    #[error("operator {uid} lists subtask {subtask} twice or beyond its parallelism {parallelism}")]
    BadSubtask {
        /// The operator.
        uid: OperatorUid,
        /// The subtask.
        subtask: SubtaskIndex,
        /// The operator's parallelism.
        parallelism: u32,
    },
    /// A keyed handle whose key groups fall outside the max parallelism.
    #[error(
        "operator {uid} subtask {subtask} holds key groups {range} beyond max parallelism {max_parallelism}"
    )]
    KeyGroupsOutOfRange {
        /// The operator.
        uid: OperatorUid,
        /// The subtask.
        subtask: SubtaskIndex,
        /// The handle's key groups.
        range: KeyGroupRange,
        /// The operator's max parallelism.
        max_parallelism: u32,
    },
    /// Keyed state without key types.
    #[error("operator {uid} has keyed state but no key types")]
    MissingKeyTypes {
        /// The operator.
        uid: OperatorUid,
    },
    /// A state file path that would leave the directory it is relative to.
    #[error(
        "it names state file {path:?}, which is not a relative path inside its directory (no empty, '.' or '..' segments); the file was edited or damaged"
    )]
    StatePathOutside {
        /// The path.
        path: String,
    },
    /// A checkpoint that names a file of another checkpoint.
    #[error(
        "it names state file {path:?}, which is neither under its own checkpoint directory nor under shared/; the file was edited or damaged"
    )]
    ForeignStateFile {
        /// The path.
        path: String,
    },
    /// A database file whose local name is no plain file name.
    #[error("it names database file {name:?}, which is not a plain file name")]
    InvalidLocalName {
        /// The name.
        name: String,
    },
    /// Two states of one operator share a name.
    #[error("operator {uid} declares state {name:?} twice")]
    DuplicateState {
        /// The operator.
        uid: OperatorUid,
        /// The state name.
        name: String,
    },
}
