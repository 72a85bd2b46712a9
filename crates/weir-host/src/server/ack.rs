//! Posting acks and declines to the checkpoint coordinator through its HTTP
//! client (`weir_coordinator::post`), with the failure as text for the
//! upload's report.

use serde::Serialize;
use weir_coordinator::{Answer, JobToken, Tls};

use crate::protocol::AckTarget;

/// POSTs `body` as JSON to `path` (`/ack` or `/decline`) of `target`
/// (over TLS to an `https://` coordinator); retries connection failures,
/// not answers.
pub(crate) async fn post<T: Serialize>(
    target: &AckTarget,
    tls: Option<&Tls>,
    path: &str,
    body: &T,
) -> Result<Answer, String> {
    let token = JobToken::new(target.token.as_str()).map_err(|err| err.to_string())?;
    weir_coordinator::post(&target.url, &token, tls, path, body)
        .await
        .map_err(|err| err.to_string())
}
