//! The job directory's lease: one run at a time owns a job directory, and
//! checkpoint ids are reserved in it so they never repeat.
//!
//! A lease is a numbered record `_lease/<n>` in the job directory, created
//! with a create-only put (works on local disks and object stores alike).
//! The highest number is the current lease. Its holder renews it by
//! rewriting its own record (heartbeat) and then checks that no higher
//! record exists; a run takes the directory over by creating the next
//! number, which only one contender can do. Records are never reused:
//! releasing marks the record released instead of deleting it, so a
//! paused holder that wakes up always finds the higher record and stops.
//!
//! **Staleness rule.** A record is free to take over when it is released,
//! when its holder ran on this host and its process is gone, or when its
//! heartbeat is older than [`LeaseTerms::stale_after`] by the taker's wall
//! clock (hosts' clocks are assumed to agree to well within that). A holder
//! that cannot renew for half that long must consider the lease lost.
//!
//! **Id reservations.** Each record carries `reserved_until`: every id up to
//! it may have been used. A holder raises it (write, then check for a
//! higher record) before using ids above it; a taker starts after the
//! highest reservation of any record and re-reads its predecessor after
//! creating its own record, so a reservation the previous holder made in
//! that window is never reused either.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_types::CheckpointId;

use crate::error::{CheckpointError, Result};
use crate::layout::LEASE_DIR;
use crate::location::StorageLocation;
use crate::record::{self, Write};
use crate::storage::delete_paths;

/// The version of lease records this build writes and reads.
const LEASE_VERSION: u32 = 1;

/// Who holds (or wants) a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHolder {
    /// A random id of the run, unique across runs.
    pub owner: String,
    /// The host name the run's process runs on.
    pub host: String,
    /// The run's process id on that host.
    pub pid: u32,
}

/// What a taker knows about whether a holder's process still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderLiveness {
    /// It runs (on this host).
    Alive,
    /// It ran on this host and is gone.
    Gone,
    /// It runs elsewhere; only its heartbeat tells.
    Unknown,
}

/// How long leases last and how many ids a reservation covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// A heartbeat older than this makes the lease stale.
    pub stale_after: Duration,
    /// Ids reserved at a time.
    pub id_block: u64,
}

impl Default for LeaseTerms {
    /// Stale after 30 s without heartbeat; 1000 ids per reservation.
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(30),
            id_block: 1_000,
        }
    }
}

/// One lease record as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    version: u32,
    /// The holder.
    #[serde(flatten)]
    pub holder: LeaseHolder,
    /// Wall-clock milliseconds of the holder's last renewal.
    pub heartbeat_ms: u64,
    /// Every checkpoint id up to this one may have been used.
    pub reserved_until: CheckpointId,
    /// The holder gave the lease up.
    pub released: bool,
}

/// Whether a lease record may be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseDecision {
    /// Released, or its holder is gone or silent: take it over.
    TakeOver,
    /// Its holder is live: refuse, this long after its last heartbeat.
    Held {
        /// Age of the holder's last heartbeat.
        heartbeat_age: Duration,
    },
}

impl LeaseRecord {
    /// Applies the staleness rule at wall-clock time `now_ms`.
    pub fn decide(
        &self,
        now_ms: u64,
        terms: &LeaseTerms,
        liveness: HolderLiveness,
    ) -> LeaseDecision {
        let heartbeat_age = Duration::from_millis(now_ms.saturating_sub(self.heartbeat_ms));
        if self.released || liveness == HolderLiveness::Gone || heartbeat_age > terms.stale_after {
            LeaseDecision::TakeOver
        } else {
            LeaseDecision::Held { heartbeat_age }
        }
    }
}

/// A lease this run holds on a job directory.
#[derive(Debug)]
pub struct JobLease {
    leases: StorageLocation,
    job_dir: String,
    number: u64,
    record: LeaseRecord,
    first_id: CheckpointId,
}

