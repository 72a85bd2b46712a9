//! Decides when the host exits: its owner is gone, a signal asked it to,
//! or the driver sent `Shutdown`. Nothing else ends a host: quiet gaps in a
//! job are normal and must not lose its state.

use std::fmt;
use std::sync::Arc;

use rustix::process::{Pid, test_kill_process};
use tokio::runtime::Runtime;
use tokio::signal::unix::{SignalKind, signal};

use super::HostConfig;
use super::host::Host;
use crate::error::{HostError, Result};

/// Why a host exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// The owner process is gone.
    OwnerGone(u32),
    /// SIGTERM or SIGINT arrived (the signal's name).
    Signal(&'static str),
    /// An authenticated client sent `Shutdown`.
    Shutdown,
}

impl ExitReason {
    /// Whether the host leaves for good, its directory with it: its owner is
    /// gone or its job shut it down. A signal leaves the directory and the
    /// log: whoever sent it may want to read why the host did not serve
    /// (a client whose host did not answer in time quotes the log).
    pub fn is_final(self) -> bool {
        matches!(self, Self::OwnerGone(_) | Self::Shutdown)
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OwnerGone(pid) => write!(f, "owner process {pid} is gone"),
            Self::Signal(name) => write!(f, "{name} received"),
            Self::Shutdown => f.write_str("shutdown requested"),
        }
    }
}

/// Blocks until the host should exit.
pub(super) fn watch(host: &Host, config: &HostConfig) -> ExitReason {
    loop {
        if let Some(reason) = host.wait_for_stop(config.poll_interval) {
            return reason;
        }
        if let Some(pid) = config.owner_pid
            && !alive(pid)
        {
            return ExitReason::OwnerGone(pid);
        }
    }
}

/// Stops the host on SIGTERM or SIGINT (so it removes its files and exits
/// 0 instead of dying with them in place). Registered before the host is
/// reachable, so no signal meant for it falls back to the default action.
pub(super) fn stop_on_signals(host: &Arc<Host>, runtime: &Runtime) -> Result<()> {
    let _context = runtime.enter();
    let register = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|err| HostError::io(format!("handling {name}"), err))
    };
    let mut term = register(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = register(SignalKind::interrupt(), "SIGINT")?;
    let host = Arc::clone(host);
    runtime.spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        host.request_stop(ExitReason::Signal(name));
    });
    Ok(())
}

/// Whether process `pid` exists (signal 0: checks without sending).
fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match test_kill_process(pid) {
        Ok(()) => true,
        // It exists but belongs to another user.
        Err(err) => err == rustix::io::Errno::PERM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        let pid = child.id();
        child.wait().expect("exits");
        assert!(!alive(pid));
    }
}
