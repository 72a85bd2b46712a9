//! One client connection: the handshake, then one reply per request for
//! the subtask the connection is attached to.

use std::io::{BufReader, BufWriter};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, BinaryArray};
use weir_state::StateId;

use super::barrier;
use super::host::{Host, SharedSlot, SlotKey, lock_slot};
use super::slot::{Slot, check_attach};
use crate::engine::Subtask;
use crate::error::{HostError, Result};
use crate::protocol::payload::{self, column};
use crate::protocol::{
    Expectation, Frame, FrameError, PROTOCOL_VERSION, Reply, Request, RestoreRequest, WireError,
    decode_header, encode_header,
};
use crate::session::{SubtaskSession, SubtaskSpec};

/// How long a client may take to send its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `stream` until the client leaves or breaks the protocol.
pub(crate) fn serve(host: &Arc<Host>, stream: UnixStream) {
    host.connection_opened();
    if let Err(err) = serve_inner(host, stream) {
        eprintln!("weir-host: connection closed: {err}");
    }
    host.connection_closed();
}

fn serve_inner(host: &Arc<Host>, stream: UnixStream) -> Result<()> {
    let io = |what: &str, err| HostError::io(format!("{what} the client socket"), err);
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| io("configuring", e))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| io("cloning", e))?);
    let mut writer = BufWriter::new(stream.try_clone().map_err(|e| io("cloning", e))?);
    let Some(hello) = Frame::read_from(&mut reader).map_err(HostError::from)? else {
        return Ok(());
    };
    match decode_header::<Request>(&hello.header) {
        Ok(Request::Hello { version, token }) => {
            if !host.authorizes(&token) {
                reply_error(&mut writer, &HostError::Unauthorized)?;
                return Err(HostError::Unauthorized);
            }
            if version != PROTOCOL_VERSION {
                let err = HostError::Protocol(format!(
                    "the client speaks protocol version {version}, this host {PROTOCOL_VERSION}; \
                     use a client and host of the same Weir release"
                ));
                reply_error(&mut writer, &err)?;
                return Err(err);
            }
        }
        Ok(_) => {
            let err = HostError::Protocol("a connection must start with hello".into());
            reply_error(&mut writer, &err)?;
            return Err(err);
        }
        Err(err) => {
            reply_error(&mut writer, &err)?;
            return Err(err);
        }
    }
    let hello = Reply::Hello {
        version: PROTOCOL_VERSION,
        host_pid: std::process::id(),
    };
    write(&mut writer, &hello, Vec::new())?;
    // Tasks may pause for a long time between requests; a dead client
    // shows as EOF, so no timeout is needed from here on.
    stream
        .set_read_timeout(None)
        .map_err(|e| io("configuring", e))?;

    let mut session = Session {
        host: Arc::clone(host),
        slot: None,
    };
    loop {
        let frame = match Frame::read_from(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(FrameError::Io(err)) => return Err(io("reading", err)),
            Err(FrameError::Malformed(message)) => {
                let err = HostError::Protocol(message);
                reply_error(&mut writer, &err)?;
                return Err(err);
            }
        };
        host.touch();
        let outcome = decode_header::<Request>(&frame.header)
            .and_then(|request| session.handle(request, &frame.payloads));
        host.touch();
        match outcome {
            Ok((reply, payloads)) => write(&mut writer, &reply, payloads)?,
            Err(err @ HostError::Protocol(_)) => {
                reply_error(&mut writer, &err)?;
                return Err(err);
            }
            Err(err) => reply_error(&mut writer, &err)?,
        }
    }
}

fn write(writer: &mut BufWriter<UnixStream>, reply: &Reply, payloads: Vec<Vec<u8>>) -> Result<()> {
    Frame {
        header: encode_header(reply)?,
        payloads,
    }
    .write_to(writer)
    .map_err(HostError::from)
}

fn reply_error(writer: &mut BufWriter<UnixStream>, err: &HostError) -> Result<()> {
    write(writer, &Reply::Error(WireError::from(err)), Vec::new())
}

/// A reply header and its payloads.
type Answer = (Reply, Vec<Vec<u8>>);

