//! The state host protocol: framed messages over a Unix socket or TCP.
//!
//! Every message is a [`Frame`]: a JSON header ([`Request`] or [`Reply`])
//! and zero or more Arrow IPC payloads ([`payload`]). A connection starts
//! with [`Request::Hello`] carrying the protocol version and the job token;
//! then the client attaches a subtask and sends requests, one reply per
//! request, in order. Where the host keeps its socket is a [`HostDir`];
//! where a client finds a host is a [`HostAddress`].

mod dir;
mod frame;
mod message;
pub mod payload;
mod transport;

pub use crate::engine::SnapshotFormat;
pub use dir::HostDir;
pub use frame::{
    Frame, FrameError, FrameLimits, MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES, MAX_PAYLOADS,
};
pub use message::{
    AckTarget, BarrierReply, BarrierRequest, Expectation, HostStatus, JobToken, PROTOCOL_VERSION,
    Reply, Request, RestoreRequest, StorageRef, SubtaskStatus, WireError, WireErrorKind,
    decode_header, encode_header,
};
pub(crate) use transport::DeadlineReader;
pub use transport::{HostAddress, Transport};
