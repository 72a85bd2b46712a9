//! `weir savepoint info` and `weir checkpoint info`: what a `_metadata`
//! records, as tables or JSON. Reads only `_metadata`, never state files
//! (that is `verify`'s and `dump`'s work).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use weir_checkpoint::{
    CheckpointError, CheckpointKind, CheckpointMetadata, CheckpointStorage, OperatorStateMeta,
    ResolvedSnapshot, StorageLocation, SubtaskStateMeta,
};
use weir_snapshot::{KeyedStateHandle, StateFile};
use weir_types::{JobId, StateDescriptor};

use super::{SUCCESS, open, print};
use crate::cli::InfoArgs;
use crate::location::locate;
use crate::render;

/// `weir savepoint info PATH`.
pub async fn savepoint(args: &InfoArgs) -> Result<u8> {
    let snapshot = open(&args.path).await?;
    show(&snapshot, args.json)
}

/// `weir checkpoint info DIR`: a checkpoint directory, or a job directory
/// for its latest completed checkpoint (what a restore from "latest" picks).
pub async fn checkpoint(args: &InfoArgs) -> Result<u8> {
    let located = locate(&args.path)?;
    let snapshot = match ResolvedSnapshot::open(&located.dir).await {
        Ok(snapshot) => snapshot,
        Err(CheckpointError::MissingMetadata { .. }) if located.parent.is_some() => {
            latest_of_job(&args.path, located.parent.as_ref()).await?
        }
        Err(err) => return Err(err).with_context(|| format!("cannot open {}", args.path)),
    };
    show(&snapshot, args.json)
}

/// The latest completed checkpoint of the job directory `parent.1` in
/// `parent.0`.
async fn latest_of_job(
    path: &str,
    parent: Option<&(StorageLocation, String)>,
) -> Result<ResolvedSnapshot> {
    let not_checkpoint = || {
        format!(
            "{path} is not a checkpoint: it has no _metadata and no completed chk-<n> directories"
        )
    };
    let Some((parent, name)) = parent else {
        bail!(not_checkpoint());
    };
    let Ok(job) = JobId::new(name.as_str()) else {
        bail!(not_checkpoint());
    };
    let storage = CheckpointStorage::filesystem(parent, job)
        .with_context(|| format!("cannot open {path}"))?;
    let latest = storage
        .latest_completed()
        .await
        .with_context(|| format!("cannot list the checkpoints of {path}"))?;
    let Some(latest) = latest else {
        bail!(not_checkpoint());
    };
    storage
        .open(latest.checkpoint_id)
        .await
        .with_context(|| format!("cannot open checkpoint {} of {path}", latest.checkpoint_id))
}

fn show(snapshot: &ResolvedSnapshot, json: bool) -> Result<u8> {
    let view = SnapshotView::new(snapshot);
    let text = if json {
        let mut text = serde_json::to_string_pretty(&view).context("cannot encode JSON")?;
        text.push('\n');
        text
    } else {
        view.to_text()
    };
    print(&text)?;
    Ok(SUCCESS)
}

/// What `info --json` prints: one checkpoint or savepoint.
#[derive(Debug, Serialize)]
pub struct SnapshotView {
    /// The directory state file paths are relative to.
    pub location: String,
    /// The job.
    pub job_id: String,
    /// The checkpoint or savepoint number.
    pub checkpoint_id: u64,
    /// `checkpoint` or `savepoint`.
    pub kind: CheckpointKind,
    /// The `_metadata` format version.
    pub format_version: u32,
    /// Trigger time in Unix milliseconds.
    pub timestamp_millis: u64,
    /// Trigger time, RFC 3339 UTC.
    pub time: String,
    /// The last epoch whose effects the state includes.
    pub cut_epoch: u64,
    /// Source positions, opaque to Weir.
    pub sources: BTreeMap<String, serde_json::Value>,
    /// Sink handles, opaque to Weir.
    pub sinks: BTreeMap<String, serde_json::Value>,
    /// Coordinator statistics, when recorded.
    pub stats: Option<StatsView>,
    /// Operators with state.
    pub operators: Vec<OperatorView>,
    /// Sums over every operator.
    pub totals: Totals,
}

/// Checkpoint statistics.
#[derive(Debug, Serialize)]
pub struct StatsView {
    /// From trigger to completion.
    pub end_to_end_millis: u64,
    /// Size of the state referenced.
    pub state_size_bytes: u64,
    /// Bytes uploaded for this checkpoint only.
    pub persisted_bytes: u64,
}

/// One operator.
#[derive(Debug, Serialize)]
pub struct OperatorView {
    /// Its uid.
    pub uid: String,
    /// Subtasks that wrote the state.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Key column types, rendered; `None` without keyed state.
    pub key_types: Option<Vec<String>>,
    /// The keyed states.
    pub states: Vec<StateView>,
    /// The subtasks that stored anything, by index.
    pub subtasks: Vec<SubtaskView>,
    /// Sums over the subtasks.
    pub totals: Totals,
}

