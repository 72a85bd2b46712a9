//! The job directory's lease on a local disk and on S3 (moto): one run at a
//! time, takeover of dead or silent holders, ids that never repeat.

use std::time::Duration;

use weir_checkpoint::{
    CheckpointError, HolderLiveness, JobLease, LeaseHolder, LeaseTerms, StorageLocation,
    StorageOptions,
};
use weir_types::CheckpointId;

use crate::s3::{create_bucket, moto_options, start_moto};

fn holder(owner: &str, pid: u32) -> LeaseHolder {
    LeaseHolder {
        owner: owner.into(),
        host: "host-a".into(),
        pid,
    }
}

fn terms() -> LeaseTerms {
    LeaseTerms {
        stale_after: Duration::from_secs(30),
        id_block: 100,
    }
}

async fn acquire(
    job_dir: &StorageLocation,
    owner: &str,
    now_ms: u64,
    liveness: HolderLiveness,
) -> Result<JobLease, CheckpointError> {
    JobLease::acquire(
        job_dir,
        holder(owner, 1),
        terms(),
        now_ms,
        CheckpointId(1),
        |_| liveness,
    )
    .await
}

/// Two runs on one job directory: the second is refused with the holder's
/// name, gets the lease once the first releases it, and its ids start after
/// every id the first could have used.
async fn one_run_at_a_time(job_dir: &StorageLocation) {
    let first = acquire(job_dir, "run-a", 1_000, HolderLiveness::Alive)
        .await
        .expect("free");
    assert_eq!(
        (first.first_id(), first.reserved_until()),
        (CheckpointId(1), CheckpointId(100))
    );
    let refused = acquire(job_dir, "run-b", 2_000, HolderLiveness::Alive)
        .await
        .expect_err("held");
    assert!(
        matches!(&refused, CheckpointError::LeaseHeld { owner, pid: 1, .. } if owner == "run-a"),
        "{refused}"
    );
    assert!(refused.to_string().contains("stop that run"), "{refused}");
    first.release(3_000).await.expect("releases");
    let second = acquire(job_dir, "run-b", 3_001, HolderLiveness::Alive)
        .await
        .expect("released");
    assert_eq!(second.first_id(), CheckpointId(101));
    second.release(4_000).await.expect("releases");
}

#[tokio::test]
async fn a_second_run_is_refused_while_the_first_holds_the_job_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job_dir = StorageLocation::parse(
        &dir.path().join("orders").to_string_lossy(),
        &StorageOptions::default(),
    )
    .expect("local");
    one_run_at_a_time(&job_dir).await;
}

#[tokio::test]
async fn the_lease_works_on_an_object_store() {
    let Some(moto) = start_moto() else {
        return;
    };
    create_bucket(moto.port, "lease");
    let job_dir =
        StorageLocation::parse("s3://lease/ckpt/orders", &moto_options(moto.port)).expect("s3");
    one_run_at_a_time(&job_dir).await;
}

#[tokio::test]
async fn a_dead_or_silent_holder_is_taken_over_and_learns_it_lost_the_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job_dir = StorageLocation::parse(&dir.path().to_string_lossy(), &StorageOptions::default())
        .expect("local");
    let mut first = acquire(&job_dir, "run-a", 1_000, HolderLiveness::Unknown)
        .await
        .expect("free");
    first
        .renew(20_000, Some(CheckpointId(150)))
        .await
        .expect("still held");
    // Silent for longer than the staleness limit: taken over.
    let mut second = acquire(&job_dir, "run-b", 50_001, HolderLiveness::Unknown)
        .await
        .expect("stale");
    assert_eq!(
        second.first_id(),
        CheckpointId(151),
        "the raised reservation counts"
    );
    let lost = first
        .renew(50_002, Some(CheckpointId(400)))
        .await
        .expect_err("taken over");
    assert!(
        matches!(&lost, CheckpointError::LeaseLost { reason, .. } if reason.contains("run-b")),
        "{lost}"
    );
    second.renew(50_003, None).await.expect("holds it");
    // A holder whose process is gone is taken over at once. The loser's
    // last write raised its reservation before it saw the takeover: those
    // ids are skipped too.
    let third = acquire(&job_dir, "run-c", 50_004, HolderLiveness::Gone)
        .await
        .expect("holder gone");
    assert_eq!(third.first_id(), CheckpointId(401));
    let mut records: Vec<_> = std::fs::read_dir(dir.path().join("_lease"))
        .expect("lease dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    records.sort();
    assert_eq!(records, ["3"], "older records are deleted by the taker");
}

#[tokio::test]
async fn reservations_start_after_ids_the_caller_knows_are_taken() {
    let job_dir =
        StorageLocation::parse("memory://ckpt/orders", &StorageOptions::default()).expect("memory");
    let lease = JobLease::acquire(
        &job_dir,
        holder("run-a", 1),
        terms(),
        0,
        CheckpointId(42),
        |_| HolderLiveness::Unknown,
    )
    .await
    .expect("free");
    assert_eq!(
        (lease.first_id(), lease.reserved_until()),
        (CheckpointId(42), CheckpointId(141))
    );
}
