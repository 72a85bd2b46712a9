//! What a coordinator run starts from and how its HTTP server listens.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use weir_checkpoint::coordinator::CheckpointConfig;
use weir_checkpoint::{LeaseTerms, OperatorStateMeta, StorageOptions};
use weir_types::JobId;

use crate::error::{DriverError, Result};
use crate::tls::Tls;
use crate::token::JobToken;

/// Largest request body accepted unless configured otherwise: an ack of an
/// incremental RocksDB checkpoint lists every SST file.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 << 20;

/// Statistics kept for the history unless configured otherwise.
pub const DEFAULT_HISTORY: usize = 64;

/// Everything a coordinator run starts from.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// The job; its checkpoints live in `<checkpoint_dir>/<job_id>/`.
    pub job_id: JobId,
    /// The checkpoint policy; validated before anything else happens.
    pub config: CheckpointConfig,
    /// The job's stateful operators (their `subtasks` are ignored): every
    /// subtask of each must ack a checkpoint.
    pub operators: Vec<OperatorStateMeta>,
    /// Where checkpoints go: a path or a `file://`, `s3://` or `memory://` URL.
    pub checkpoint_dir: String,
    /// Where savepoints go unless a trigger names another directory.
    pub savepoint_dir: Option<String>,
    /// Options of the checkpoint and savepoint storage (S3 settings, ...).
    pub storage_options: StorageOptions,
    /// The checkpoint or savepoint the run starts from; `None` starts empty.
    pub restored: Option<String>,
    /// Checkpoints kept in the statistics history.
    pub history: usize,
    /// The job directory's lease: staleness and id reservations.
    pub lease: LeaseTerms,
    /// Longest wait for deleting old checkpoints at a restart or shutdown;
    /// what is left is deleted when the next run recovers the directory.
    pub cleanup_grace: Duration,
}

impl DriverOptions {
    /// A run of `job_id` checkpointing by `config` under `checkpoint_dir`,
    /// starting empty, with defaults for the rest.
    pub fn new(job_id: JobId, config: CheckpointConfig, checkpoint_dir: impl Into<String>) -> Self {
        Self {
            job_id,
            config,
            operators: Vec::new(),
            checkpoint_dir: checkpoint_dir.into(),
            savepoint_dir: None,
            storage_options: StorageOptions::default(),
            restored: None,
            history: DEFAULT_HISTORY,
            lease: LeaseTerms::default(),
            cleanup_grace: Duration::from_secs(30),
        }
    }

    /// How often the lease is renewed: often enough that a few missed
    /// renewals in a row still leave it far from stale.
    pub(crate) fn renew_every(&self) -> Duration {
        self.lease.stale_after / 6
    }
}

/// How the HTTP server listens and whom it lets in.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Where to listen; `127.0.0.1` on a free port by default. Executors on
    /// other machines need an address they can reach.
    pub bind: SocketAddr,
    /// The host executors connect to, when it differs from the bind address
    /// (a wildcard bind, NAT): Spark's `spark.driver.host` beside
    /// `spark.driver.bindAddress`. The port is always the bound one.
    pub advertise: Option<String>,
    /// The job's secret token, required on every request.
    pub token: JobToken,
    /// Requests with a larger body get `413`.
    pub max_body_bytes: usize,
    /// A connection that has not sent a complete request head this long
    /// after it opened (or after its previous request) is closed.
    pub header_read_timeout: Duration,
    /// Connections served at once; more are closed at once, and hosts retry.
    pub max_connections: usize,
    /// Serve HTTPS with the job's TLS files instead of plain HTTP.
    pub tls: Option<Tls>,
}

impl ServerOptions {
    /// Loopback on a free port, default limits.
    pub fn new(token: JobToken) -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            advertise: None,
            token,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 512,
            tls: None,
        }
    }

    /// Listens on `host` (a name or an address of this machine) at `port`.
    pub async fn bind_to(mut self, host: &str, port: u16) -> Result<Self> {
        let resolve = |reason: String| DriverError::Resolve {
            host: host.to_owned(),
            reason,
        };
        self.bind = tokio::net::lookup_host((host, port))
            .await
            .map_err(|err| resolve(err.to_string()))?
            .next()
            .ok_or_else(|| resolve("it has no address".into()))?;
        Ok(self)
    }

    /// The base URL executors use, for a server listening on `local`.
    pub(crate) fn advertised_url(&self, local: SocketAddr) -> Result<String> {
        let host = match &self.advertise {
            Some(host) => host.clone(),
            None if local.ip().is_unspecified() => {
                return Err(DriverError::NothingToAdvertise { addr: local });
            }
            None => local.ip().to_string(),
        };
        let host = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => host,
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        Ok(format!("{scheme}://{host}:{}", local.port()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ServerOptions {
        ServerOptions::new(JobToken::new("t").expect("non-empty"))
    }

    #[test]
    fn the_advertised_url_names_a_reachable_host_and_the_bound_port() {
        let local: SocketAddr = "10.1.2.3:4567".parse().expect("valid");
        assert_eq!(
            server().advertised_url(local).expect("url"),
            "http://10.1.2.3:4567"
        );
        let wildcard: SocketAddr = "0.0.0.0:4567".parse().expect("valid");
        assert!(matches!(
            server().advertised_url(wildcard),
            Err(DriverError::NothingToAdvertise { .. })
        ));
        let mut natted = server();
        natted.advertise = Some("driver.example".into());
        assert_eq!(
            natted.advertised_url(wildcard).expect("url"),
            "http://driver.example:4567"
        );
        natted.advertise = Some("fd00::1".into());
        assert_eq!(
            natted.advertised_url(wildcard).expect("url"),
            "http://[fd00::1]:4567"
        );
    }

    #[tokio::test]
    async fn bind_hosts_resolve_and_default_to_loopback() {
        assert!(server().bind.ip().is_loopback());
        let bound = server().bind_to("localhost", 0).await.expect("resolves");
        assert!(bound.bind.ip().is_loopback());
        assert!(matches!(
            server().bind_to("no-such-host.invalid", 0).await,
            Err(DriverError::Resolve { .. })
        ));
    }
}
