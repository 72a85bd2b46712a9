//! `checkpoint list`: completed, latest and incomplete checkpoints.

use crate::common::{fixture, path, weir};

#[test]
fn list_marks_the_latest_and_the_incomplete() {
    let f = fixture();
    // A checkpoint that never completed, and one whose metadata is cut off.
    std::fs::create_dir_all(f.job_dir.join("chk-4/counts/0")).expect("mkdir");
    std::fs::write(f.job_dir.join("chk-4/counts/0/keyed"), b"partial").expect("write");
    let chk5 = f.job_dir.join("chk-5");
    std::fs::create_dir_all(&chk5).expect("mkdir");
    let metadata = std::fs::read(f.chk_dir.join("_metadata")).expect("read");
    std::fs::write(chk5.join("_metadata"), &metadata[..metadata.len() / 2]).expect("write");

    for target in [&f.checkpoints, &f.job_dir] {
        let run = weir(&["checkpoint", "list", "--json", path(target)]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("valid JSON");
        let job = &v["jobs"][0];
        assert_eq!(job["job_id"], "orders");
        assert_eq!(job["latest"], 3);
        let ids: Vec<_> = job["checkpoints"]
            .as_array()
            .expect("array")
            .iter()
            .map(|c| (c["checkpoint_id"].as_u64(), c["completed"].as_bool()))
            .collect();
        assert_eq!(
            ids,
            [
                (Some(3), Some(true)),
                (Some(4), Some(false)),
                (Some(5), Some(false))
            ]
        );
        assert_eq!(job["checkpoints"][0]["operators"], 1);
        assert!(
            job["checkpoints"][2]["problem"]
                .as_str()
                .expect("reason")
                .contains("truncated")
        );
    }

    let run = weir(&["checkpoint", "list", path(&f.checkpoints)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("completed (latest)"), "{}", run.stdout);
    assert!(run.stdout.contains("incomplete: "), "{}", run.stdout);
    assert!(
        run.stdout.contains("2026-11-22T05:00:00.000Z"),
        "{}",
        run.stdout
    );
}
