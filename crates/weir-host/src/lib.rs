//! The executor-local state host (ARCHITECTURE section 1).
//!
//! - [`SubtaskSession`] is the batched state access of one operator subtask,
//!   the only interface the Python SDK programs against. Two implementations:
//!   the in-process engine ([`engine`], used by `weir.testing`) and the client
//!   of a state host process (`client`), so both paths run the same Python code.
//! - Batches are Arrow arrays: keys are a [`KeyBatch`] (key group + encoded key
//!   per row), values are nullable `BinaryArray`s of values encoded with
//!   [`weir_types::encode_value`] (list states: list payloads, see
//!   [`weir_state::push_list_item`]).

mod batch;
pub mod client;
pub mod engine;
mod error;
pub mod local;
pub mod protocol;
pub mod server;
mod session;

pub use batch::KeyBatch;
pub use error::{HostError, RemoteErrorKind, Result};
pub use session::{BackendSpec, MapEntries, NativeAggregate, SubtaskSession, SubtaskSpec};
