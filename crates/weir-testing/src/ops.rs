//! Random operation sequences over keyed state, and a runner that applies
//! them to several backends at once and requires identical answers.

use proptest::prelude::*;
use weir_state::{KeyedStateBackend, StateError, StateId, StateKey, ValueUpdate, push_list_item};
use weir_types::{
    Attempt, Epoch, MaxParallelism, StateDescriptor, StateKind, Value, ValueType, encode_key,
    encode_value, key_group_of,
};

use crate::model::{Dump, dump};

/// The states every sequence uses, in registration order.
pub fn descriptors() -> Vec<StateDescriptor> {
    let d = |name: &str, kind| {
        StateDescriptor::new(name, kind, ValueType::Int64).expect("valid test descriptor")
    };
    vec![
        d("count", StateKind::Value),
        d("sum", StateKind::Reducing),
        d("events", StateKind::List),
        StateDescriptor::map("by_tag", ValueType::Utf8, ValueType::Int64)
            .expect("valid test descriptor"),
    ]
}

const VALUE_STATES: [u32; 2] = [0, 1];
const LIST_STATE: StateId = StateId(2);
const MAP_STATE: StateId = StateId(3);

/// One step of a sequence. Keys, namespaces and user keys come from small
/// universes so that operations collide.
#[derive(Debug, Clone)]
#[expect(
    missing_docs,
    reason = "fields are the arguments of the backend call each variant names"
)]
pub enum Op {
    /// `put_value` on value state `state % 2`.
    Put {
        state: u8,
        key: u8,
        ns: u8,
        value: i64,
    },
    /// `get_value`.
    Get { state: u8, key: u8, ns: u8 },
    /// `update_value` on value state `state % 2`: sets a value derived from
    /// the current one for `delta > 0`, keeps it for 0, removes it below 0,
    /// and fails (changing nothing) for `i8::MIN`.
    Update {
        state: u8,
        key: u8,
        ns: u8,
        delta: i8,
    },
    /// `clear` on any of the states.
    Clear { state: u8, key: u8, ns: u8 },
    /// `append_list`.
    Append { key: u8, ns: u8, items: Vec<i64> },
    /// `replace_list` (empty clears).
    Replace { key: u8, ns: u8, items: Vec<i64> },
    /// `get_list`.
    GetList { key: u8, ns: u8 },
    /// `map_put`.
    MapPut {
        key: u8,
        ns: u8,
        user_key: u8,
        value: i64,
    },
    /// `map_remove`.
    MapRemove { key: u8, ns: u8, user_key: u8 },
    /// `map_get`.
    MapGet { key: u8, ns: u8, user_key: u8 },
    /// `map_for_each`, compared as a sorted list.
    MapIter { key: u8, ns: u8 },
    /// Commit the open epoch and begin the next one.
    NextEpoch,
    /// Begin the open (or last) epoch again with a new attempt.
    Retry,
    /// Finalize every committed epoch.
    Finalize,
    /// Discard the open epoch's writes.
    Discard,
    /// Begin the epoch after the open one without committing it (must fail).
    SkipAhead,
    /// Commit the open epoch's attempt twice (the second is harmless), then
    /// begin the next epoch.
    CommitTwice,
    /// Commit and finalize everything, then compare full snapshots.
    Snapshot,
}

fn small_key() -> impl Strategy<Value = u8> {
    0u8..24
}

