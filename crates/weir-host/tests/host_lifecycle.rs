//! The host process's life: started on demand (once, under concurrency),
//! gone when idle or when its owner is, and a killed host surfacing as
//! `StateLost` at once.

mod host_support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

use host_support::{Host, TOKEN, ints, keys, options, spec, wait_gone};
use weir_host::client::{HostClient, HostOptions, ensure_host};
use weir_host::protocol::{Expectation, HostDir};
use weir_host::{BackendSpec, HostError, SubtaskSession};
use weir_types::{Attempt, Epoch, StateDescriptor, StateKind, ValueType};

fn host_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("wh")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path().join("h");
    (tmp, dir)
}

#[test]
fn concurrent_ensure_host_calls_start_one_host() {
    let (_tmp, dir) = host_dir();
    let start = Arc::new(Barrier::new(4));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (dir, start) = (dir.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                let socket =
                    ensure_host(&dir, TOKEN, &options(Duration::from_secs(60))).expect("a host");
                HostClient::connect(&dir, TOKEN)
                    .expect("connects")
                    .host_pid()
                    .to_string()
                    + "@"
                    + &socket.display().to_string()
            })
        })
        .collect();
    let answers: Vec<String> = callers
        .into_iter()
        .map(|c| c.join().expect("caller succeeded"))
        .collect();
    assert!(
        answers.iter().all(|a| a == &answers[0]),
        "one host for all: {answers:?}"
    );
    let pid: u32 = answers[0]
        .split('@')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("pid");
    // A second host for the same directory refuses to run.
    let second = Command::new(host_support::binary())
        .arg("--dir")
        .arg(&dir)
        .env(weir_host::client::HOST_TOKEN_ENV, TOKEN)
        .stderr(Stdio::piped())
        .output()
        .expect("runs");
    assert_eq!(
        second.status.code(),
        Some(weir_host::client::EXIT_ALREADY_RUNNING)
    );
    assert!(String::from_utf8_lossy(&second.stderr).contains("another state host"));
    // The directory is private and the host is still the same one.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&dir).expect("exists").permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(
        HostClient::connect(&dir, TOKEN)
            .expect("connects")
            .host_pid(),
        pid
    );
    kill(pid);
    assert!(wait_gone(pid, Duration::from_secs(30)));
}

#[test]
fn ensure_host_refuses_a_host_of_another_token_and_a_missing_binary() {
    let (_tmp, dir) = host_dir();
    ensure_host(&dir, TOKEN, &options(Duration::from_secs(60))).expect("a host");
    let pid = HostClient::connect(&dir, TOKEN)
        .expect("connects")
        .host_pid();
    let err =
        ensure_host(&dir, "other-run", &options(Duration::from_secs(60))).expect_err("wrong token");
    assert!(matches!(err, HostError::Unauthorized), "{err}");
    kill(pid);
    assert!(wait_gone(pid, Duration::from_secs(30)));

    let (_tmp2, dir2) = host_dir();
    let missing = HostOptions {
        binary: Some("/nonexistent/weir-host".into()),
        ..HostOptions::default()
    };
    let err = ensure_host(&dir2, TOKEN, &missing).expect_err("no binary");
    assert!(err.to_string().contains("/nonexistent/weir-host"), "{err}");
}

#[test]
fn an_idle_host_exits_and_the_next_caller_starts_a_new_one() {
    let (_tmp, dir) = host_dir();
    let socket = ensure_host(&dir, TOKEN, &options(Duration::from_millis(300))).expect("a host");
    let mut client = HostClient::connect(&dir, TOKEN).expect("connects");
    let pid = client.host_pid();
    // An open connection keeps it alive well past the idle timeout.
    std::thread::sleep(Duration::from_millis(900));
    client.status().expect("still serving");
    drop(client);
    assert!(
        wait_gone(pid, Duration::from_secs(30)),
        "the idle host exits"
    );
    assert!(!socket.exists(), "its socket is removed");
    assert!(!HostDir::new(&dir).work().exists(), "its working files too");
    ensure_host(&dir, TOKEN, &options(Duration::from_secs(60))).expect("a new host");
    let new_pid = HostClient::connect(&dir, TOKEN)
        .expect("connects")
        .host_pid();
    assert_ne!(new_pid, pid);
    // The new host lost the old state and says so.
    let err = HostClient::connect(&dir, TOKEN)
        .expect("connects")
        .attach(
            spec("avg", 0, 1, BackendSpec::Heap),
            Expectation {
                restored_from: None,
                final_epoch: Some(Epoch(4)),
            },
        )
        .expect_err("state lost");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    kill(new_pid);
    assert!(wait_gone(new_pid, Duration::from_secs(30)));
}

#[test]
fn a_host_exits_when_its_owner_is_gone() {
    let mut owner = Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("starts an owner");
    let owner_pid = owner.id();
    let host = Host::start_with(&["--owner-pid", &owner_pid.to_string()]);
    let host_pid = host.connect().host_pid();
    owner.kill().expect("kills the owner");
    owner.wait().expect("reaps the owner");
    let mut host = host;
    let status = wait_child(&mut host.child, Duration::from_secs(30)).expect("the host exits");
    assert!(status.success(), "{status}");
    assert_eq!(host.child.id(), host_pid);
    assert!(!HostDir::new(host.path()).socket().exists());
}

#[test]
fn a_host_killed_mid_batch_surfaces_as_state_lost_at_once() {
    let host = Host::start();
    let mut session = host
        .connect()
        .attach(
            spec("big", 0, 1, BackendSpec::RocksDb),
            Expectation::fresh(),
        )
        .expect("attaches");
    let count = session
        .register_state(
            &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
        )
        .expect("registers");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    let ids: Vec<i64> = (0..200_000).collect();
    let (batch, values) = (
        keys(&ids),
        ints(&ids.iter().map(|&i| Some(i)).collect::<Vec<_>>()),
    );
    let (started, in_flight) = mpsc::channel();
    let (done, outcome) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let mut sent = 0u32;
        loop {
            if sent == 1 {
                let _ = started.send(());
            }
            if let Err(err) = session.put_values(count, &batch, &values) {
                let _ = done.send((sent, err));
                return session;
            }
            sent += 1;
        }
    });
    in_flight
        .recv_timeout(Duration::from_secs(120))
        .expect("batches are flowing");
    let pid = host.child.id();
    kill(pid);
    // A generous guard: a hang fails here instead of blocking the suite.
    let (sent, err) = outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the client notices the dead host");
    assert!(sent >= 1);
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    let mut session = worker.join().expect("worker ends");
    // Every later call fails the same way without touching the socket.
    let err = session
        .commit(Epoch(1), Attempt(0))
        .expect_err("still lost");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    // Connecting again finds no host.
    assert!(HostClient::connect(host.path(), TOKEN).is_err());
}

fn kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("runs kill");
    assert!(status.success());
}

fn wait_child(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("waits") {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