impl JobLease {
    /// Takes the lease on `job_dir` for `holder` at wall-clock `now_ms`, and
    /// reserves ids from at least `min_next` (the caller knows ids up to it
    /// are taken: checkpoint directories, a restored snapshot).
    ///
    /// Fails with [`CheckpointError::LeaseHeld`] when a live run holds it;
    /// `liveness` tells whether a holder's process still runs.
    pub async fn acquire(
        job_dir: &StorageLocation,
        holder: LeaseHolder,
        terms: LeaseTerms,
        now_ms: u64,
        min_next: CheckpointId,
        liveness: impl Fn(&LeaseHolder) -> HolderLiveness,
    ) -> Result<Self> {
        let leases = job_dir.child(LEASE_DIR)?;
        // A lost race for the next number means another run took it just
        // now; the next round finds its record live and refuses.
        for _ in 0..3 {
            let records = list(&leases).await?;
            let top = records.last().map(|(n, _)| *n);
            if let Some((_, current)) = records.last()
                && let LeaseDecision::Held { heartbeat_age } =
                    current.decide(now_ms, &terms, liveness(&current.holder))
            {
                return Err(CheckpointError::LeaseHeld {
                    job_dir: job_dir.url().to_owned(),
                    owner: current.holder.owner.clone(),
                    host: current.holder.host.clone(),
                    pid: current.holder.pid,
                    heartbeat_age,
                    stale_after: terms.stale_after,
                });
            }
            let reserved = records.iter().map(|(_, r)| r.reserved_until).max();
            let first_id = after(reserved).max(min_next);
            let number = top.map_or(1, |n| n + 1);
            let mut lease = Self {
                leases: leases.clone(),
                job_dir: job_dir.url().to_owned(),
                number,
                record: LeaseRecord {
                    version: LEASE_VERSION,
                    holder: holder.clone(),
                    heartbeat_ms: now_ms,
                    reserved_until: last_of_block(first_id, terms.id_block),
                    released: false,
                },
                first_id,
            };
            if !record::write(&leases, &number.to_string(), &lease.record, Write::Create).await? {
                continue;
            }
            if let Some(previous) = top {
                lease.after_takeover(previous, terms.id_block).await?;
            }
            return Ok(lease);
        }
        Err(CheckpointError::LeaseLost {
            job_dir: job_dir.url().to_owned(),
            reason: "other runs kept taking the lease while this one tried to".into(),
        })
    }

    /// The first id this run may use.
    pub fn first_id(&self) -> CheckpointId {
        self.first_id
    }

    /// The last id this run may use until it reserves more.
    pub fn reserved_until(&self) -> CheckpointId {
        self.record.reserved_until
    }

    /// The holder.
    pub fn holder(&self) -> &LeaseHolder {
        &self.record.holder
    }

    /// Renews the heartbeat at `now_ms` and, if given, raises the reservation
    /// to `reserve_until`. Fails with [`CheckpointError::LeaseLost`] if
    /// another run has taken the lease; the new reservation counts only
    /// when this succeeds.
    pub async fn renew(&mut self, now_ms: u64, reserve_until: Option<CheckpointId>) -> Result<()> {
        let mut record = self.record.clone();
        record.heartbeat_ms = now_ms;
        if let Some(until) = reserve_until {
            record.reserved_until = record.reserved_until.max(until);
        }
        record::write(
            &self.leases,
            &self.number.to_string(),
            &record,
            Write::Overwrite,
        )
        .await?;
        let newer = list(&self.leases)
            .await?
            .into_iter()
            .find(|(n, _)| *n > self.number);
        if let Some((_, taker)) = newer {
            return Err(CheckpointError::LeaseLost {
                job_dir: self.job_dir.clone(),
                reason: format!(
                    "run {} (pid {} on {}) took it over",
                    taker.holder.owner, taker.holder.pid, taker.holder.host
                ),
            });
        }
        self.record = record;
        Ok(())
    }

    /// Gives the lease up at `now_ms`; the next run takes it at once.
    pub async fn release(mut self, now_ms: u64) -> Result<()> {
        self.record.released = true;
        self.record.heartbeat_ms = now_ms;
        record::write(
            &self.leases,
            &self.number.to_string(),
            &self.record,
            Write::Overwrite,
        )
        .await
        .map(drop)
    }