/// The connection's view: which subtask it serves.
struct Session {
    host: Arc<Host>,
    slot: Option<SharedSlot>,
}

impl Session {
    fn handle(&mut self, request: Request, payloads: &[Vec<u8>]) -> Result<Answer> {
        match request {
            Request::Hello { .. } => Err(HostError::Protocol(
                "hello may only start a connection".into(),
            )),
            Request::Attach { spec, expect } => self.attach(spec, &expect),
            Request::Restore(restore) => self.restore(*restore),
            Request::Status => Ok((Reply::Status(Box::new(self.host.status())), Vec::new())),
            Request::AbortCheckpoint { checkpoint } => {
                let canceled = self.host.cancel_uploads(checkpoint);
                eprintln!(
                    "weir-host: checkpoint {checkpoint} aborted; {canceled} uploads canceled"
                );
                Ok(done())
            }
            request => {
                let slot = self.slot.as_ref().ok_or_else(|| {
                    HostError::InvalidRequest(
                        "attach (or restore) a subtask on this connection before using state"
                            .into(),
                    )
                })?;
                let mut guard = lock_slot(slot)?;
                let slot = guard.usable()?;
                on_slot(&self.host, slot, request, payloads)
            }
        }
    }

    fn attach(&mut self, spec: SubtaskSpec, expect: &Expectation) -> Result<Answer> {
        let key: SlotKey = (spec.uid.clone(), spec.subtask);
        let existing = self.host.slot(&key);
        let slot = match existing {
            Some(slot) => {
                {
                    let mut guard = lock_slot(&slot)?;
                    check_compatible(guard.subtask.spec(), &spec)?;
                    check_attach(&spec, Some(&guard.facts), expect)?;
                    if let Some(types) = spec.key_types.clone() {
                        guard.subtask.set_key_types(types)?;
                    }
                }
                slot
            }
            None => {
                check_attach(&spec, None, expect)?;
                let dir = self.host.slot_dir(&key);
                self.host
                    .slot_or_open(key, || Slot::open(spec.clone(), &dir))?
            }
        };
        let range = lock_slot(&slot)?.subtask.key_group_range();
        self.slot = Some(slot);
        Ok((
            Reply::Attached {
                key_group_range: range,
            },
            Vec::new(),
        ))
    }

    fn restore(&mut self, request: RestoreRequest) -> Result<Answer> {
        let spec = request.spec.clone();
        let key: SlotKey = (spec.uid.clone(), spec.subtask);
        let storage = request.storage.open()?.snapshot_storage();
        let dir = self.host.slot_dir(&key);
        let mut slot = Slot::open(spec, &dir)?;
        let plan = request.subtask_restore();
        self.host
            .runtime
            .block_on(slot.subtask.restore(&plan, &storage))?;
        slot.facts.restored_from = Some(request.restored_from);
        slot.facts.final_epoch = Some(request.cut);
        let range = slot.subtask.key_group_range();
        self.slot = Some(self.host.replace_slot(key, slot));
        Ok((
            Reply::Attached {
                key_group_range: range,
            },
            Vec::new(),
        ))
    }
}

/// A subtask seen again must keep its shape; another shape means another
/// run of the job shares this host directory.
fn check_compatible(held: &SubtaskSpec, wanted: &SubtaskSpec) -> Result<()> {
    if held.parallelism != wanted.parallelism
        || held.max_parallelism != wanted.max_parallelism
        || held.backend != wanted.backend
    {
        return Err(HostError::StateLost(format!(
            "this state host holds {}/{} at parallelism {}, max parallelism {}, backend {:?}; \
             the task runs it at parallelism {}, max parallelism {}, backend {:?}. Restore the \
             job (the restore replaces the state) or give each run of a job its own host \
             directory",
            held.uid,
            held.subtask,
            held.parallelism,
            held.max_parallelism,
            held.backend,
            wanted.parallelism,
            wanted.max_parallelism,
            wanted.backend
        )));
    }
    Ok(())
}

fn done() -> Answer {
    (Reply::Done, Vec::new())
}

fn values(array: ArrayRef) -> Result<Answer> {
    Ok((Reply::Done, vec![payload::encode_values(array)?]))
}

