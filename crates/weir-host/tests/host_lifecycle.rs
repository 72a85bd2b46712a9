//! The host process's life: started on demand (once, under concurrency),
//! one per executor directory, alive through quiet gaps, gone with its
//! owner, on SIGTERM/SIGINT or Shutdown (leaving no files), and a killed
//! host surfacing as `StateLost` at once.

mod host_support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

use host_support::{
    Host, TOKEN, ints, keys, options, read_epoch_two, spec, wait_gone, write_epoch_one,
};
use weir_host::client::{HostClient, HostOptions, ensure_host};
use weir_host::protocol::{Expectation, HostAddress, HostDir};
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
                let local = ensure_host(&dir, TOKEN, &options()).expect("a host");
                let connected = HostClient::connect(&local.address, TOKEN).expect("connects");
                (connected.host_pid(), local)
            })
        })
        .collect();
    let answers: Vec<_> = callers
        .into_iter()
        .map(|c| c.join().expect("caller succeeded"))
        .collect();
    let pid = answers[0].0;
    assert!(
        answers
            .iter()
            .all(|(p, local)| *p == pid && local.pid == pid),
        "one host for all: {answers:?}"
    );
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
    assert_eq!(connect(&dir).host_pid(), pid);
    kill(pid);
    assert!(wait_gone(pid, Duration::from_secs(30)));
}

#[test]
fn ensure_host_refuses_a_host_of_another_token_and_a_missing_binary() {
    let (_tmp, dir) = host_dir();
    let pid = ensure_host(&dir, TOKEN, &options()).expect("a host").pid;
    let err = ensure_host(&dir, "other-run", &options()).expect_err("wrong token");
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

fn write_one(client: HostClient, value: i64) {
    write_epoch_one(client, BackendSpec::RocksDb, value);
}

fn read_one(client: HostClient) -> weir_host::Result<Vec<Option<i64>>> {
    read_epoch_two(client, BackendSpec::RocksDb)
}

// Regression: a host exited after a quiet gap of its idle timeout (no
// connection, no upload) and took the job's state with it. Hosts now have
// no idle timeout at all; they end with their owner, a signal or Shutdown.
#[test]
fn a_quiet_host_keeps_its_state_until_told_to_shut_down() {
    let (_tmp, dir) = host_dir();
    let local = ensure_host(&dir, TOKEN, &options()).expect("a host");
    write_one(connect(&dir), 42);
    // No connection at all for many times the owner check interval.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(read_one(connect(&dir)).expect("still held"), [Some(42)]);
    let host_dir = HostDir::new(&dir);
    assert!(host_dir.work().exists(), "RocksDB files while serving");
    connect(&dir).shutdown().expect("shuts down");
    assert!(wait_gone(local.pid, Duration::from_secs(30)), "it exits");
    assert!(!host_dir.socket().exists(), "its socket is removed");
    assert!(!host_dir.work().exists(), "its working files too");
    // The next task starts a new host, which knows it lost the state.
    let again = ensure_host(&dir, TOKEN, &options()).expect("a new host");
    assert_ne!(again.pid, local.pid);
    let err = read_one(connect(&dir)).expect_err("state lost");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    connect(&dir).shutdown().expect("shuts down");
    assert!(wait_gone(again.pid, Duration::from_secs(30)));
}

// Regression: without a SIGTERM handler the socket (and the working files)
// stayed behind when a host was terminated.
#[test]
fn sigterm_and_sigint_end_a_host_cleanly() {
    for signal in ["-TERM", "-INT"] {
        let mut host = Host::start_with(&["--listen", "127.0.0.1:0"]);
        write_one(host.connect(), 7);
        let dir = HostDir::new(host.path());
        assert!(dir.tcp_address().exists() && dir.work().exists());
        send(signal, host.child.id());
        let status = wait_child(&mut host.child, Duration::from_secs(30)).expect("exits");
        assert_eq!(status.code(), Some(0), "{signal}: {status}");
        for left in [dir.socket(), dir.tcp_address(), dir.work()] {
            assert!(
                !left.exists(),
                "{signal}: {} is left behind",
                left.display()
            );
        }
        // Whoever sent the signal may want to read why: the directory stays.
        assert!(dir.host_lock().exists(), "{signal}: the directory stays");
    }
}

// Regression (leaks): hosts left their directories (lock, spawn lock, log)
// and the run's directory of them behind, one per executor and run; on a
// machine without the driver nothing removed them.
#[test]
fn a_host_leaving_for_good_removes_its_directory_and_the_emptied_run_directory() {
    let (tmp, _) = host_dir();
    let run = tmp.path().join("run");
    let executors = [run.join("a-1"), run.join("b-2")];
    let leaving = HostOptions {
        remove_empty_parent: true,
        ..options()
    };
    let pids: Vec<u32> = executors
        .iter()
        .map(|dir| ensure_host(dir, TOKEN, &leaving).expect("a host").pid)
        .collect();
    let first = HostDir::new(&executors[0]);
    assert!(first.log().exists() && first.spawn_lock().exists());
    connect(&executors[0]).shutdown().expect("shuts down");
    assert!(wait_gone(pids[0], Duration::from_secs(30)));
    assert!(!executors[0].exists(), "its directory is removed");
    assert!(run.exists(), "the run's directory holds the other host's");
    connect(&executors[1]).shutdown().expect("shuts down");
    assert!(wait_gone(pids[1], Duration::from_secs(30)));
    assert!(!run.exists(), "the last host removes the run's directory");
    assert!(tmp.path().exists(), "and nothing above it");
}

// Regression (leaks): a host that failed after binding its socket left the
// socket behind.
#[test]
fn a_host_that_fails_to_start_leaves_nothing_behind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let address = taken.local_addr().expect("bound").to_string();
    let (_tmp, dir) = host_dir();
    let out = Command::new(host_support::binary())
        .arg("--dir")
        .arg(&dir)
        .args(["--listen", &address])
        .env(weir_host::client::HOST_TOKEN_ENV, TOKEN)
        .stderr(Stdio::piped())
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&address),
        "says which address: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host_dir = HostDir::new(&dir);
    for left in [host_dir.socket(), host_dir.tcp_address(), host_dir.work()] {
        assert!(!left.exists(), "{} is left behind", left.display());
    }
}

