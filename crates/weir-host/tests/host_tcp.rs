//! A host reached from another executor over TCP: the published address,
//! the token before anything else, an unreachable owner, the driver's
//! control requests, and generations sharing one host.

mod host_support;

use std::path::PathBuf;
use std::time::Duration;

use rustls::ClientConnection;

use host_support::{Host, Raw, TOKEN, count, decoded, eventually, ints, keys, owned_ids, spec};
use weir_coordinator::{Tls, TlsFiles};
use weir_host::client::HostClient;
use weir_host::protocol::{
    Expectation, HostAddress, HostDir, JobToken, PROTOCOL_VERSION, Reply, Request, WireError,
    WireErrorKind,
};
use weir_host::{BackendSpec, HostError, SubtaskSession};
use weir_types::{Attempt, CheckpointId, Epoch};

fn tcp_host() -> (Host, HostAddress) {
    tcp_host_with(&[])
}

fn tcp_host_with(extra: &[&str]) -> (Host, HostAddress) {
    let host = Host::start_with(&[&["--listen", "127.0.0.1:0"], extra].concat());
    let published = std::fs::read_to_string(HostDir::new(host.path()).tcp_address())
        .expect("the address is published");
    let address: HostAddress = published.parse().expect("host:port");
    (host, address)
}

#[test]
fn a_task_on_another_executor_reaches_the_owner_over_tcp() {
    let (host, address) = tcp_host();
    let HostAddress::Tcp(published) = &address else {
        panic!("a TCP address: {address:?}");
    };
    assert!(published.starts_with("127.0.0.1:") && !published.ends_with(":0"));
    // The hello and the status say the same as the file.
    let mut local = host.connect();
    assert_eq!(local.tcp_address(), Some(published.as_str()));
    assert_eq!(
        local.status().expect("status").tcp_address.as_deref(),
        Some(published.as_str())
    );
    // Epoch 1 over TCP, one batch per request.
    let ids = owned_ids(1, 2, 2000);
    let mut remote = HostClient::connect(&address, TOKEN)
        .expect("connects over TCP")
        .attach(
            spec("avg", 1, 2, BackendSpec::RocksDb),
            Expectation::fresh(),
        )
        .expect("attaches");
    let state = remote.register_state(&count()).expect("registers");
    remote.begin(Epoch(1), Attempt(0), None).expect("begins");
    let values: Vec<Option<i64>> = ids.iter().map(|&i| Some(i * 3)).collect();
    remote
        .put_values(state, &keys(&ids), &ints(&values))
        .expect("writes a batch");
    remote.commit(Epoch(1), Attempt(0)).expect("commits");
    drop(remote);
    // Epoch 2 on the owner's own executor, over the Unix socket.
    let mut same = host
        .connect()
        .attach(
            spec("avg", 1, 2, BackendSpec::RocksDb),
            Expectation {
                final_epoch: Some(Epoch(1)),
                ..Expectation::fresh()
            },
        )
        .expect("attaches");
    let state = same.register_state(&count()).expect("registers");
    same.begin(Epoch(2), Attempt(0), Some(Epoch(1)))
        .expect("begins");
    assert_eq!(
        decoded(&same.get_values(state, &keys(&ids)).expect("reads")),
        values
    );
}

fn refused(reply: &Option<Reply>, kind: WireErrorKind) -> bool {
    matches!(reply, Some(Reply::Error(WireError { kind: k, .. })) if *k == kind)
}

#[test]
fn tcp_peers_must_prove_the_token_before_anything_else() {
    let (host, address) = tcp_host();
    let attach = Request::Attach {
        spec: spec("avg", 0, 1, BackendSpec::Heap),
        expect: Expectation::fresh(),
    };
    // Requests before the hello, a wrong token, an empty one.
    for first in [
        Request::Status,
        attach.clone(),
        Request::Shutdown,
        Request::StartGeneration { generation: 9 },
        Request::AbortCheckpoint {
            checkpoint: CheckpointId(1),
        },
    ] {
        let mut raw = Raw::connect(&address);
        let reply = raw.call(&first, Vec::new());
        assert!(
            refused(&reply, WireErrorKind::Protocol),
            "{first:?}: {reply:?}"
        );
        assert!(raw.reply().is_none(), "closed after {first:?}");
    }
    for token in ["not-the-token", ""] {
        let mut raw = Raw::connect(&address);
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            token: JobToken::new(token),
        };
        let reply = raw.call(&hello, Vec::new());
        assert!(refused(&reply, WireErrorKind::Unauthorized), "{reply:?}");
        assert!(raw.reply().is_none(), "closed after a wrong token");
    }
    // A hello without a token, and bytes that are no frame at all.
    let mut raw = Raw::connect(&address);
    let mut frame = Vec::new();
    let header = br#"{"op":"hello","version":1}"#;
    frame.extend_from_slice(&u32::try_from(header.len()).expect("fits").to_le_bytes());
    frame.extend_from_slice(header);
    frame.extend_from_slice(&0u32.to_le_bytes());
    raw.send_bytes(&frame).expect("sends");
    assert!(refused(&raw.reply(), WireErrorKind::Protocol));
    let mut raw = Raw::connect(&address);
    raw.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("sends");
    assert!(refused(&raw.reply(), WireErrorKind::Protocol));
    // None of that was served: no state, the generation and host unchanged.
    let mut client = HostClient::connect(&address, TOKEN).expect("the token gets in");
    let status = client.status().expect("status");
    assert!(status.subtasks.is_empty(), "{status:?}");
    assert_eq!(status.generation, 0);
    assert!(host.connect().status().is_ok());
}

