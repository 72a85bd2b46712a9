//! The HTTP surface: authentication first, routing, malformed requests,
//! owner claims, and the limits that keep idle or excess peers out.

use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_checkpoint::coordinator::{EpochCut, EpochProgress};
use weir_coordinator::{
    DriverError, JobToken, OwnerClaim, ProgressReport, claim_owner, report_progress,
};
use weir_types::{Epoch, OperatorUid, SubtaskIndex};

use crate::client::{PATIENCE, TOKEN, request, server, start, start_with};

#[tokio::test]
async fn requests_without_the_right_token_are_refused() {
    let job = start().await;
    let addr = job.driver.local_addr();
    assert!(addr.ip().is_loopback(), "binds to loopback by default");
    assert_eq!(job.driver.address(), format!("http://{addr}"));
    let ack = r#"{"checkpoint_id": 1, "uid": "avg", "subtask": 0, "keyed": null, "operator_state": null, "metrics": {"sync_millis": 0, "async_millis": 0, "state_size_bytes": 0, "persisted_bytes": 0}}"#;
    let claim = r#"{"generation": 1, "uid": "avg", "subtask": 0, "address": "10.0.0.9:7000"}"#;
    for token in [None, Some("wrong"), Some("test-token-7f3")] {
        let (status, body) = request(addr, Method::POST, "/ack", token, ack).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "token {token:?}");
        assert_eq!(body["error"], "missing or wrong job token");
        let (status, _) = request(addr, Method::GET, "/checkpoints", token, "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _) = request(addr, Method::POST, "/owners", token, claim).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // The refused ack and claim were never recorded.
    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), ack).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["outcome"], "unknown");
    assert!(job.driver.owners().is_empty());
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn a_request_without_the_token_is_refused_before_its_body_is_read() {
    let job = start().await;
    let mut stream = TcpStream::connect(job.driver.local_addr())
        .await
        .expect("connects");
    // Announces a body it never sends: a server that read it first would wait.
    stream
        .write_all(b"POST /ack HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n\r\n")
        .await
        .expect("sends");
    let mut answer = vec![0; 256];
    let read = tokio::time::timeout(PATIENCE, stream.read(&mut answer))
        .await
        .expect("answers without the body")
        .expect("reads");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn malformed_requests_get_client_errors() {
    let mut small = server();
    small.max_body_bytes = 256;
    let job = start_with(|_| {}, small).await;
    let addr = job.driver.local_addr();
    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid request body"))
    );
    let bad_uid = r#"{"checkpoint_id": 1, "uid": "../etc", "subtask": 0, "message": "x"}"#;
    let (status, _) = request(addr, Method::POST, "/decline", Some(TOKEN), bad_uid).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = request(addr, Method::POST, "/ack", Some(TOKEN), &"x".repeat(1_000)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, _) = request(addr, Method::GET, "/checkpoints/abc", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = request(addr, Method::GET, "/checkpoints/999", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for path in ["/ack", "/owners", "/progress"] {
        let (status, _) = request(addr, Method::GET, path, Some(TOKEN), "").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    }
    let (status, _) = request(addr, Method::GET, "/nowhere", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    job.driver.shutdown(false).await.expect("shuts down");
}

fn claim(generation: u64, subtask: u32, address: &str) -> String {
    json!({"generation": generation, "uid": "avg", "subtask": subtask, "address": address})
        .to_string()
}

#[tokio::test]
async fn the_first_claim_of_a_subtask_wins_until_the_job_restarts() {
    let job = start().await;
    let addr = job.driver.local_addr();
    let (status, body) = request(
        addr,
        Method::POST,
        "/owners",
        Some(TOKEN),
        &claim(1, 0, "10.0.0.1:7000"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"owner": "10.0.0.1:7000", "granted": true}));
    // The client a task uses gets the winner's address.
    let token = JobToken::new(TOKEN).expect("non-empty");
    let late = OwnerClaim {
        generation: 1,
        uid: OperatorUid::new("avg").expect("valid"),
        subtask: SubtaskIndex(0),
        address: "10.0.0.2:7000".into(),
    };
    let answer = claim_owner(job.driver.address(), &token, None, &late)
        .await
        .expect("answers");
    assert_eq!(
        (answer.owner.as_str(), answer.granted),
        ("10.0.0.1:7000", false)
    );
    let (status, _) = request(
        addr,
        Method::POST,
        "/owners",
        Some(TOKEN),
        &claim(1, 5, "10.0.0.1:7000"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no subtask 5");
    assert_eq!(job.driver.owners().len(), 1);

    assert_eq!(job.driver.restart(None).await.expect("restarts"), 2);
    assert!(
        job.driver.owners().is_empty(),
        "a new generation has no owners"
    );
    let stale = claim_owner(job.driver.address(), &token, None, &late)
        .await
        .expect_err("stale");
    assert!(
        matches!(&stale, DriverError::Refused { status: 409, message, .. } if message.contains("generation 2")),
        "{stale}"
    );
    let fresh = OwnerClaim {
        generation: 2,
        ..late
    };
    let answer = claim_owner(job.driver.address(), &token, None, &fresh)
        .await
        .expect("answers");
    assert!(answer.granted);
    job.driver.shutdown(false).await.expect("shuts down");
}

fn report(generation: u64, subtask: u32, done: u64, next: u64) -> ProgressReport {
    ProgressReport {
        generation,
        progress: EpochProgress {
            uid: OperatorUid::new("avg").expect("valid"),
            subtask: SubtaskIndex(subtask),
            done: Some(Epoch(done)),
            next: Some(Epoch(next)),
        },
    }
}

/// Tasks of a Spark job running several planned epochs report each epoch
/// boundary; a triggered checkpoint cuts at one and the reports at it get
/// the barrier, with the job directory to upload to.
#[tokio::test]
async fn progress_reports_inside_a_running_job_get_the_barrier_at_the_cut() {
    let job = start().await;
    let token = JobToken::new(TOKEN).expect("non-empty");
    let url = job.driver.address().to_owned();
    job.driver
        .epoch_final(EpochCut {
            epoch: Epoch(1),
            ..EpochCut::default()
        })
        .await
        .expect("recorded");
    let planned = (2..=4)
        .map(|epoch| EpochCut {
            epoch: Epoch(epoch),
            sources: [(
                OperatorUid::new("events").expect("valid"),
                json!({"next": epoch * 10}),
            )]
            .into(),
            ..EpochCut::default()
        })
        .collect();
    job.driver.epochs_planned(planned).await.expect("planned");
    // Both subtasks began epoch 2 before the trigger, so it cannot cut at epoch 1.
    for subtask in 0..2 {
        let start = report_progress(&url, &token, None, &report(1, subtask, 1, 2))
            .await
            .expect("answers");
        assert!(
            start.barriers.is_empty(),
            "nothing triggered yet: {start:?}"
        );
    }
    let id = job.driver.next_trigger().await;
    // Nobody is past epoch 2: it is the cut, and the reporter takes it now.
    let first = report_progress(&url, &token, None, &report(1, 0, 2, 3))
        .await
        .expect("answers");
    let [granted] = &first.barriers[..] else {
        panic!("one barrier: {first:?}");
    };
    assert_eq!((granted.grant.id, granted.grant.cut), (id, Epoch(2)));
    let (status, body) = request(
        job.driver.local_addr(),
        Method::POST,
        "/progress",
        Some(TOKEN),
        &json!({"generation": 1, "uid": "avg", "subtask": 1, "done": 2, "next": 3}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let barrier = &body["barriers"][0];
    assert_eq!(
        (barrier["id"].as_u64(), barrier["cut"].as_u64()),
        (Some(id.0), Some(2)),
        "{body}"
    );
    assert!(
        barrier["storage"]
            .as_str()
            .is_some_and(|s| s.ends_with("/job")),
        "{body}"
    );
    let later = report_progress(&url, &token, None, &report(1, 1, 3, 4))
        .await
        .expect("answers");
    assert!(later.barriers.is_empty(), "epoch 3 is no cut");
    let unknown = report_progress(&url, &token, None, &report(1, 7, 2, 3))
        .await
        .expect_err("no subtask 7");
    assert!(
        matches!(unknown, DriverError::Refused { status: 400, .. }),
        "{unknown}"
    );
    job.driver.restart(None).await.expect("restarts");
    let stale = report_progress(&url, &token, None, &report(1, 0, 3, 4))
        .await
        .expect_err("stale");
    assert!(
        matches!(stale, DriverError::Refused { status: 409, .. }),
        "{stale}"
    );
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_header_timeout() {
    let mut limited = server();
    limited.header_read_timeout = Duration::from_millis(200);
    let job = start_with(|_| {}, limited).await;
    let mut idle = TcpStream::connect(job.driver.local_addr())
        .await
        .expect("connects");
    idle.write_all(b"POST /ack HTTP/1.1\r\nhost:")
        .await
        .expect("sends part of a head");
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, idle.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection")
        .expect("reads");
    job.driver.shutdown(false).await.expect("shuts down");
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_unanswered() {
    let mut capped = server();
    capped.max_connections = 2;
    let job = start_with(|_| {}, capped).await;
    let addr = job.driver.local_addr();
    let held: Vec<TcpStream> = connect_many(addr, 2).await;
    let mut third = TcpStream::connect(addr)
        .await
        .expect("the kernel accepts it");
    third
        .write_all(b"GET /checkpoints HTTP/1.1\r\nhost: x\r\nauthorization: Bearer test-token-7f3a\r\n\r\n")
        .await
        .ok();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, third.read_to_end(&mut answer)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "closed without an answer: {:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(held);
    // Once the held connections are gone, requests are served again.
    crate::client::eventually("a slot frees up", async || {
        tokio::time::timeout(Duration::from_secs(2), try_stats(addr))
            .await
            .is_ok_and(|ok| ok)
    })
    .await;
    job.driver.shutdown(false).await.expect("shuts down");
}

async fn connect_many(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    for _ in 0..n {
        streams.push(TcpStream::connect(addr).await.expect("connects"));
    }
    streams
}

async fn try_stats(addr: std::net::SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    let sent = stream
        .write_all(b"GET /checkpoints HTTP/1.1\r\nhost: x\r\nauthorization: Bearer test-token-7f3a\r\nconnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    sent.is_ok()
        && stream.read_to_end(&mut answer).await.is_ok()
        && answer.starts_with(b"HTTP/1.1 200")
}