/// One keyed state.
#[derive(Debug, Serialize)]
pub struct StateView {
    /// Its name.
    pub name: String,
    /// `value`, `list`, `reducing`, `aggregating` or `map`.
    pub kind: String,
    /// The value (list item, map value, accumulator) type, rendered.
    pub value_type: String,
    /// The map key type, rendered; map state only.
    pub user_key_type: Option<String>,
    /// Time-to-live in milliseconds, if any.
    pub ttl_millis: Option<u64>,
}

/// One subtask.
#[derive(Debug, Serialize)]
pub struct SubtaskView {
    /// Its index.
    pub subtask: u32,
    /// First key group held (keyed state only).
    pub key_group_start: Option<u32>,
    /// One past the last key group held (keyed state only).
    pub key_group_end: Option<u32>,
    /// `full` or `incremental` (keyed state only).
    pub format: Option<&'static str>,
    /// Keyed entries (full snapshots only).
    pub entries: Option<u64>,
    /// Every file, keyed state first, then operator state.
    pub files: Vec<FileView>,
}

/// One stored file.
#[derive(Debug, Serialize)]
pub struct FileView {
    /// Path relative to `location`.
    pub path: String,
    /// `keyed`, `shared`, `private` or `operator`.
    pub role: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 recorded in the handle.
    pub crc32: u32,
    /// Stored inside `_metadata` rather than as a file.
    pub inline: bool,
}

/// Counts and sizes.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Operators.
    pub operators: usize,
    /// Subtasks that stored anything.
    pub subtasks: usize,
    /// Files referenced (a shared file counts once per reference).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Keyed entries in full snapshots.
    pub entries: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.operators += other.operators;
        self.subtasks += other.subtasks;
        self.files += other.files;
        self.bytes += other.bytes;
        self.entries += other.entries;
    }
}

impl SnapshotView {
    /// The view of an opened snapshot.
    pub fn new(snapshot: &ResolvedSnapshot) -> Self {
        let meta = snapshot.metadata();
        let mut operators: Vec<OperatorView> = meta
            .operators
            .iter()
            .map(|op| OperatorView::new(meta, op))
            .collect();
        operators.sort_by(|a, b| a.uid.cmp(&b.uid));
        let mut totals = Totals::default();
        for op in &operators {
            totals.add(&op.totals);
        }
        let opaque = |m: &BTreeMap<weir_types::OperatorUid, serde_json::Value>| {
            m.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
        };
        Self {
            location: snapshot.base().url().to_owned(),
            job_id: meta.job_id.to_string(),
            checkpoint_id: meta.checkpoint_id.0,
            kind: meta.kind,
            format_version: meta.format_version,
            timestamp_millis: meta.timestamp_millis,
            time: render::time(meta.timestamp_millis),
            cut_epoch: meta.cut_epoch.0,
            sources: opaque(&meta.sources),
            sinks: opaque(&meta.sinks),
            stats: meta.stats.map(|s| StatsView {
                end_to_end_millis: s.end_to_end_millis,
                state_size_bytes: s.state_size_bytes,
                persisted_bytes: s.persisted_bytes,
            }),
            operators,
            totals,
        }
    }

    /// The human form: a summary, then per operator its states and subtasks.
    pub fn to_text(&self) -> String {
        let kind = match self.kind {
            CheckpointKind::Checkpoint => "checkpoint",
            CheckpointKind::Savepoint => "savepoint",
        };
        let mut summary = render::table(&["", ""]);
        summary.set_header(vec![kind.to_owned(), self.checkpoint_id.to_string()]);
        summary.add_row(vec!["job", self.job_id.as_str()]);
        summary.add_row(vec!["location", self.location.as_str()]);
        summary.add_row(vec!["time", self.time.as_str()]);
        summary.add_row(vec!["cut epoch".to_owned(), self.cut_epoch.to_string()]);
        summary.add_row(vec![
            "format version".to_owned(),
            self.format_version.to_string(),
        ]);
        for (label, map) in [("source", &self.sources), ("sink", &self.sinks)] {
            if map.is_empty() {
                summary.add_row(vec![format!("{label}s"), "(none)".to_owned()]);
            }
            for (uid, value) in map {
                summary.add_row(vec![format!("{label} {uid}"), value.to_string()]);
            }
        }
        if let Some(s) = &self.stats {
            summary.add_row(vec![
                "stats".to_owned(),
                format!(
                    "{} ms end to end, state {}, persisted {}",
                    s.end_to_end_millis,
                    render::bytes(s.state_size_bytes),
                    render::bytes(s.persisted_bytes)
                ),
            ]);
        }
        let mut out = format!("{summary}\n");
        for op in &self.operators {
            op.write_text(&mut out);
        }
        let t = &self.totals;
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "\ntotal: {}, {}, {}, {} ({} bytes), {}",
            render::count(t.operators as u64, "operator"),
            render::count(t.subtasks as u64, "subtask"),
            render::count(t.files as u64, "file"),
            render::bytes(t.bytes),
            t.bytes,
            render::count(t.entries, "entry")
        );
        out
    }
}