/// A strategy for one operation.
pub fn op() -> impl Strategy<Value = Op> {
    let ns = 0u8..2;
    let items = proptest::collection::vec(-5i64..5, 0..4);
    prop_oneof![
        6 => (0u8..2, small_key(), ns.clone(), any::<i64>())
            .prop_map(|(state, key, ns, value)| Op::Put { state, key, ns, value }),
        4 => (0u8..2, small_key(), ns.clone()).prop_map(|(state, key, ns)| Op::Get { state, key, ns }),
        3 => (0u8..2, small_key(), ns.clone(), prop_oneof![Just(i8::MIN), -3i8..4])
            .prop_map(|(state, key, ns, delta)| Op::Update { state, key, ns, delta }),
        2 => (0u8..4, small_key(), ns.clone()).prop_map(|(state, key, ns)| Op::Clear { state, key, ns }),
        3 => (small_key(), ns.clone(), items.clone()).prop_map(|(key, ns, items)| Op::Append { key, ns, items }),
        1 => (small_key(), ns.clone(), items).prop_map(|(key, ns, items)| Op::Replace { key, ns, items }),
        2 => (small_key(), ns.clone()).prop_map(|(key, ns)| Op::GetList { key, ns }),
        3 => (small_key(), ns.clone(), 0u8..4, any::<i64>())
            .prop_map(|(key, ns, user_key, value)| Op::MapPut { key, ns, user_key, value }),
        1 => (small_key(), ns.clone(), 0u8..4).prop_map(|(key, ns, user_key)| Op::MapRemove { key, ns, user_key }),
        2 => (small_key(), ns.clone(), 0u8..4).prop_map(|(key, ns, user_key)| Op::MapGet { key, ns, user_key }),
        1 => (small_key(), ns).prop_map(|(key, ns)| Op::MapIter { key, ns }),
        2 => Just(Op::NextEpoch),
        1 => Just(Op::Retry),
        1 => Just(Op::Finalize),
        1 => Just(Op::Discard),
        1 => Just(Op::SkipAhead),
        1 => Just(Op::CommitTwice),
        1 => Just(Op::Snapshot),
    ]
}

/// Encoded key columns of a small key, with its key group.
pub fn key_bytes(key: u8, max: MaxParallelism) -> (weir_types::KeyGroup, Vec<u8>) {
    let cols = [Value::Int64(i64::from(key) * 7919)];
    let mut out = Vec::new();
    encode_key(&cols, &[ValueType::Int64], &mut out).expect("int64 key encodes");
    (key_group_of(&cols, max), out)
}

/// The value state an operation's `state` picks.
fn value_state(state: u8) -> StateId {
    StateId(VALUE_STATES[usize::from(state % 2)])
}

fn int(v: i64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&Value::Int64(v), &ValueType::Int64, &mut out).expect("int64 encodes");
    out
}

fn tag(user_key: u8) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(
        &Value::Utf8(format!("tag{user_key}")),
        &ValueType::Utf8,
        &mut out,
    )
    .expect("utf8 encodes");
    out
}

fn list_payload(items: &[i64]) -> Vec<u8> {
    let mut p = Vec::new();
    for &i in items {
        push_list_item(&int(i), &mut p);
    }
    p
}

/// An owned [`StateKey`].
struct Address {
    key_group: weir_types::KeyGroup,
    key: Vec<u8>,
    namespace: [u8; 1],
}

impl Address {
    fn key(&self) -> StateKey<'_> {
        StateKey {
            key_group: self.key_group,
            key: &self.key,
            namespace: &self.namespace,
        }
    }
}

/// What an operation returned, in a form backends can be compared by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The operation failed (the error variant is not compared).
    Failed,
    /// A write or epoch step succeeded.
    Done,
    /// A read returned this.
    Read(Option<Vec<u8>>),
    /// A map iteration returned these entries (sorted).
    Entries(Vec<(Vec<u8>, Vec<u8>)>),
    /// Full snapshots, by state name.
    Snapshot(Dump),
}

/// Drives one backend through a sequence, tracking epochs the way the host
/// does (so most sequences are valid and the invalid ones are deliberate).
pub struct Driver {
    max: MaxParallelism,
    /// The epoch writes go to now, and its attempt.
    open: Option<(Epoch, Attempt)>,
    /// The newest epoch begun.
    newest: Epoch,
    /// Epochs committed but not final.
    committed: Option<Epoch>,
}

