//! The HTTP surface: authentication, routing and malformed requests.

use hyper::{Method, StatusCode};

use crate::client::{TOKEN, request, start};

#[tokio::test]
async fn requests_without_the_right_token_are_refused() {
    let job = start(None).await;
    let addr = job.driver.local_addr();
    assert!(addr.ip().is_loopback(), "binds to loopback by default");
    let ack = r#"{"checkpoint_id": 1, "uid": "avg", "subtask": 0, "keyed": null, "operator_state": null, "metrics": {"sync_millis": 0, "async_millis": 0, "state_size_bytes": 0, "persisted_bytes": 0}}"#;
    for token in [None, Some("wrong"), Some("test-token-7f3")] {
        let (status, body) = request(addr, Method::POST, "/ack", token, ack).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "token {token:?}");
        assert_eq!(body["error"], "missing or wrong job token");
        let (status, _) = request(addr, Method::GET, "/checkpoints", token, "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // The refused ack was never counted: the same ack with the token is
    // judged on its own (no barrier for checkpoint 1 yet).
    let (status, body) = request(addr, Method::POST, "/ack", Some(TOKEN), ack).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["outcome"], "unknown");
    job.driver.shutdown().await;
}

#[tokio::test]
async fn malformed_requests_get_client_errors() {
    let job = start(Some(256)).await;
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
    let (status, _) = request(addr, Method::GET, "/ack", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = request(addr, Method::GET, "/nowhere", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    job.driver.shutdown().await;
}
