//! Every state kind through `RemoteSession` against a real `weir-host`
//! process; the handshake; several clients at once; attach expectations.

mod host_support;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Int64Array};
use host_support::{Host, TOKEN, decoded, int, ints, keys, owned_ids, spec};
use weir_host::client::HostClient;
use weir_host::protocol::{
    Expectation, Frame, HostAddress, JobToken, PROTOCOL_VERSION, Reply, Request, WireError,
    WireErrorKind, decode_header, encode_header,
};
use weir_host::{
    Aggregation, BackendSpec, HostError, NativeAggregate, RemoteErrorKind, SubtaskSession,
};
use weir_state::{RedistributionMode, list_items, push_list_item};
use weir_types::{
    Attempt, CheckpointId, Epoch, StateDescriptor, StateKind, Value, ValueType, decode_value,
};

const BACKENDS: [BackendSpec; 2] = [BackendSpec::Heap, BackendSpec::RocksDb];

fn list_payload(items: &[i64]) -> Vec<u8> {
    let mut payload = Vec::new();
    for &i in items {
        push_list_item(&int(i), &mut payload);
    }
    payload
}

fn list_values(payload: &[u8]) -> Vec<i64> {
    list_items(payload)
        .map(|item| {
            match decode_value(item.expect("well-formed"), &ValueType::Int64).expect("decodes") {
                Value::Int64(v) => v,
                other => panic!("not an int64: {other}"),
            }
        })
        .collect()
}

