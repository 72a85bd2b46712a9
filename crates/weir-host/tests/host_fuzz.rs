//! Fuzzing the host's input paths with proptest: arbitrary and mutated
//! bytes into frame reading, header and payload decoding, and a live host's
//! handshake and requests. Every input may fail; none may panic, hang,
//! poison a subtask or make the host allocate without bound.
//!
//! Quick by default; `WEIR_FUZZ_CASES=<n>` runs `n` cases per target.

mod host_support;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, BinaryArray, Int64Array};
use host_support::{
    Host, Raw, TOKEN, count, eventually, keys, proc_kib, read_epoch_two, spec, write_epoch_one,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use weir_host::protocol::payload::{self, column};
use weir_host::protocol::{
    Expectation, Frame, FrameLimits, JobToken, PROTOCOL_VERSION, Reply, Request, decode_header,
    encode_header,
};
use weir_host::{BackendSpec, MapEntries, SubtaskSession};

fn cases(quick: u32) -> u32 {
    std::env::var("WEIR_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(quick)
}

fn runner(quick: u32) -> TestRunner {
    TestRunner::new(Config {
        cases: cases(quick),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Valid encodings of every payload shape the protocol uses.
fn valid_payloads() -> Vec<Vec<u8>> {
    let values: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]));
    let entries = MapEntries {
        offsets: vec![0, 1, 2],
        user_keys: BinaryArray::from(vec![&b"u"[..], b"v"]),
        values: BinaryArray::from(vec![Some(&b"1"[..]), None]),
    };
    let mut all = vec![
        payload::encode_keys(&keys(&[1, 2, 3])).expect("encodes"),
        payload::encode_values(values).expect("encodes"),
        payload::encode_items(&[b"a".to_vec(), Vec::new()]).expect("encodes"),
    ];
    all.extend(payload::encode_map_entries(&entries).expect("encodes"));
    all
}

/// Byte edits: (position fraction, new byte), applied to a copy.
fn mutate(base: &[u8], edits: &[(f64, u8)], cut: Option<f64>) -> Vec<u8> {
    let mut out = base.to_vec();
    if out.is_empty() {
        return out;
    }
    for &(at, byte) in edits {
        let i = ((at * out.len() as f64) as usize).min(out.len() - 1);
        out[i] = byte;
    }
    if let Some(cut) = cut {
        out.truncate((cut * out.len() as f64) as usize);
    }
    out
}

fn edits() -> impl Strategy<Value = (Vec<(f64, u8)>, Option<f64>)> {
    (
        prop::collection::vec((0.0..1.0f64, any::<u8>()), 1..6),
        prop::option::of(0.0..1.0f64),
    )
}

/// Decodes `bytes` with every payload decoder; results are ignored, a
/// panic fails the case.
fn decode_everything(bytes: &[u8]) {
    if let Ok(batch) = payload::decode(bytes) {
        let _ = payload::decode_keys(&batch);
        let _ = payload::decode_items(&batch);
        let _ = payload::array(&batch, column::VALUE);
        let _ = payload::typed::<BinaryArray>(&batch, column::VALUE);
    }
    let _ = payload::decode_map_entries(&[bytes.to_vec(), bytes.to_vec()]);
}

#[test]
fn frames_from_arbitrary_bytes_fail_cleanly() {
    let mut valid = Vec::new();
    Frame {
        header: encode_header(&Request::Status).expect("encodes"),
        payloads: vec![vec![1, 2, 3], Vec::new()],
    }
    .write_to(&mut valid)
    .expect("encodes");
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        edits().prop_map(move |(e, cut)| mutate(&valid, &e, cut)),
    ];
    runner(512)
        .run(&bytes, |bytes| {
            for limits in [FrameLimits::DEFAULT, FrameLimits::HELLO] {
                if let Ok(Some(frame)) = Frame::read_limited(&mut &bytes[..], &limits) {
                    // What was read is no more than what was sent.
                    let read =
                        frame.header.len() + frame.payloads.iter().map(Vec::len).sum::<usize>();
                    prop_assert!(read <= bytes.len());
                    let _ = decode_header::<Request>(&frame.header);
                }
            }
            Ok(())
        })
        .expect("no input panics");
}

#[test]
fn headers_from_arbitrary_bytes_fail_cleanly() {
    let valid = encode_header(&Request::Attach {
        spec: spec("avg", 0, 1, BackendSpec::Heap),
        expect: Expectation::fresh(),
    })
    .expect("encodes");
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..128),
        edits().prop_map(move |(e, cut)| mutate(&valid, &e, cut)),
    ];
    runner(512)
        .run(&bytes, |bytes| {
            let _ = decode_header::<Request>(&bytes);
            let _ = decode_header::<Reply>(&bytes);
            Ok(())
        })
        .expect("no header panics");
}

