//! Decides when the host exits: idle for too long, or its owner is gone.

use std::fmt;

use rustix::process::{Pid, test_kill_process};

use super::HostConfig;
use super::host::Host;

/// Why a host exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// No connection and no upload for the idle timeout.
    Idle,
    /// The owner process is gone.
    OwnerGone(u32),
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Idle => f.write_str("idle"),
            Self::OwnerGone(pid) => write!(f, "owner process {pid} is gone"),
        }
    }
}

/// Blocks until the host should exit.
pub(super) fn watch(host: &Host, config: &HostConfig) -> ExitReason {
    loop {
        std::thread::sleep(config.poll_interval);
        if let Some(pid) = config.owner_pid
            && !alive(pid)
        {
            return ExitReason::OwnerGone(pid);
        }
        let idle = host.connections() == 0
            && host.pending_uploads() == 0
            && host.last_active().elapsed() >= config.idle_timeout;
        if idle {
            return ExitReason::Idle;
        }
    }
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
