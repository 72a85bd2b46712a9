//! TLS between machines: the coordinator's HTTP server, the state hosts'
//! TCP listeners, and their clients (rustls).
//!
//! One set of PEM files serves a whole job, like Spark's own `spark.ssl.*`
//! settings: the same paths must exist on the driver and every executor. A
//! server presents `cert` (with its chain) and `key`; a client trusts only
//! certificates issued by `ca` and checks that the certificate names the
//! server: by default the host part of the address it connects to, or
//! `server_name` when one certificate (e.g. for `weir.internal`) serves
//! every machine. The job token still authenticates clients: TLS adds
//! confidentiality and proves the server to the client.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Where a job's TLS material lives, on every machine of the job.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsFiles {
    /// PEM certificates of the authorities clients trust.
    pub ca: PathBuf,
    /// PEM certificate chain servers present, leaf first.
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
    /// The name clients expect in the server's certificate; the host they
    /// connect to if `None`.
    pub server_name: Option<String>,
}

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("cannot use {what} {path}: {reason}; check the job's TLS files on this machine")]
    File {
        /// Which file (`CA certificates`, ...).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificates or key.
    #[error("cannot set up TLS with the job's files: {0}")]
    Config(#[from] rustls::Error),
    /// The name to check the server's certificate against is not a DNS name
    /// or an IP address.
    #[error("{0:?} is not a valid TLS server name (a DNS name or an IP address)")]
    ServerName(String),
}

/// A job's loaded TLS configuration, for servers and clients alike.
#[derive(Clone)]
pub struct Tls {
    files: TlsFiles,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl Tls {
    /// Reads and checks `files`.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        for ca in certificates(&files.ca, "CA certificates")? {
            roots.add(ca)?;
        }
        let client = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|err| TlsError::File {
            what: "private key",
            path: files.key.clone(),
            reason: err.to_string(),
        })?;
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certificates(&files.cert, "certificate chain")?, key)?;
        if let Some(name) = &files.server_name {
            server_name(name)?;
        }
        Ok(Self {
            files,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The files this was loaded from (what a started host is given).
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// What a server accepts connections with.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server)
    }

    /// What a client connects with.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        Arc::clone(&self.client)
    }

    /// The name a client connecting to `authority` (`host:port`) checks the
    /// server's certificate against.
    pub fn server_name_for(&self, authority: &str) -> Result<ServerName<'static>, TlsError> {
        match &self.files.server_name {
            Some(name) => server_name(name),
            None => server_name(host_of(authority)),
        }
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let found = CertificateDer::pem_file_iter(path)
        .map_err(|err| failed(err.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| failed(err.to_string()))?;
    if found.is_empty() {
        return Err(failed("it holds no PEM certificate".into()));
    }
    Ok(found)
}

fn server_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.to_owned()).map_err(|_| TlsError::ServerName(name.to_owned()))
}

/// `host` of `host:port` or `[v6]:port`.
fn host_of(authority: &str) -> &str {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_authority_is_what_the_certificate_must_name() {
        assert_eq!(host_of("10.0.0.7:4100"), "10.0.0.7");
        assert_eq!(host_of("[::1]:80"), "::1");
        assert_eq!(host_of("node-3.cluster:1"), "node-3.cluster");
    }

    #[test]
    fn missing_or_empty_files_say_which_file_is_wrong() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let files = TlsFiles {
            ca: empty.clone(),
            cert: empty.clone(),
            key: dir.path().join("missing.pem"),
            server_name: None,
        };
        let err = Tls::load(files).expect_err("no certificates");
        assert!(
            err.to_string().contains("CA certificates") && err.to_string().contains("no PEM"),
            "{err}"
        );
    }
}
