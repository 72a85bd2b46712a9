//! `weir savepoint verify`: reads every file a checkpoint or savepoint
//! references and checks it against its handle (size, CRC-32) and, for
//! canonical snapshot files, against itself (footer, header, index, each
//! key group's block CRC and entry count). Every problem is reported, not
//! only the first; any problem makes the exit code non-zero.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::Result;
use bytes::Bytes;
use object_store::ObjectStoreExt;
use weir_checkpoint::{OperatorStateMeta, ResolvedSnapshot, layout};
use weir_snapshot::format::SnapshotLayout;
use weir_snapshot::{FormatError, FullSnapshotHandle, KeyedStateHandle, StateFile};
use weir_state::OperatorStateSnapshot;

use super::{FAILURE, SUCCESS, open, print};
use crate::render;

/// What a file is expected to hold.
enum Content<'a> {
    /// A canonical key-group-indexed snapshot file.
    Full(&'a FullSnapshotHandle),
    /// An operator state file.
    Operator,
    /// Opaque bytes (RocksDB files of an incremental checkpoint).
    Opaque,
}

/// One file to check and who references it.
struct Target<'a> {
    owner: String,
    role: &'a str,
    file: &'a StateFile,
    content: Content<'a>,
    op: &'a OperatorStateMeta,
}

/// `weir savepoint verify PATH`.
pub async fn run(path: &str) -> Result<u8> {
    let snapshot = open(path).await?;
    let targets = targets(&snapshot);
    let mut out = String::new();
    let (mut bytes, mut failed, mut problems) = (0u64, 0usize, 0usize);
    for target in &targets {
        let (found, detail) = check(&snapshot, target).await;
        bytes += target.file.size;
        let name = format!("{} {}", target.owner, target.role);
        if found.is_empty() {
            let _ = writeln!(
                out,
                "OK    {name:<24} {} ({}{detail})",
                target.file.path,
                render::bytes(target.file.size)
            );
        } else {
            failed += 1;
            problems += found.len();
            for problem in found {
                let _ = writeln!(out, "FAIL  {name:<24} {}: {problem}", target.file.path);
            }
        }
    }
    let meta = snapshot.metadata();
    let what = format!(
        "{:?} {} of job {}",
        meta.kind, meta.checkpoint_id, meta.job_id
    )
    .to_lowercase();
    if failed == 0 {
        let _ = writeln!(
            out,
            "{what}: OK, {}, {} verified",
            render::count(targets.len() as u64, "file"),
            render::bytes(bytes)
        );
        print(&out)?;
        Ok(SUCCESS)
    } else {
        let _ = writeln!(
            out,
            "{what}: {} in {failed} of {}",
            render::count(problems as u64, "problem"),
            render::count(targets.len() as u64, "file")
        );
        print(&out)?;
        Ok(FAILURE)
    }
}

/// Every referenced file once (shared files may be referenced by several
/// checkpoints' handles, never twice here), by operator and subtask.
fn targets(snapshot: &ResolvedSnapshot) -> Vec<Target<'_>> {
    let mut seen = BTreeSet::new();
    let mut targets = Vec::new();
    let mut operators: Vec<_> = snapshot.metadata().operators.iter().collect();
    operators.sort_by(|a, b| a.uid.cmp(&b.uid));
    for op in operators {
        let mut subtasks: Vec<_> = op.subtasks.iter().collect();
        subtasks.sort_by_key(|s| s.subtask);
        for sub in subtasks {
            let owner = format!("{}/{}", op.uid, sub.subtask);
            let mut files: Vec<(&str, &StateFile, Content<'_>)> = Vec::new();
            match &sub.keyed {
                Some(KeyedStateHandle::Full(h)) => files.push(("keyed", &h.file, Content::Full(h))),
                Some(KeyedStateHandle::Incremental(h)) => {
                    let shared = h
                        .shared
                        .iter()
                        .map(|f| ("shared", &f.file, Content::Opaque));
                    let private = h
                        .private
                        .iter()
                        .map(|f| ("private", &f.file, Content::Opaque));
                    files.extend(shared.chain(private));
                }
                None => {}
            }
            if let Some(f) = &sub.operator_state {
                files.push(("operator", f, Content::Operator));
            }
            for (role, file, content) in files {
                if seen.insert(file.path.as_str()) {
                    targets.push(Target {
                        owner: owner.clone(),
                        role,
                        file,
                        content,
                        op,
                    });
                }
            }
        }
    }
    targets
}

