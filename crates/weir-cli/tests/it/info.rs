//! `savepoint info` and `checkpoint info`.

use crate::common::{JOB, Placement, UID, build, fixture, path, weir};

#[test]
fn savepoint_info_shows_job_operator_states_and_subtasks() {
    let f = fixture();
    let run = weir(&["savepoint", "info", path(&f.savepoint)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = &run.stdout;
    for needle in [
        "savepoint",
        JOB,
        "2026-11-22T05:00:00.000Z",
        "cut epoch",
        "17",
        "kafka-in",
        "{\"offset\":1234}",
        "operator counts: parallelism 2, max parallelism 16, key types [string]",
        "by_day",
        "map",
        "0..8",
        "8..16",
        "full",
        "chk-3/counts/0/keyed",
        "chk-3/counts/0/operator",
        "33 entries",
    ] {
        assert!(out.contains(needle), "{needle:?} missing from\n{out}");
    }
}

#[test]
fn info_json_parses_and_adds_up() {
    let f = fixture();
    let run = weir(&["savepoint", "info", "--json", path(&f.savepoint)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    assert_eq!(v["kind"], "savepoint");
    assert_eq!(v["checkpoint_id"], 3);
    assert_eq!(v["job_id"], JOB);
    let op = &v["operators"][0];
    assert_eq!(op["uid"], UID);
    assert_eq!(op["key_types"], serde_json::json!(["string"]));
    assert_eq!(op["states"][2]["user_key_type"], "string");
    assert_eq!(op["subtasks"].as_array().expect("array").len(), 2);
    assert_eq!(v["totals"]["entries"], 33);
    assert_eq!(v["totals"]["files"], 3);
    let sizes: u64 = op["subtasks"]
        .as_array()
        .expect("array")
        .iter()
        .flat_map(|s| s["files"].as_array().expect("files").clone())
        .map(|f| f["size"].as_u64().expect("size"))
        .sum();
    assert_eq!(v["totals"]["bytes"].as_u64(), Some(sizes));
}

#[test]
fn checkpoint_info_opens_a_checkpoint_its_metadata_and_its_job_dir() {
    let f = fixture();
    let metadata = f.chk_dir.join("_metadata");
    for target in [&f.chk_dir, &metadata, &f.job_dir] {
        let run = weir(&["checkpoint", "info", "--json", path(target)]);
        assert_eq!(run.code, 0, "{target:?}: {}", run.stderr);
        let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
        assert_eq!(v["kind"], "checkpoint");
        assert_eq!(v["checkpoint_id"], 3);
    }
}

#[test]
fn inline_state_is_shown_verified_and_dumped() {
    let f = build(Placement::Inline);
    let run = weir(&["checkpoint", "info", path(&f.chk_dir)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("chk-3/counts/0/keyed (inline)"),
        "{}",
        run.stdout
    );
    let run = weir(&["savepoint", "verify", path(&f.chk_dir)]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = weir(&[
        "savepoint",
        "dump",
        "--json",
        "--key",
        "alice",
        "--state",
        "count",
        path(&f.chk_dir),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
    assert_eq!(v["entries"][0]["value"], 42);
}
