//! The client side of the HTTP API, for tasks and state hosts: one request
//! per message over a fresh connection, with the job token as a Bearer
//! header, over TLS for an `https://` coordinator; connection failures are
//! retried, answers are not.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::{DriverError, Result};
use crate::owners::{OwnerAnswer, OwnerClaim};
use crate::progress::{ProgressAnswer, ProgressReport};
use crate::tls::Tls;
use crate::token::JobToken;

/// How long one attempt may take, connect to last byte.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// Waits before the second and third attempt: a coordinator at its
/// connection limit or a brief network hiccup should not fail a task.
const BACKOFF: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// Claims the state of `claim.subtask` for the host at `claim.address`
/// from the coordinator at `coordinator_url` (`http://host:port`, or
/// `https://` with the job's `tls`); returns the owner the coordinator
/// settled on.
pub async fn claim_owner(
    coordinator_url: &str,
    token: &JobToken,
    tls: Option<&Tls>,
    claim: &OwnerClaim,
) -> Result<OwnerAnswer> {
    post_json(coordinator_url, token, tls, "/owners", claim).await
}

/// Reports a subtask's progress at an epoch boundary to the coordinator at
/// `coordinator_url`; returns the barriers it takes before its next epoch.
pub async fn report_progress(
    coordinator_url: &str,
    token: &JobToken,
    tls: Option<&Tls>,
    report: &ProgressReport,
) -> Result<ProgressAnswer> {
    post_json(coordinator_url, token, tls, "/progress", report).await
}

/// POSTs `body` as JSON to `path` of the coordinator at `base_url` and
/// decodes a successful answer; any other answer is [`DriverError::Refused`].
pub async fn post_json<T: Serialize, R: DeserializeOwned>(
    base_url: &str,
    token: &JobToken,
    tls: Option<&Tls>,
    path: &str,
    body: &T,
) -> Result<R> {
    let answer = post(base_url, token, tls, path, body).await?;
    let url = format!("{}{path}", base_url.trim_end_matches('/'));
    if answer.status != 200 {
        let message = serde_json::from_str::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(answer.body);
        return Err(DriverError::Refused {
            url,
            status: answer.status,
            message,
        });
    }
    serde_json::from_str(&answer.body).map_err(|err| DriverError::Unreachable {
        url,
        reason: format!("the answer does not parse: {err}"),
    })
}

/// What the coordinator answered a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

/// POSTs `body` as JSON to `path` of the coordinator at `base_url`
/// (`http://host:port`, optionally with a path prefix; `https://` needs the
/// job's `tls`); retries failures to connect or to get an answer, never an
/// answer.
pub async fn post<T: Serialize>(
    base_url: &str,
    token: &JobToken,
    tls: Option<&Tls>,
    path: &str,
    body: &T,
) -> Result<Answer> {
    let unreachable = |reason: String| DriverError::Unreachable {
        url: format!("{}{path}", base_url.trim_end_matches('/')),
        reason,
    };
    let endpoint = Endpoint::parse(base_url, path).map_err(unreachable)?;
    let tls = match (endpoint.secure, tls) {
        (false, _) => None,
        (true, Some(tls)) => Some((
            TlsConnector::from(tls.client_config()),
            tls.server_name_for(&endpoint.authority)
                .map_err(|err| unreachable(err.to_string()))?,
        )),
        (true, None) => {
            return Err(unreachable(
                "the coordinator serves HTTPS; give this client the job's TLS files".into(),
            ));
        }
    };
    let body = serde_json::to_vec(body)
        .map_err(|err| unreachable(format!("cannot encode the request: {err}")))?;
    let mut last = String::new();
    for attempt in 0..=BACKOFF.len() {
        if attempt > 0 {
            tokio::time::sleep(BACKOFF[attempt - 1]).await;
        }
        match tokio::time::timeout(ATTEMPT_TIMEOUT, send(&endpoint, tls.as_ref(), token, &body))
            .await
        {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(err)) => last = err,
            Err(_) => last = format!("no answer within {ATTEMPT_TIMEOUT:?}"),
        }
    }
    Err(unreachable(last))
}

/// A parsed `http[s]://authority[/prefix]` plus the request path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    secure: bool,
    authority: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str, path: &str) -> std::result::Result<Self, String> {
        let (secure, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            (None, None) => {
                return Err(format!(
                    "the coordinator URL {url:?} must start with http:// or https://"
                ));
            }
        };
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
            secure,
            authority: authority.to_owned(),
            path: format!("{prefix}{path}"),
        })
    }
}

async fn send(
    endpoint: &Endpoint,
    tls: Option<&(TlsConnector, rustls::pki_types::ServerName<'static>)>,
    token: &JobToken,
    body: &[u8],
) -> std::result::Result<Answer, String> {
    let stream = TcpStream::connect(&endpoint.authority)
        .await
        .map_err(|err| format!("connect: {err}"))?;
    match tls {
        None => exchange(stream, endpoint, token, body).await,
        Some((connector, name)) => {
            let secured = connector
                .connect(name.clone(), stream)
                .await
                .map_err(|err| format!("TLS handshake: {err}"))?;
            exchange(secured, endpoint, token, body).await
        }
    }
}

async fn exchange<S>(
    stream: S,
    endpoint: &Endpoint,
    token: &JobToken,
    body: &[u8],
) -> std::result::Result<Answer, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| format!("handshake: {err}"))?;
    let driver = tokio::spawn(connection);
    let request = Request::post(endpoint.path.as_str())
        .header(HOST, endpoint.authority.as_str())
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
        assert!(!e.secure);
        assert!(
            Endpoint::parse("https://h:1", "/ack")
                .expect("valid")
                .secure
        );
        for bad in ["ftp://h:1", "h:1", "http://", "http://host/x"] {
            assert!(Endpoint::parse(bad, "/ack").is_err(), "{bad}");
        }
    }
}