/// The problems of one file (empty when it is sound) and, when sound, a
/// note on what was checked inside it.
async fn check(snapshot: &ResolvedSnapshot, target: &Target<'_>) -> (Vec<String>, String) {
    let file = target.file;
    let bytes = match fetch(snapshot, file).await {
        Ok(bytes) => bytes,
        Err(problem) => return (vec![problem], String::new()),
    };
    let mut problems = Vec::new();
    if bytes.len() as u64 != file.size {
        problems.push(format!(
            "size is {} bytes, the handle says {}",
            bytes.len(),
            file.size
        ));
    }
    let crc32 = crc32fast::hash(&bytes);
    if crc32 != file.crc32 {
        problems.push(format!(
            "crc32 is {crc32:08x}, the handle says {:08x}",
            file.crc32
        ));
    }
    let detail = match target.content {
        Content::Full(handle) => check_full(&bytes, handle, target.op, &mut problems),
        Content::Operator => match OperatorStateSnapshot::decode(&bytes) {
            Ok(state) => format!(
                ", {}",
                render::count(state.states.len() as u64, "operator state")
            ),
            Err(e) => {
                problems.push(format!("operator state does not decode: {e}"));
                String::new()
            }
        },
        Content::Opaque => String::new(),
    };
    (problems, detail)
}

/// The stored bytes of `file`, unchecked (inline files come from the
/// metadata); the error is the problem to report.
async fn fetch(snapshot: &ResolvedSnapshot, file: &StateFile) -> Result<Bytes, String> {
    if let Some(inline) = snapshot.metadata().inline.get(&file.path) {
        return Ok(inline.0.clone());
    }
    let base = snapshot.base();
    let path = layout::join(base.root(), &file.path).map_err(|e| e.to_string())?;
    let read = match base.store().get(&path).await {
        Ok(result) => result.bytes().await,
        Err(e) => Err(e),
    };
    read.map_err(|e| match e {
        object_store::Error::NotFound { .. } => format!("missing from {}", base.url()),
        other => format!("cannot read: {other}"),
    })
}

/// Checks a canonical snapshot file block by block, so a damaged file
/// reports every damaged key group.
fn check_full(
    bytes: &[u8],
    handle: &FullSnapshotHandle,
    op: &OperatorStateMeta,
    problems: &mut Vec<String>,
) -> String {
    let layout = match SnapshotLayout::from_file(bytes) {
        Ok(layout) => layout,
        Err(e) => {
            problems.push(e.to_string());
            return String::new();
        }
    };
    let header = layout.header();
    if header.key_group_range != handle.key_group_range {
        problems.push(format!(
            "the file holds key groups {}, the handle says {}",
            header.key_group_range, handle.key_group_range
        ));
    }
    if header.max_parallelism != op.max_parallelism {
        problems.push(format!(
            "the file has max parallelism {}, the operator {}",
            header.max_parallelism.get(),
            op.max_parallelism.get()
        ));
    }
    let mut entries = 0u64;
    for info in layout.blocks() {
        let counted = layout.read_block(info, info.stored_in(bytes, 0), &mut |_| {
            entries += 1;
            Ok::<_, FormatError>(())
        });
        if let Err(e) = counted {
            problems.push(e.to_string());
        }
    }
    if problems.is_empty() && entries != handle.entries {
        problems.push(format!(
            "the file holds {entries} entries, the handle says {}",
            handle.entries
        ));
    }
    format!(", {} key groups, {entries} entries", layout.blocks().len())
}
