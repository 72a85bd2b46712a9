//! `savepoint verify`: sound files pass; damage is found and named.

use std::fs::OpenOptions;

use crate::common::{assert_one_line_error, fixture, path, weir};

#[test]
fn a_sound_savepoint_and_checkpoint_verify() {
    let f = fixture();
    for target in [&f.savepoint, &f.chk_dir] {
        let run = weir(&["savepoint", "verify", path(target)]);
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        assert!(run.stdout.contains(": OK, 3 files"), "{}", run.stdout);
        assert!(!run.stdout.contains("FAIL"), "{}", run.stdout);
    }
}

#[test]
fn a_flipped_byte_is_found_in_its_key_group() {
    let f = fixture();
    let file = f.savepoint.join("chk-3/counts/1/keyed");
    let mut bytes = std::fs::read(&file).expect("read");
    // Past the prelude and JSON header, inside the first block.
    let header_end = bytes.iter().position(|&b| b == b'}').expect("json header") + 400;
    let at = header_end.min(bytes.len() / 2);
    bytes[at] ^= 0x10;
    std::fs::write(&file, &bytes).expect("write");
    let run = weir(&["savepoint", "verify", path(&f.savepoint)]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("FAIL  counts/1 keyed"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("crc32 is"), "{}", run.stdout);
    assert!(run.stdout.contains("checksum mismatch"), "{}", run.stdout);
    assert!(
        run.stdout.contains("OK    counts/0 keyed"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

#[test]
fn a_truncated_file_is_found() {
    let f = fixture();
    let file = f.savepoint.join("chk-3/counts/0/keyed");
    let len = std::fs::metadata(&file).expect("stat").len();
    OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open")
        .set_len(len - 10)
        .expect("truncate");
    let run = weir(&["savepoint", "verify", path(&f.savepoint)]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "size is {} bytes, the handle says {len}",
            len - 10
        )),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("in 1 of 3 files"), "{}", run.stdout);
}

#[test]
fn a_missing_file_is_found() {
    let f = fixture();
    std::fs::remove_file(f.savepoint.join("chk-3/counts/0/operator")).expect("remove");
    let run = weir(&["savepoint", "verify", path(&f.savepoint)]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("FAIL  counts/0 operator"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("missing"), "{}", run.stdout);
}

#[cfg(unix)]
#[test]
fn a_symlinked_state_file_is_reported_not_read() {
    let f = fixture();
    let file = f.savepoint.join("chk-3/counts/0/keyed");
    let copy = f.checkpoints.join("copy-of-keyed");
    std::fs::rename(&file, &copy).expect("move");
    std::os::unix::fs::symlink(&copy, &file).expect("link");
    let run = weir(&["savepoint", "verify", path(&f.savepoint)]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("FAIL  counts/0 keyed"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("symbolic link"), "{}", run.stdout);
    let run = weir(&["savepoint", "dump", path(&f.savepoint)]);
    assert_one_line_error(&run, "symbolic link");
}
