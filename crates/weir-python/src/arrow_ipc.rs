//! Arrow arrays to and from Arrow IPC stream bytes: how arrays cross into
//! Python (pyarrow reads and writes the same streams) without unsafe code.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, Field, Schema};

use crate::errors::PyWeirError;

fn arrow_error(err: ArrowError) -> PyWeirError {
    PyWeirError::InvalidArgument(format!(
        "cannot read or write an Arrow IPC stream: {err}; pass a pyarrow array"
    ))
}

/// One array as an IPC stream of one batch with one column named `name`.
pub(crate) fn to_ipc(name: &str, array: ArrayRef) -> Result<Vec<u8>, PyWeirError> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        name,
        array.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![array]).map_err(arrow_error)?;
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &schema).map_err(arrow_error)?;
    writer.write(&batch).map_err(arrow_error)?;
    writer.finish().map_err(arrow_error)?;
    drop(writer);
    Ok(out)
}

/// The first column of the only batch of an IPC stream.
pub(crate) fn from_ipc(bytes: &[u8]) -> Result<ArrayRef, PyWeirError> {
    let mut reader = StreamReader::try_new(bytes, None).map_err(arrow_error)?;
    let batch = match reader.next() {
        Some(batch) => batch.map_err(arrow_error)?,
        None => {
            return Err(PyWeirError::InvalidArgument(
                "an Arrow IPC stream holds no batch: pass a stream of one batch".into(),
            ));
        }
    };
    if batch.num_columns() != 1 || reader.next().is_some() {
        return Err(PyWeirError::InvalidArgument(
            "an Arrow IPC stream must hold one batch of one column".into(),
        ));
    }
    Ok(Arc::clone(batch.column(0)))
}
