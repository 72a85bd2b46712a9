//! One client connection: the handshake (token first, under tight limits
//! and one deadline), then one reply per request for the subtask the
//! connection is attached to, and the driver's control requests.

use std::io::BufReader;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::CANCEL_WAIT;
use super::host::{Host, SharedSlot, SlotKey, Tally, lock_slot};
use super::op::{Answer, SlotOp, done};
use super::slot::{Slot, check_attach};
use super::watchdog::ExitReason;
use crate::engine::{RestoreOrigin, Subtask};
use crate::error::{HostError, Result};
use crate::protocol::{
    DeadlineReader, Expectation, Frame, FrameError, FrameLimits, PROTOCOL_VERSION, Reply, Request,
    RestoreRequest, Transport, WireError, decode_header, encode_header,
};
use crate::session::{SubtaskSession, SubtaskSpec};

/// How long a client may take for its whole handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `stream` until the client leaves or breaks the protocol. The
/// tallies count the connection (and its handshake) for as long as they
/// are held, whichever way this ends.
pub(crate) fn serve(host: &Arc<Host>, stream: Transport, handshake: Tally, _connection: Tally) {
    let peer = stream.peer();
    if let Err(err) = serve_inner(host, stream, handshake) {
        eprintln!("weir-host: connection from {peer} closed: {err}");
    }
}

fn serve_inner(host: &Arc<Host>, stream: Transport, handshake: Tally) -> Result<()> {
    let io = |what: &str, err| HostError::io(format!("{what} the client socket"), err);
    let mut reader = BufReader::new(stream);
    if !shake_hands(host, &mut reader)? {
        return Ok(());
    }
    drop(handshake);
    // Tasks may pause for a long time between requests; a dead client
    // shows as EOF, so no timeout is needed from here on.
    reader
        .get_ref()
        .set_read_timeout(None)
        .map_err(|e| io("configuring", e))?;
    let mut session = Session {
        host: Arc::clone(host),
        slot: None,
    };
    let remote = reader.get_ref().is_remote();
    let count = |payloads: &[Vec<u8>]| {
        if remote {
            let bytes: usize = payloads.iter().map(Vec::len).sum();
            host.tcp_payload_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
        }
    };
    loop {
        let frame = match Frame::read_from(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(FrameError::Io(err)) => return Err(io("reading", err)),
            Err(FrameError::Malformed(message)) => {
                let err = HostError::Protocol(message);
                reply_error(reader.get_mut(), &err)?;
                return Err(err);
            }
        };
        let request = decode_header::<Request>(&frame.header);
        let shutdown = matches!(request, Ok(Request::Shutdown));
        count(&frame.payloads);
        let outcome = request.and_then(|request| session.handle(request, &frame.payloads));
        if shutdown && outcome.is_ok() {
            // Before the answer: whoever got it never finds this host serving again.
            host.set_stopping();
        }
        match outcome {
            Ok((reply, payloads)) => {
                count(&payloads);
                write(reader.get_mut(), &reply, payloads)?;
            }
            Err(err @ HostError::Protocol(_)) => {
                reply_error(reader.get_mut(), &err)?;
                return Err(err);
            }
            Err(err) => reply_error(reader.get_mut(), &err)?,
        }
        if shutdown {
            host.request_stop(ExitReason::Shutdown);
            return Ok(());
        }
    }
}

