//! `weir savepoint dump`: the keyed state entries of the snapshot files,
//! decoded by the types recorded with them.
//!
//! Files are read the way a restore reads them (footer and index, then one
//! key group at a time, each block checked against its CRC), so `--limit`
//! stops early without reading the rest. Incremental (RocksDB) handles hold
//! native database files, not entries; they are reported and skipped.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use weir_checkpoint::{OperatorStateMeta, ResolvedSnapshot};
use weir_snapshot::{KeyedStateHandle, SnapshotFile, SnapshotStorage};
use weir_state::{EntryPayload, StateEntry, list_items};
use weir_types::{KeyGroupRange, StateDescriptor, Value, ValueType, decode_key, decode_value};

use super::{SUCCESS, open, print};
use crate::cli::DumpArgs;
use crate::render;

/// `weir savepoint dump PATH [--uid U] [--state S] [--key K] [--limit N] [--json]`.
pub async fn run(args: &DumpArgs) -> Result<u8> {
    let snapshot = open(&args.path).await?;
    let operators = select_operators(&snapshot, args)?;
    let storage = snapshot
        .state_storage()
        .await
        .context("cannot read the inline state files")?;
    let mut dump = Dump {
        args,
        entries: Vec::new(),
        truncated: false,
        skipped: Vec::new(),
    };
    'operators: for op in operators {
        let mut subtasks: Vec<_> = op.subtasks.iter().collect();
        subtasks.sort_by_key(|s| s.subtask);
        for sub in subtasks {
            match &sub.keyed {
                Some(KeyedStateHandle::Full(handle)) => {
                    let file = SnapshotFile::open(
                        &*storage.store,
                        &storage.root,
                        &handle.file.path,
                        Some(handle.file.size),
                    )
                    .await
                    .with_context(|| format!("cannot dump operator {} subtask {}", op.uid, sub.subtask))?;
                    if !dump.file(&storage, op, sub.subtask.0, &file).await? {
                        break 'operators;
                    }
                }
                Some(KeyedStateHandle::Incremental(_)) => dump.skipped.push(format!(
                    "operator {} subtask {}: incremental RocksDB files cannot be dumped; take a savepoint and dump it",
                    op.uid, sub.subtask
                )),
                None => {}
            }
        }
    }
    for skipped in &dump.skipped {
        eprintln!("weir: warning: {skipped}");
    }
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&DumpView {
            entries: &dump.entries,
            truncated: dump.truncated,
        })
        .context("cannot encode JSON")?;
        text.push('\n');
        text
    } else {
        dump.to_text()
    };
    print(&text)?;
    Ok(SUCCESS)
}

/// The operators `--uid` and `--state` select; naming one that does not
/// exist is an error that lists what does.
fn select_operators<'a>(
    snapshot: &'a ResolvedSnapshot,
    args: &DumpArgs,
) -> Result<Vec<&'a OperatorStateMeta>> {
    let meta = snapshot.metadata();
    let mut operators: Vec<_> = meta
        .operators
        .iter()
        .filter(|op| args.uid.as_deref().is_none_or(|uid| op.uid.as_str() == uid))
        .collect();
    operators.sort_by(|a, b| a.uid.cmp(&b.uid));
    if let (Some(uid), true) = (&args.uid, operators.is_empty()) {
        let known: Vec<_> = meta.operators.iter().map(|o| o.uid.to_string()).collect();
        bail!(
            "operator {uid} has no state in {} (operators: {})",
            args.path,
            join_or_none(&known)
        );
    }
    if let Some(state) = &args.state {
        let has = |op: &&OperatorStateMeta| op.states.iter().any(|d| &d.name == state);
        if !operators.iter().any(has) {
            let known: Vec<_> = operators
                .iter()
                .flat_map(|o| o.states.iter().map(|d| format!("{}/{}", o.uid, d.name)))
                .collect();
            bail!(
                "no operator has a state named {state:?} (states: {})",
                join_or_none(&known)
            );
        }
        operators.retain(has);
    }
    Ok(operators)
}

