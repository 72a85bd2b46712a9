//! `savepoint dispose`: removes a savepoint and says what; never a checkpoint.

use crate::common::{assert_one_line_error, fixture, path, weir};

#[test]
fn dispose_removes_the_savepoint_and_lists_its_files() {
    let f = fixture();
    let run = weir(&["savepoint", "dispose", path(&f.savepoint)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for needle in [
        "removed _metadata",
        "removed chk-3/counts/0/keyed",
        "removed chk-3/counts/1/keyed",
        "removed chk-3/counts/0/operator",
        "disposed savepoint 3 of job orders",
        "4 files",
    ] {
        assert!(
            run.stdout.contains(needle),
            "{needle:?} missing from\n{}",
            run.stdout
        );
    }
    assert!(!f.savepoint.join("_metadata").exists());
    assert!(!f.savepoint.join("chk-3/counts/0/keyed").exists());
}

#[test]
fn dispose_refuses_a_checkpoint() {
    let f = fixture();
    let run = weir(&["savepoint", "dispose", path(&f.chk_dir)]);
    assert_one_line_error(&run, "is checkpoint 3 of job orders, not a savepoint");
    assert!(f.chk_dir.join("_metadata").exists());
}

#[cfg(unix)]
#[test]
fn dispose_never_follows_a_link_and_keeps_what_the_savepoint_does_not_name() {
    let f = fixture();
    let victim = tempfile::tempdir().expect("tempdir");
    std::fs::write(victim.path().join("precious"), b"keep").expect("write");
    std::os::unix::fs::symlink(victim.path(), f.savepoint.join("chk-3/linked")).expect("link");
    std::fs::write(f.savepoint.join("README"), b"mine").expect("write");
    let run = weir(&["savepoint", "dispose", path(&f.savepoint)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        victim.path().join("precious").is_file(),
        "a link was followed"
    );
    assert!(
        run.stdout
            .contains("kept README: the savepoint does not name it"),
        "{}",
        run.stdout
    );
    assert!(f.savepoint.join("README").is_file());
    assert!(!f.savepoint.join("_metadata").exists());
}