#[test]
fn an_unreachable_owner_is_state_lost() {
    let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let address = HostAddress::Tcp(gone.local_addr().expect("bound").to_string());
    drop(gone);
    let err = HostClient::connect(&address, TOKEN).expect_err("nobody listens");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    assert!(err.to_string().contains("unreachable"), "{err}");
}

// Regression: a restarted job got a second host (one per generation), so
// state was held twice until the old host idled out. One host now serves
// every generation: a new generation drops the older one's state.
#[test]
fn a_new_generation_replaces_the_older_generations_state() {
    let (host, address) = tcp_host();
    let s = spec("avg", 0, 1, BackendSpec::RocksDb);
    let mut first = host
        .connect()
        .attach(s.clone(), Expectation::fresh())
        .expect("attaches");
    let state = first.register_state(&count()).expect("registers");
    first.begin(Epoch(1), Attempt(0), None).expect("begins");
    first
        .put_values(state, &keys(&[1]), &ints(&[Some(11)]))
        .expect("writes");
    first.commit(Epoch(1), Attempt(0)).expect("commits");
    assert!(host.connect().status().expect("status").subtasks[0].local_bytes > 0);
    // The driver starts generation 1 (over TCP, as from the driver's machine).
    HostClient::connect(&address, TOKEN)
        .expect("connects")
        .start_generation(1)
        .expect("starts");
    let status = host.connect().status().expect("status");
    assert_eq!(
        (status.generation, status.subtasks.len()),
        (1, 0),
        "{status:?}"
    );
    // A connection still attached from generation 0 can no longer use it.
    let err = first.get_values(state, &keys(&[1])).expect_err("retired");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    drop(first);
    // Once no connection holds them, its working files are gone.
    let work = HostDir::new(host.path()).work();
    assert!(
        eventually(Duration::from_secs(30), || no_files(&work)),
        "generation 0's RocksDB files stay"
    );
    // A task of generation 0 is refused; generation 1 starts empty.
    let old = Expectation {
        final_epoch: Some(Epoch(1)),
        ..Expectation::fresh()
    };
    let err = host.connect().attach(s.clone(), old).expect_err("stale");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    let fresh = Expectation {
        generation: 1,
        ..Expectation::fresh()
    };
    let mut next = host.connect().attach(s.clone(), fresh).expect("attaches");
    let state = next.register_state(&count()).expect("registers");
    next.begin(Epoch(1), Attempt(0), None).expect("begins");
    assert_eq!(
        decoded(&next.get_values(state, &keys(&[1])).expect("reads")),
        [None]
    );
    // A task of generation 2 moves the host on by itself.
    let later = Expectation {
        generation: 2,
        ..Expectation::fresh()
    };
    drop(next);
    host.connect().attach(s, later).expect("attaches");
    assert_eq!(host.connect().status().expect("status").generation, 2);
}

/// Whether no file is left under `dir` (empty directories may be).
fn no_files(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |entries| {
        entries.flatten().all(|entry| {
            let path = entry.path();
            path.is_dir() && no_files(&path)
        })
    })
}

