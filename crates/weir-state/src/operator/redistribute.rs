//! Rescaling operator state: from the snapshots of `P` old subtasks to the
//! initial state of `P'` new ones, per each state's [`RedistributionMode`].
//!
//! Pure: snapshots in, snapshots out. Like Flink's
//! `RoundRobinOperatorStateRepartitioner`, minus its rotation of where the
//! remainder of a split lands (here the first subtasks take one more item).

use std::collections::BTreeMap;

use weir_types::TypesError;

use crate::error::{Result, StateError};
use crate::operator::snapshot::{OperatorListSnapshot, OperatorStateSnapshot, RedistributionMode};

/// The largest parallelism Weir supports (Flink's bound on max parallelism).
const MAX_PARALLELISM: u32 = 32_768;

/// Spreads the states of `old` (indexed by old subtask) over
/// `new_parallelism` subtasks:
/// - `Split`: items of all old subtasks, concatenated in subtask order, cut
///   into `new_parallelism` contiguous chunks whose sizes differ by at most
///   one (earlier subtasks get the larger ones);
/// - `Union`: every new subtask gets the concatenation;
/// - `Broadcast`: every new subtask gets the copy of the first old subtask
///   holding the state.
///
/// Every new subtask lists every state, with no items if it gets none, so
/// the state stays registered with its mode. A state name with different
/// modes in different old subtasks is an error.
pub fn redistribute(
    old: &[OperatorStateSnapshot],
    new_parallelism: u32,
) -> Result<Vec<OperatorStateSnapshot>> {
    if !(1..=MAX_PARALLELISM).contains(&new_parallelism) {
        return Err(TypesError::InvalidParallelism {
            got: new_parallelism,
            max: MAX_PARALLELISM,
        }
        .into());
    }
    let p = new_parallelism as usize;
    let mut out = vec![OperatorStateSnapshot::default(); p];
    for (name, (mode, parts)) in collect(old)? {
        let shares: Vec<Vec<Vec<u8>>> = match mode {
            RedistributionMode::Split => split(parts.into_iter().flatten().cloned().collect(), p),
            RedistributionMode::Union => {
                let all: Vec<Vec<u8>> = parts.into_iter().flatten().cloned().collect();
                vec![all; p]
            }
            RedistributionMode::Broadcast => {
                let first = parts
                    .first()
                    .map(|items| items.to_vec())
                    .unwrap_or_default();
                vec![first; p]
            }
        };
        // `collect` yields names in order, so every output stays sorted.
        for (snapshot, items) in out.iter_mut().zip(shares) {
            snapshot.states.push(OperatorListSnapshot {
                name: name.to_owned(),
                mode,
                items,
            });
        }
    }
    Ok(out)
}

/// The states of all old subtasks by name: their mode and each subtask's
/// items, in subtask order.
type Collected<'a> = BTreeMap<&'a str, (RedistributionMode, Vec<&'a [Vec<u8>]>)>;

fn collect(old: &[OperatorStateSnapshot]) -> Result<Collected<'_>> {
    let mut by_name = Collected::new();
    for snapshot in old {
        for state in &snapshot.states {
            let (mode, parts) = by_name
                .entry(state.name.as_str())
                .or_insert((state.mode, Vec::new()));
            if *mode != state.mode {
                return Err(StateError::OperatorStateMode {
                    name: state.name.clone(),
                    existing: mode.as_str(),
                });
            }
            parts.push(&state.items);
        }
    }
    Ok(by_name)
}

