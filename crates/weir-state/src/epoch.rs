//! The epoch bookkeeping every backend shares: which epochs are open,
//! committed or final, and what a transition asks the backend to do.
//!
//! [`EpochLog`] validates the transitions of the
//! [`KeyedStateBackend`](crate::KeyedStateBackend) contract (see the
//! `backend` module docs) and returns a decision naming the epochs whose
//! writes the backend must drop or fold into its base. It is pure: it holds no
//! data and does no I/O, so the heap and RocksDB backends, and operator state,
//! use the same rules. A rejected transition leaves the log unchanged.
//!
//! Rules beyond the trait docs, chosen so misuse fails early:
//! - `begin(e)` while an *older* epoch is still open (not committed) is an
//!   error: that epoch's attempt must commit, be retried or be discarded first.
//! - `commit` must name the open epoch and attempt; committing the same attempt
//!   again is a no-op.
//! - `finalize_up_to(e)` makes `e` the last final epoch even if `e` itself had
//!   no writes (epochs without writes are trivially final).
//! - `discard_from(e)` of an already final `e` is an error: final writes are
//!   part of the base and cannot be dropped.

use std::fmt;

use weir_types::{Attempt, Epoch};

use crate::error::{Result, StateError};

/// Where a not yet final epoch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochStatus {
    /// Attempt in progress: the epoch accepts writes.
    Open(Attempt),
    /// The attempt finished: writes are kept, no more are accepted.
    Committed(Attempt),
}

/// One epoch that has writes (possibly none) but is not final yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingEpoch {
    /// The epoch.
    pub epoch: Epoch,
    /// Its status.
    pub status: EpochStatus,
}

/// Epochs whose writes the backend must drop, **newest first** (the order in
/// which undo logs are replayed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscardDecision {
    /// The epochs to drop, newest first; empty when nothing is dropped.
    pub epochs: Vec<Epoch>,
}

/// Epochs whose writes become part of the base, **oldest first**.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalizeDecision {
    /// The epochs to fold, oldest first; empty when nothing changes.
    pub epochs: Vec<Epoch>,
}

/// The epoch state machine of one backend (see the module docs).
///
/// Invariants: pending epochs are strictly increasing and all newer than the
/// last final epoch; at most one is open, and it is the newest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochLog {
    last_final: Option<Epoch>,
    pending: Vec<PendingEpoch>,
}

impl EpochLog {
    /// A log with no epochs: nothing final, nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last finalized epoch, if any.
    pub fn last_final(&self) -> Option<Epoch> {
        self.last_final
    }

    /// The epochs that are not final, oldest first.
    pub fn pending(&self) -> &[PendingEpoch] {
        &self.pending
    }

    /// The open epoch and its attempt, if one accepts writes.
    pub fn open(&self) -> Option<(Epoch, Attempt)> {
        match self.pending.last() {
            Some(PendingEpoch {
                epoch,
                status: EpochStatus::Open(attempt),
            }) => Some((*epoch, *attempt)),
            _ => None,
        }
    }

    /// The epoch a write goes to; [`StateError::NoOpenEpoch`] when no attempt
    /// is open.
    pub fn write_epoch(&self) -> Result<Epoch> {
        // A match, not `ok_or`: that builds and drops the error on every write.
        match self.open() {
            Some((epoch, _)) => Ok(epoch),
            None => Err(StateError::NoOpenEpoch),
        }
    }

    /// Succeeds when every epoch is final, so the backend's data is exactly
    /// its base (required by `snapshot_sync` and `ingest`).
    pub fn check_all_final(&self) -> Result<()> {
        match (self.pending.first(), self.pending.last()) {
            (Some(first), Some(last)) => Err(StateError::EpochsNotFinal {
                first: first.epoch,
                last: last.epoch,
            }),
            _ => Ok(()),
        }
    }