/// Reads the hello under [`FrameLimits::HELLO`] and one deadline, checks
/// the token before anything else, and answers. `false`: the peer left
/// without a word.
fn shake_hands(host: &Host, reader: &mut BufReader<Transport>) -> Result<bool> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    // Nothing is buffered yet: the deadline reader reads the socket itself.
    let hello = Frame::read_limited(
        &mut DeadlineReader::new(reader.get_mut(), deadline),
        &FrameLimits::HELLO,
    );
    let writer = reader.get_mut();
    let hello = match hello {
        Ok(Some(frame)) => frame,
        Ok(None) => return Ok(false),
        Err(FrameError::Io(err))
            if matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            return Err(HostError::Protocol(format!(
                "the peer did not complete its handshake within {HANDSHAKE_TIMEOUT:?}"
            )));
        }
        Err(FrameError::Io(err)) => {
            return Err(HostError::io("reading the handshake from the peer", err));
        }
        Err(FrameError::Malformed(message)) => {
            let err = HostError::Protocol(format!("in the handshake: {message}"));
            reply_error(writer, &err)?;
            return Err(err);
        }
    };
    // The replies below are small; the deadline covers sending them too.
    let left = deadline.saturating_duration_since(Instant::now());
    writer
        .set_write_timeout(Some(left.max(Duration::from_millis(1))))
        .map_err(|e| HostError::io("configuring the client socket", e))?;
    let err = match decode_header::<Request>(&hello.header) {
        Ok(Request::Hello { token, .. }) if !host.authorizes(&token) => HostError::Unauthorized,
        Ok(Request::Hello { version, .. }) if version != PROTOCOL_VERSION => {
            HostError::Protocol(format!(
                "the client speaks protocol version {version}, this host {PROTOCOL_VERSION}; \
                 use a client and host of the same Weir release"
            ))
        }
        Ok(Request::Hello { .. }) => {
            let hello = Reply::Hello {
                version: PROTOCOL_VERSION,
                host_pid: std::process::id(),
                tcp_address: host.tcp_address.clone(),
            };
            write(writer, &hello, Vec::new())?;
            writer
                .set_write_timeout(None)
                .map_err(|e| HostError::io("configuring the client socket", e))?;
            return Ok(true);
        }
        Ok(_) => HostError::Protocol("a connection must start with hello".into()),
        Err(err) => err,
    };
    reply_error(writer, &err)?;
    Err(err)
}

fn write(writer: &mut Transport, reply: &Reply, payloads: Vec<Vec<u8>>) -> Result<()> {
    Frame {
        header: encode_header(reply)?,
        payloads,
    }
    .write_to(writer)
    .map_err(HostError::from)
}

fn reply_error(writer: &mut Transport, err: &HostError) -> Result<()> {
    write(writer, &Reply::Error(WireError::from(err)), Vec::new())
}

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
                let canceled = self.host.abort_checkpoint(checkpoint, CANCEL_WAIT);
                eprintln!(
                    "weir-host: checkpoint {checkpoint} aborted; {canceled} uploads canceled"
                );
                Ok((Reply::Aborted { canceled }, Vec::new()))
            }
            Request::StartGeneration { generation } => {
                self.host.enter_generation(generation)?;
                Ok(done())
            }
            Request::Shutdown => {
                // Answered once the uploads stopped and deleted their files;
                // the rest of the exit follows on the host's main thread.
                let canceled = self.host.cancel_uploads(None, CANCEL_WAIT);
                eprintln!("weir-host: shutdown requested; {canceled} uploads canceled");
                Ok(done())
            }
            request => {
                let slot = self.slot.as_ref().ok_or_else(|| {
                    HostError::InvalidRequest(
                        "attach (or restore) a subtask on this connection before using state"
                            .into(),
                    )
                })?;
                let op = SlotOp::decode(request, payloads)?;
                let mut guard = lock_slot(slot)?;
                op.apply(&self.host, guard.usable()?)
            }
        }
    }

    fn attach(&mut self, spec: SubtaskSpec, expect: &Expectation) -> Result<Answer> {
        self.host.enter_generation(expect.generation)?;
        let key: SlotKey = (spec.uid.clone(), spec.subtask);
        let slot = match self.host.slot(&key) {
            Some(slot) => {
                {
                    let mut guard = lock_slot(&slot)?;
                    let held = guard.usable()?;
                    check_compatible(held.subtask.spec(), &spec)?;
                    check_attach(&spec, Some(&held.facts), expect)?;
                    if let Some(types) = spec.key_types.clone() {
                        held.subtask.set_key_types(types)?;
                    }
                }
                slot
            }
            None => {
                check_attach(&spec, None, expect)?;
                let dir = self.host.slot_dir(&key);
                self.host
                    .slot_or_open(expect.generation, key, || Slot::open(spec.clone(), &dir))?
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
        self.host.enter_generation(request.generation)?;
        let spec = request.spec.clone();
        let key: SlotKey = (spec.uid.clone(), spec.subtask);
        let storage = request.storage.open()?.snapshot_storage();
        let dir = self.host.slot_dir(&key);
        let plan = request.subtask_restore();
        let origin = RestoreOrigin {
            checkpoint: request.restored_from,
            location: &request.storage.url,
        };
        let subtask = self.host.runtime.block_on(Subtask::restore(
            spec,
            &dir,
            &plan,
            &[],
            (&storage, origin),
        ))?;
        let mut slot = Slot::new(subtask, &dir);
        slot.facts.restored_from = Some(request.restored_from);
        slot.facts.final_epoch = Some(request.cut);
        let range = slot.subtask.key_group_range();
        self.slot = Some(self.host.replace_slot(request.generation, key, slot)?);
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