/// Cuts `items` into `p` contiguous chunks, the first `len % p` one longer.
fn split(items: Vec<Vec<u8>>, p: usize) -> Vec<Vec<Vec<u8>>> {
    let (base, extra) = (items.len() / p, items.len() % p);
    let mut rest = items.into_iter();
    (0..p)
        .map(|i| rest.by_ref().take(base + usize::from(i < extra)).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, mode: RedistributionMode, items: &[&str]) -> OperatorListSnapshot {
        OperatorListSnapshot {
            name: name.into(),
            mode,
            items: items.iter().map(|i| i.as_bytes().to_vec()).collect(),
        }
    }

    fn items<'a>(s: &'a OperatorStateSnapshot, name: &str) -> Vec<&'a str> {
        s.get(name)
            .expect("every new subtask lists every state")
            .items
            .iter()
            .map(|i| std::str::from_utf8(i).expect("test items are text"))
            .collect()
    }

    fn old_split(parts: &[&[&str]]) -> Vec<OperatorStateSnapshot> {
        parts
            .iter()
            .map(|p| OperatorStateSnapshot {
                states: vec![state("offsets", RedistributionMode::Split, p)],
            })
            .collect()
    }

    #[test]
    fn split_scales_up_into_even_contiguous_chunks() {
        let old = old_split(&[&["a", "b", "c"], &["d", "e"]]);
        let new = redistribute(&old, 3).expect("redistributes");
        let got: Vec<_> = new.iter().map(|s| items(s, "offsets")).collect();
        assert_eq!(got, vec![vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
    }

    #[test]
    fn split_scales_down_and_keeps_every_item_once() {
        let old = old_split(&[&["a"], &["b", "c"], &[], &["d", "e", "f", "g"]]);
        let new = redistribute(&old, 2).expect("redistributes");
        let got: Vec<_> = new.iter().map(|s| items(s, "offsets")).collect();
        assert_eq!(got, vec![vec!["a", "b", "c", "d"], vec!["e", "f", "g"]]);
    }

    #[test]
    fn split_with_fewer_items_than_subtasks_leaves_some_empty() {
        let old = old_split(&[&["a"], &["b"]]);
        let new = redistribute(&old, 4).expect("redistributes");
        let got: Vec<_> = new.iter().map(|s| items(s, "offsets")).collect();
        let empty: Vec<&str> = Vec::new();
        assert_eq!(got, vec![vec!["a"], vec!["b"], empty.clone(), empty]);
    }

    #[test]
    fn same_parallelism_split_is_identity_for_even_state() {
        let old = old_split(&[&["a", "b"], &["c", "d"]]);
        assert_eq!(redistribute(&old, 2).expect("redistributes"), old);
    }

    #[test]
    fn union_gives_everything_to_every_subtask() {
        let old: Vec<_> = [&["a"][..], &["b", "c"], &[]]
            .iter()
            .map(|p| OperatorStateSnapshot {
                states: vec![state("seen", RedistributionMode::Union, p)],
            })
            .collect();
        for p in [1, 2, 3, 5] {
            let new = redistribute(&old, p).expect("redistributes");
            assert_eq!(new.len(), p as usize);
            assert!(new.iter().all(|s| items(s, "seen") == ["a", "b", "c"]));
        }
    }

    #[test]
    fn broadcast_gives_one_copy_to_every_subtask() {
        let copy = ["r1", "r2"];
        let old: Vec<_> = (0..3)
            .map(|_| OperatorStateSnapshot {
                states: vec![state("rules", RedistributionMode::Broadcast, &copy)],
            })
            .collect();
        for p in [1, 3, 6] {
            let new = redistribute(&old, p).expect("redistributes");
            assert!(new.iter().all(|s| items(s, "rules") == copy));
        }
    }

    #[test]
    fn states_of_all_modes_together_and_partial_presence() {
        let old = vec![
            OperatorStateSnapshot {
                states: vec![
                    state("a", RedistributionMode::Split, &["1", "2"]),
                    state("b", RedistributionMode::Broadcast, &["x"]),
                ],
            },
            OperatorStateSnapshot {
                states: vec![state("c", RedistributionMode::Union, &["u"])],
            },
        ];
        let new = redistribute(&old, 3).expect("redistributes");
        for s in &new {
            let names: Vec<_> = s.states.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["a", "b", "c"]);
            assert_eq!(items(s, "b"), ["x"]);
            assert_eq!(items(s, "c"), ["u"]);
        }
        assert_eq!(items(&new[0], "a"), ["1"]);
        assert_eq!(items(&new[1], "a"), ["2"]);
        assert!(items(&new[2], "a").is_empty());
        let decoded: Vec<_> = new
            .iter()
            .map(|s| OperatorStateSnapshot::decode(&s.encode()).expect("sorted output decodes"))
            .collect();
        assert_eq!(decoded, new);
    }

    #[test]
    fn errors_on_mode_conflict_and_bad_parallelism() {
        let old = vec![
            OperatorStateSnapshot {
                states: vec![state("a", RedistributionMode::Split, &["1"])],
            },
            OperatorStateSnapshot {
                states: vec![state("a", RedistributionMode::Union, &["2"])],
            },
        ];
        assert!(matches!(
            redistribute(&old, 2),
            Err(StateError::OperatorStateMode {
                existing: "split",
                ..
            })
        ));
        assert!(matches!(
            redistribute(&[], 0),
            Err(StateError::Types(TypesError::InvalidParallelism {
                got: 0,
                ..
            }))
        ));
        let none = redistribute(&[], 2).expect("no old state");
        assert_eq!(none, vec![OperatorStateSnapshot::default(); 2]);
    }
}