#[test]
fn every_state_kind_round_trips_through_the_host() {
    let host = Host::start();
    for backend in BACKENDS {
        let uid = format!("all-{backend:?}").to_lowercase();
        let mut s = host
            .connect()
            .attach(spec(&uid, 0, 1, backend.clone()), Expectation::fresh())
            .expect("attaches");
        assert_eq!(s.key_group_range().len(), 128);
        let value = s
            .register_state(
                &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        let again = s
            .register_state(
                &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
            )
            .expect("idempotent");
        assert_eq!(value, again);
        let list = s
            .register_state(
                &StateDescriptor::new("recent", StateKind::List, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        let map = s
            .register_state(
                &StateDescriptor::map("by_item", ValueType::Int64, ValueType::Int64)
                    .expect("valid"),
            )
            .expect("registers");
        let sum = s
            .register_state(
                &StateDescriptor::new("sum", StateKind::Aggregating, ValueType::Int64)
                    .expect("valid"),
            )
            .expect("registers");
        let reducing = s
            .register_state(
                &StateDescriptor::new("max", StateKind::Reducing, ValueType::Int64).expect("valid"),
            )
            .expect("registers");
        let offsets = s
            .register_operator_state("offsets", RedistributionMode::Split)
            .expect("registers");

        s.begin(Epoch(1), Attempt(0), None).expect("begins");
        // Value state: binary and vectorized paths, clear by null and by clear().
        let batch = keys(&[1, 2, 3]);
        assert_eq!(
            decoded(&s.get_values(value, &batch).expect("reads")),
            [None, None, None]
        );
        s.put_values(value, &batch, &ints(&[Some(10), Some(20), Some(30)]))
            .expect("writes");
        s.put_values(value, &keys(&[1, 1]), &ints(&[Some(11), None]))
            .expect("writes");
        assert_eq!(
            decoded(&s.get_values(value, &batch).expect("reads")),
            [None, Some(20), Some(30)],
            "{backend:?}: later rows see earlier ones"
        );
        let vector: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), None, Some(9)]));
        s.put_batch(value, &batch, &vector)
            .expect("writes a vector");
        let read = s.get_batch(value, &batch).expect("reads a vector");
        assert_eq!(
            read.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![Some(7), None, Some(9)])
        );
        s.clear(value, &keys(&[3])).expect("clears");
        assert_eq!(
            decoded(&s.get_values(value, &batch).expect("reads")),
            [Some(7), None, None]
        );

        // List state.
        let two = keys(&[1, 2]);
        let payloads = arrow_array::BinaryArray::from(vec![
            Some(list_payload(&[1, 2]).as_slice()),
            Some(list_payload(&[5]).as_slice()),
        ]);
        s.append_lists(list, &two, &payloads).expect("appends");
        s.append_lists(
            list,
            &keys(&[1]),
            &arrow_array::BinaryArray::from(vec![Some(list_payload(&[3]).as_slice())]),
        )
        .expect("appends");
        let lists = s.get_lists(list, &keys(&[1, 2, 3])).expect("reads");
        assert_eq!(list_values(lists.value(0)), [1, 2, 3]);
        assert_eq!(list_values(lists.value(1)), [5]);
        assert!(lists.is_null(2));
        s.replace_lists(
            list,
            &keys(&[1]),
            &arrow_array::BinaryArray::from(vec![Some(list_payload(&[9]).as_slice())]),
        )
        .expect("replaces");
        assert_eq!(
            list_values(s.get_lists(list, &keys(&[1])).expect("reads").value(0)),
            [9]
        );

        // Map state.
        s.map_put(
            map,
            &keys(&[1, 1, 2]),
            &ints(&[Some(100), Some(101), Some(100)]),
            &ints(&[Some(1), Some(2), Some(3)]),
        )
        .expect("puts");
        assert_eq!(
            decoded(
                &s.map_get(
                    map,
                    &keys(&[1, 2, 2]),
                    &ints(&[Some(101), Some(100), Some(101)])
                )
                .expect("gets")
            ),
            [Some(2), Some(3), None]
        );
        s.map_put(map, &keys(&[1]), &ints(&[Some(100)]), &ints(&[None]))
            .expect("removes");
        let entries = s
            .map_entries(map, &keys(&[1, 2, 3]))
            .expect("lists entries");
        assert_eq!(entries.offsets, [0, 1, 2, 2]);
        assert_eq!(decoded(&entries.user_keys), [Some(101), Some(100)]);
        assert_eq!(decoded(&entries.values), [Some(2), Some(3)]);

        // Native aggregates, folded in the host.
        let inputs: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), Some(6), None, Some(1)]));
        let sums = s
            .aggregate(
                sum,
                &keys(&[1, 1, 1, 2]),
                &inputs,
                NativeAggregate::Sum.into(),
            )
            .expect("aggregates");
        assert_eq!(
            sums.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![Some(5), Some(11), Some(11), Some(1)])
        );
        let mean_state = s
            .register_state(
                &StateDescriptor::new(
                    "mean",
                    StateKind::Aggregating,
                    weir_host::engine::accumulator_type(NativeAggregate::Mean, &ValueType::Int64)
                        .expect("valid"),
                )
                .expect("valid"),
            )
            .expect("registers");
        let means = s
            .aggregate(
                mean_state,
                &keys(&[4, 4]),
                &inputs.slice(0, 2),
                NativeAggregate::Mean.into(),
            )
            .expect("aggregates");
        assert_eq!(
            means.as_primitive::<Float64Type>().values().to_vec(),
            [5.0, 5.5]
        );
        // ... also in count windows: the request carries the window's size.
        let pairs = Aggregation::parse("sum", Some(2)).expect("valid");
        let pair_state = s
            .register_state(
                &StateDescriptor::new(
                    "pairs",
                    StateKind::Value,
                    weir_host::engine::accumulator_type(pairs, &ValueType::Int64).expect("valid"),
                )
                .expect("valid"),
            )
            .expect("registers");
        let pair_sums = s
            .aggregate(pair_state, &keys(&[5, 5, 5, 6]), &inputs, pairs)
            .expect("aggregates");
        assert_eq!(
            pair_sums.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![None, Some(11), None, None])
        );

        // Reducing state takes value access.
        s.put_values(reducing, &keys(&[1]), &ints(&[Some(42)]))
            .expect("writes");
        assert_eq!(
            decoded(&s.get_values(reducing, &keys(&[1])).expect("reads")),
            [Some(42)]
        );

        // Operator state.
        assert!(s.operator_state(offsets).expect("reads").is_empty());
        s.set_operator_state(offsets, vec![b"p0:17".to_vec(), Vec::new()])
            .expect("sets");
        assert_eq!(
            s.operator_state(offsets).expect("reads"),
            [b"p0:17".to_vec(), Vec::new()]
        );
        s.commit(Epoch(1), Attempt(0)).expect("commits");

        // The state outlives the connection: the next epoch's task attaches
        // on a new connection and sees it.
        drop(s);
        let mut s = host
            .connect()
            .attach(
                spec(&uid, 0, 1, backend.clone()),
                Expectation {
                    generation: 0,
                    restored_from: None,
                    final_epoch: Some(Epoch(1)),
                },
            )
            .expect("attaches again");
        let value = s
            .register_state(
                &StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid"),
            )
            .expect("registered already");
        s.begin(Epoch(2), Attempt(0), Some(Epoch(1)))
            .expect("begins");
        assert_eq!(
            decoded(&s.get_values(value, &batch).expect("reads")),
            [Some(7), None, None]
        );
        // Errors of the engine keep their kind across the socket, and the
        // connection stays usable.
        let err = s.get_batch(list, &batch).expect_err("wrong kind");
        assert!(
            matches!(
                err,
                HostError::Remote {
                    kind: RemoteErrorKind::State,
                    ..
                }
            ),
            "{err}"
        );
        let err = s
            .put_values(value, &keys(&[1, 2]), &ints(&[Some(1)]))
            .expect_err("row count");
        assert!(!matches!(err, HostError::StateLost(_)), "{err}");
        assert_eq!(
            decoded(&s.get_values(value, &keys(&[1])).expect("reads")),
            [Some(7)]
        );
        s.commit(Epoch(2), Attempt(0)).expect("commits");
    }
}

