//! S3 storage round trip through a real S3-compatible server: moto's server
//! mode on loopback, started from the project's virtualenv.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_checkpoint::{
    CheckpointError, CheckpointStorage, ResolvedSnapshot, StorageLocation, StorageOptions,
    create_savepoint, dispose_savepoint,
};
use weir_types::CheckpointId;

use crate::common::{content, full_checkpoint, incremental_checkpoint, job};

/// A moto server killed when dropped.
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts moto on a free loopback port; `None` (and a note) without it.
pub fn start_moto() -> Option<Moto> {
    let binary =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/moto_server");
    if !binary.exists() {
        eprintln!(
            "skipping the S3 test: {} is missing (`make venv` installs it)",
            binary.display()
        );
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let child = Command::new(binary)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let moto = Moto { child, port };
    // Wait for the server to accept connections (a start-up wait, not an
    // assertion on timing).
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(moto)
}

/// Creates a bucket with a plain HTTP request (object_store cannot).
pub fn create_bucket(port: u16, bucket: &str) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// Storage options that reach the moto server on `port`.
pub fn moto_options(port: u16) -> StorageOptions {
    StorageOptions::default()
        .with("endpoint", format!("http://127.0.0.1:{port}"))
        .with("region", "us-east-1")
        .with("access_key_id", "test")
        .with("secret_access_key", "test")
        .with("allow_http", "true")
}

#[tokio::test]
async fn s3_storage_round_trips_through_moto() {
    let Some(moto) = start_moto() else {
        return;
    };
    create_bucket(moto.port, "weir");
    let options = moto_options(moto.port);
    let location = StorageLocation::parse("s3://weir/checkpoints", &options).expect("s3");
    let storage = CheckpointStorage::filesystem(&location, job()).expect("storage");

    let first = storage
        .complete(&incremental_checkpoint(&storage, 1, &["a.sst"]).await)
        .await
        .expect("completes");
    let second = storage
        .complete(&full_checkpoint(&storage, 2, 2).await)
        .await
        .expect("completes");
    assert_eq!(
        storage.checkpoint_dirs().await.expect("lists"),
        [CheckpointId(1), CheckpointId(2)]
    );
    assert_eq!(
        storage.completed().await.expect("lists"),
        [first, second.clone()]
    );
    let latest = storage
        .latest_completed()
        .await
        .expect("lists")
        .expect("one");
    assert_eq!(latest, second);
    for (i, file) in latest.files().into_iter().enumerate() {
        let bytes = storage.read_state_file(&latest, file).await.expect("reads");
        assert_eq!(bytes.as_ref(), content(2, i as u32));
    }
    // The create-only put is enforced by the server (If-None-Match).
    assert!(matches!(
        storage
            .complete(&full_checkpoint(&storage, 2, 1).await)
            .await,
        Err(CheckpointError::AlreadyExists { .. })
    ));

    let savepoints = StorageLocation::parse("s3://weir/savepoints", &options).expect("s3");
    let savepoint = create_savepoint(
        &storage.open(CheckpointId(1)).await.expect("opens"),
        &savepoints,
    )
    .await
    .expect("savepoint");
    storage.discard(CheckpointId(1)).await.expect("discards");
    let reopened = ResolvedSnapshot::open(savepoint.base())
        .await
        .expect("reopens");
    for file in reopened.metadata().files() {
        reopened.read_file(file).await.expect("self-contained");
    }
    dispose_savepoint(savepoint.base()).await.expect("disposes");
    assert!(ResolvedSnapshot::open(savepoint.base()).await.is_err());
}
