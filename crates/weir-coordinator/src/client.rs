//! The client side of the HTTP API, for tasks and state hosts: one request
//! per message over a fresh connection, with the job token as a Bearer
//! header; connection failures are retried, answers are not.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;

use crate::error::{DriverError, Result};
use crate::owners::{OwnerAnswer, OwnerClaim};
use crate::token::JobToken;

/// How long one attempt may take, connect to last byte.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// Waits before the second and third attempt: a coordinator at its
/// connection limit or a brief network hiccup should not fail a task.
const BACKOFF: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// Claims the state of `claim.subtask` for the host at `claim.address`
/// from the coordinator at `coordinator_url` (`http://host:port`); returns
/// the owner the coordinator settled on.
pub async fn claim_owner(
    coordinator_url: &str,
    token: &JobToken,
    claim: &OwnerClaim,
) -> Result<OwnerAnswer> {
    post_json(coordinator_url, token, "/owners", claim).await
}

/// POSTs `body` as JSON to `path` of the coordinator at `base_url` and
/// decodes a successful answer.
pub async fn post_json<T: Serialize, R: DeserializeOwned>(
    base_url: &str,
    token: &JobToken,
    path: &str,
    body: &T,
) -> Result<R> {
    let url = format!("{}{path}", base_url.trim_end_matches('/'));
    let unreachable = |reason: String| DriverError::Unreachable {
        url: url.clone(),
        reason,
    };
    let authority = base_url
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|authority| authority.contains(':') && !authority.contains('/'))
        .ok_or_else(|| unreachable("the coordinator URL must look like http://host:port".into()))?;
    let body = serde_json::to_vec(body)
        .map_err(|err| unreachable(format!("cannot encode the request: {err}")))?;
    let mut last = String::new();
    for attempt in 0..=BACKOFF.len() {
        if attempt > 0 {
            tokio::time::sleep(BACKOFF[attempt - 1]).await;
        }
        let sent = tokio::time::timeout(ATTEMPT_TIMEOUT, send(authority, path, token, &body)).await;
        let (status, answer) = match sent {
            Ok(Ok(answer)) => answer,
            Ok(Err(err)) => {
                last = err;
                continue;
            }
            Err(_) => {
                last = format!("no answer within {ATTEMPT_TIMEOUT:?}");
                continue;
            }
        };
        if status != 200 {
            let message = serde_json::from_slice::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&answer).into_owned());
            return Err(DriverError::Refused {
                url,
                status,
                message,
            });
        }
        return serde_json::from_slice(&answer)
            .map_err(|err| unreachable(format!("the answer does not parse: {err}")));
    }
    Err(unreachable(last))
}

async fn send(
    authority: &str,
    path: &str,
    token: &JobToken,
    body: &[u8],
) -> std::result::Result<(u16, Bytes), String> {
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|err| format!("connect: {err}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| format!("handshake: {err}"))?;
    let driver = tokio::spawn(connection);
    let request = Request::post(path)
        .header(HOST, authority)
        .header(AUTHORIZATION, token.bearer_header())
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
    Ok((status, bytes))
}
