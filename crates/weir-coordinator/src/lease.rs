//! This run's side of the job directory's lease: who it is, whether another
//! holder's process still runs, and renewing the lease (with more reserved
//! ids when they run short) until shutdown.

use std::sync::Arc;

use rustix::io::Errno;
use rustix::process::{Pid, test_kill_process};
use tokio_util::sync::CancellationToken;
use weir_checkpoint::{CheckpointError, HolderLiveness, LeaseHolder};
use weir_types::CheckpointId;

use crate::driver::Shared;

/// This process as a lease holder, with a fresh random run id.
pub(crate) fn this_run() -> LeaseHolder {
    LeaseHolder {
        owner: format!("{:016x}", rand::random::<u64>()),
        host: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
        pid: rustix::process::getpid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs(),
    }
}

/// Whether `holder`'s process runs, as far as this host can tell: only a
/// process on this host can be probed.
pub(crate) fn liveness(holder: &LeaseHolder, me: &LeaseHolder) -> HolderLiveness {
    if holder.host != me.host {
        return HolderLiveness::Unknown;
    }
    let Some(pid) = i32::try_from(holder.pid).ok().and_then(Pid::from_raw) else {
        return HolderLiveness::Gone;
    };
    match test_kill_process(pid) {
        Err(Errno::SRCH) => HolderLiveness::Gone,
        // Running, possibly as another user (EPERM).
        _ => HolderLiveness::Alive,
    }
}

/// Renews the lease every `renew_every` and when the coordinator runs short
/// of ids, until `stop`. Losing the lease, or failing to renew for half its
/// staleness limit, fences the run.
pub(crate) async fn renew_until_stopped(shared: Arc<Shared>, stop: CancellationToken) {
    let every = shared.renew_every;
    let mut last_renewed = shared.now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = shared.fenced.cancelled() => return,
            () = tokio::time::sleep(every) => {}
            () = shared.ids_wanted.notified() => {}
        }
        let reserve = shared.ids_to_reserve().await;
        let now = shared.now();
        let renewed = {
            let mut lease = shared.lease.lock().await;
            match lease.as_mut() {
                Some(lease) => lease.renew(now.0, reserve).await,
                None => return,
            }
        };
        match renewed {
            Ok(()) => {
                last_renewed = now;
                if let Some(until) = reserve {
                    shared.on_ids_reserved(until).await;
                }
            }
            Err(err @ CheckpointError::LeaseLost { .. }) => {
                shared.fence(err.to_string()).await;
                return;
            }
            Err(err) if now.since(last_renewed) >= shared.stale_after / 2 => {
                let message = format!(
                    "the lease could not be renewed for {:?} and may be taken over: {err}",
                    now.since(last_renewed)
                );
                shared.fence(message).await;
                return;
            }
            // A passing storage hiccup: the next round retries.
            Err(_) => {}
        }
    }
}

/// The reservation to ask for when `left` ids remain after `next`: another
/// `block` once fewer than half a block are left.
pub(crate) fn reservation(next: CheckpointId, left: u64, block: u64) -> Option<CheckpointId> {
    (left < block / 2).then(|| CheckpointId(next.0.saturating_add(block.max(1) - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_an_unused_pid_is_gone() {
        let me = this_run();
        assert_eq!(liveness(&me, &me), HolderLiveness::Alive);
        let elsewhere = LeaseHolder {
            host: format!("{}-other", me.host),
            ..me.clone()
        };
        assert_eq!(liveness(&elsewhere, &me), HolderLiveness::Unknown);
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        let pid = child.id();
        child.wait().expect("exits");
        let gone = LeaseHolder { pid, ..me.clone() };
        assert_eq!(liveness(&gone, &me), HolderLiveness::Gone);
        assert_ne!(this_run().owner, me.owner, "run ids are random");
    }

    #[test]
    fn more_ids_are_reserved_once_half_a_block_is_used() {
        assert_eq!(reservation(CheckpointId(10), 600, 1_000), None);
        assert_eq!(
            reservation(CheckpointId(510), 499, 1_000),
            Some(CheckpointId(1_509))
        );
    }
}
