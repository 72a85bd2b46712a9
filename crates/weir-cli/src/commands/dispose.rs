//! `weir savepoint dispose`: deletes a savepoint through the storage crate,
//! which refuses anything that is not a readable savepoint and deletes only
//! `_metadata` and the state files the savepoint names (never through a
//! symbolic link), and prints what it removed and what it left. Asks no
//! questions: it is meant for scripts, and a checkpoint can never be
//! disposed by mistake.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use weir_checkpoint::{CheckpointKind, ResolvedSnapshot, dispose_savepoint, layout};

use super::{SUCCESS, print};
use crate::location::locate;
use crate::render;

/// `weir savepoint dispose PATH`.
pub async fn run(path: &str) -> Result<u8> {
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
    let disposed = dispose_savepoint(&located.dir)
        .await
        .with_context(|| format!("cannot dispose {path}"))?;
    let mut out = format!("removed {}\n", layout::METADATA_FILE);
    let mut bytes = 0;
    for file in &disposed.removed {
        bytes += file.size;
        let _ = writeln!(out, "removed {} ({})", file.path, render::bytes(file.size));
    }
    for name in &disposed.left {
        let _ = writeln!(out, "kept {name}: the savepoint does not name it");
    }
    let meta = &disposed.metadata;
    let _ = writeln!(
        out,
        "disposed savepoint {} of job {} at {}: {}, {} of state",
        meta.checkpoint_id,
        meta.job_id,
        snapshot.base().url(),
        render::count(disposed.removed.len() as u64 + 1, "file"),
        render::bytes(bytes)
    );
    print(&out)?;
    Ok(SUCCESS)
}
