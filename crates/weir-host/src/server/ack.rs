//! Posting acks and declines to the checkpoint coordinator: one HTTP/1.1
//! request per message over a fresh TCP connection, with the job token as a
//! Bearer header (see `weir_coordinator`'s HTTP API).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpStream;

use crate::protocol::AckTarget;

/// How long one attempt may take, connect to last byte.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// Waits before the second and third attempt: a coordinator restarting its
/// listener or a brief network hiccup should not fail a checkpoint.
const BACKOFF: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// What the coordinator answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub(crate) status: u16,
    /// The body, as text.
    pub(crate) body: String,
}

/// POSTs `body` as JSON to `path` (`/ack` or `/decline`) of `target`;
/// retries connection failures, not answers.
pub(crate) async fn post<T: Serialize>(
    target: &AckTarget,
    path: &str,
    body: &T,
) -> Result<Answer, String> {
    let body = serde_json::to_vec(body).map_err(|err| format!("cannot encode {path}: {err}"))?;
    let endpoint = Endpoint::parse(&target.url, path)?;
    let mut last = String::new();
    for attempt in 0..=BACKOFF.len() {
        if attempt > 0 {
            tokio::time::sleep(BACKOFF[attempt - 1]).await;
        }
        match tokio::time::timeout(ATTEMPT_TIMEOUT, send(&endpoint, &target.token, &body)).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(err)) => last = err,
            Err(_) => last = format!("no answer within {ATTEMPT_TIMEOUT:?}"),
        }
    }
    Err(format!(
        "cannot reach the checkpoint coordinator at {}{path}: {last}",
        target.url
    ))
}

/// A parsed `http://authority[/prefix]` plus the request path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    authority: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str, path: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("the coordinator URL {url:?} must start with http:// (no TLS on this hop)")
        })?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() || !authority.contains(':') {
            return Err(format!(
                "the coordinator URL {url:?} needs a host and port: http://host:port"
            ));
        }
        Ok(Self {
            authority: authority.to_owned(),
            path: format!("{prefix}{path}"),
        })
    }
}

async fn send(endpoint: &Endpoint, token: &str, body: &[u8]) -> Result<Answer, String> {
    let stream = TcpStream::connect(&endpoint.authority)
        .await
        .map_err(|err| format!("connect: {err}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| format!("handshake: {err}"))?;
    let driver = tokio::spawn(connection);
    let request = Request::post(endpoint.path.as_str())
        .header(HOST, endpoint.authority.as_str())
        .header(AUTHORIZATION, format!("Bearer {token}"))
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|err| format!("request: {err}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| format!("send: {err}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|err| format!("read answer: {err}"))?
        .to_bytes();
    driver.abort();
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_join_the_prefix_and_path() {
        let e = Endpoint::parse("http://127.0.0.1:8080", "/ack").expect("valid");
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:8080", "/ack")
        );
        let e = Endpoint::parse("http://h:1/api/", "/decline").expect("valid");
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("h:1", "/api/decline")
        );
        for bad in ["https://h:1", "h:1", "http://", "http://host/x"] {
            assert!(Endpoint::parse(bad, "/ack").is_err(), "{bad}");
        }
    }
}
