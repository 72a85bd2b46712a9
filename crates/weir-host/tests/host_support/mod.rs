//! Shared by the host tests: a real `weir-host` process in a private
//! directory, subtask specs, and key/value encodings.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_array::{Array, BinaryArray};
use weir_host::client::{HOST_TOKEN_ENV, HostClient, HostOptions};
use weir_host::protocol::{
    Expectation, Frame, FrameError, HostAddress, JobToken, PROTOCOL_VERSION, Reply, Request,
    Transport, decode_header, encode_header,
};
use weir_host::{BackendSpec, KeyBatch, SubtaskSession, SubtaskSpec};
use weir_types::{
    Attempt, Epoch, KeyGroup, MaxParallelism, OperatorUid, StateDescriptor, StateKind,
    SubtaskIndex, Value, ValueType, decode_value, encode_key, encode_value, key_group_of,
};

pub const TOKEN: &str = "host-test-token-93c1";
pub const MAX: u32 = 128;

/// The host binary cargo built for these tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir-host"))
}

/// Options for `ensure_host` with this binary.
pub fn options() -> HostOptions {
    HostOptions {
        binary: Some(binary()),
        // A test process that dies takes its hosts with it.
        owner_pid: Some(std::process::id()),
        ..HostOptions::default()
    }
}

/// `--owner-pid <this test process>` unless `args` name another owner.
fn owner(args: &[&str]) -> Vec<String> {
    if args.contains(&"--owner-pid") {
        Vec::new()
    } else {
        vec!["--owner-pid".into(), std::process::id().to_string()]
    }
}

/// A host process started directly; killed when dropped.
pub struct Host {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl Host {
    /// Starts a host in a fresh private directory and waits until it answers.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("wh")
            .tempdir()
            .expect("temp dir");
        let host_dir = dir.path().join("h");
        let child = Command::new(binary())
            .arg("--dir")
            .arg(&host_dir)
            .args(args)
            .args(owner(args))
            .env(HOST_TOKEN_ENV, TOKEN)
            .stdin(Stdio::null())
            .spawn()
            .expect("starts weir-host");
        let host = Self { child, dir };
        host.wait_ready();
        host
    }