#[test]
fn each_executor_directory_gets_its_own_host() {
    let (_a, first) = host_dir();
    let (_b, second) = host_dir();
    let listen = HostOptions {
        listen: Some("127.0.0.1:0".into()),
        ..options()
    };
    let one = ensure_host(&first, TOKEN, &listen).expect("a host");
    let two = ensure_host(&second, TOKEN, &listen).expect("another host");
    assert_ne!(one.pid, two.pid);
    assert_ne!(one.tcp_address, two.tcp_address);
    // The same subtask in both, apart.
    write_one(connect(&first), 1);
    write_one(connect(&second), 2);
    assert_eq!(read_one(connect(&first)).expect("held"), [Some(1)]);
    assert_eq!(read_one(connect(&second)).expect("held"), [Some(2)]);
    for (dir, pid) in [(&first, one.pid), (&second, two.pid)] {
        connect(dir).shutdown().expect("shuts down");
        assert!(wait_gone(pid, Duration::from_secs(30)));
    }
}

#[test]
fn a_host_exits_when_its_owner_is_gone() {
    let mut owner = Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("starts an owner");
    let owner_pid = owner.id();
    let host = Host::start_with(&[
        "--owner-pid",
        &owner_pid.to_string(),
        "--remove-empty-parent",
    ]);
    let host_pid = host.connect().host_pid();
    owner.kill().expect("kills the owner");
    owner.wait().expect("reaps the owner");
    let mut host = host;
    let status = wait_child(&mut host.child, Duration::from_secs(30)).expect("the host exits");
    assert!(status.success(), "{status}");
    assert_eq!(host.child.id(), host_pid);
    assert!(
        !host.path().exists(),
        "it leaves for good, with its directory"
    );
    // The job goes on after an executor died: the run's directory stays.
    assert!(host.dir.path().exists(), "the parent stays");
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
    assert!(HostClient::connect(&host.address(), TOKEN).is_err());
}

fn kill(pid: u32) {
    send("-KILL", pid);
}

fn send(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("runs kill");
    assert!(status.success());
}

fn connect(dir: &std::path::Path) -> HostClient {
    HostClient::connect(&HostAddress::of_dir(dir), TOKEN).expect("connects")
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
