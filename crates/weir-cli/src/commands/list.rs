//! `weir checkpoint list`: the checkpoints of one job directory, or of
//! every job directory under a checkpoint directory, with the latest
//! completed one marked; directories without a valid `_metadata` are
//! listed as incomplete with the reason.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use weir_checkpoint::{CheckpointMetadata, CheckpointStorage, StorageLocation, layout};
use weir_types::JobId;

use super::{SUCCESS, print};
use crate::cli::ListArgs;
use crate::location::locate;
use crate::render;

/// What `checkpoint list --json` prints.
#[derive(Debug, Serialize)]
struct ListView {
    jobs: Vec<JobView>,
}

/// The checkpoints of one job directory.
#[derive(Debug, Serialize)]
struct JobView {
    job_id: String,
    location: String,
    /// The newest completed checkpoint, what a restore from "latest" picks.
    latest: Option<u64>,
    checkpoints: Vec<CheckpointView>,
}

/// One `chk-<n>` directory.
#[derive(Debug, Serialize)]
struct CheckpointView {
    checkpoint_id: u64,
    /// Whether `_metadata` is present and valid.
    completed: bool,
    latest: bool,
    timestamp_millis: Option<u64>,
    time: Option<String>,
    cut_epoch: Option<u64>,
    /// Bytes of the state files referenced (inline ones included).
    size_bytes: Option<u64>,
    operators: Option<usize>,
    /// Why an incomplete directory does not count as completed.
    problem: Option<String>,
}

/// `weir checkpoint list DIR [--json]`.
pub async fn run(args: &ListArgs) -> Result<u8> {
    let located = locate(&args.dir)?;
    let mut jobs = Vec::new();
    if has_checkpoints(&located.dir).await? {
        let Some((parent, name)) = &located.parent else {
            bail!(
                "{} holds checkpoints but has no parent directory to name its job",
                args.dir
            );
        };
        jobs.push(job(parent, name).await?);
    } else {
        for name in children(&located.dir).await? {
            let dir = located.dir.child(&name)?;
            if JobId::new(name.as_str()).is_ok() && has_checkpoints(&dir).await? {
                jobs.push(job(&located.dir, &name).await?);
            }
        }
    }
    if jobs.is_empty() {
        bail!(
            "{} holds no checkpoints: no chk-<n> directories in it or in the job directories under it",
            args.dir
        );
    }
    let text = if args.json {
        let mut text =
            serde_json::to_string_pretty(&ListView { jobs }).context("cannot encode JSON")?;
        text.push('\n');
        text
    } else {
        to_text(&jobs)
    };
    print(&text)?;
    Ok(SUCCESS)
}

/// The names of the directories directly under `dir`, sorted.
async fn children(dir: &StorageLocation) -> Result<Vec<String>> {
    let listing = dir
        .store()
        .list_with_delimiter(Some(dir.root()))
        .await
        .with_context(|| format!("cannot list {}", dir.url()))?;
    let mut names: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}

/// Whether `dir` has `chk-<n>` directories, i.e. is a job directory.
async fn has_checkpoints(dir: &StorageLocation) -> Result<bool> {
    Ok(children(dir)
        .await?
        .iter()
        .any(|n| layout::parse_checkpoint_dir(n).is_some()))
}

/// The checkpoints of job directory `name` under `parent`.
async fn job(parent: &StorageLocation, name: &str) -> Result<JobView> {
    let job = JobId::new(name).with_context(|| format!("{name} is not a job directory"))?;
    let storage = CheckpointStorage::filesystem(parent, job)?;
    let location = storage.job_dir().url().to_owned();
    let context = || format!("cannot list the checkpoints of {location}");
    let latest = storage
        .latest_completed()
        .await
        .with_context(context)?
        .map(|m| m.checkpoint_id);
    let mut checkpoints = Vec::new();
    for id in storage.checkpoint_dirs().await.with_context(context)? {
        let view = match storage.open(id).await {
            Ok(snapshot) => completed(snapshot.metadata(), latest == Some(id)),
            Err(err) if err.is_incomplete_checkpoint() => CheckpointView {
                checkpoint_id: id.0,
                completed: false,
                latest: false,
                timestamp_millis: None,
                time: None,
                cut_epoch: None,
                size_bytes: None,
                operators: None,
                problem: Some(err.to_string()),
            },
            Err(err) => return Err(err).with_context(context),
        };
        checkpoints.push(view);
    }
    Ok(JobView {
        job_id: name.to_owned(),
        location,
        latest: latest.map(|id| id.0),
        checkpoints,
    })
}

fn completed(meta: &CheckpointMetadata, latest: bool) -> CheckpointView {
    CheckpointView {
        checkpoint_id: meta.checkpoint_id.0,
        completed: true,
        latest,
        timestamp_millis: Some(meta.timestamp_millis),
        time: Some(render::time(meta.timestamp_millis)),
        cut_epoch: Some(meta.cut_epoch.0),
        size_bytes: Some(meta.files().iter().map(|f| f.size).sum()),
        operators: Some(meta.operators.len()),
        problem: None,
    }
}

fn to_text(jobs: &[JobView]) -> String {
    let mut out = String::new();
    for job in jobs {
        let _ = writeln!(out, "job {} at {}", job.job_id, job.location);
        let mut table = render::table(&[
            "checkpoint",
            "status",
            "time",
            "cut epoch",
            "size",
            "operators",
        ]);
        for c in &job.checkpoints {
            let status = match (c.completed, c.latest) {
                (true, true) => "completed (latest)".to_owned(),
                (true, false) => "completed".to_owned(),
                (false, _) => format!(
                    "incomplete: {}",
                    c.problem.as_deref().unwrap_or("no valid _metadata")
                ),
            };
            let opt = |v: Option<String>| v.unwrap_or_default();
            table.add_row(vec![
                c.checkpoint_id.to_string(),
                status,
                opt(c.time.clone()),
                opt(c.cut_epoch.map(|e| e.to_string())),
                opt(c.size_bytes.map(render::bytes)),
                opt(c.operators.map(|n| n.to_string())),
            ]);
        }
        let _ = writeln!(out, "{table}");
    }
    out
}