#[test]
fn the_driver_shuts_a_host_down_over_tcp_and_the_token_is_never_shown() {
    let tmp = tempfile::Builder::new()
        .prefix("wh")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path().join("h");
    let log = tmp.path().join("host.log");
    let mut child = std::process::Command::new(host_support::binary())
        .arg("--dir")
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--owner-pid", &std::process::id().to_string()])
        .env(weir_host::client::HOST_TOKEN_ENV, TOKEN)
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("starts");
    let host_dir = HostDir::new(&dir);
    assert!(eventually(Duration::from_secs(30), || host_dir
        .tcp_address()
        .exists()));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).expect("cmdline");
    assert!(!String::from_utf8_lossy(&cmdline).contains(TOKEN));
    let address: HostAddress = std::fs::read_to_string(host_dir.tcp_address())
        .expect("address")
        .parse()
        .expect("host:port");
    // Some traffic, a refused peer, an abort of a checkpoint never taken.
    assert!(HostClient::connect(&address, "wrong").is_err());
    let mut control = HostClient::connect(&address, TOKEN).expect("connects");
    assert_eq!(
        control.abort_checkpoint(CheckpointId(5)).expect("aborts"),
        0
    );
    assert!(!format!("{control:?}").contains(TOKEN));
    control.shutdown().expect("shuts down");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "never exited");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(!host_dir.tcp_address().exists() && !host_dir.socket().exists());
    let log = std::fs::read_to_string(&log).expect("log");
    assert!(log.contains("shutdown requested"), "{log}");
    assert!(!log.contains(TOKEN), "the token is in the log: {log}");
}

/// The repository's test certificates (`tests/tls`): a client trusting `ca`.
fn test_tls(ca: &str) -> Tls {
    let dir = test_certificates();
    Tls::load(TlsFiles {
        ca: dir.join(ca),
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
        server_name: None,
    })
    .expect("test certificates load")
}

fn test_certificates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/tls")
}

/// A host whose TCP port speaks TLS with the test certificates.
fn tls_host() -> (Host, HostAddress) {
    let dir = test_certificates();
    let file = |name: &str| dir.join(name).display().to_string();
    let (ca, cert, key) = (file("ca.pem"), file("server.pem"), file("server-key.pem"));
    tcp_host_with(&["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key])
}

#[test]
fn a_host_with_tls_serves_tcp_only_to_clients_that_trust_it() {
    let (host, address) = tls_host();
    let timeout = Duration::from_secs(10);
    let tls = test_tls("ca.pem");
    let ids = owned_ids(0, 1, 500);
    let values: Vec<Option<i64>> = ids.iter().map(|&i| Some(i + 1)).collect();
    let mut remote = HostClient::open(&address, TOKEN, timeout, Some(&tls))
        .expect("a client trusting the job's CA connects")
        .attach(spec("avg", 0, 1, BackendSpec::Heap), Expectation::fresh())
        .expect("attaches");
    let state = remote.register_state(&count()).expect("registers");
    remote.begin(Epoch(1), Attempt(0), None).expect("begins");
    remote
        .put_values(state, &keys(&ids), &ints(&values))
        .expect("writes over TLS");
    assert_eq!(
        decoded(
            &remote
                .get_values(state, &keys(&ids))
                .expect("reads over TLS")
        ),
        values
    );
    remote.commit(Epoch(1), Attempt(0)).expect("commits");
    drop(remote);

    assert!(
        HostClient::connect_with_timeout(&address, TOKEN, timeout).is_err(),
        "plain TCP is refused"
    );
    assert!(
        HostClient::open(&address, TOKEN, timeout, Some(&test_tls("other-ca.pem"))).is_err(),
        "a client that does not trust the host's certificate does not connect"
    );
    let wrong = HostClient::open(&address, "not-the-token", timeout, Some(&tls))
        .expect_err("over TLS the token is still checked");
    assert!(matches!(wrong, HostError::Unauthorized), "{wrong}");
    // None of that disturbed the host or the state it holds.
    let status = host.connect().status().expect("status");
    assert_eq!(status.subtasks.len(), 1, "{status:?}");
}

#[test]
fn a_tls_hello_trickled_byte_by_byte_runs_out_of_time() {
    let (_host, address) = tls_host();
    let HostAddress::Tcp(published) = &address else {
        panic!("a TCP address: {address:?}");
    };
    let tls = test_tls("ca.pem");
    let name = tls.server_name_for(published).expect("a server name");
    let mut client = ClientConnection::new(tls.client_config(), name).expect("a TLS client");
    let mut hello = Vec::new();
    while client.wants_write() {
        client
            .write_tls(&mut hello)
            .expect("encodes the client hello");
    }
    // Raw TLS records over plain TCP, as a peer that trickles them sends them.
    let sent = Raw::connect(&address).trickle(&hello);
    assert!(
        sent < hello.len(),
        "the host waited for all {sent} bytes of a trickled TLS hello"
    );
}