fn join_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// One decoded entry, as `--json` prints it.
#[derive(Debug, Serialize)]
struct EntryView {
    uid: String,
    subtask: u32,
    key_group: u16,
    state: String,
    kind: String,
    /// The key as printed and matched by `--key`.
    key: String,
    /// The key's columns; `null` when the key types are unknown or the
    /// key does not decode (then `key` is its hex).
    key_columns: Option<Vec<serde_json::Value>>,
    /// Hex of the namespace; omitted when empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    /// The map key, for map state.
    #[serde(skip_serializing_if = "Option::is_none")]
    user_key: Option<serde_json::Value>,
    /// The value; the items for list state.
    value: serde_json::Value,
    /// Why part of the entry is shown as hex instead of decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    decode_error: Option<String>,
    /// The table's rendering of `user_key` and `value`.
    #[serde(skip)]
    text: (String, String),
    /// The key with string columns unquoted, also matched by `--key`.
    #[serde(skip)]
    key_unquoted: Option<String>,
}

/// What `dump --json` prints.
#[derive(Debug, Serialize)]
struct DumpView<'a> {
    entries: &'a [EntryView],
    /// True when `--limit` cut the dump short.
    truncated: bool,
}

struct Dump<'a> {
    args: &'a DumpArgs,
    entries: Vec<EntryView>,
    truncated: bool,
    skipped: Vec<String>,
}

/// A decoded part of an entry: its JSON and its text, or hex and the error.
struct Decoded {
    json: serde_json::Value,
    text: String,
    error: Option<String>,
}

impl Decoded {
    fn of(bytes: &[u8], ty: &ValueType) -> Self {
        match decode_value(bytes, ty) {
            Ok(v) => Self::value(&v, ty),
            Err(e) => Self::raw(bytes, e.to_string()),
        }
    }

    fn value(v: &Value, ty: &ValueType) -> Self {
        Self {
            json: render::value_json(v, ty),
            text: v.to_string(),
            error: None,
        }
    }

    fn raw(bytes: &[u8], error: String) -> Self {
        let hex = render::hex(bytes);
        Self {
            json: serde_json::Value::String(hex.clone()),
            text: format!("{hex} (undecodable)"),
            error: Some(error),
        }
    }
}

impl Dump<'_> {
    /// Dumps the entries of one file, one key group at a time; false once
    /// `--limit` is reached.
    async fn file(
        &mut self,
        storage: &SnapshotStorage,
        op: &OperatorStateMeta,
        subtask: u32,
        file: &SnapshotFile,
    ) -> Result<bool> {
        let header = file.layout().header();
        // The file records its key types; older writers may have left them
        // to the metadata only.
        let key_types = header.key_types.as_deref().or(op.key_types.as_deref());
        let args = self.args;
        for info in file.layout().blocks() {
            let kg = u32::from(info.key_group.0);
            let range = KeyGroupRange::new(kg, kg + 1)?;
            let mut selected = Vec::new();
            file.read_entries(&*storage.store, range, &mut |entry| {
                if let Some(view) =
                    select(args, op, subtask, &entry, &header.descriptors, key_types)
                {
                    selected.push((SortKey::of(&entry), view));
                }
                Ok(())
            })
            .await
            .with_context(|| format!("cannot dump operator {} subtask {subtask}", op.uid))?;
            // Backends write a key group's entries in hash order; sorting by
            // state and encoded key makes dumps of equal state compare equal.
            selected.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, view) in selected {
                if args.limit.is_some_and(|n| self.entries.len() as u64 >= n) {
                    self.truncated = true;
                    return Ok(false);
                }
                self.entries.push(view);
            }
        }
        Ok(true)
    }

    fn to_text(&self) -> String {
        let mut table = render::table(&[
            "operator",
            "subtask",
            "key group",
            "state",
            "key",
            "map key",
            "value",
        ]);
        for e in &self.entries {
            let key = match &e.namespace {
                Some(ns) => format!("{} @ {ns}", e.key),
                None => e.key.clone(),
            };
            table.add_row(vec![
                e.uid.clone(),
                e.subtask.to_string(),
                e.key_group.to_string(),
                e.state.clone(),
                key,
                e.text.0.clone(),
                e.text.1.clone(),
            ]);
        }
        let mut text = format!(
            "{table}\n{}",
            render::count(self.entries.len() as u64, "entry")
        );
        if self.truncated {
            text.push_str(" (limit reached; more follow)");
        }
        text.push('\n');
        text
    }
}

