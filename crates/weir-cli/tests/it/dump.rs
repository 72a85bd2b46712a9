//! `savepoint dump`: decoded keys, values, lists and map entries.

use serde_json::json;

use crate::common::{KEYS, assert_one_line_error, fixture, path, weir};

fn dump(args: &[&str]) -> serde_json::Value {
    let run = weir(args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(&run.stdout).expect("valid JSON")
}

#[test]
fn dump_decodes_every_kind_of_state() {
    let f = fixture();
    let v = dump(&["savepoint", "dump", "--json", path(&f.savepoint)]);
    let entries = v["entries"].as_array().expect("entries");
    assert_eq!(
        entries.len(),
        KEYS + 1 + 2,
        "counts plus alice's list and map entry"
    );
    assert_eq!(v["truncated"], false);
    let alice: Vec<_> = entries.iter().filter(|e| e["key"] == "\"alice\"").collect();
    let by_state = |s: &str| {
        alice
            .iter()
            .find(|e| e["state"] == s)
            .unwrap_or_else(|| panic!("no {s} entry for alice"))
    };
    assert_eq!(by_state("count")["value"], 42);
    assert_eq!(by_state("count")["key_columns"], json!(["alice"]));
    assert_eq!(by_state("seen")["value"], json!(["x", "y"]));
    assert_eq!(by_state("by_day")["user_key"], "mon");
    assert_eq!(by_state("by_day")["value"], 3);
    assert!(entries.iter().all(|e| e.get("decode_error").is_none()));
}

#[test]
fn dump_filters_by_key_state_and_uid_and_limits() {
    let f = fixture();
    let v = dump(&[
        "savepoint",
        "dump",
        "--json",
        "--key",
        "alice",
        "--state",
        "count",
        path(&f.savepoint),
    ]);
    assert_eq!(v["entries"].as_array().expect("entries").len(), 1);
    assert_eq!(v["entries"][0]["value"], 42);

    let v = dump(&[
        "savepoint",
        "dump",
        "--json",
        "--key",
        "\"user-7\"",
        "--uid",
        "counts",
        path(&f.savepoint),
    ]);
    assert_eq!(v["entries"][0]["value"], 7);

    let v = dump(&[
        "savepoint",
        "dump",
        "--json",
        "--limit",
        "3",
        path(&f.savepoint),
    ]);
    assert_eq!(v["entries"].as_array().expect("entries").len(), 3);
    assert_eq!(v["truncated"], true);

    let run = weir(&["savepoint", "dump", "--key", "alice", path(&f.savepoint)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("[\"x\", \"y\"]"), "{}", run.stdout);
    assert!(run.stdout.contains("\"mon\""), "{}", run.stdout);
    assert!(run.stdout.contains("3 entries"), "{}", run.stdout);
}

#[test]
fn dump_names_what_exists_when_a_filter_matches_nothing() {
    let f = fixture();
    let run = weir(&["savepoint", "dump", "--uid", "nope", path(&f.savepoint)]);
    assert_one_line_error(&run, "operators: counts");
    let run = weir(&["savepoint", "dump", "--state", "nope", path(&f.savepoint)]);
    assert_one_line_error(&run, "counts/count");
}
