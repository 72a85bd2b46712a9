//! `weir-host`: the executor-local state host process.
//!
//! Started on demand by `weir_host::client::ensure_host`; the job token
//! comes in the `WEIR_HOST_TOKEN` environment variable (never an argument:
//! arguments are visible to every user). Lives as long as its job: exits 0
//! when its owner process is gone, on SIGTERM or SIGINT, or on an
//! authenticated `Shutdown`; 75 when another host serves the directory; 1 on
//! any other error. Leaving because its owner is gone or on `Shutdown`, it
//! removes its directory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use weir_coordinator::{Tls, TlsFiles};
use weir_host::client::{EXIT_ALREADY_RUNNING, HOST_TOKEN_ENV};
use weir_host::protocol::{HostDir, JobToken};
use weir_host::server::{HostConfig, StartError, run};

/// The Weir state host: serves the keyed and operator state of the subtasks
/// of one executor over a Unix socket in `--dir` and, with `--listen`, TCP.
#[derive(Debug, Parser)]
#[command(name = "weir-host", version)]
struct Args {
    /// The host directory (mode 0700), one per executor: socket, address,
    /// lock, log, working files.
    #[arg(long)]
    dir: PathBuf,
    /// Exit when this process is gone.
    #[arg(long)]
    owner_pid: Option<u32>,
    /// Where subtasks keep working files (default: <dir>/work).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// How often to check the owner, in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_millis: u64,
    /// Also listen on TCP at host:port (port 0: any free port) for tasks on
    /// other executors; the bound address is written to <dir>/address.
    #[arg(long)]
    listen: Option<String>,
    /// PEM certificates of the authorities the job trusts; with --tls-cert
    /// and --tls-key, TCP is served over TLS and acks go to an https://
    /// coordinator.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// PEM certificate chain this host presents.
    #[arg(long, requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_ca")]
    tls_key: Option<PathBuf>,
    /// The name clients expect in certificates, if not the host they dial.
    #[arg(long, requires = "tls_ca")]
    tls_server_name: Option<String>,
    /// On Shutdown (the end of the job), also remove the directory's parent
    /// if that leaves it empty.
    #[arg(long)]
    remove_empty_parent: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Ok(token) = std::env::var(HOST_TOKEN_ENV) else {
        eprintln!("weir-host: set the job token in {HOST_TOKEN_ENV}");
        return ExitCode::FAILURE;
    };
    let tls = match (args.tls_ca, args.tls_cert, args.tls_key) {
        (Some(ca), Some(cert), Some(key)) => {
            let files = TlsFiles {
                ca,
                cert,
                key,
                server_name: args.tls_server_name,
            };
            match Tls::load(files) {
                Ok(tls) => Some(tls),
                Err(err) => {
                    eprintln!("weir-host: {err}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    let config = HostConfig {
        dir: HostDir::new(args.dir),
        token: JobToken::new(token),
        owner_pid: args.owner_pid,
        work_dir: args.work_dir,
        poll_interval: Duration::from_millis(args.poll_millis.max(1)),
        listen: args.listen,
        tls,
        remove_empty_parent: args.remove_empty_parent,
    };
    match run(config) {
        Ok(_) => ExitCode::SUCCESS,
        Err(StartError::AlreadyRunning(dir)) => {
            eprintln!(
                "weir-host {}: another state host serves {}",
                std::process::id(),
                dir.display()
            );
            ExitCode::from(EXIT_ALREADY_RUNNING as u8)
        }
        Err(StartError::Host(err)) => {
            eprintln!("weir-host {}: {err}", std::process::id());
            ExitCode::FAILURE
        }
    }
}
