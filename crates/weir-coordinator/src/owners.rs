//! Which state host owns each subtask's state in the current generation.
//!
//! On a cluster a subtask's task may run on any executor; its state lives
//! in one host, the owner. The first task of a generation to claim a
//! subtask makes its host the owner, and every later claim learns that
//! owner, so all tasks of the subtask reach the same state. A restart
//! starts a new generation with no owners; claims for another generation
//! are refused, since their tasks belong to a run that is over.
//!
//! Pure decisions; `http` serves them as `POST /owners`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_types::{OperatorUid, SubtaskIndex};

/// Longest host address accepted in a claim.
const MAX_ADDRESS_LEN: usize = 256;

/// A task's claim: its host at `address` would own `(uid, subtask)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerClaim {
    /// The generation the task belongs to.
    pub generation: u64,
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Where the claiming task's state host listens (`host:port`).
    pub address: String,
}

/// The answer to a granted or settled claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerAnswer {
    /// The owner's address: the claimant's if `granted`.
    pub owner: String,
    /// Whether this claim made its host the owner.
    pub granted: bool,
}

/// What became of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The subtask has an owner (the claimant's host if this claim made it).
    Owner(OwnerAnswer),
    /// The claim belongs to another generation than the current one.
    WrongGeneration {
        /// The current generation.
        current: u64,
    },
    /// The job has no such subtask.
    UnknownSubtask,
    /// The address is empty, too long, or not printable ASCII.
    BadAddress,
}

/// The owners of one generation, for the job's stateful subtasks.
#[derive(Debug, Clone)]
pub struct OwnerRegistry {
    generation: u64,
    parallelism: BTreeMap<OperatorUid, u32>,
    owners: BTreeMap<(OperatorUid, SubtaskIndex), String>,
}

impl OwnerRegistry {
    /// No owners yet in `generation` of a job whose stateful operators have
    /// the given parallelism.
    pub fn new(generation: u64, parallelism: BTreeMap<OperatorUid, u32>) -> Self {
        Self {
            generation,
            parallelism,
            owners: BTreeMap::new(),
        }
    }

    /// Decides `claim`: the first valid claim of a subtask in the current
    /// generation wins; later ones get the winner.
    pub fn claim(&mut self, claim: OwnerClaim) -> ClaimOutcome {
        if claim.generation != self.generation {
            return ClaimOutcome::WrongGeneration {
                current: self.generation,
            };
        }
        if !self.has_subtask(&claim.uid, claim.subtask) {
            return ClaimOutcome::UnknownSubtask;
        }
        let printable = claim.address.bytes().all(|b| b.is_ascii_graphic());
        if claim.address.is_empty() || claim.address.len() > MAX_ADDRESS_LEN || !printable {
            return ClaimOutcome::BadAddress;
        }
        let key = (claim.uid, claim.subtask);
        if let Some(owner) = self.owners.get(&key) {
            return ClaimOutcome::Owner(OwnerAnswer {
                owner: owner.clone(),
                granted: *owner == claim.address,
            });
        }
        self.owners.insert(key, claim.address.clone());
        ClaimOutcome::Owner(OwnerAnswer {
            owner: claim.address,
            granted: true,
        })
    }

    /// Whether the job has stateful subtask `(uid, subtask)`.
    pub fn has_subtask(&self, uid: &OperatorUid, subtask: SubtaskIndex) -> bool {
        self.parallelism.get(uid).is_some_and(|&p| subtask.0 < p)
    }

    /// A restart began `generation`: every owner is forgotten.
    pub fn next_generation(&mut self, generation: u64) {
        self.generation = generation;
        self.owners.clear();
    }

    /// The owners known in the current generation.
    pub fn owners(&self) -> &BTreeMap<(OperatorUid, SubtaskIndex), String> {
        &self.owners
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid() -> OperatorUid {
        OperatorUid::new("avg").expect("valid")
    }

    fn claim(generation: u64, subtask: u32, address: &str) -> OwnerClaim {
        OwnerClaim {
            generation,
            uid: uid(),
            subtask: SubtaskIndex(subtask),
            address: address.into(),
        }
    }

    fn owner(outcome: ClaimOutcome) -> (String, bool) {
        match outcome {
            ClaimOutcome::Owner(a) => (a.owner, a.granted),
            other => panic!("expected an owner, got {other:?}"),
        }
    }

    #[test]
    fn the_first_claim_of_a_generation_wins_and_later_ones_learn_it() {
        let mut r = OwnerRegistry::new(1, BTreeMap::from([(uid(), 2)]));
        assert_eq!(
            owner(r.claim(claim(1, 0, "10.0.0.1:7000"))),
            ("10.0.0.1:7000".into(), true)
        );
        assert_eq!(
            owner(r.claim(claim(1, 0, "10.0.0.2:7000"))),
            ("10.0.0.1:7000".into(), false)
        );
        assert_eq!(
            owner(r.claim(claim(1, 0, "10.0.0.1:7000"))),
            ("10.0.0.1:7000".into(), true),
            "the owner's own later tasks keep it"
        );
        assert_eq!(
            owner(r.claim(claim(1, 1, "10.0.0.2:7000"))),
            ("10.0.0.2:7000".into(), true)
        );
        assert_eq!(r.owners().len(), 2);
    }

    #[test]
    fn claims_of_other_generations_and_strangers_are_refused() {
        let mut r = OwnerRegistry::new(1, BTreeMap::from([(uid(), 2)]));
        r.claim(claim(1, 0, "a:1"));
        r.next_generation(2);
        assert!(r.owners().is_empty());
        assert_eq!(
            r.claim(claim(1, 0, "a:1")),
            ClaimOutcome::WrongGeneration { current: 2 }
        );
        assert_eq!(
            r.claim(claim(3, 0, "a:1")),
            ClaimOutcome::WrongGeneration { current: 2 }
        );
        assert_eq!(r.claim(claim(2, 2, "a:1")), ClaimOutcome::UnknownSubtask);
        let mut stranger = claim(2, 0, "a:1");
        stranger.uid = OperatorUid::new("other").expect("valid");
        assert_eq!(r.claim(stranger), ClaimOutcome::UnknownSubtask);
        for bad in ["", "a b:1", &"x".repeat(300)] {
            assert_eq!(
                r.claim(claim(2, 0, bad)),
                ClaimOutcome::BadAddress,
                "{bad:?}"
            );
        }
        assert_eq!(owner(r.claim(claim(2, 0, "b:2"))), ("b:2".into(), true));
    }
}
