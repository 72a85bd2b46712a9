//! Checkpoint barriers: the synchronous part inside the request, the upload
//! and the ack (or decline) in the background on the host's runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use tokio::sync::watch;
use weir_checkpoint::coordinator::{AckOutcome, SubtaskAck, SubtaskDecline, SubtaskMetrics};
use weir_checkpoint::{StorageLocation, layout};
use weir_types::{CheckpointId, OperatorUid, StateDescriptor, SubtaskIndex, ValueType};

use super::ack;
use super::host::{Host, UploadKey};
use super::slot::Slot;
use crate::engine::{SubtaskUpload, UploadFuture};
use crate::error::{HostError, Result};
use crate::protocol::{AckTarget, BarrierReply, BarrierRequest};
use crate::session::SubtaskSession;

/// Takes checkpoint `request.checkpoint` of the subtask in `slot` at
/// `request.cut` and starts its upload. A barrier this slot already took
/// (a retried task), or of a checkpoint the driver aborted already, does
/// nothing.
pub(crate) fn take(
    host: &Arc<Host>,
    slot: &mut Slot,
    request: &BarrierRequest,
) -> Result<BarrierReply> {
    let id = request.checkpoint;
    if slot.checkpoints.contains(&id) || host.was_aborted(id) {
        return Ok(BarrierReply {
            started: false,
            sync_micros: 0,
        });
    }
    let spec = slot.subtask.spec().clone();
    let reached = slot.facts.final_epoch.max(slot.facts.last_committed);
    if reached < Some(request.cut) {
        return Err(HostError::StateLost(format!(
            "checkpoint {id} cuts {}/{} at epoch {}, which this state host never committed \
             (its newest epoch is {})",
            spec.uid,
            spec.subtask,
            request.cut,
            reached.map_or_else(|| "none".to_owned(), |e| e.to_string())
        )));
    }
    let location = request.storage.open()?;
    let storage = location.snapshot_storage();
    let started = Instant::now();
    if slot.facts.final_epoch < Some(request.cut) {
        slot.subtask.finalize_up_to(request.cut)?;
        slot.note_final();
    }
    let snapshot = slot
        .subtask
        .snapshot_sync_as(&request.format, id, &request.storage.url)?
        .with_compression(request.compression);
    let sync = started.elapsed();
    let key_types = snapshot.key_types().map(<[_]>::to_vec);
    let states = snapshot.descriptors().to_vec();
    slot.remember_checkpoint(id);
    let upload = snapshot.upload(&host.runtime, &storage, id);
    let key: UploadKey = (id, spec.uid, spec.subtask);
    let cancel = host.start_upload(key.clone());
    if host.was_aborted(id) {
        // Aborted while the snapshot was taken: the abort found no upload to cancel.
        host.cancel_upload(&key);
    }
    let background = Background {
        host: Arc::clone(host),
        key,
        ack: request.ack.clone(),
        location,
        sync,
        key_types,
        states,
    };
    host.runtime.spawn(background.run(upload, cancel));
    Ok(BarrierReply {
        started: true,
        sync_micros: u64::try_from(sync.as_micros()).unwrap_or(u64::MAX),
    })
}

/// The body of the coordinator's answer to an ack.
#[derive(serde::Deserialize)]
struct OutcomeBody {
    outcome: AckOutcome,
}

/// The asynchronous part of one subtask's checkpoint. Files it wrote that
/// no checkpoint will reference (the checkpoint was aborted, the upload
/// failed, or the coordinator refused the ack) are deleted; only an ack
/// without an answer leaves them, as the coordinator may have completed the
/// checkpoint with them.
struct Background {
    host: Arc<Host>,
    key: UploadKey,
    ack: AckTarget,
    /// The job directory the upload writes under.
    location: StorageLocation,
    sync: Duration,
    key_types: Option<Vec<ValueType>>,
    states: Vec<StateDescriptor>,
}

/// What became of an ack.
enum Acked {
    /// The coordinator counted it (or had already): the files are its now.
    Kept,
    /// The coordinator refused it or no longer wants the checkpoint: the
    /// files belong to nobody.
    Unwanted(String),
    /// No answer: the coordinator may still reference the files.
    Unanswered(String),
}