/// Serves a request on the attached subtask (its lock held).
fn on_slot(
    host: &Arc<Host>,
    slot: &mut Slot,
    request: Request,
    payloads: &[Vec<u8>],
) -> Result<Answer> {
    let keys = || payload::decode_keys(&payload::nth(payloads, 0)?);
    let second = || payload::nth(payloads, 1);
    let binary = |name: &str| -> Result<BinaryArray> { payload::typed(&second()?, name) };
    let state = |id: u32| StateId(id);
    let subtask: &mut Subtask = &mut slot.subtask;
    match request {
        Request::RegisterState { descriptor } => {
            let id = subtask.register_state(&descriptor)?;
            Ok((Reply::State { id: id.0 }, Vec::new()))
        }
        Request::RegisterOperatorState { name, mode } => {
            let id = subtask.register_operator_state(&name, mode)?;
            Ok((Reply::State { id: id.0 }, Vec::new()))
        }
        Request::Begin {
            epoch,
            attempt,
            final_epoch,
        } => {
            subtask.begin(epoch, attempt, final_epoch)?;
            slot.note_final();
            Ok(done())
        }
        Request::Commit { epoch, attempt } => {
            subtask.commit(epoch, attempt)?;
            slot.facts.last_committed = slot.facts.last_committed.max(Some(epoch));
            Ok(done())
        }
        Request::GetValues { state: id } => {
            values(Arc::new(subtask.get_values(state(id), &keys()?)?))
        }
        Request::PutValues { state: id } => {
            subtask.put_values(state(id), &keys()?, &binary(column::VALUE)?)?;
            Ok(done())
        }
        Request::GetBatch { state: id } => values(subtask.get_batch(state(id), &keys()?)?),
        Request::PutBatch { state: id } => {
            let array = payload::array(&second()?, column::VALUE)?;
            subtask.put_batch(state(id), &keys()?, &array)?;
            Ok(done())
        }
        Request::Aggregate {
            state: id,
            function,
        } => {
            let inputs = payload::array(&second()?, column::VALUE)?;
            values(subtask.aggregate(state(id), &keys()?, &inputs, function)?)
        }
        Request::GetLists { state: id } => {
            values(Arc::new(subtask.get_lists(state(id), &keys()?)?))
        }
        Request::AppendLists { state: id } => {
            subtask.append_lists(state(id), &keys()?, &binary(column::VALUE)?)?;
            Ok(done())
        }
        Request::ReplaceLists { state: id } => {
            subtask.replace_lists(state(id), &keys()?, &binary(column::VALUE)?)?;
            Ok(done())
        }
        Request::MapEntries { state: id } => {
            let entries = subtask.map_entries(state(id), &keys()?)?;
            Ok((Reply::Done, payload::encode_map_entries(&entries)?))
        }
        Request::MapGet { state: id } => {
            let user_keys = binary(column::USER_KEY)?;
            values(Arc::new(subtask.map_get(
                state(id),
                &keys()?,
                &user_keys,
            )?))
        }
        Request::MapPut { state: id } => {
            let (user_keys, map_values) = (binary(column::USER_KEY)?, binary(column::VALUE)?);
            subtask.map_put(state(id), &keys()?, &user_keys, &map_values)?;
            Ok(done())
        }
        Request::Clear { state: id } => {
            subtask.clear(state(id), &keys()?)?;
            Ok(done())
        }
        Request::OperatorState { state: id } => {
            let items = subtask.operator_state(state(id))?;
            Ok((Reply::Done, vec![payload::encode_items(&items)?]))
        }
        Request::SetOperatorState { state: id } => {
            let items = payload::decode_items(&payload::nth(payloads, 0)?)?;
            subtask.set_operator_state(state(id), items)?;
            Ok(done())
        }
        Request::Barrier(request) => Ok((
            Reply::Barrier(barrier::take(host, slot, &request)?),
            Vec::new(),
        )),
        Request::Hello { .. }
        | Request::Attach { .. }
        | Request::Restore(_)
        | Request::Status
        | Request::AbortCheckpoint { .. } => Err(HostError::Protocol(
            "a connection-level request reached the subtask handler".into(),
        )),
    }
}
