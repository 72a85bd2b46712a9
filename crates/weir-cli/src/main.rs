//! The `weir` binary: see [`weir_cli::run`].

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(weir_cli::run(std::env::args_os()))
}
