//! `weir`: inspect, dump, verify and dispose Weir checkpoints and savepoints.
//!
//! [`run`] is the whole command: the `weir` binary of this crate and the
//! `weir` command the Python package installs both call it. It parses the
//! arguments, builds a small current-thread runtime, runs the command and
//! turns an error into one line on stderr; the commands live in `commands`.

mod cli;
mod commands;
mod location;
mod render;
mod report;

use std::ffi::OsString;

use clap::Parser;

use crate::cli::Cli;

/// Runs the command line `args` (the program name first) and returns the
/// exit status: 0 when the command did all it was asked, 1 when it failed
/// or found problems, 2 for arguments it could not parse (after printing
/// why, or the help or version text it was asked for, which exit 0).
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            // Printing can fail only on a closed stream; the status still says what happened.
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(2);
        }
    };
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(commands::run(cli)));
    match outcome {
        Ok(status) => status,
        Err(err) => {
            report::print_error(&err);
            commands::FAILURE
        }
    }
}