    /// Starts `attempt` of `epoch`: the writes of `epoch` and of every later
    /// epoch are to be dropped (returned newest first), then `epoch` is open.
    pub fn begin(&mut self, epoch: Epoch, attempt: Attempt) -> Result<DiscardDecision> {
        self.check_not_final(epoch)?;
        if let Some((open, open_attempt)) = self.open()
            && open < epoch
        {
            return Err(StateError::NotOpenEpoch {
                epoch,
                open: OpenRender(Some((open, open_attempt))).to_string(),
            });
        }
        let decision = self.drain_from(epoch);
        self.pending.push(PendingEpoch {
            epoch,
            status: EpochStatus::Open(attempt),
        });
        Ok(decision)
    }

    /// Marks `attempt` of the open `epoch` as finished. Committing an attempt
    /// that already committed is a no-op.
    pub fn commit(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        let open = self.open();
        let Some(last) = self.pending.last_mut() else {
            return Err(StateError::NotOpenEpoch {
                epoch,
                open: OpenRender(open).to_string(),
            });
        };
        match last.status {
            EpochStatus::Open(a) if last.epoch == epoch && a == attempt => {
                last.status = EpochStatus::Committed(attempt);
                Ok(())
            }
            EpochStatus::Committed(a) if last.epoch == epoch && a == attempt => Ok(()),
            _ => Err(StateError::NotOpenEpoch {
                epoch,
                open: OpenRender(open).to_string(),
            }),
        }
    }

    /// Folds every epoch `<= epoch` into the base (returned oldest first);
    /// they must all be committed. Idempotent: an epoch at or before the last
    /// final one changes nothing.
    pub fn finalize_up_to(&mut self, epoch: Epoch) -> Result<FinalizeDecision> {
        if self.last_final.is_some_and(|last| epoch <= last) {
            return Ok(FinalizeDecision::default());
        }
        let upto = self.pending.partition_point(|p| p.epoch <= epoch);
        if let Some(open) = self.pending[..upto]
            .iter()
            .find(|p| matches!(p.status, EpochStatus::Open(_)))
        {
            return Err(StateError::EpochNotCommitted { epoch: open.epoch });
        }
        let epochs = self.pending.drain(..upto).map(|p| p.epoch).collect();
        self.last_final = Some(epoch);
        Ok(FinalizeDecision { epochs })
    }

    /// Drops `epoch` and every later epoch (returned newest first). An epoch
    /// that is already final cannot be dropped.
    pub fn discard_from(&mut self, epoch: Epoch) -> Result<DiscardDecision> {
        self.check_not_final(epoch)?;
        Ok(self.drain_from(epoch))
    }

    fn check_not_final(&self, epoch: Epoch) -> Result<()> {
        match self.last_final {
            Some(last_final) if epoch <= last_final => {
                Err(StateError::EpochAlreadyFinal { epoch, last_final })
            }
            _ => Ok(()),
        }
    }

    fn drain_from(&mut self, epoch: Epoch) -> DiscardDecision {
        let from = self.pending.partition_point(|p| p.epoch < epoch);
        let epochs = self.pending.drain(from..).rev().map(|p| p.epoch).collect();
        DiscardDecision { epochs }
    }
}

/// Renders the open epoch for [`StateError::NotOpenEpoch`].
struct OpenRender(Option<(Epoch, Attempt)>);

