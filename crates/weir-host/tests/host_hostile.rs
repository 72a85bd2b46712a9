//! Bad input against a real host process: payloads that make the Arrow
//! decoder panic, handshakes that try to make the host allocate or wait,
//! and frames that declare more than they send.

mod host_support;

use std::time::{Duration, Instant};

use arrow_ipc::reader::StreamReader;
use host_support::{
    Host, Raw, TOKEN, count, eventually, ints, keys, proc_kib, read_epoch_two, spec,
    write_epoch_one,
};
use weir_host::BackendSpec;
use weir_host::client::HostClient;
use weir_host::protocol::{
    Expectation, JobToken, PROTOCOL_VERSION, Reply, Request, WireError, WireErrorKind, payload,
};

/// A well-formed key payload with a few bytes changed so that the Arrow IPC
/// reader panics on it (the kind of payload a broken or hostile client sends).
fn panicking_payload() -> Vec<u8> {
    let valid = payload::encode_keys(&keys(&[1, 2, 3])).expect("encodes");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..100_000 {
        let mut mutated = valid.clone();
        for _ in 0..1 + next() % 4 {
            let at = usize::try_from(next()).expect("fits") % mutated.len();
            mutated[at] = next().to_le_bytes()[0];
        }
        let panics = std::panic::catch_unwind(|| {
            if let Ok(reader) = StreamReader::try_new(&mutated[..], None) {
                for batch in reader {
                    if batch.is_err() {
                        break;
                    }
                }
            }
        })
        .is_err();
        if panics {
            return mutated;
        }
    }
    panic!("no mutation made the Arrow reader panic");
}

fn is_protocol_error(reply: &Option<Reply>) -> bool {
    matches!(
        reply,
        Some(Reply::Error(WireError {
            kind: WireErrorKind::Protocol,
            ..
        }))
    )
}

// Regression: the payload was decoded inside the subtask's lock and the
// decoder's panic poisoned it (every later attach: state lost), and the
// connection count leaked.
#[test]
fn a_payload_that_panics_the_decoder_fails_the_request_not_the_subtask() {
    let host = Host::start();
    write_epoch_one(host.connect(), BackendSpec::Heap, 5);
    let bad = panicking_payload();
    let good_values =
        payload::encode_values(std::sync::Arc::new(ints(&[Some(9)]))).expect("encodes");
    for payloads in [
        vec![bad.clone()],
        vec![
            payload::encode_keys(&keys(&[1])).expect("encodes"),
            bad.clone(),
        ],
        vec![bad.clone(), good_values],
    ] {
        let mut raw = Raw::authenticated(&host.address());
        let attach = Request::Attach {
            spec: spec("avg", 0, 1, BackendSpec::Heap),
            expect: Expectation::fresh(),
        };
        assert!(matches!(
            raw.call(&attach, Vec::new()),
            Some(Reply::Attached { .. })
        ));
        let register = Request::RegisterState {
            descriptor: count(),
        };
        let Some(Reply::State { id }) = raw.call(&register, Vec::new()) else {
            panic!("registers");
        };
        let reply = raw.call(&Request::PutValues { state: id }, payloads);
        assert!(is_protocol_error(&reply), "{reply:?}");
        assert!(
            raw.reply().is_none(),
            "a protocol error closes the connection"
        );
    }
    assert_eq!(
        read_epoch_two(host.connect(), BackendSpec::Heap).expect("the subtask is still usable"),
        [Some(5)]
    );
    let mut status = host.connect();
    assert!(
        eventually(Duration::from_secs(30), || {
            status.status().expect("status").connections == 1
        }),
        "the closed connections are no longer counted"
    );
}

// Regression: the hello was read with the limits of an authenticated
// frame, so a peer without the token could declare a 16 MiB header (or
// payloads of up to 4 GiB) and the host waited for and allocated them.
#[test]
fn the_hello_is_refused_as_soon_as_it_declares_too_much() {
    let host = Host::start();
    let big_header = (1u32 << 20).to_le_bytes().to_vec();
    let mut with_payload = Vec::new();
    let hello = weir_host::protocol::encode_header(&Request::Hello {
        version: PROTOCOL_VERSION,
        token: JobToken::new(TOKEN),
    })
    .expect("encodes");
    with_payload.extend_from_slice(&u32::try_from(hello.len()).expect("fits").to_le_bytes());
    with_payload.extend_from_slice(&hello);
    with_payload.extend_from_slice(&1u32.to_le_bytes());
    for declared in [big_header, with_payload] {
        let mut raw = Raw::connect(&host.address());
        // The host must answer without waiting for what was declared.
        raw.timeout(Duration::from_secs(5));
        raw.send_bytes(&declared).expect("sends");
        let reply = raw.reply();
        assert!(is_protocol_error(&reply), "{reply:?}");
        assert!(raw.reply().is_none(), "then it closes the connection");
    }
}

// Regression: the handshake timeout applied to each read, so a peer that
// sent its hello a byte at a time kept a connection (and a thread) for as
// long as it liked.
#[test]
fn the_whole_handshake_has_one_deadline() {
    let host = Host::start();
    let hello = weir_host::protocol::encode_header(&Request::Hello {
        version: PROTOCOL_VERSION,
        token: JobToken::new(TOKEN),
    })
    .expect("encodes");
    let mut frame = u32::try_from(hello.len())
        .expect("fits")
        .to_le_bytes()
        .to_vec();
    frame.extend_from_slice(&hello);
    frame.extend_from_slice(&0u32.to_le_bytes());
    let sent = Raw::connect(&host.address()).trickle(&frame);
    assert!(
        sent < frame.len(),
        "the host waited for all {sent} bytes of a trickled hello"
    );
}

// Regression: a frame's buffers were allocated at their declared length
// before any byte of them arrived (4 GiB for one payload).
#[test]
fn declared_lengths_allocate_only_what_arrives() {
    let host = Host::start();
    let pid = host.child.id();
    let mut raw = Raw::authenticated(&host.address());
    let before = proc_kib(pid, "VmSize");
    let header = weir_host::protocol::encode_header(&Request::Status).expect("encodes");
    let mut frame = u32::try_from(header.len())
        .expect("fits")
        .to_le_bytes()
        .to_vec();
    frame.extend_from_slice(&header);
    frame.extend_from_slice(&1u32.to_le_bytes());
    frame.extend_from_slice(&((4u64 << 30) - 1).to_le_bytes());
    frame.extend_from_slice(&[7u8; 1024]);
    raw.send_bytes(&frame).expect("sends");
    // Wait until the host has read what was sent (it then waits for more).
    let started = Instant::now();
    let mut grown = 0;
    while started.elapsed() < Duration::from_secs(1) {
        grown = grown.max(proc_kib(pid, "VmSize").saturating_sub(before));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        grown < 512 * 1024,
        "the host reserved {grown} KiB for a payload of which 1 KiB arrived"
    );
    drop(raw);
    // The host is unharmed.
    HostClient::connect(&host.address(), TOKEN)
        .expect("connects")
        .status()
        .expect("status");
}