#[test]
fn a_retried_attempt_on_another_connection_discards_the_failed_one() {
    let host = Host::start();
    let count = StateDescriptor::new("count", StateKind::Value, ValueType::Int64).expect("valid");
    let mut first = host
        .connect()
        .attach(spec("retry", 0, 1, BackendSpec::Heap), Expectation::fresh())
        .expect("attaches");
    let id = first.register_state(&count).expect("registers");
    first.begin(Epoch(1), Attempt(0), None).expect("begins");
    first
        .put_values(id, &keys(&[1]), &ints(&[Some(1)]))
        .expect("writes");
    // The task dies without committing; Spark retries on another worker.
    drop(first);
    let mut second = host
        .connect()
        .attach(spec("retry", 0, 1, BackendSpec::Heap), Expectation::fresh())
        .expect("attaches");
    let id = second.register_state(&count).expect("registers");
    second.begin(Epoch(1), Attempt(1), None).expect("begins");
    assert_eq!(
        decoded(&second.get_values(id, &keys(&[1])).expect("reads")),
        [None]
    );
    second.commit(Epoch(1), Attempt(1)).expect("commits");
}

#[test]
fn a_wrong_token_is_refused() {
    let host = Host::start();
    let err = HostClient::connect(&HostAddress::of_dir(host.path()), "not-the-token")
        .expect_err("refused");
    assert!(matches!(err, HostError::Unauthorized), "{err}");
    let err = HostClient::connect(&HostAddress::of_dir(host.path()), "").expect_err("refused");
    assert!(matches!(err, HostError::Unauthorized), "{err}");
    // The right token still gets in.
    HostClient::connect(&HostAddress::of_dir(host.path()), TOKEN).expect("connects");
}

#[test]
fn a_host_without_the_expected_state_answers_state_lost() {
    let host = Host::start();
    let s = spec("lost", 0, 1, BackendSpec::Heap);
    for expect in [
        Expectation {
            generation: 0,
            restored_from: None,
            final_epoch: Some(Epoch(3)),
        },
        Expectation {
            generation: 0,
            restored_from: Some(CheckpointId(2)),
            final_epoch: Some(Epoch(5)),
        },
    ] {
        let err = host
            .connect()
            .attach(s.clone(), expect)
            .expect_err("not held");
        assert!(matches!(err, HostError::StateLost(_)), "{err}");
    }
    // The host created nothing for those attaches; a fresh start works.
    let mut session = host
        .connect()
        .attach(s.clone(), Expectation::fresh())
        .expect("fresh");
    session.begin(Epoch(1), Attempt(0), None).expect("begins");
    session.commit(Epoch(1), Attempt(0)).expect("commits");
    drop(session);
    // Epoch 2 ran elsewhere: a task that says 2 is final must not get state at 1.
    let err = host
        .connect()
        .attach(
            s.clone(),
            Expectation {
                generation: 0,
                restored_from: None,
                final_epoch: Some(Epoch(2)),
            },
        )
        .expect_err("epoch 2 never committed here");
    assert!(matches!(err, HostError::StateLost(_)), "{err}");
    let mut status_client = host.connect();
    let status = status_client.status().expect("status");
    assert_eq!(status.subtasks.len(), 1);
    assert_eq!(status.subtasks[0].last_committed, Some(Epoch(1)));
}

