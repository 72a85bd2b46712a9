//! A blocking connection to a state host, over its Unix socket or TCP.

use std::io::{self, BufReader};
use std::time::Duration;

use weir_coordinator::Tls;
use weir_types::CheckpointId;

use super::RemoteSession;
use crate::error::{HostError, Result};
use crate::protocol::{
    Expectation, Frame, FrameError, HostAddress, HostStatus, JobToken, PROTOCOL_VERSION, Reply,
    Request, RestoreRequest, Transport, decode_header, encode_header,
};
use crate::session::SubtaskSpec;

/// How long a client waits for one reply unless told otherwise. Generous:
/// a restore of large state or a big batch on RocksDB takes a while. A host
/// that dies is seen at once (EOF), not after this.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a TCP connect to a host on another executor may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a state host, after a successful handshake. Not
/// attached to a subtask yet: see [`HostClient::attach`].
#[derive(Debug)]
pub struct HostClient {
    /// Replies are read through the buffer; requests are written to the
    /// transport underneath in one piece each.
    stream: BufReader<Transport>,
    address: HostAddress,
    host_pid: u32,
    tcp_address: Option<String>,
    /// Set once the connection broke: every later call fails at once.
    broken: Option<String>,
}

impl HostClient {
    /// Connects to the host at `address` and presents `token`.
    ///
    /// A Unix socket without a host is an [`HostError::Io`] (start one with
    /// [`ensure_host`](super::ensure_host)); a TCP address without one is
    /// [`HostError::StateLost`]: the subtasks it owned are gone with it. A
    /// wrong token is [`HostError::Unauthorized`].
    pub fn connect(address: &HostAddress, token: &str) -> Result<Self> {
        Self::connect_with_timeout(address, token, DEFAULT_REPLY_TIMEOUT)
    }

    /// Like [`connect`](Self::connect), waiting at most `reply_timeout` for
    /// each reply.
    pub fn connect_with_timeout(
        address: &HostAddress,
        token: &str,
        reply_timeout: Duration,
    ) -> Result<Self> {
        Self::open(address, token, reply_timeout, None)
    }

