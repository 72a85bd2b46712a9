//! `weir._internal.TlsFiles`: where a job's TLS material lives, shipped to
//! executors with the tasks (paths only; every machine reads its own copy).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use weir_coordinator::{Tls, TlsFiles};

use crate::errors::PyWeirError;

/// PEM files for TLS between the machines of a job: `ca` (the authorities
/// trusted), `cert` (the chain servers present) and `key`, at the same paths
/// on the driver and every executor; `server_name`, when one certificate
/// serves every machine, is the name clients check instead of the host they
/// connect to.
#[pyclass(module = "weir._internal", name = "TlsFiles", frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyTlsFiles {
    pub(crate) inner: TlsFiles,
}

#[pymethods]
impl PyTlsFiles {
    #[new]
    #[pyo3(signature = (ca, cert, key, *, server_name = None))]
    fn new(ca: PathBuf, cert: PathBuf, key: PathBuf, server_name: Option<String>) -> Self {
        Self {
            inner: TlsFiles {
                ca,
                cert,
                key,
                server_name,
            },
        }
    }

    #[getter]
    fn ca(&self) -> PathBuf {
        self.inner.ca.clone()
    }

    #[getter]
    fn cert(&self) -> PathBuf {
        self.inner.cert.clone()
    }

    #[getter]
    fn key(&self) -> PathBuf {
        self.inner.key.clone()
    }

    #[getter]
    fn server_name(&self) -> Option<String> {
        self.inner.server_name.clone()
    }

    /// Reads the files now; raises `InvalidArgumentError` naming the file
    /// that cannot be used.
    fn check(&self) -> PyResult<()> {
        load(Some(self)).map(drop)
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("server_name", self.server_name())?;
        Ok((
            PyTuple::new(py, [self.ca(), self.cert(), self.key()])?,
            kwargs,
        ))
    }

    fn __repr__(&self) -> String {
        let name = self
            .inner
            .server_name
            .as_ref()
            .map_or_else(|| "None".to_owned(), |name| format!("'{name}'"));
        format!(
            "TlsFiles(ca='{}', cert='{}', key='{}', server_name={name})",
            self.inner.ca.display(),
            self.inner.cert.display(),
            self.inner.key.display()
        )
    }
}

/// The loaded TLS configuration of `files`, if given.
pub(crate) fn load(files: Option<&PyTlsFiles>) -> PyResult<Option<Tls>> {
    files
        .map(|files| Tls::load(files.inner.clone()))
        .transpose()
        .map_err(|err| PyWeirError::InvalidArgument(err.to_string()).into())
}