/// Sends raw frames: what a client that skips steps gets.
fn raw_call(stream: &mut std::os::unix::net::UnixStream, request: &Request) -> Reply {
    Frame {
        header: encode_header(request).expect("encodes"),
        payloads: Vec::new(),
    }
    .write_to(stream)
    .expect("writes");
    let frame = Frame::read_from(stream).expect("reads").expect("a reply");
    decode_header(&frame.header).expect("a reply header")
}

#[test]
fn the_protocol_refuses_out_of_order_and_foreign_requests() {
    let host = Host::start();
    let socket = weir_host::protocol::HostDir::new(host.path()).socket();
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connects");
    let reply = raw_call(&mut stream, &Request::Status);
    assert!(
        matches!(
            reply,
            Reply::Error(WireError {
                kind: WireErrorKind::Protocol,
                ..
            })
        ),
        "{reply:?}"
    );
    assert!(
        Frame::read_from(&mut stream)
            .expect("clean close")
            .is_none(),
        "closed after"
    );

    let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connects");
    let reply = raw_call(
        &mut stream,
        &Request::Hello {
            version: PROTOCOL_VERSION + 1,
            token: JobToken::new(TOKEN),
        },
    );
    assert!(
        matches!(
            reply,
            Reply::Error(WireError {
                kind: WireErrorKind::Protocol,
                ..
            })
        ),
        "{reply:?}"
    );

    let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connects");
    let reply = raw_call(
        &mut stream,
        &Request::Hello {
            version: PROTOCOL_VERSION,
            token: JobToken::new(TOKEN),
        },
    );
    assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    let reply = raw_call(
        &mut stream,
        &Request::Commit {
            epoch: Epoch(1),
            attempt: Attempt(0),
        },
    );
    assert!(
        matches!(
            reply,
            Reply::Error(WireError {
                kind: WireErrorKind::InvalidRequest,
                ..
            })
        ),
        "state before attach: {reply:?}"
    );
    // The connection survives a refused request.
    assert!(matches!(
        raw_call(&mut stream, &Request::Status),
        Reply::Status(_)
    ));
}

#[test]
fn two_clients_serve_different_subtasks_at_once() {
    let host = Host::start();
    let path = host.path();
    let workers: Vec<_> = (0..2u32)
        .map(|subtask| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut s = HostClient::connect(&HostAddress::of_dir(&path), TOKEN)
                    .expect("connects")
                    .attach(
                        spec("pair", subtask, 2, BackendSpec::RocksDb),
                        Expectation::fresh(),
                    )
                    .expect("attaches");
                let count = s
                    .register_state(
                        &StateDescriptor::new("count", StateKind::Value, ValueType::Int64)
                            .expect("valid"),
                    )
                    .expect("registers");
                let ids = owned_ids(subtask, 2, 400);
                let batch = keys(&ids);
                for epoch in 1..=20u64 {
                    let final_epoch = (epoch > 1).then(|| Epoch(epoch - 1));
                    s.begin(Epoch(epoch), Attempt(0), final_epoch)
                        .expect("begins");
                    let current = decoded(&s.get_values(count, &batch).expect("reads"));
                    let next: Vec<Option<i64>> = current
                        .iter()
                        .map(|v| Some(v.unwrap_or(0) + i64::from(subtask) + 1))
                        .collect();
                    s.put_values(count, &batch, &ints(&next)).expect("writes");
                    s.commit(Epoch(epoch), Attempt(0)).expect("commits");
                }
                let totals = decoded(&s.get_values(count, &batch).expect("reads"));
                assert!(
                    totals
                        .iter()
                        .all(|v| *v == Some(20 * (i64::from(subtask) + 1))),
                    "{totals:?}"
                );
                // A key of the other subtask is refused, not silently stored.
                let other = owned_ids(1 - subtask, 2, 400);
                let err = s
                    .get_values(count, &keys(&other[..1]))
                    .expect_err("not this subtask's key");
                assert!(!matches!(err, HostError::StateLost(_)), "{err}");
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker succeeded");
    }
    let status = host.connect().status().expect("status");
    assert_eq!(status.subtasks.len(), 2);
    assert!(
        status
            .subtasks
            .iter()
            .all(|s| s.last_committed == Some(Epoch(20)))
    );
    assert!(
        status.subtasks.iter().all(|s| s.local_bytes > 0),
        "RocksDB files: {status:?}"
    );
}