    /// Like [`connect_with_timeout`](Self::connect_with_timeout), over TLS
    /// with the job's `tls` when the host is on another executor (a host
    /// started with TLS refuses plain TCP).
    pub fn open(
        address: &HostAddress,
        token: &str,
        reply_timeout: Duration,
        tls: Option<&Tls>,
    ) -> Result<Self> {
        let stream = address
            .connect(CONNECT_TIMEOUT.min(reply_timeout), tls)
            .map_err(|err| match address {
                HostAddress::Unix(_) => {
                    HostError::io(format!("connecting to the state host at {address}"), err)
                }
                HostAddress::Tcp(_) => HostError::StateLost(format!(
                    "the state host at {address} is unreachable ({err}); the state it held is \
                     lost with it"
                )),
            })?;
        let setup = |err| HostError::io(format!("configuring the connection to {address}"), err);
        stream
            .set_read_timeout(Some(reply_timeout))
            .map_err(setup)?;
        stream
            .set_write_timeout(Some(reply_timeout))
            .map_err(setup)?;
        let mut client = Self {
            stream: BufReader::new(stream),
            address: address.clone(),
            host_pid: 0,
            tcp_address: None,
            broken: None,
        };
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            token: JobToken::new(token),
        };
        match client.call(&hello, Vec::new())? {
            (
                Reply::Hello {
                    version,
                    host_pid,
                    tcp_address,
                },
                _,
            ) if version == PROTOCOL_VERSION => {
                client.host_pid = host_pid;
                client.tcp_address = tcp_address;
                Ok(client)
            }
            (reply, _) => Err(unexpected("hello", &reply)),
        }
    }

    /// The host's process id.
    pub fn host_pid(&self) -> u32 {
        self.host_pid
    }

    /// Where this client connected to.
    pub fn address(&self) -> &HostAddress {
        &self.address
    }

    /// Where the host listens on TCP (`host:port`), if it does: the address
    /// tasks on other executors use to reach the subtasks it owns.
    pub fn tcp_address(&self) -> Option<&str> {
        self.tcp_address.as_deref()
    }

    /// Serves `spec`'s state on this connection. The host answers
    /// [`HostError::StateLost`] unless it holds the state `expect` describes.
    pub fn attach(mut self, spec: SubtaskSpec, expect: Expectation) -> Result<RemoteSession> {
        let request = Request::Attach {
            spec: spec.clone(),
            expect,
        };
        match self.call(&request, Vec::new())? {
            (Reply::Attached { key_group_range }, _) => {
                Ok(RemoteSession::new(self, spec, key_group_range))
            }
            (reply, _) => Err(unexpected("attach", &reply)),
        }
    }

    /// Replaces the subtask's state in the host by stored state (the first
    /// task after the job restored), then serves it on this connection.
    pub fn restore(mut self, request: RestoreRequest) -> Result<RemoteSession> {
        let spec = request.spec.clone();
        match self.call(&Request::Restore(Box::new(request)), Vec::new())? {
            (Reply::Attached { key_group_range }, _) => {
                Ok(RemoteSession::new(self, spec, key_group_range))
            }
            (reply, _) => Err(unexpected("restore", &reply)),
        }
    }

    /// What the host holds and does.
    pub fn status(&mut self) -> Result<HostStatus> {
        match self.call(&Request::Status, Vec::new())? {
            (Reply::Status(status), _) => Ok(*status),
            (reply, _) => Err(unexpected("status", &reply)),
        }
    }

    /// Cancels the host's uploads for checkpoint `id` (the coordinator
    /// aborted it); returns once they deleted the files they wrote, with
    /// how many were canceled.
    pub fn abort_checkpoint(&mut self, id: CheckpointId) -> Result<usize> {
        match self.call(&Request::AbortCheckpoint { checkpoint: id }, Vec::new())? {
            (Reply::Aborted { canceled }, _) => Ok(canceled),
            (reply, _) => Err(unexpected("abort", &reply)),
        }
    }

    /// Makes the host serve `generation` of the job: it drops the state of
    /// older generations and refuses their tasks.
    pub fn start_generation(&mut self, generation: u64) -> Result<()> {
        self.call_done(&Request::StartGeneration { generation }, Vec::new())
            .map(|_| ())
    }

    /// Stops the host: it cancels its uploads (deleting what they wrote)
    /// before answering, then drops all state, removes its socket, address
    /// and working files, and exits.
    pub fn shutdown(mut self) -> Result<()> {
        self.call_done(&Request::Shutdown, Vec::new()).map(|_| ())
    }

    /// Sends a request expecting `Done`; returns the reply's payloads.
    pub(crate) fn call_done(
        &mut self,
        request: &Request,
        payloads: Vec<Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>> {
        match self.call(request, payloads)? {
            (Reply::Done, payloads) => Ok(payloads),
            (reply, _) => Err(unexpected("a state request", &reply)),
        }
    }

    /// Sends one request and reads its reply; an error reply becomes the
    /// matching [`HostError`].
    pub(crate) fn call(
        &mut self,
        request: &Request,
        payloads: Vec<Vec<u8>>,
    ) -> Result<(Reply, Vec<Vec<u8>>)> {
        if let Some(why) = &self.broken {
            return Err(HostError::StateLost(format!(
                "the connection to the state host broke earlier ({why})"
            )));
        }
        let frame = Frame {
            header: encode_header(request)?,
            payloads,
        };
        if let Err(err) = frame.write_to(self.stream.get_mut()) {
            return Err(self.broke(err));
        }
        let reply = match Frame::read_from(&mut self.stream) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                return Err(self.broke(FrameError::Io(io::ErrorKind::UnexpectedEof.into())));
            }
            Err(err) => return Err(self.broke(err)),
        };
        match decode_header::<Reply>(&reply.header)? {
            Reply::Error(err) => Err(HostError::from(err)),
            header => Ok((header, reply.payloads)),
        }
    }

    /// Marks the connection broken and explains why as `StateLost`: a host
    /// that died or stopped answering took the state with it.
    fn broke(&mut self, err: FrameError) -> HostError {
        let why = match &err {
            FrameError::Io(e) => match e.kind() {
                io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::NotConnected => format!(
                    "state host {} at {} closed the connection (it died or exited): {e}",
                    self.host_pid, self.address
                ),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
                    "state host {} at {} did not answer in time",
                    self.host_pid, self.address
                ),
                _ => format!(
                    "talking to state host {} at {} failed: {e}",
                    self.host_pid, self.address
                ),
            },
            FrameError::Malformed(message) => {
                format!(
                    "state host {} sent a malformed reply: {message}",
                    self.host_pid
                )
            }
        };
        self.broken = Some(why.clone());
        HostError::StateLost(why)
    }
}

fn unexpected(what: &str, reply: &Reply) -> HostError {
    HostError::Protocol(format!("unexpected reply to {what}: {reply:?}"))
}
