//! Arrow IPC payloads: each payload is one IPC stream holding one record
//! batch whose columns are named arrays of equal length.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, UInt16Array, UInt32Array};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{Field, Schema};

use crate::batch::KeyBatch;
use crate::error::{HostError, Result};
use crate::session::MapEntries;

/// Column names used in payloads.
pub mod column {
    /// Key group of each row of a key batch (`UInt16`).
    pub const KEY_GROUP: &str = "key_group";
    /// Encoded key of each row of a key batch (`Binary`).
    pub const KEY: &str = "key";
    /// Values, list payloads, aggregate inputs or outputs (any type).
    pub const VALUE: &str = "value";
    /// Encoded map user keys (`Binary`).
    pub const USER_KEY: &str = "user_key";
    /// Offsets of map entries per key (`UInt32`, one more than keys).
    pub const OFFSET: &str = "offset";
    /// Items of an operator list state (`Binary`, no nulls).
    pub const ITEM: &str = "item";
}

/// Encodes named, equally long columns as one Arrow IPC stream.
pub fn encode(columns: Vec<(&str, ArrayRef)>) -> Result<Vec<u8>> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let arrays = columns.into_iter().map(|(_, array)| array).collect();
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)
        .map_err(|err| HostError::InvalidRequest(format!("cannot build a payload: {err}")))?;
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &schema).map_err(arrow_error)?;
    writer.write(&batch).map_err(arrow_error)?;
    writer.finish().map_err(arrow_error)?;
    drop(writer);
    Ok(out)
}

/// Decodes a payload written by [`encode`]: exactly one record batch, its
/// arrays validated. Any payload that is not one is a protocol error, also
/// one that makes the Arrow decoder panic (the panic is caught here, so no
/// bytes from a peer can unwind through the host).
pub fn decode(payload: &[u8]) -> Result<RecordBatch> {
    std::panic::catch_unwind(|| decode_unguarded(payload)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        Err(HostError::Protocol(format!(
            "invalid Arrow IPC payload: the decoder gave up ({what})"
        )))
    })
}

fn decode_unguarded(payload: &[u8]) -> Result<RecordBatch> {
    let mut reader = StreamReader::try_new(payload, None).map_err(arrow_error)?;
    let batch = match reader.next() {
        Some(batch) => batch.map_err(arrow_error)?,
        None => {
            return Err(HostError::Protocol(
                "an Arrow payload holds no record batch".into(),
            ));
        }
    };
    if reader.next().is_some() {
        return Err(HostError::Protocol(
            "an Arrow payload holds more than one record batch".into(),
        ));
    }
    Ok(batch)
}

/// The column `name` of `batch`, whatever its type.
pub fn array(batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| HostError::Protocol(format!("an Arrow payload has no column {name:?}")))
}

/// The column `name` of `batch` as a concrete array type.
pub fn typed<T: Array + Clone + 'static>(batch: &RecordBatch, name: &str) -> Result<T> {
    let array = array(batch, name)?;
    array.as_any().downcast_ref::<T>().cloned().ok_or_else(|| {
        HostError::Protocol(format!(
            "column {name:?} of an Arrow payload has type {}, not the one expected",
            array.data_type()
        ))
    })
}

/// `payloads[index]`, decoded.
pub fn nth(payloads: &[Vec<u8>], index: usize) -> Result<RecordBatch> {
    let payload = payloads.get(index).ok_or_else(|| {
        HostError::Protocol(format!(
            "the message carries {} payloads; payload {index} is missing",
            payloads.len()
        ))
    })?;
    decode(payload)
}

/// A key batch as a payload.
pub fn encode_keys(keys: &KeyBatch) -> Result<Vec<u8>> {
    encode(vec![
        (column::KEY_GROUP, Arc::new(keys.key_groups().clone())),
        (column::KEY, Arc::new(keys.keys().clone())),
    ])
}

