//! The HTTP API. Every request needs the job's token.
//!
//! - `POST /ack`: a [`SubtaskAck`] as JSON; answers `{"outcome": ...}`.
//! - `POST /decline`: a [`SubtaskDecline`] as JSON; answers `{"outcome": ...}`.
//! - `POST /owners`: an [`OwnerClaim`] as JSON; answers an [`OwnerAnswer`],
//!   or 409 for a claim of another generation.
//! - `POST /progress`: a [`ProgressReport`] as JSON; answers a
//!   [`ProgressAnswer`](crate::ProgressAnswer), or 409 for a report of
//!   another generation.
//! - `GET /checkpoints`: the statistics history.
//! - `GET /checkpoints/<id>`: one checkpoint's statistics.
//!
//! The token is checked before anything else of a request is looked at:
//! no body is read and nothing is recorded for a request without it.
//! Errors answer `{"error": "..."}` with 400, 401, 404, 405, 409 or 413.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_checkpoint::coordinator::{AckOutcome, SubtaskAck, SubtaskDecline};
use weir_types::CheckpointId;

use crate::driver::Shared;
use crate::owners::{ClaimOutcome, OwnerAnswer, OwnerClaim};
use crate::progress::{ProgressOutcome, ProgressReport};

/// The body of a successful `POST /ack` or `POST /decline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OutcomeBody {
    /// What the coordinator made of the message.
    pub outcome: AckOutcome,
}

pub(crate) async fn handle(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if !shared.token.authorizes(header) {
        let mut response = error(StatusCode::UNAUTHORIZED, "missing or wrong job token");
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    let path = request.uri().path().to_owned();
    match (request.method().clone(), path.as_str()) {
        (Method::POST, "/ack") => {
            let ack: SubtaskAck = match read_json(request, shared.max_body_bytes).await {
                Ok(ack) => ack,
                Err(response) => return response,
            };
            let mut run = shared.run.lock().await;
            let (outcome, effects) = run.coordinator.on_ack(shared.now(), ack);
            shared.dispatch(&run, effects);
            drop(run);
            json(StatusCode::OK, &OutcomeBody { outcome })
        }
        (Method::POST, "/decline") => {
            let decline: SubtaskDecline = match read_json(request, shared.max_body_bytes).await {
                Ok(decline) => decline,
                Err(response) => return response,
            };
            let mut run = shared.run.lock().await;
            let (outcome, effects) = run.coordinator.on_decline(shared.now(), decline);
            shared.dispatch(&run, effects);
            drop(run);
            json(StatusCode::OK, &OutcomeBody { outcome })
        }
        (Method::POST, "/owners") => {
            let claim: OwnerClaim = match read_json(request, shared.max_body_bytes).await {
                Ok(claim) => claim,
                Err(response) => return response,
            };
            match shared.claim_owner(claim) {
                ClaimOutcome::Owner(answer) => json::<OwnerAnswer>(StatusCode::OK, &answer),
                ClaimOutcome::WrongGeneration { current } => error(
                    StatusCode::CONFLICT,
                    &format!(
                        "the job runs generation {current}; a task of another generation cannot claim state"
                    ),
                ),
                ClaimOutcome::UnknownSubtask => error(
                    StatusCode::BAD_REQUEST,
                    "the job has no such stateful subtask",
                ),
                ClaimOutcome::BadAddress => error(
                    StatusCode::BAD_REQUEST,
                    "the address must be a non-empty host:port of printable ASCII, at most 256 bytes",
                ),
            }
        }
        (Method::POST, "/progress") => {
            let report: ProgressReport = match read_json(request, shared.max_body_bytes).await {
                Ok(report) => report,
                Err(response) => return response,
            };
            match shared.report_progress(report).await {
                ProgressOutcome::Answered(answer) => json(StatusCode::OK, &answer),
                ProgressOutcome::WrongGeneration { current } => error(
                    StatusCode::CONFLICT,
                    &format!(
                        "the job runs generation {current}; a task of another generation has no say"
                    ),
                ),
                ProgressOutcome::UnknownSubtask => error(
                    StatusCode::BAD_REQUEST,
                    "the job has no such stateful subtask",
                ),
            }
        }
        (Method::GET, "/checkpoints") => {
            json(StatusCode::OK, shared.run.lock().await.coordinator.stats())
        }
        (Method::GET, p) if p.starts_with("/checkpoints/") => {
            let raw = &p["/checkpoints/".len()..];
            let Ok(id) = raw.parse::<u64>() else {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("{raw:?} is not a checkpoint id"),
                );
            };
            match shared
                .run
                .lock()
                .await
                .coordinator
                .stats()
                .get(CheckpointId(id))
            {
                Some(stats) => json(StatusCode::OK, stats),
                None => error(
                    StatusCode::NOT_FOUND,
                    &format!("checkpoint {id} is not in the statistics history"),
                ),
            }
        }
        (_, "/ack" | "/decline" | "/owners" | "/progress" | "/checkpoints") => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        (_, p) if p.starts_with("/checkpoints/") => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => error(StatusCode::NOT_FOUND, &format!("no such endpoint: {path}")),
    }
}

/// Reads a JSON body of at most `limit` bytes.
async fn read_json<T: DeserializeOwned>(
    request: Request<Incoming>,
    limit: usize,
) -> Result<T, Response<Full<Bytes>>> {
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body exceeds {limit} bytes"),
            ));
        }
        Err(err) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read request body: {err}"),
            ));
        }
    };
    serde_json::from_slice(&body).map_err(|err| {
        error(
            StatusCode::BAD_REQUEST,
            &format!("invalid request body: {err}"),
        )
    })
}

fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(body) => response(status, body),
        Err(err) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode response: {err}"),
        ),
    }
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "error": message })
        .to_string()
        .into_bytes();
    response(status, body)
}

fn response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
