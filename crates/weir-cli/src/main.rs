//! `weir`: inspect, dump, verify and dispose Weir checkpoints and savepoints.
//!
//! This file only parses arguments, builds a small current-thread runtime,
//! runs the command and turns an error into one line on stderr; the
//! commands live in [`commands`].

mod cli;
mod commands;
mod location;
mod render;
mod report;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(commands::run(cli)));
    match outcome {
        Ok(code) => code,
        Err(err) => {
            report::print_error(&err);
            ExitCode::FAILURE
        }
    }
}
