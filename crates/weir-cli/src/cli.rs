//! The command line: verbs, their arguments and their help texts.

use clap::{Args, Parser, Subcommand};

/// Inspect Weir checkpoints and savepoints.
///
/// Paths are local directories (or their `_metadata` file), `file://` URLs
/// or `s3://bucket/prefix` URLs (configured by the usual `AWS_*` variables).
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
pub struct Cli {
    /// What to work on.
    #[command(subcommand)]
    pub command: Command,
}

/// The nouns.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect, dump, verify or dispose a savepoint.
    #[command(subcommand)]
    Savepoint(SavepointCommand),
    /// Inspect or list checkpoints.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
}

/// Verbs on savepoints. `info`, `dump` and `verify` accept a checkpoint too.
#[derive(Debug, Subcommand)]
pub enum SavepointCommand {
    /// Show the job, operators, states, subtasks, files and sizes.
    Info(InfoArgs),
    /// Print the state entries, decoded by the types the snapshot records.
    Dump(DumpArgs),
    /// Read every referenced file and check sizes and checksums.
    Verify(PathArg),
    /// Delete a savepoint (it must be one; checkpoints are refused).
    Dispose(PathArg),
}

/// Verbs on checkpoints.
#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Show a checkpoint: a `chk-<n>` directory, or a job directory for its
    /// latest completed checkpoint.
    Info(InfoArgs),
    /// List the checkpoints of the job directories under DIR (or of DIR
    /// itself when it is a job directory), marking the latest completed one.
    List(ListArgs),
}

/// A path and nothing else.
#[derive(Debug, Args)]
pub struct PathArg {
    /// The savepoint or checkpoint directory, or its `_metadata` file.
    pub path: String,
}

/// Arguments of `info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// The savepoint or checkpoint directory, or its `_metadata` file.
    pub path: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The savepoint or checkpoint directory, or its `_metadata` file.
    pub path: String,
    /// Only this operator.
    #[arg(long, value_name = "UID")]
    pub uid: Option<String>,
    /// Only this state.
    #[arg(long, value_name = "NAME")]
    pub state: Option<String>,
    /// Only entries of this key, as printed (`42`, `"alice"` or `alice`,
    /// `(1, "x")` for composite keys).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Stop after this many entries.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `checkpoint list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// A checkpoint directory (holding job directories) or a job directory.
    pub dir: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}