impl Driver {
    /// A driver for a fresh backend: registers the states and opens epoch 1.
    pub fn start(backend: &mut dyn KeyedStateBackend) -> Self {
        for d in descriptors() {
            backend.register_state(&d).expect("test states register");
        }
        backend
            .begin_epoch(Epoch(1), Attempt(0))
            .expect("first epoch begins");
        Self {
            max: backend.max_parallelism(),
            open: Some((Epoch(1), Attempt(0))),
            newest: Epoch(1),
            committed: None,
        }
    }

    fn addr(&self, key: u8, ns: u8) -> Address {
        let (key_group, key) = key_bytes(key, self.max);
        Address {
            key_group,
            key,
            namespace: [ns],
        }
    }

    fn commit_open(&mut self, b: &mut dyn KeyedStateBackend) -> Outcome {
        if let Some((e, a)) = self.open.take() {
            if b.commit_epoch(e, a).is_err() {
                return Outcome::Failed;
            }
            self.committed = Some(e);
        }
        Outcome::Done
    }

    /// Applies `op` and reports what happened.
    pub fn apply(&mut self, b: &mut dyn KeyedStateBackend, op: &Op) -> Outcome {
        fn read(r: weir_state::Result<Option<std::borrow::Cow<'_, [u8]>>>) -> Outcome {
            match r {
                Ok(v) => Outcome::Read(v.map(|c| c.into_owned())),
                Err(_) => Outcome::Failed,
            }
        }
        fn done(r: weir_state::Result<()>) -> Outcome {
            if r.is_ok() {
                Outcome::Done
            } else {
                Outcome::Failed
            }
        }
        match op {
            Op::Put {
                state,
                key,
                ns,
                value,
            } => {
                let at = self.addr(*key, *ns);
                let s = value_state(*state);
                done(b.put_value(s, at.key(), &int(*value)))
            }
            Op::Get { state, key, ns } => {
                let at = self.addr(*key, *ns);
                let s = value_state(*state);
                read(b.get_value(s, at.key()))
            }
            Op::Update {
                state,
                key,
                ns,
                delta,
            } => {
                let at = self.addr(*key, *ns);
                let s = value_state(*state);
                let mut seen = None;
                let mut buffer = Vec::new();
                let r = b.update_value(s, at.key(), &mut buffer, &mut |current, out| {
                    seen = current.map(<[u8]>::to_vec);
                    match *delta {
                        i8::MIN => Err(StateError::Corrupt {
                            what: "refused by the test",
                        }),
                        0 => Ok(ValueUpdate::Keep),
                        negative if negative < 0 => Ok(ValueUpdate::Remove),
                        _ => {
                            let grown = current.map_or(0, |c| c.len() as i64 * 100);
                            out.extend_from_slice(&int(grown + i64::from(*delta)));
                            Ok(ValueUpdate::Set)
                        }
                    }
                });
                match r {
                    Ok(()) => Outcome::Read(seen),
                    Err(_) => Outcome::Failed,
                }
            }
            Op::Clear { state, key, ns } => {
                let at = self.addr(*key, *ns);
                done(b.clear(StateId(u32::from(*state % 4)), at.key()))
            }
            Op::Append { key, ns, items } => {
                let at = self.addr(*key, *ns);
                done(b.append_list(LIST_STATE, at.key(), &list_payload(items)))
            }
            Op::Replace { key, ns, items } => {
                let at = self.addr(*key, *ns);
                done(b.replace_list(LIST_STATE, at.key(), &list_payload(items)))
            }
            Op::GetList { key, ns } => {
                let at = self.addr(*key, *ns);
                read(b.get_list(LIST_STATE, at.key()))
            }
            Op::MapPut {
                key,
                ns,
                user_key,
                value,
            } => {
                let at = self.addr(*key, *ns);
                done(b.map_put(MAP_STATE, at.key(), &tag(*user_key), &int(*value)))
            }
            Op::MapRemove { key, ns, user_key } => {
                let at = self.addr(*key, *ns);
                done(b.map_remove(MAP_STATE, at.key(), &tag(*user_key)))
            }
            Op::MapGet { key, ns, user_key } => {
                let at = self.addr(*key, *ns);
                read(b.map_get(MAP_STATE, at.key(), &tag(*user_key)))
            }
            Op::MapIter { key, ns } => {
                let at = self.addr(*key, *ns);
                let mut entries = Vec::new();
                let r = b.map_for_each(MAP_STATE, at.key(), &mut |uk, v| {
                    entries.push((uk.to_vec(), v.to_vec()));
                });
                entries.sort();
                if r.is_ok() {
                    Outcome::Entries(entries)
                } else {
                    Outcome::Failed
                }
            }
            Op::NextEpoch => {
                if self.commit_open(b) == Outcome::Failed {
                    return Outcome::Failed;
                }
                let next = Epoch(self.newest.0 + 1);
                self.newest = next;
                self.open = Some((next, Attempt(0)));
                done(b.begin_epoch(next, Attempt(0)))
            }
            Op::Retry => {
                let (epoch, attempt) = self.open.map_or((self.newest, Attempt(0)), |(e, a)| (e, a));
                let attempt = Attempt(attempt.0 + 1);
                self.open = Some((epoch, attempt));
                if self.committed == Some(epoch) {
                    self.committed = None;
                }
                done(b.begin_epoch(epoch, attempt))
            }
            Op::Finalize => match self.committed.take() {
                Some(e) => done(b.finalize_up_to(e)),
                None => Outcome::Done,
            },
            Op::SkipAhead => match self.open {
                Some((e, a)) => done(b.begin_epoch(Epoch(e.0 + 1), a)),
                None => Outcome::Done,
            },
            Op::CommitTwice => {
                let Some((e, a)) = self.open else {
                    return Outcome::Done;
                };
                if b.commit_epoch(e, a).is_err() {
                    return Outcome::Failed;
                }
                self.apply(b, &Op::NextEpoch)
            }
            Op::Discard => match self.open.take() {
                Some((e, _)) => done(b.discard_from(e)),
                None => Outcome::Done,
            },
            Op::Snapshot => {
                if self.commit_open(b) == Outcome::Failed {
                    return Outcome::Failed;
                }
                if b.finalize_up_to(self.newest).is_err() {
                    return Outcome::Failed;
                }
                self.committed = None;
                let out = match b.snapshot_sync().and_then(|f| dump(f.as_ref())) {
                    Ok(d) => Outcome::Snapshot(d),
                    Err(_) => Outcome::Failed,
                };
                let next = Epoch(self.newest.0 + 1);
                self.newest = next;
                self.open = Some((next, Attempt(0)));
                if b.begin_epoch(next, Attempt(0)).is_err() {
                    return Outcome::Failed;
                }
                out
            }
        }
    }
}

/// Runs `ops` on every backend and panics with the first step at which their
/// outcomes differ. Returns the outcomes of the first backend.
pub fn run_and_compare(backends: &mut [&mut dyn KeyedStateBackend], ops: &[Op]) -> Vec<Outcome> {
    let mut drivers: Vec<Driver> = backends
        .iter_mut()
        .map(|b| Driver::start(&mut **b))
        .collect();
    let mut outcomes = Vec::with_capacity(ops.len());
    for (step, op) in ops.iter().enumerate() {
        let results: Vec<Outcome> = backends
            .iter_mut()
            .zip(&mut drivers)
            .map(|(b, d)| d.apply(&mut **b, op))
            .collect();
        for (i, r) in results.iter().enumerate().skip(1) {
            assert_eq!(
                &results[0], r,
                "backend {i} differs from backend 0 at step {step}: {op:?}"
            );
        }
        outcomes.push(results.into_iter().next().expect("at least one backend"));
    }
    outcomes
}
