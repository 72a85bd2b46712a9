//! `weir savepoint dispose` (P6): deletes a savepoint through the storage
//! crate, which refuses anything that is not a readable savepoint, and
//! prints every object it removed. Asks no questions: it is meant for
//! scripts, and a checkpoint can never be disposed by mistake.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result};
use futures::TryStreamExt;
use weir_checkpoint::dispose_savepoint;

use super::{open, print};
use crate::location::locate;
use crate::render;

/// `weir savepoint dispose PATH`.
pub async fn run(path: &str) -> Result<ExitCode> {
    let snapshot = open(path).await?;
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
    let located = locate(path)?;
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
    let meta = snapshot.metadata();
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
