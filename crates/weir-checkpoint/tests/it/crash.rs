//! A checkpoint whose writer is killed half-way leaves the last completed
//! checkpoint intact: the test binary re-runs itself as a child that uploads
//! checkpoint 2 slowly, and the parent SIGKILLs it mid-upload.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use weir_checkpoint::{CheckpointStorage, StorageLocation, StorageOptions, layout};
use weir_types::{CheckpointId, SubtaskIndex};

use crate::common::{content, full_checkpoint, job, uid, write_file};

const DIR_VAR: &str = "WEIR_CRASH_CHILD_DIR";

fn storage(dir: &str) -> CheckpointStorage {
    let location = StorageLocation::parse(dir, &StorageOptions::default()).expect("local");
    CheckpointStorage::filesystem(&location, job()).expect("storage")
}

/// The child: uploads many files of checkpoint 2, reporting each on stdout,
/// and would complete the checkpoint only after all of them.
#[tokio::test]
#[ignore = "run as a child process by checkpoint_killed_mid_upload_keeps_the_last_completed"]
async fn slow_uploader_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let storage = storage(&dir);
    let chk = layout::subtask_dir(CheckpointId(2), &uid(), SubtaskIndex(0));
    for part in 0..10_000 {
        write_file(&storage, &format!("{chk}/part-{part}"), &[7u8; 4096]).await;
        println!("uploaded {part}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let meta = full_checkpoint(&storage, 2, 1).await;
    storage.complete(&meta).await.expect("completes");
}

#[tokio::test]
async fn checkpoint_killed_mid_upload_keeps_the_last_completed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_string_lossy().into_owned();
    let storage = storage(&path);
    let first = storage
        .complete(&full_checkpoint(&storage, 1, 2).await)
        .await
        .expect("completes");

    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "crash::slow_uploader_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(DIR_VAR, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut uploaded = 0;
    for line in BufReader::new(stdout).lines() {
        if line.expect("child output").starts_with("uploaded ") {
            uploaded += 1;
            if uploaded == 5 {
                break;
            }
        }
    }
    assert_eq!(uploaded, 5, "the child stopped before uploading");
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reaped");
    assert!(!status.success());

    assert!(dir.path().join("orders/chk-2/avg/0/part-0").is_file());
    let latest = storage
        .latest_completed()
        .await
        .expect("lists")
        .expect("one");
    assert_eq!(latest, first);
    for (i, file) in latest.files().into_iter().enumerate() {
        let bytes = storage
            .read_state_file(&latest, file)
            .await
            .expect("intact");
        assert_eq!(bytes.as_ref(), content(1, i as u32));
    }
}