    /// After creating record `number` over `previous`: starts after any
    /// reservation the previous holder made since it was read, then deletes
    /// the older records.
    async fn after_takeover(&mut self, previous: u64, id_block: u64) -> Result<()> {
        let late = record::read::<LeaseRecord>(&self.leases, &previous.to_string())
            .await?
            .map(|r| r.reserved_until);
        if late.is_some_and(|until| until >= self.first_id) {
            self.first_id = after(late);
            self.record.reserved_until = last_of_block(self.first_id, id_block);
            record::write(
                &self.leases,
                &self.number.to_string(),
                &self.record,
                Write::Overwrite,
            )
            .await?;
        }
        let older: Vec<String> = list_numbers(&self.leases)
            .await?
            .into_iter()
            .filter(|n| *n < self.number)
            .map(|n| n.to_string())
            .collect();
        delete_paths(&self.leases, older.iter().map(String::as_str)).await
    }
}

/// The id after `reserved`, or the first id.
fn after(reserved: Option<CheckpointId>) -> CheckpointId {
    reserved.map_or(CheckpointId(1), |id| CheckpointId(id.0.saturating_add(1)))
}

fn last_of_block(first: CheckpointId, block: u64) -> CheckpointId {
    CheckpointId(first.0.saturating_add(block.max(1) - 1))
}

/// The record numbers under `leases`, ascending.
async fn list_numbers(leases: &StorageLocation) -> Result<Vec<u64>> {
    let store = leases.store();
    let listing = store.list_with_delimiter(Some(leases.root())).await;
    let objects = match listing {
        Ok(listing) => listing.objects,
        Err(object_store::Error::NotFound { .. }) => Vec::new(),
        Err(source) => {
            return Err(CheckpointError::Store {
                operation: "list",
                path: leases.url().to_owned(),
                source,
            });
        }
    };
    let mut numbers: Vec<u64> = objects
        .iter()
        .filter_map(|o| o.location.filename()?.parse().ok())
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// The records under `leases`, by ascending number; records deleted while
/// listing are skipped.
async fn list(leases: &StorageLocation) -> Result<Vec<(u64, LeaseRecord)>> {
    let mut records = Vec::new();
    for number in list_numbers(leases).await? {
        if let Some(record) = record::read::<LeaseRecord>(leases, &number.to_string()).await? {
            if record.version > LEASE_VERSION {
                return Err(CheckpointError::NewerVersion {
                    location: format!("{}/{number}", leases.url()),
                    found: record.version,
                    supported: LEASE_VERSION,
                });
            }
            records.push((number, record));
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(heartbeat_ms: u64, released: bool) -> LeaseRecord {
        LeaseRecord {
            version: LEASE_VERSION,
            holder: LeaseHolder {
                owner: "a1".into(),
                host: "h".into(),
                pid: 7,
            },
            heartbeat_ms,
            reserved_until: CheckpointId(10),
            released,
        }
    }

    #[test]
    fn a_lease_is_held_until_released_silent_or_its_process_is_gone() {
        let terms = LeaseTerms::default();
        let live = record(100_000, false);
        assert_eq!(
            live.decide(110_000, &terms, HolderLiveness::Unknown),
            LeaseDecision::Held {
                heartbeat_age: Duration::from_secs(10)
            }
        );
        assert_eq!(
            live.decide(110_000, &terms, HolderLiveness::Gone),
            LeaseDecision::TakeOver
        );
        assert_eq!(
            live.decide(130_001, &terms, HolderLiveness::Alive),
            LeaseDecision::TakeOver,
            "a live process that stopped renewing is stuck"
        );
        assert!(matches!(
            live.decide(130_000, &terms, HolderLiveness::Unknown),
            LeaseDecision::Held { .. }
        ));
        assert_eq!(
            record(100_000, true).decide(100_001, &terms, HolderLiveness::Alive),
            LeaseDecision::TakeOver
        );
        // A clock behind the heartbeat's counts as a fresh heartbeat.
        assert!(matches!(
            live.decide(90_000, &terms, HolderLiveness::Unknown),
            LeaseDecision::Held { .. }
        ));
    }

    #[test]
    fn reservations_are_whole_blocks_after_the_last_one() {
        assert_eq!(after(None), CheckpointId(1));
        assert_eq!(after(Some(CheckpointId(10))), CheckpointId(11));
        assert_eq!(last_of_block(CheckpointId(11), 1_000), CheckpointId(1_010));
        assert_eq!(last_of_block(CheckpointId(5), 0), CheckpointId(5));
    }
}
