//! The restore plan: which stored state each operator and
//! subtask of the job being started restores, possibly at a new parallelism.
//!
//! Pure: it reads a decoded `_metadata` and the job's operators and decides;
//! reading the files is the snapshot crate's job. Rules:
//! - state is matched to operators by uid, so operators may be reordered;
//! - an operator without stored state starts empty;
//! - stored state of an operator the job no longer has is an error unless
//!   `allow_non_restored_state` drops it;
//! - max parallelism must not change (key groups would move);
//! - each new subtask gets the keyed handles overlapping its key-group range;
//! - operator (non-keyed) state goes to the same subtask at an unchanged
//!   parallelism; after rescaling every new subtask gets all old files, in
//!   old subtask order, and redistributes by each state's mode (even split,
//!   union, broadcast), which only the file contents record.

use std::collections::{BTreeMap, BTreeSet};

use weir_snapshot::{KeyedStateHandle, StateFile};
use weir_types::{
    KeyGroupRange, MaxParallelism, OperatorUid, StateDescriptor, SubtaskIndex, ValueType,
};

use crate::error::{CheckpointError, Result, UidList};
use crate::metadata::{CheckpointMetadata, OperatorStateMeta};

/// An operator of the job being started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOperator {
    /// Its uid.
    pub uid: OperatorUid,
    /// Its max parallelism.
    pub max_parallelism: MaxParallelism,
    /// Its parallelism in this run.
    pub parallelism: u32,
}

/// What one operator restores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorRestore {
    /// No stored state: the operator starts empty.
    Empty,
    /// Stored state, redistributed over the operator's subtasks.
    Restored(RestoredOperator),
}

/// An operator's stored state, assigned to its new subtasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredOperator {
    /// The parallelism that wrote the state.
    pub old_parallelism: u32,
    /// The key columns' types recorded with the state.
    pub key_types: Option<Vec<ValueType>>,
    /// The keyed states recorded with the state.
    pub states: Vec<StateDescriptor>,
    /// One entry per new subtask, in subtask order.
    pub subtasks: Vec<SubtaskRestore>,
}

/// What one new subtask restores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskRestore {
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The key groups it owns; restore only these from `keyed`.
    pub key_group_range: KeyGroupRange,
    /// The stored keyed handles overlapping `key_group_range`.
    pub keyed: Vec<KeyedStateHandle>,
    /// The operator state files it redistributes (see the module docs).
    pub operator_state: Vec<StateFile>,
    /// Whether the parallelism changed: then `operator_state` holds every
    /// old subtask's file, to redistribute with `weir_state::redistribute`;
    /// otherwise at most this subtask's own file, to restore as it is.
    pub rescaled: bool,
}

/// The restore decision for a whole job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePlan {
    /// Every operator of the job, by uid.
    pub operators: BTreeMap<OperatorUid, OperatorRestore>,
    /// Stored operators the job no longer has, dropped because non-restored
    /// state was allowed.
    pub dropped: Vec<OperatorUid>,
}

impl RestorePlan {
    /// Plans restoring `metadata` into a job made of `job_operators`.
    pub fn new(
        metadata: &CheckpointMetadata,
        job_operators: &[JobOperator],
        allow_non_restored_state: bool,
    ) -> Result<Self> {
        let mut wanted = BTreeSet::new();
        for op in job_operators {
            if !wanted.insert(&op.uid) {
                return Err(CheckpointError::DuplicateJobOperator {
                    uid: op.uid.clone(),
                });
            }
        }
        let dropped: Vec<OperatorUid> = metadata
            .operators
            .iter()
            .map(|o| o.uid.clone())
            .filter(|uid| !wanted.contains(uid))
            .collect();
        if !dropped.is_empty() && !allow_non_restored_state {
            return Err(CheckpointError::NonRestoredState {
                uids: UidList(dropped),
            });
        }
        let mut operators = BTreeMap::new();
        for op in job_operators {
            let restore = match metadata.operator(&op.uid) {
                None => OperatorRestore::Empty,
                Some(stored) => OperatorRestore::Restored(assign(stored, op)?),
            };
            operators.insert(op.uid.clone(), restore);
        }
        Ok(Self { operators, dropped })
    }
}

