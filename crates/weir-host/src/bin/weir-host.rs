//! `weir-host`: the executor-local state host process.
//!
//! Started on demand by `weir_host::client::ensure_host`; the job token
//! comes in the `WEIR_HOST_TOKEN` environment variable. Exits 0 when idle or
//! when its owner process is gone, 75 when another host serves the
//! directory, 1 on any other error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use weir_host::client::{EXIT_ALREADY_RUNNING, HOST_TOKEN_ENV};
use weir_host::protocol::HostDir;
use weir_host::server::{HostConfig, StartError, run};

/// The Weir state host: serves the keyed and operator state of the subtasks
/// on this executor over a Unix socket in `--dir`.
#[derive(Debug, Parser)]
#[command(name = "weir-host", version)]
struct Args {
    /// The host directory (mode 0700): socket, lock, log, working files.
    #[arg(long)]
    dir: PathBuf,
    /// Exit after this many milliseconds without connections or uploads.
    #[arg(long, default_value_t = 600_000)]
    idle_timeout_millis: u64,
    /// Exit when this process is gone.
    #[arg(long)]
    owner_pid: Option<u32>,
    /// Where subtasks keep working files (default: <dir>/work).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// How often to check the idle timer and the owner, in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_millis: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Ok(token) = std::env::var(HOST_TOKEN_ENV) else {
        eprintln!("weir-host: set the job token in {HOST_TOKEN_ENV}");
        return ExitCode::FAILURE;
    };
    let config = HostConfig {
        dir: HostDir::new(args.dir),
        token,
        idle_timeout: Duration::from_millis(args.idle_timeout_millis),
        owner_pid: args.owner_pid,
        work_dir: args.work_dir,
        poll_interval: Duration::from_millis(args.poll_millis.max(1)),
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
