//! The executor-local state host (docs/architecture.md, "State hosts").
//!
//! - [`SubtaskSession`] is the batched state access of one operator subtask.
//!   Two implementations: the in-process engine ([`engine`], all subtasks of
//!   an operator in [`local`], used by `weir.testing`) and the client of a
//!   state host process (`client`), so both paths run the same Python code.
//! - [`typed::TypedSession`] is what a language binding programs against: a
//!   session plus the registered states' types and the key types, taking and
//!   giving values in the binding's own objects.
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
mod restore_ticket;
pub mod server;
mod session;
pub mod typed;

pub use batch::KeyBatch;
pub use error::{HostError, RemoteErrorKind, Result};
pub use restore_ticket::RestoreTicket;
pub use session::{
    Aggregation, BackendSpec, MapEntries, NativeAggregate, SubtaskSession, SubtaskSpec,
};
