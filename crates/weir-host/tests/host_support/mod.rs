//! Shared by the host tests: a real `weir-host` process in a private
//! directory, subtask specs, and key/value encodings.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_array::{Array, BinaryArray};
use weir_host::client::{HOST_TOKEN_ENV, HostClient, HostOptions};
use weir_host::protocol::HostAddress;
use weir_host::{BackendSpec, KeyBatch, SubtaskSpec};
use weir_types::{
    KeyGroup, MaxParallelism, OperatorUid, SubtaskIndex, Value, ValueType, decode_value,
    encode_key, encode_value, key_group_of,
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