impl Background {
    async fn run(self, mut upload: UploadFuture, mut cancel: watch::Receiver<bool>) {
        let (id, uid, subtask) = self.key.clone();
        let outcome = tokio::select! {
            result = &mut upload => Some(result),
            // A dropped switch (the host is going away) cancels too.
            _ = cancel.wait_for(|canceled| *canceled) => None,
        };
        let failure = match outcome {
            None => {
                upload.cancel();
                // Waits until the upload stopped writing, so nothing
                // appears after the files are deleted.
                let _ = upload.await;
                let message = format!("checkpoint {id} of {uid}/{subtask} was aborted");
                Some(self.discard(message).await)
            }
            Some(Ok(upload)) => {
                let acked = tokio::select! {
                    acked = self.acknowledge(upload) => acked,
                    // Aborted: the coordinator will not complete it, whether
                    // or not this ack reached it.
                    _ = cancel.wait_for(|canceled| *canceled) => Acked::Unwanted(format!(
                        "checkpoint {id} of {uid}/{subtask} was aborted while it was acked"
                    )),
                };
                match acked {
                    Acked::Kept => None,
                    Acked::Unwanted(message) => Some(self.discard(message).await),
                    Acked::Unanswered(message) => Some(message),
                }
            }
            Some(Err(err)) => {
                let message = format!("checkpoint {id} of {uid}/{subtask}: upload failed: {err}");
                self.decline(id, &uid, subtask, &message).await;
                Some(self.discard(message).await)
            }
        };
        if let Some(message) = &failure {
            eprintln!("weir-host: {message}");
        }
        self.host.finish_upload(&self.key, failure);
    }

    /// Deletes every file under the subtask's directory of the checkpoint
    /// (no completed checkpoint names them); returns `why` with what
    /// happened.
    async fn discard(&self, why: String) -> String {
        let (id, uid, subtask) = &self.key;
        let dir = layout::subtask_dir(*id, uid, *subtask);
        let root = match self.location.child(&dir) {
            Ok(location) => location.root().clone(),
            Err(err) => return format!("{why}; cannot name its files to delete them: {err}"),
        };
        let store = self.location.store();
        let listed = store.list(Some(&root)).map_ok(|meta| meta.location).boxed();
        let outcomes: Vec<_> = store.delete_stream(listed).collect().await;
        let deleted = outcomes.iter().filter(|o| o.is_ok()).count();
        match outcomes.into_iter().find_map(|o| match o {
            Err(object_store::Error::NotFound { .. }) | Ok(_) => None,
            Err(err) => Some(err),
        }) {
            None => format!("{why}; deleted what it wrote ({deleted} files)"),
            Some(err) => format!("{why}; deleted {deleted} files it wrote, then failed: {err}"),
        }
    }

    async fn acknowledge(&self, upload: SubtaskUpload) -> Acked {
        let (id, uid, subtask) = self.key.clone();
        let metrics = upload.metrics;
        let body = SubtaskAck {
            checkpoint_id: id,
            uid: uid.clone(),
            state: upload.meta,
            metrics: SubtaskMetrics {
                sync_millis: millis(self.sync),
                async_millis: millis(metrics.async_duration),
                state_size_bytes: metrics.state_size,
                persisted_bytes: metrics.uploaded_size,
                alignment_buffered_bytes: 0,
            },
            key_types: self.key_types.clone(),
            states: self.states.clone(),
        };
        let answer = match ack::post(&self.ack, self.host.tls.as_ref(), "/ack", &body).await {
            Ok(answer) => answer,
            Err(err) => return Acked::Unanswered(err),
        };
        if answer.status != 200 {
            return Acked::Unwanted(refused(id, &uid, subtask, "ack", &answer));
        }
        match serde_json::from_str::<OutcomeBody>(&answer.body).map(|b| b.outcome) {
            Ok(AckOutcome::Accepted | AckOutcome::Duplicate) => {
                eprintln!(
                    "weir-host: checkpoint {id} of {uid}/{subtask} acked: {}",
                    answer.body
                );
                Acked::Kept
            }
            Ok(outcome @ (AckOutcome::Unknown | AckOutcome::Discarded)) => {
                Acked::Unwanted(format!(
                    "the coordinator no longer takes checkpoint {id} of {uid}/{subtask} \
                     ({outcome:?})"
                ))
            }
            // An answer of another version: keep the files to be safe.
            Err(err) => Acked::Unanswered(format!(
                "the coordinator's answer to the ack of checkpoint {id} of {uid}/{subtask} is \
                 unreadable ({err}): {}",
                answer.body
            )),
        }
    }

    async fn decline(
        &self,
        id: CheckpointId,
        uid: &OperatorUid,
        subtask: SubtaskIndex,
        message: &str,
    ) {
        let body = SubtaskDecline {
            checkpoint_id: id,
            uid: uid.clone(),
            subtask,
            message: message.to_owned(),
        };
        match ack::post(&self.ack, self.host.tls.as_ref(), "/decline", &body).await {
            Ok(answer) if answer.status == 200 => {}
            Ok(answer) => eprintln!(
                "weir-host: {}",
                refused(id, uid, subtask, "decline", &answer)
            ),
            // The coordinator times the checkpoint out without the decline.
            Err(err) => eprintln!("weir-host: {err}"),
        }
    }
}

fn refused(
    id: CheckpointId,
    uid: &OperatorUid,
    subtask: SubtaskIndex,
    what: &str,
    answer: &weir_coordinator::Answer,
) -> String {
    let hint = if answer.status == 401 {
        " (the coordinator refused the job token)"
    } else {
        ""
    };
    format!(
        "the coordinator refused the {what} of checkpoint {id} of {uid}/{subtask} with HTTP {}{hint}: {}",
        answer.status, answer.body
    )
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
