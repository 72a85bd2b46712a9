//! Checkpoint benchmarks of docs/benchmarks.md ("Checkpoint benchmarks"):
//! the synchronous pause, the asynchronous upload, incremental RocksDB
//! checkpoints, restore and rescale, for the heap and RocksDB backends, on
//! the in-process engine with checkpoints in local files under `--dir`.
//!
//! Prints progress to stderr and writes raw measurements as JSON to `--out`;
//! `benchmarks/checkpoints.py` measures the disk of `--dir` in the same run,
//! compares, and prints the table with the targets.
//!
//! ```text
//! cargo run --release -p weir-host --example checkpoint_bench -- \
//!     --dir /tmp/weir-chk --out /tmp/raw.json --sizes 10000,100000
//! ```

mod error;
mod full_checkpoints;
mod incremental;
mod memory;
mod report;
mod rescale;
mod schedstat;
mod storage;
mod workload;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use weir_host::BackendSpec;
use weir_types::MaxParallelism;

use crate::error::{BenchError, Result, io};
use crate::full_checkpoints::Rounds;
use crate::report::Records;

/// Checkpoint benchmarks on the in-process engine (heap and RocksDB).
#[derive(Debug, Parser)]
struct Args {
    /// Work directory: state, checkpoints and restores (on the disk whose
    /// bandwidth the results are compared with). Must not exist or be empty.
    #[arg(long)]
    dir: PathBuf,
    /// Where to write the raw measurements (JSON).
    #[arg(long)]
    out: PathBuf,
    /// Keys per subtask, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10000,100000,1000000,10000000"
    )]
    sizes: Vec<u64>,
    /// The backends to run, comma-separated (`heap`, `rocksdb`). One backend
    /// per process gives each a resident-memory baseline of its own.
    #[arg(long, value_delimiter = ',', default_value = "heap,rocksdb")]
    backends: Vec<BackendName>,
    /// Largest size run on RocksDB (larger sizes are skipped there, and say so).
    #[arg(long, default_value_t = u64::MAX)]
    rocksdb_max_keys: u64,
    /// Snapshots whose synchronous part is timed per size (at least 20).
    #[arg(long, default_value_t = 20)]
    snapshots: u64,
    /// How many of those snapshots are uploaded with each compression (zstd,
    /// LZ4 and none take turns, as far as the snapshots go).
    #[arg(long, default_value_t = 5)]
    uploads: u64,
    /// Restores timed per size and backend (the median is reported).
    #[arg(long, default_value_t = 3)]
    restores: u32,
    /// The number of key groups.
    #[arg(long, default_value_t = 128)]
    max_parallelism: u32,
}

/// A backend as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendName {
    Heap,
    Rocksdb,
}

/// A keyed state backend and its name in the results.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The backend.
    pub spec: BackendSpec,
    /// `heap` or `rocksdb`.
    pub name: &'static str,
}

/// The JSON written to `--out`.
#[derive(Debug, serde::Serialize)]
struct Output<'a> {
    records: &'a [report::Record],
    notes: &'a [String],
    args: String,
    wall_s: f64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("checkpoint_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    if args.snapshots < 20 {
        return Err(BenchError::Usage(format!(
            "--snapshots {} is too few for a p99; use at least 20",
            args.snapshots
        )));
    }
    std::fs::create_dir_all(&args.dir).map_err(io("create", &args.dir))?;
    let max = MaxParallelism::new(args.max_parallelism)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("checkpoint-bench-upload")
        .enable_all()
        .build()
        .map_err(io("start runtime in", &args.dir))?;
    let started = Instant::now();
    let mut out = Records::default();
    for &n in &args.sizes {
        let keys = workload::Keys::new(n, max)?;
        let rounds = Rounds {
            snapshots: args.snapshots,
            uploads: args.uploads.min(args.snapshots),
            restores: args.restores,
        };
        for &chosen in &args.backends {
            let rocksdb = chosen == BackendName::Rocksdb;
            let spec = if rocksdb {
                BackendSpec::RocksDb
            } else {
                BackendSpec::Heap
            };
            let backend = Backend {
                name: if rocksdb { "rocksdb" } else { "heap" },
                spec,
            };
            if rocksdb && n > args.rocksdb_max_keys {
                out.note(format!(
                    "rocksdb skipped at {n} keys: above --rocksdb-max-keys {} (too long on this \
                     machine)",
                    args.rocksdb_max_keys
                ));
                continue;
            }
            eprintln!("{}, {n} keys per subtask", backend.name);
            full_checkpoints::run(&runtime, &args.dir, &backend, &keys, max, rounds, &mut out)?;
            rescale::run(&args.dir, &backend, &keys, max, &mut out)?;
            if rocksdb {
                incremental::run(&runtime, &args.dir, &keys, max, rounds.restores, &mut out)?;
            }
        }
    }
    let output = Output {
        records: &out.all,
        notes: &out.notes,
        args: format!("{args:?}"),
        wall_s: started.elapsed().as_secs_f64(),
    };
    let file = std::fs::File::create(&args.out).map_err(io("create", &args.out))?;
    serde_json::to_writer_pretty(std::io::BufWriter::new(file), &output)?;
    Ok(())
}