#[test]
fn payloads_from_mutated_bytes_fail_cleanly() {
    let valid = valid_payloads();
    let count = valid.len();
    let strategy = (0..count, edits());
    runner(1024)
        .run(&strategy, |(which, (e, cut))| {
            decode_everything(&mutate(&valid[which], &e, cut));
            Ok(())
        })
        .expect("no payload panics");
}

/// What the live fuzz sends on one connection.
#[derive(Debug, Clone)]
enum Attack {
    /// Random bytes instead of the hello.
    Handshake(Vec<u8>),
    /// A mutated hello frame.
    Hello(Vec<(f64, u8)>, Option<f64>),
    /// After attaching: a state request with mutated payloads.
    Request(usize, Vec<(f64, u8)>, Option<f64>),
    /// After attaching: random bytes instead of a frame.
    Garbage(Vec<u8>),
}

fn attacks() -> impl Strategy<Value = Attack> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..128).prop_map(Attack::Handshake),
        edits().prop_map(|(e, c)| Attack::Hello(e, c)),
        (0..6usize, edits()).prop_map(|(r, (e, c))| Attack::Request(r, e, c)),
        prop::collection::vec(any::<u8>(), 0..256).prop_map(Attack::Garbage),
    ]
}

fn frame_bytes(request: &Request, payloads: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    Frame {
        header: encode_header(request).expect("encodes"),
        payloads,
    }
    .write_to(&mut out)
    .expect("encodes");
    out
}

/// Sends `bytes` and half-closes, then drains the replies until the host
/// closes the connection: it must answer or close, never hang.
fn send_and_drain(raw: &mut Raw, bytes: &[u8]) {
    // The host may close before reading everything.
    let _ = raw.send_bytes(bytes);
    if let weir_host::protocol::Transport::Unix(stream) = &raw.stream {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    let mut sink = Vec::new();
    let drained = std::io::Read::read_to_end(&mut raw.stream, &mut sink);
    if let Err(err) = drained {
        assert_ne!(
            err.kind(),
            std::io::ErrorKind::WouldBlock,
            "the host neither answered nor closed"
        );
    }
}

fn attack(host: &Host, state: u32, attack: &Attack) {
    let valid = valid_payloads();
    match attack {
        Attack::Handshake(bytes) => send_and_drain(&mut Raw::connect(&host.address()), bytes),
        Attack::Hello(e, cut) => {
            let hello = frame_bytes(
                &Request::Hello {
                    version: PROTOCOL_VERSION,
                    token: JobToken::new(TOKEN),
                },
                Vec::new(),
            );
            send_and_drain(&mut Raw::connect(&host.address()), &mutate(&hello, e, *cut));
        }
        Attack::Request(which, e, cut) => {
            let mut raw = attached(host);
            let requests = [
                Request::GetValues { state },
                Request::PutValues { state },
                Request::PutBatch { state },
                Request::MapPut { state },
                Request::AppendLists { state },
                Request::SetOperatorState { state },
            ];
            let request = &requests[*which];
            let payloads = vec![
                mutate(&valid[0], e, *cut),
                mutate(&valid[1 + which % (valid.len() - 1)], e, None),
            ];
            send_and_drain(&mut raw, &frame_bytes(request, payloads));
        }
        Attack::Garbage(bytes) => send_and_drain(&mut attached(host), bytes),
    }
}

fn attached(host: &Host) -> Raw {
    let mut raw = Raw::authenticated(&host.address());
    let reply = raw.call(
        &Request::Attach {
            spec: spec("avg", 0, 1, BackendSpec::Heap),
            expect: Expectation::fresh(),
        },
        Vec::new(),
    );
    assert!(matches!(reply, Some(Reply::Attached { .. })), "{reply:?}");
    raw
}

#[test]
fn a_live_host_survives_mutated_handshakes_and_requests() {
    let host = Host::start();
    write_epoch_one(host.connect(), BackendSpec::Heap, 5);
    let state = {
        let mut session = host
            .connect()
            .attach(spec("avg", 0, 1, BackendSpec::Heap), Expectation::fresh())
            .expect("attaches");
        session.register_state(&count()).expect("registers")
    };
    let pid = host.child.id();
    runner(48)
        .run(&attacks(), |a| {
            attack(&host, state.0, &a);
            Ok(())
        })
        .expect("the host answers or closes every attack");
    // The subtask is neither poisoned nor changed by any of it (no attack
    // began an epoch, so none could write).
    assert_eq!(
        read_epoch_two(host.connect(), BackendSpec::Heap).expect("usable after the fuzz"),
        [Some(5)]
    );
    let mut status = host.connect();
    assert!(
        eventually(Duration::from_secs(30), || status
            .status()
            .expect("status")
            .connections
            == 1),
        "every fuzz connection closed and stopped counting"
    );
    let peak = proc_kib(pid, "VmHWM");
    assert!(peak < 1024 * 1024, "the host's peak memory is {peak} KiB");
}