    /// The host directory.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("h")
    }

    /// Its Unix socket.
    pub fn address(&self) -> HostAddress {
        HostAddress::of_dir(self.path())
    }

    pub fn connect(&self) -> HostClient {
        HostClient::connect(&self.address(), TOKEN).expect("connects")
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while HostClient::connect(&self.address(), TOKEN).is_err() {
            assert!(
                Instant::now() < deadline,
                "the host never accepted a connection"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn spec(uid: &str, subtask: u32, parallelism: u32, backend: BackendSpec) -> SubtaskSpec {
    SubtaskSpec {
        uid: OperatorUid::new(uid).expect("valid uid"),
        subtask: SubtaskIndex(subtask),
        parallelism,
        max_parallelism: MaxParallelism::new(MAX).expect("valid"),
        backend,
        key_types: Some(vec![ValueType::Int64]),
    }
}

/// The int64 keys among `0..limit` that belong to subtask `subtask` of `parallelism`.
pub fn owned_ids(subtask: u32, parallelism: u32, limit: i64) -> Vec<i64> {
    let max = MaxParallelism::new(MAX).expect("valid");
    (0..limit)
        .filter(|&i| {
            let kg = key_group_of(&[Value::Int64(i)], max);
            max.subtask_of(kg, parallelism).expect("valid").0 == subtask
        })
        .collect()
}

/// A batch of int64 keys.
pub fn keys(ids: &[i64]) -> KeyBatch {
    let max = MaxParallelism::new(MAX).expect("valid");
    let encoded: Vec<(KeyGroup, Vec<u8>)> = ids
        .iter()
        .map(|&i| {
            let cols = [Value::Int64(i)];
            let mut bytes = Vec::new();
            encode_key(&cols, &[ValueType::Int64], &mut bytes).expect("encodes");
            (key_group_of(&cols, max), bytes)
        })
        .collect();
    KeyBatch::from_pairs(encoded.iter().map(|(g, k)| (*g, k.as_slice())))
}

pub fn int(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&Value::Int64(v), &ValueType::Int64, &mut out).expect("encodes");
    out
}

pub fn ints(values: &[Option<i64>]) -> BinaryArray {
    let encoded: Vec<Option<Vec<u8>>> = values.iter().map(|v| v.map(int)).collect();
    BinaryArray::from_iter(encoded)
}

pub fn decoded(array: &BinaryArray) -> Vec<Option<i64>> {
    (0..array.len())
        .map(|i| {
            array.is_valid(i).then(|| {
                match decode_value(array.value(i), &ValueType::Int64).expect("decodes") {
                    Value::Int64(v) => v,
                    other => panic!("not an int64: {other}"),
                }
            })
        })
        .collect()
}

/// Whether process `pid` has exited (polls until `limit`).
pub fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// How long a [`Raw`] client awaits a reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A client that speaks raw frames, for what a well-behaved client never sends.
pub struct Raw {
    pub stream: Transport,
}

impl Raw {
    /// Connects without a handshake; replies are awaited at most 30 s.
    pub fn connect(address: &HostAddress) -> Self {
        let stream = match address {
            HostAddress::Unix(path) => {
                Transport::Unix(std::os::unix::net::UnixStream::connect(path).expect("connects"))
            }
            HostAddress::Tcp(address) => {
                Transport::Tcp(std::net::TcpStream::connect(address).expect("connects"))
            }
        };
        let raw = Self { stream };
        raw.timeout(REPLY_TIMEOUT);
        raw
    }

    /// Connects and completes the handshake.
    pub fn authenticated(address: &HostAddress) -> Self {
        let mut raw = Self::connect(address);
        let reply = raw.call(
            &Request::Hello {
                version: PROTOCOL_VERSION,
                token: JobToken::new(TOKEN),
            },
            Vec::new(),
        );
        assert!(matches!(reply, Some(Reply::Hello { .. })), "{reply:?}");
        raw
    }

    pub fn timeout(&self, limit: Duration) {
        self.stream.set_read_timeout(Some(limit)).expect("sets");
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self.stream, bytes)
    }

    /// Sends `bytes` one at a time until the host closes the connection;
    /// returns how many it took. Each byte comes well within any per-read
    /// timeout; all of them take far longer than a handshake may.
    pub fn trickle(&mut self, bytes: &[u8]) -> usize {
        let pause = Duration::from_millis(700);
        assert!(pause * u32::try_from(bytes.len()).expect("fits") > Duration::from_secs(30));
        let mut sent = 0;
        for byte in bytes {
            if self.send_bytes(&[*byte]).is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(pause);
            if self.closed_by_host() {
                break;
            }
        }
        sent
    }

    /// Whether the host closed the connection (a read sees EOF or an error
    /// at once); the host must not have answered.
    fn closed_by_host(&mut self) -> bool {
        self.timeout(Duration::from_millis(1));
        let mut byte = [0u8; 1];
        let closed = match std::io::Read::read(&mut self.stream, &mut byte) {
            Ok(0) => true,
            Ok(_) => panic!("the host answered an incomplete hello"),
            Err(err) => !matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        self.timeout(REPLY_TIMEOUT);
        closed
    }

    /// The next reply; `None` once the host closed the connection.
    pub fn reply(&mut self) -> Option<Reply> {
        match Frame::read_from(&mut self.stream) {
            Ok(Some(frame)) => Some(decode_header(&frame.header).expect("a reply header")),
            Ok(None) => None,
            Err(FrameError::Io(err)) if err.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(err) => panic!("no reply: {err}"),
        }
    }

    pub fn call(&mut self, request: &Request, payloads: Vec<Vec<u8>>) -> Option<Reply> {
        let frame = Frame {
            header: encode_header(request).expect("encodes"),
            payloads,
        };
        let mut bytes = Vec::new();
        frame.write_to(&mut bytes).expect("encodes");
        // A host that closed the connection early shows in the reply.
        let _ = self.send_bytes(&bytes);
        self.reply()
    }
}

/// A field of `/proc/<pid>/status` in KiB (`VmSize`, `VmHWM`, ...).
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Waits until `check` holds (polls until `limit`); whether it did.
pub fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A value state of int64 counts.
pub fn count() -> StateDescriptor {
    StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid")
}

/// Epoch 1 of `avg/0` (parallelism 1) on `backend`: key 1 set to `value`, committed.
pub fn write_epoch_one(client: HostClient, backend: BackendSpec, value: i64) {
    let mut session = client
        .attach(spec("avg", 0, 1, backend), Expectation::fresh())
        .expect("attaches");
    let state = session.register_state(&count()).expect("registers");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    session
        .put_values(state, &keys(&[1]), &ints(&[Some(value)]))
        .expect("writes");
    session.commit(Epoch(1), Attempt(0)).expect("commits");
}

/// Key 1 of `avg/0` as the task of epoch 2 (epoch 1 final) sees it.
pub fn read_epoch_two(
    client: HostClient,
    backend: BackendSpec,
) -> weir_host::Result<Vec<Option<i64>>> {
    let after_epoch_1 = Expectation {
        final_epoch: Some(Epoch(1)),
        ..Expectation::fresh()
    };
    let mut session = client.attach(spec("avg", 0, 1, backend), after_epoch_1)?;
    let state = session.register_state(&count())?;
    session.begin(Epoch(2), Attempt(0), Some(Epoch(1)))?;
    Ok(decoded(&session.get_values(state, &keys(&[1]))?))
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                files_under(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}
