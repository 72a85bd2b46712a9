//! One module per verb; [`run`] dispatches to them.

mod dispose;
mod dump;
mod info;
mod list;
mod verify;

use anyhow::{Context, Result};
use weir_checkpoint::ResolvedSnapshot;

use crate::cli::{CheckpointCommand, Cli, Command, SavepointCommand};
use crate::location::locate;

/// The exit status of a command that did all it was asked.
pub const SUCCESS: u8 = 0;
/// The exit status of a command that failed, or that ran to its end but
/// found problems (verify).
pub const FAILURE: u8 = 1;

/// Runs the command; `Ok` carries the exit status of a command that ran to
/// its end (verify exits non-zero when it found problems).
pub async fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Savepoint(SavepointCommand::Info(args)) => info::savepoint(&args).await,
        Command::Savepoint(SavepointCommand::Dump(args)) => dump::run(&args).await,
        Command::Savepoint(SavepointCommand::Verify(args)) => verify::run(&args.path).await,
        Command::Savepoint(SavepointCommand::Dispose(args)) => dispose::run(&args.path).await,
        Command::Checkpoint(CheckpointCommand::Info(args)) => info::checkpoint(&args).await,
        Command::Checkpoint(CheckpointCommand::List(args)) => list::run(&args).await,
    }
}

/// Opens the checkpoint or savepoint at `path` (its directory or `_metadata`).
async fn open(path: &str) -> Result<ResolvedSnapshot> {
    let located = locate(path)?;
    ResolvedSnapshot::open(&located.dir)
        .await
        .with_context(|| format!("cannot open {path}"))
}

/// Writes `text` to stdout; a closed pipe (`weir ... | head`) ends quietly.
fn print(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}