/// How a key group's entries are ordered: state, key, namespace, map key.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct SortKey(u32, Vec<u8>, Vec<u8>, Vec<u8>);

impl SortKey {
    fn of(entry: &StateEntry<'_>) -> Self {
        let user_key = match entry.payload {
            EntryPayload::MapEntry { user_key, .. } => user_key,
            EntryPayload::Value(_) | EntryPayload::List(_) => &[],
        };
        Self(
            entry.state.0,
            entry.key.to_vec(),
            entry.namespace.to_vec(),
            user_key.to_vec(),
        )
    }
}

/// The entry as dumped, if `--state` and `--key` select it.
fn select(
    args: &DumpArgs,
    op: &OperatorStateMeta,
    subtask: u32,
    entry: &StateEntry<'_>,
    descriptors: &[StateDescriptor],
    key_types: Option<&[ValueType]>,
) -> Option<EntryView> {
    let d = descriptors.get(entry.state.0 as usize)?;
    if args.state.as_ref().is_some_and(|s| s != &d.name) {
        return None;
    }
    let view = entry_view(op, subtask, entry, d, key_types);
    let wanted = args.key.as_ref();
    if wanted.is_some_and(|k| &view.key != k && view.key_unquoted.as_ref() != Some(k)) {
        return None;
    }
    Some(view)
}

fn entry_view(
    op: &OperatorStateMeta,
    subtask: u32,
    entry: &StateEntry<'_>,
    d: &StateDescriptor,
    key_types: Option<&[ValueType]>,
) -> EntryView {
    let mut errors = Vec::new();
    let (key, key_unquoted, key_columns) =
        match key_types.map(|types| (decode_key(entry.key, types), types)) {
            Some((Ok(cols), types)) => (
                render::key(&cols),
                Some(render::key_unquoted(&cols)),
                Some(
                    cols.iter()
                        .zip(types)
                        .map(|(v, t)| render::value_json(v, t))
                        .collect(),
                ),
            ),
            Some((Err(e), _)) => {
                errors.push(format!("key: {e}"));
                (render::hex(entry.key), None, None)
            }
            None => (render::hex(entry.key), None, None),
        };
    let (user_key, value) = match entry.payload {
        EntryPayload::Value(bytes) => (None, Decoded::of(bytes, &d.value_type)),
        EntryPayload::List(payload) => (None, list(payload, &d.value_type)),
        EntryPayload::MapEntry { user_key, value } => {
            let user_key = match &d.user_key_type {
                Some(ty) => Decoded::of(user_key, ty),
                None => Decoded::raw(user_key, "the state has no map key type".to_owned()),
            };
            (Some(user_key), Decoded::of(value, &d.value_type))
        }
    };
    if let Some(e) = user_key.as_ref().and_then(|u| u.error.as_ref()) {
        errors.push(format!("map key: {e}"));
    }
    if let Some(e) = &value.error {
        errors.push(format!("value: {e}"));
    }
    EntryView {
        uid: op.uid.to_string(),
        subtask,
        key_group: entry.key_group.0,
        state: d.name.clone(),
        kind: d.kind.to_string(),
        key,
        key_unquoted,
        key_columns,
        namespace: (!entry.namespace.is_empty()).then(|| render::hex(entry.namespace)),
        text: (
            user_key
                .as_ref()
                .map(|u| u.text.clone())
                .unwrap_or_default(),
            value.text.clone(),
        ),
        user_key: user_key.map(|u| u.json),
        value: value.json,
        decode_error: (!errors.is_empty()).then(|| errors.join("; ")),
    }
}

/// The items of a list payload, each decoded as `item`.
fn list(payload: &[u8], item: &ValueType) -> Decoded {
    let mut values = Vec::new();
    for bytes in list_items(payload) {
        let Some(bytes) = bytes else {
            return Decoded::raw(payload, "malformed list payload".to_owned());
        };
        match decode_value(bytes, item) {
            Ok(v) => values.push(v),
            Err(e) => return Decoded::raw(payload, format!("list item: {e}")),
        }
    }
    let list_type = ValueType::List {
        item: Box::new(item.clone()),
    };
    Decoded::value(&Value::List(values), &list_type)
}
