//! `weir savepoint dispose` (P6): deletes a savepoint through the storage
//! crate, which refuses anything that is not a readable savepoint, and
//! prints every object it removed. Asks no questions: it is meant for
//! scripts, and a checkpoint can never be disposed by mistake.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use weir_checkpoint::{CheckpointKind, ResolvedSnapshot, dispose_savepoint};

use super::print;
use crate::location::locate;
use crate::render;

/// `weir savepoint dispose PATH`.
pub async fn run(path: &str) -> Result<ExitCode> {
    let located = locate(path)?;
    let snapshot = ResolvedSnapshot::open(&located.dir)
        .await
        .with_context(|| format!("cannot open {path}"))?;
    let meta = snapshot.metadata();
    if meta.kind != CheckpointKind::Savepoint {
        bail!(
            "{path} is checkpoint {} of job {}, not a savepoint: checkpoints belong to the job and are removed by its retention",
            meta.checkpoint_id,
            meta.job_id
        );
    }
    let base = snapshot.base();
    // Listed before deleting so the report names what was there; the
    // storage crate deletes the whole directory, not only what is listed.
    let mut objects: Vec<_> = base
        .store()
        .list(Some(base.root()))
        .try_collect()
        .await
        .with_context(|| format!("cannot list {}", base.url()))?;
    objects.sort_by(|a, b| a.location.cmp(&b.location));
    dispose_savepoint(&located.dir)
        .await
        .with_context(|| format!("cannot dispose {path}"))?;
    let root = base.root().as_ref();
    let mut out = String::new();
    let mut bytes = 0;
    for object in &objects {
        let name = object.location.as_ref();
        let relative = name
            .strip_prefix(root)
            .map_or(name, |r| r.trim_start_matches('/'));
        bytes += object.size;
        let _ = writeln!(out, "removed {relative} ({})", render::bytes(object.size));
    }
    let _ = writeln!(
        out,
        "disposed savepoint {} of job {} at {}: {}, {}",
        meta.checkpoint_id,
        meta.job_id,
        base.url(),
        render::count(objects.len() as u64, "file"),
        render::bytes(bytes)
    );
    print(&out)?;
    Ok(ExitCode::SUCCESS)
}