impl fmt::Display for OpenRender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((epoch, attempt)) => write!(f, "{epoch} attempt {attempt}"),
            None => f.write_str("none"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(n: u64) -> Epoch {
        Epoch(n)
    }

    fn a(n: u32) -> Attempt {
        Attempt(n)
    }

    fn epochs(log: &EpochLog) -> Vec<(u64, EpochStatus)> {
        log.pending()
            .iter()
            .map(|p| (p.epoch.0, p.status))
            .collect()
    }

    #[test]
    fn fresh_log_has_nothing_open_or_final() {
        let log = EpochLog::new();
        assert_eq!(log.last_final(), None);
        assert_eq!(log.open(), None);
        assert!(matches!(log.write_epoch(), Err(StateError::NoOpenEpoch)));
        assert!(log.check_all_final().is_ok());
    }

    #[test]
    fn begin_commit_finalize_happy_path() {
        let mut log = EpochLog::new();
        assert_eq!(
            log.begin(e(1), a(0)).expect("accepted"),
            DiscardDecision::default()
        );
        assert_eq!(log.write_epoch().expect("accepted"), e(1));
        log.commit(e(1), a(0)).expect("accepted");
        assert!(matches!(log.write_epoch(), Err(StateError::NoOpenEpoch)));
        log.begin(e(2), a(0)).expect("accepted");
        log.commit(e(2), a(0)).expect("accepted");
        let decision = log.finalize_up_to(e(2)).expect("accepted");
        assert_eq!(decision.epochs, vec![e(1), e(2)]);
        assert_eq!(log.last_final(), Some(e(2)));
        assert!(log.pending().is_empty());
        assert!(log.check_all_final().is_ok());
    }

    #[test]
    fn retry_of_open_epoch_discards_its_writes() {
        let mut log = EpochLog::new();
        log.begin(e(3), a(0)).expect("accepted");
        let decision = log.begin(e(3), a(1)).expect("accepted");
        assert_eq!(decision.epochs, vec![e(3)]);
        assert_eq!(log.open(), Some((e(3), a(1))));
    }

    #[test]
    fn retry_of_committed_epoch_discards_it_and_later_epochs_newest_first() {
        let mut log = EpochLog::new();
        for n in 1..=4 {
            log.begin(e(n), a(0)).expect("accepted");
            log.commit(e(n), a(0)).expect("accepted");
        }
        let decision = log.begin(e(2), a(1)).expect("accepted");
        assert_eq!(decision.epochs, vec![e(4), e(3), e(2)]);
        assert_eq!(
            epochs(&log),
            vec![
                (1, EpochStatus::Committed(a(0))),
                (2, EpochStatus::Open(a(1)))
            ]
        );
    }

    #[test]
    fn begin_of_final_epoch_is_rejected() {
        let mut log = EpochLog::new();
        log.begin(e(5), a(0)).expect("accepted");
        log.commit(e(5), a(0)).expect("accepted");
        log.finalize_up_to(e(5)).expect("accepted");
        let err = log.begin(e(5), a(1)).expect_err("rejected");
        assert!(matches!(
            err,
            StateError::EpochAlreadyFinal { epoch, last_final } if epoch == e(5) && last_final == e(5)
        ));
        assert!(log.begin(e(4), a(0)).is_err());
        assert!(log.begin(e(6), a(0)).is_ok());
    }

    #[test]
    fn begin_while_older_epoch_open_is_rejected_and_changes_nothing() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        let before = log.clone();
        let err = log.begin(e(2), a(0)).expect_err("rejected");
        assert!(matches!(err, StateError::NotOpenEpoch { epoch, .. } if epoch == e(2)));
        assert_eq!(
            err.to_string(),
            "epoch 2 is not the open epoch (1 attempt 0)"
        );
        assert_eq!(log, before);
    }

    #[test]
    fn begin_of_older_epoch_while_newer_open_discards_newer() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        log.begin(e(2), a(0)).expect("accepted");
        let decision = log.begin(e(1), a(1)).expect("accepted");
        assert_eq!(decision.epochs, vec![e(2), e(1)]);
        assert_eq!(log.open(), Some((e(1), a(1))));
    }

    #[test]
    fn epochs_need_not_be_contiguous() {
        let mut log = EpochLog::new();
        log.begin(e(10), a(0)).expect("accepted");
        log.commit(e(10), a(0)).expect("accepted");
        log.begin(e(20), a(0)).expect("accepted");
        log.commit(e(20), a(0)).expect("accepted");
        assert_eq!(
            log.finalize_up_to(e(15)).expect("accepted").epochs,
            vec![e(10)]
        );
        assert_eq!(log.last_final(), Some(e(15)));
        assert_eq!(
            log.discard_from(e(16)).expect("accepted").epochs,
            vec![e(20)]
        );
    }

    #[test]
    fn commit_must_name_the_open_attempt() {
        let mut log = EpochLog::new();
        assert!(matches!(
            log.commit(e(1), a(0)),
            Err(StateError::NotOpenEpoch { open, .. }) if open == "none"
        ));
        log.begin(e(1), a(2)).expect("accepted");
        assert!(log.commit(e(1), a(1)).is_err());
        assert!(log.commit(e(2), a(2)).is_err());
        log.commit(e(1), a(2)).expect("accepted");
        // The same commit again is a no-op; another attempt is not.
        log.commit(e(1), a(2)).expect("accepted");
        assert!(log.commit(e(1), a(3)).is_err());
        assert_eq!(epochs(&log), vec![(1, EpochStatus::Committed(a(2)))]);
    }

    #[test]
    fn commit_of_older_committed_epoch_is_rejected() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        log.begin(e(2), a(0)).expect("accepted");
        assert!(log.commit(e(1), a(0)).is_err());
        assert_eq!(log.open(), Some((e(2), a(0))));
    }

    #[test]
    fn finalize_of_uncommitted_epoch_is_rejected_and_changes_nothing() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        log.begin(e(2), a(0)).expect("accepted");
        let before = log.clone();
        let err = log.finalize_up_to(e(2)).expect_err("rejected");
        assert!(matches!(err, StateError::EpochNotCommitted { epoch } if epoch == e(2)));
        assert_eq!(log, before);
        // Finalizing only the committed prefix is fine; the open epoch stays.
        assert_eq!(
            log.finalize_up_to(e(1)).expect("accepted").epochs,
            vec![e(1)]
        );
        assert_eq!(log.open(), Some((e(2), a(0))));
        assert_eq!(log.write_epoch().expect("accepted"), e(2));
    }

    #[test]
    fn finalize_is_idempotent() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        assert_eq!(
            log.finalize_up_to(e(1)).expect("accepted").epochs,
            vec![e(1)]
        );
        assert_eq!(
            log.finalize_up_to(e(1)).expect("accepted"),
            FinalizeDecision::default()
        );
        assert_eq!(
            log.finalize_up_to(e(0)).expect("accepted"),
            FinalizeDecision::default()
        );
        assert_eq!(log.last_final(), Some(e(1)));
    }

    #[test]
    fn finalize_without_writes_advances_last_final() {
        let mut log = EpochLog::new();
        assert!(
            log.finalize_up_to(e(7))
                .expect("accepted")
                .epochs
                .is_empty()
        );
        assert_eq!(log.last_final(), Some(e(7)));
        assert!(log.begin(e(7), a(0)).is_err());
    }

    #[test]
    fn discard_from_drops_newer_epochs_and_closes_the_open_one() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        log.begin(e(2), a(0)).expect("accepted");
        assert_eq!(log.discard_from(e(2)).expect("accepted").epochs, vec![e(2)]);
        assert!(matches!(log.write_epoch(), Err(StateError::NoOpenEpoch)));
        assert_eq!(epochs(&log), vec![(1, EpochStatus::Committed(a(0)))]);
        assert!(log.discard_from(e(5)).expect("accepted").epochs.is_empty());
        assert_eq!(log.discard_from(e(0)).expect("accepted").epochs, vec![e(1)]);
        assert!(log.pending().is_empty());
    }

    #[test]
    fn discard_of_final_epoch_is_rejected() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        log.finalize_up_to(e(1)).expect("accepted");
        assert!(matches!(
            log.discard_from(e(1)),
            Err(StateError::EpochAlreadyFinal { .. })
        ));
        assert!(log.discard_from(e(2)).expect("accepted").epochs.is_empty());
    }

    #[test]
    fn snapshot_needs_every_epoch_final() {
        let mut log = EpochLog::new();
        log.begin(e(1), a(0)).expect("accepted");
        log.commit(e(1), a(0)).expect("accepted");
        log.begin(e(3), a(0)).expect("accepted");
        assert!(matches!(
            log.check_all_final(),
            Err(StateError::EpochsNotFinal { first, last }) if first == e(1) && last == e(3)
        ));
        log.commit(e(3), a(0)).expect("accepted");
        log.finalize_up_to(e(3)).expect("accepted");
        assert!(log.check_all_final().is_ok());
    }
}
