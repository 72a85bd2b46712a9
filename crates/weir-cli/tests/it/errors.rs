//! Bad input: one line on stderr, a non-zero exit, never a panic.

use crate::common::{assert_one_line_error, fixture, path, weir};

#[test]
fn a_missing_path_is_one_line_and_is_not_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope");
    for args in [
        vec!["savepoint", "info", path(&missing)],
        vec!["savepoint", "dump", path(&missing)],
        vec!["savepoint", "verify", path(&missing)],
        vec!["savepoint", "dispose", path(&missing)],
        vec!["checkpoint", "info", path(&missing)],
        vec!["checkpoint", "list", path(&missing)],
    ] {
        let run = weir(&args);
        assert_one_line_error(&run, "does not exist");
    }
    assert!(!missing.exists(), "inspecting a path must not create it");
}

#[test]
fn a_directory_that_is_no_checkpoint_is_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), b"hello").expect("write");
    let run = weir(&["savepoint", "info", path(dir.path())]);
    assert_one_line_error(&run, "_metadata does not exist");
    let run = weir(&["checkpoint", "info", path(dir.path())]);
    assert_one_line_error(&run, "is not a checkpoint");
    let run = weir(&["checkpoint", "list", path(dir.path())]);
    assert_one_line_error(&run, "holds no checkpoints");
    let run = weir(&["savepoint", "info", path(&dir.path().join("notes.txt"))]);
    assert_one_line_error(&run, "is a file");
}

#[test]
fn damaged_metadata_is_one_line() {
    let f = fixture();
    let metadata = f.savepoint.join("_metadata");
    let good = std::fs::read(&metadata).expect("read");

    std::fs::write(&metadata, &good[..good.len() - 20]).expect("truncate");
    assert_one_line_error(
        &weir(&["savepoint", "info", path(&f.savepoint)]),
        "truncated",
    );

    let mut flipped = good.clone();
    let last = flipped.len() - 5;
    flipped[last] ^= 0x01;
    std::fs::write(&metadata, &flipped).expect("corrupt");
    assert_one_line_error(
        &weir(&["savepoint", "verify", path(&f.savepoint)]),
        "corrupt",
    );

    let text = String::from_utf8(good.clone()).expect("metadata is text");
    let newer = text.replacen("WEIRMETA 1 ", "WEIRMETA 9 ", 1);
    assert_ne!(newer, text);
    std::fs::write(&metadata, newer).expect("newer");
    assert_one_line_error(
        &weir(&["savepoint", "dump", path(&f.savepoint)]),
        "newer weir",
    );

    std::fs::write(&metadata, b"hello world").expect("garbage");
    assert_one_line_error(
        &weir(&["savepoint", "info", path(&f.savepoint)]),
        "not a weir",
    );
}

#[test]
fn a_corrupt_state_file_fails_dump_in_one_line() {
    let f = fixture();
    let file = f.savepoint.join("chk-3/counts/0/keyed");
    let bytes = std::fs::read(&file).expect("read");
    std::fs::write(&file, &bytes[..bytes.len() - 3]).expect("truncate");
    let run = weir(&["savepoint", "dump", path(&f.savepoint)]);
    assert_one_line_error(&run, "chk-3/counts/0/keyed");
}