impl OperatorView {
    fn new(meta: &CheckpointMetadata, op: &OperatorStateMeta) -> Self {
        let mut subtasks: Vec<SubtaskView> = op
            .subtasks
            .iter()
            .map(|s| SubtaskView::new(meta, s))
            .collect();
        subtasks.sort_by_key(|s| s.subtask);
        let mut totals = Totals {
            operators: 1,
            subtasks: subtasks.len(),
            ..Totals::default()
        };
        for s in &subtasks {
            totals.files += s.files.len();
            totals.bytes += s.files.iter().map(|f| f.size).sum::<u64>();
            totals.entries += s.entries.unwrap_or(0);
        }
        Self {
            uid: op.uid.to_string(),
            parallelism: op.parallelism,
            max_parallelism: op.max_parallelism.get(),
            key_types: op
                .key_types
                .as_ref()
                .map(|types| types.iter().map(ToString::to_string).collect()),
            states: op.states.iter().map(StateView::new).collect(),
            subtasks,
            totals,
        }
    }

    fn write_text(&self, out: &mut String) {
        let key_types = self
            .key_types
            .as_ref()
            .map_or_else(|| "none".to_owned(), |t| t.join(", "));
        let _ = writeln!(
            out,
            "\noperator {}: parallelism {}, max parallelism {}, key types [{}]",
            self.uid, self.parallelism, self.max_parallelism, key_types
        );
        if !self.states.is_empty() {
            let mut states = render::table(&["state", "kind", "value type", "map key type", "ttl"]);
            for s in &self.states {
                states.add_row(vec![
                    s.name.clone(),
                    s.kind.clone(),
                    s.value_type.clone(),
                    s.user_key_type.clone().unwrap_or_default(),
                    s.ttl_millis.map(|t| format!("{t} ms")).unwrap_or_default(),
                ]);
            }
            let _ = writeln!(out, "{states}");
        }
        let mut subtasks = render::table(&[
            "subtask",
            "key groups",
            "format",
            "file",
            "role",
            "size",
            "entries",
        ]);
        for s in &self.subtasks {
            let range = match (s.key_group_start, s.key_group_end) {
                (Some(start), Some(end)) => format!("{start}..{end}"),
                _ => String::new(),
            };
            for (i, f) in s.files.iter().enumerate() {
                let first = i == 0;
                let path = if f.inline {
                    format!("{} (inline)", f.path)
                } else {
                    f.path.clone()
                };
                subtasks.add_row(vec![
                    if first {
                        s.subtask.to_string()
                    } else {
                        String::new()
                    },
                    if first { range.clone() } else { String::new() },
                    if first {
                        s.format.unwrap_or("").to_owned()
                    } else {
                        String::new()
                    },
                    path,
                    f.role.to_owned(),
                    render::bytes(f.size),
                    match (first, s.entries) {
                        (true, Some(n)) => n.to_string(),
                        _ => String::new(),
                    },
                ]);
            }
        }
        let _ = writeln!(out, "{subtasks}");
        let t = &self.totals;
        let _ = writeln!(
            out,
            "operator {}: {}, {}, {}, {}",
            self.uid,
            render::count(t.subtasks as u64, "subtask"),
            render::count(t.files as u64, "file"),
            render::bytes(t.bytes),
            render::count(t.entries, "entry")
        );
    }
}

impl StateView {
    fn new(d: &StateDescriptor) -> Self {
        Self {
            name: d.name.clone(),
            kind: d.kind.to_string(),
            value_type: d.value_type.to_string(),
            user_key_type: d.user_key_type.as_ref().map(ToString::to_string),
            ttl_millis: d.ttl.map(|t| t.ttl_millis),
        }
    }
}

impl SubtaskView {
    fn new(meta: &CheckpointMetadata, s: &SubtaskStateMeta) -> Self {
        let file = |f: &StateFile, role| FileView {
            path: f.path.clone(),
            role,
            size: f.size,
            crc32: f.crc32,
            inline: meta.inline.contains_key(&f.path),
        };
        let mut files = Vec::new();
        let (format, entries) = match &s.keyed {
            Some(KeyedStateHandle::Full(h)) => {
                files.push(file(&h.file, "keyed"));
                (Some("full"), Some(h.entries))
            }
            Some(KeyedStateHandle::Incremental(h)) => {
                files.extend(h.shared.iter().map(|f| file(&f.file, "shared")));
                files.extend(h.private.iter().map(|f| file(&f.file, "private")));
                (Some("incremental"), None)
            }
            None => (None, None),
        };
        files.extend(s.operator_state.iter().map(|f| file(f, "operator")));
        let range = s.keyed.as_ref().map(KeyedStateHandle::key_group_range);
        Self {
            subtask: s.subtask.0,
            key_group_start: range.map(|r| r.start()),
            key_group_end: range.map(|r| r.end()),
            format,
            entries,
            files,
        }
    }
}