fn assign(stored: &OperatorStateMeta, op: &JobOperator) -> Result<RestoredOperator> {
    if stored.max_parallelism != op.max_parallelism {
        return Err(CheckpointError::MaxParallelismChanged {
            uid: op.uid.clone(),
            stored: stored.max_parallelism.get(),
            job: op.max_parallelism.get(),
        });
    }
    let rescaled = stored.parallelism != op.parallelism;
    let mut old: Vec<_> = stored.subtasks.iter().collect();
    old.sort_by_key(|s| s.subtask);
    let subtasks = (0..op.parallelism)
        .map(|i| {
            let subtask = SubtaskIndex(i);
            let range = KeyGroupRange::for_subtask(op.max_parallelism, op.parallelism, subtask)?;
            let keyed = old
                .iter()
                .filter_map(|s| s.keyed.as_ref())
                .filter(|h| !h.key_group_range().intersect(range).is_empty())
                .cloned()
                .collect();
            let operator_state = old
                .iter()
                .filter(|s| rescaled || s.subtask == subtask)
                .filter_map(|s| s.operator_state.clone())
                .collect();
            Ok(SubtaskRestore {
                subtask,
                key_group_range: range,
                keyed,
                operator_state,
                rescaled,
            })
        })
        .collect::<Result<_>>()?;
    Ok(RestoredOperator {
        old_parallelism: stored.parallelism,
        key_types: stored.key_types.clone(),
        states: stored.states.clone(),
        subtasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::tests::sample;

    fn op(uid: &str, max: u32, parallelism: u32) -> JobOperator {
        JobOperator {
            uid: OperatorUid::new(uid).expect("valid"),
            max_parallelism: MaxParallelism::new(max).expect("valid"),
            parallelism,
        }
    }

    fn restored(plan: &RestorePlan, uid: &str) -> RestoredOperator {
        match &plan.operators[&OperatorUid::new(uid).expect("valid")] {
            OperatorRestore::Restored(r) => r.clone(),
            OperatorRestore::Empty => panic!("{uid} restored nothing"),
        }
    }

    #[test]
    fn rescaling_assigns_overlapping_handles() {
        // Stored at parallelism 2: [0,64) and [64,128).
        let meta = sample(1, 2);
        let plan = RestorePlan::new(&meta, &[op("avg", 128, 3)], false).expect("plans");
        let r = restored(&plan, "avg");
        assert_eq!(r.old_parallelism, 2);
        let paths: Vec<Vec<String>> = r
            .subtasks
            .iter()
            .map(|s| {
                s.keyed
                    .iter()
                    .flat_map(|h| h.files())
                    .map(|f| f.path.clone())
                    .collect()
            })
            .collect();
        // New ranges [0,43), [43,86), [86,128): the middle one straddles both.
        assert_eq!(
            paths,
            [
                vec!["chk-1/avg/0/keyed"],
                vec!["chk-1/avg/0/keyed", "chk-1/avg/1/keyed"],
                vec!["chk-1/avg/1/keyed"],
            ]
        );
        assert_eq!(
            r.subtasks[1].key_group_range,
            KeyGroupRange::new(43, 86).expect("valid")
        );
    }

    #[test]
    fn operator_state_stays_put_unless_rescaled() {
        let mut meta = sample(1, 2);
        for (i, sub) in meta.operators[0].subtasks.iter_mut().enumerate() {
            sub.operator_state = Some(StateFile {
                path: format!("chk-1/avg/{i}/operator"),
                size: 0,
                crc32: 0,
            });
        }
        let same = restored(
            &RestorePlan::new(&meta, &[op("avg", 128, 2)], false).expect("plans"),
            "avg",
        );
        assert!(!same.subtasks[1].rescaled);
        assert_eq!(same.subtasks[1].operator_state.len(), 1);
        assert_eq!(
            same.subtasks[1].operator_state[0].path,
            "chk-1/avg/1/operator"
        );
        let down = restored(
            &RestorePlan::new(&meta, &[op("avg", 128, 1)], false).expect("plans"),
            "avg",
        );
        assert!(down.subtasks[0].rescaled);
        assert_eq!(down.subtasks[0].operator_state.len(), 2);
    }

    #[test]
    fn new_operators_start_empty_and_removed_ones_need_permission() {
        let meta = sample(1, 1);
        let plan =
            RestorePlan::new(&meta, &[op("avg", 128, 1), op("new", 128, 2)], false).expect("plans");
        assert_eq!(
            plan.operators[&OperatorUid::new("new").expect("valid")],
            OperatorRestore::Empty
        );

        let err = RestorePlan::new(&meta, &[op("other", 128, 1)], false).expect_err("avg removed");
        assert!(matches!(err, CheckpointError::NonRestoredState { .. }));
        assert!(err.to_string().contains("avg"), "{err}");
        let plan = RestorePlan::new(&meta, &[op("other", 128, 1)], true).expect("allowed");
        assert_eq!(plan.dropped, [OperatorUid::new("avg").expect("valid")]);
    }

    #[test]
    fn changed_max_parallelism_is_refused_with_the_fix() {
        let err = RestorePlan::new(&sample(1, 1), &[op("avg", 256, 1)], false)
            .expect_err("max parallelism changed");
        assert!(matches!(
            err,
            CheckpointError::MaxParallelismChanged {
                stored: 128,
                job: 256,
                ..
            }
        ));
        assert!(err.to_string().contains("set it back to 128"), "{err}");
    }
}