/// A key batch from a payload.
pub fn decode_keys(batch: &RecordBatch) -> Result<KeyBatch> {
    KeyBatch::new(
        typed::<UInt16Array>(batch, column::KEY_GROUP)?,
        typed::<BinaryArray>(batch, column::KEY)?,
    )
}

/// One column named [`column::VALUE`].
pub fn encode_values(values: ArrayRef) -> Result<Vec<u8>> {
    encode(vec![(column::VALUE, values)])
}

/// Map entries as two payloads: offsets, then user keys with values.
pub fn encode_map_entries(entries: &MapEntries) -> Result<Vec<Vec<u8>>> {
    Ok(vec![
        encode(vec![(
            column::OFFSET,
            Arc::new(UInt32Array::from(entries.offsets.clone())),
        )])?,
        encode(vec![
            (column::USER_KEY, Arc::new(entries.user_keys.clone())),
            (column::VALUE, Arc::new(entries.values.clone())),
        ])?,
    ])
}

/// Map entries from the two payloads of [`encode_map_entries`].
pub fn decode_map_entries(payloads: &[Vec<u8>]) -> Result<MapEntries> {
    let offsets = typed::<UInt32Array>(&nth(payloads, 0)?, column::OFFSET)?;
    let entries = nth(payloads, 1)?;
    Ok(MapEntries {
        offsets: offsets.values().to_vec(),
        user_keys: typed(&entries, column::USER_KEY)?,
        values: typed(&entries, column::VALUE)?,
    })
}

/// Operator state items as a payload.
pub fn encode_items(items: &[Vec<u8>]) -> Result<Vec<u8>> {
    let array = BinaryArray::from_iter_values(items.iter().map(Vec::as_slice));
    encode(vec![(column::ITEM, Arc::new(array))])
}

/// Operator state items from a payload; nulls are refused.
pub fn decode_items(batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let array = typed::<BinaryArray>(batch, column::ITEM)?;
    if array.null_count() > 0 {
        return Err(HostError::InvalidRequest(
            "operator state items may not be null".into(),
        ));
    }
    Ok(array.iter().flatten().map(<[u8]>::to_vec).collect())
}

fn arrow_error(err: arrow_schema::ArrowError) -> HostError {
    HostError::Protocol(format!("invalid Arrow IPC payload: {err}"))
}

#[cfg(test)]
mod tests {
    use arrow_array::Int64Array;
    use weir_types::KeyGroup;

    use super::*;

    #[test]
    fn key_batches_and_values_round_trip() {
        let keys = KeyBatch::from_pairs([(KeyGroup(3), &b"a"[..]), (KeyGroup(90), b"bb")]);
        let decoded = decode_keys(&decode(&encode_keys(&keys).expect("encodes")).expect("decodes"))
            .expect("a key batch");
        assert_eq!(decoded, keys);
        let values: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None]));
        let batch = decode(&encode_values(Arc::clone(&values)).expect("encodes")).expect("decodes");
        assert_eq!(&array(&batch, column::VALUE).expect("present"), &values);
        assert!(typed::<BinaryArray>(&batch, column::VALUE).is_err());
        assert!(array(&batch, column::KEY).is_err());
    }

    #[test]
    fn map_entries_and_items_round_trip() {
        let entries = MapEntries {
            offsets: vec![0, 2, 2],
            user_keys: BinaryArray::from(vec![&b"x"[..], b"y"]),
            values: BinaryArray::from(vec![Some(&b"1"[..]), None]),
        };
        let payloads = encode_map_entries(&entries).expect("encodes");
        assert_eq!(decode_map_entries(&payloads).expect("decodes"), entries);
        let items = vec![b"one".to_vec(), Vec::new()];
        let batch = decode(&encode_items(&items).expect("encodes")).expect("decodes");
        assert_eq!(decode_items(&batch).expect("items"), items);
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(matches!(decode(b"not arrow"), Err(HostError::Protocol(_))));
        assert!(matches!(nth(&[], 0), Err(HostError::Protocol(_))));
    }
}
