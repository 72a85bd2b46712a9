//! Restore of a savepoint written at parallelism 2, at parallelism 2 (the
//! plain restore) and at 3 (a rescale: every new subtask reads the key
//! groups it now owns out of both old files).

use std::path::Path;
use std::time::Instant;

use weir_host::local::LocalOperator;
use weir_types::{Attempt, Epoch, MaxParallelism, OperatorUid};

use crate::Backend;
use crate::error::{Result, io};
use crate::report::{Records, mib_s, ms};
use crate::storage;
use crate::workload::{self, Keys};

/// Keys checked after each restore.
const VERIFIED_KEYS: usize = 2_000;

/// Loads `keys` into 2 subtasks, snapshots them, and times restores at
/// parallelism 2 and 3.
pub fn run(
    dir: &Path,
    backend: &Backend,
    keys: &Keys,
    max: MaxParallelism,
    out: &mut Records,
) -> Result<()> {
    let (name, backend) = (backend.name, &backend.spec);
    let n = keys.len() as u64;
    let uid = OperatorUid::new("bench")?;
    let work = dir.join(format!("rescale-{name}-{n}"));
    let savepoints = work.join("savepoints");
    std::fs::create_dir_all(&savepoints).map_err(io("create", &savepoints))?;
    let (savepoint, state) = {
        let mut operator = LocalOperator::new(uid.clone(), 2, max, backend.clone(), &work)?;
        let state = operator.register_state(&workload::descriptor()?)?;
        operator.set_key_types(workload::key_types())?;
        operator.begin(Epoch(1), Attempt(0), None)?;
        let mut owned: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        for i in 0..keys.len() {
            owned[operator.subtask_of(keys.group(i))?].push(i);
        }
        for (index, indices) in owned.iter().enumerate() {
            workload::put(
                operator.subtask_mut(index)?,
                state,
                keys,
                indices.iter().copied(),
                workload::LOAD_ROUND,
            )?;
        }
        operator.commit(Epoch(1), Attempt(0))?;
        (operator.snapshot(&savepoints.to_string_lossy())?, state)
    };
    let bytes = storage::dir_bytes(&savepoints)?;
    out.add("rescale", name, n, "savepoint_bytes", bytes as f64, "bytes");
    for parallelism in [2u32, 3] {
        storage::evict(&savepoints)?;
        let restore_work = work.join(format!("restore-{parallelism}"));
        let started = Instant::now();
        let mut operator = LocalOperator::restore(
            &savepoint,
            uid.clone(),
            parallelism,
            max,
            backend.clone(),
            &restore_work,
            false,
        )?;
        let elapsed = started.elapsed();
        let metric = format!("restore_2_to_{parallelism}");
        out.add(
            "rescale",
            name,
            n,
            format!("{metric}_ms"),
            ms(elapsed),
            "ms",
        );
        out.add(
            "rescale",
            name,
            n,
            format!("{metric}_rate"),
            mib_s(bytes, elapsed),
            "MiB/s",
        );
        for index in 0..parallelism as usize {
            let sample = workload::sample(keys.len(), VERIFIED_KEYS, |i| {
                operator.subtask_of(keys.group(i)).ok() == Some(index)
            });
            let subtask = operator.subtask_mut(index)?;
            workload::verify(subtask, state, keys, &sample, |_| workload::LOAD_ROUND)?;
        }
        drop(operator);
    }
    std::fs::remove_dir_all(&work).map_err(io("remove", &work))?;
    Ok(())
}
