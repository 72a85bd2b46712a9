//! The host directory: where a host's socket, address, lock, log and working
//! files live. One directory, one host (the caller gives every executor its
//! own); client and host agree on it by name only.

use std::fs::{self, DirBuilder, File, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{HostError, Result};

/// A host directory. It must be private to the user (mode `0700`), since
/// anyone who can reach the socket could try tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDir {
    root: PathBuf,
}

/// Unix socket paths are limited to 108 bytes on Linux (104 on macOS),
/// the terminating NUL included.
const MAX_SOCKET_PATH: usize = 103;

impl HostDir {
    /// The host directory at `root` (not created yet; see [`Self::prepare`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The Unix socket the host listens on.
    pub fn socket(&self) -> PathBuf {
        self.root.join("host.sock")
    }

    /// The host's TCP address (`host:port`), written once the host listens
    /// on TCP (replaced atomically, so a reader never sees half of it).
    pub fn tcp_address(&self) -> PathBuf {
        self.root.join("address")
    }

    /// Locked (`flock`, exclusive) by the running host for its whole life.
    pub fn host_lock(&self) -> PathBuf {
        self.root.join("host.lock")
    }

    /// Locked by a client while it starts a host, so concurrent clients
    /// start one host, not several.
    pub fn spawn_lock(&self) -> PathBuf {
        self.root.join("spawn.lock")
    }

    /// The host's standard output and error.
    pub fn log(&self) -> PathBuf {
        self.root.join("host.log")
    }

    /// Working files of subtask state (RocksDB directories), removed when
    /// the host exits.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// Creates the directory with mode `0700`, or checks that an existing one
    /// is a directory of this user that nobody else can enter.
    pub fn prepare(&self) -> Result<()> {
        let socket = self.socket();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(HostError::InvalidRequest(format!(
                "the host socket path {} is longer than {MAX_SOCKET_PATH} bytes, the limit of Unix \
                 sockets; choose a shorter host directory",
                socket.display()
            )));
        }
        self.create()?;
        self.check_parent()?;
        self.check_private()
    }

    /// Creates the directory (mode `0700`) and its missing parents. A host
    /// of another executor may remove the parent it shared once it left it
    /// empty (see [`Self::remove`]) between the two steps: then both are
    /// created again.
    fn create(&self) -> Result<()> {
        const ATTEMPTS: usize = 3;
        for _ in 0..ATTEMPTS {
            match DirBuilder::new().mode(0o700).create(&self.root) {
                Ok(()) => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    // Parents are created with default permissions; only the
                    // host directory itself must be private.
                    if let Some(parent) = self.root.parent() {
                        fs::create_dir_all(parent).map_err(|e| {
                            HostError::io(format!("creating {}", parent.display()), e)
                        })?;
                    }
                }
                Err(err) => return Err(self.io("creating the host directory", err)),
            }
        }
        Err(self.io(
            "creating the host directory",
            io::Error::new(io::ErrorKind::NotFound, "its parent kept disappearing"),
        ))
    }

    /// Removes what a host that leaves for good leaves behind: its log and
    /// lock files, the directory, and with `parent` the parent too if that
    /// leaves it empty (a run's directory of per-executor host directories,
    /// which nobody else would remove on a machine without the driver).
    ///
    /// Call it while holding the host lock. Nothing is removed while a client
    /// holds the spawn lock: it is starting the next host here. Files the
    /// host does not know stay, and so does the directory that holds them.
    pub fn remove(&self, parent: bool) -> Result<()> {
        let spawn_lock = match File::open(self.spawn_lock()) {
            Ok(file) => Some(file),
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => return Err(self.io("opening the spawn lock of", err)),
        };
        if let Some(file) = &spawn_lock {
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(()),
                Err(TryLockError::Error(err)) => {
                    return Err(self.io("locking the spawn lock of", err));
                }
            }
        }
        for file in [self.log(), self.spawn_lock(), self.host_lock()] {
            match fs::remove_file(&file) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(HostError::io(format!("removing {}", file.display()), err)),
            }
        }
        if !remove_if_empty(&self.root)? {
            return Ok(());
        }
        match self.root.parent() {
            Some(up) if parent => remove_if_empty(up).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// Refuses a parent directory that someone else could swap the host
    /// directory out of: one that belongs to another user (not root), or
    /// that others may write to without the sticky bit (as `/tmp` has).
    /// Such a parent would let them put their own socket where clients
    /// send the job token.
    fn check_parent(&self) -> Result<()> {
        let Some(parent) = self.root.parent().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(());
        };
        let meta = fs::metadata(parent)
            .map_err(|err| HostError::io(format!("inspecting {}", parent.display()), err))?;
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(HostError::InvalidRequest(format!(
                "the host directory's parent {} belongs to user {}, not to this user ({me}) or \
                 root, who could replace the host directory; choose another path",
                parent.display(),
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(HostError::InvalidRequest(format!(
                "the host directory's parent {} has mode {:o}: others may replace the host \
                 directory in it; remove their write permission or set the sticky bit (chmod \
                 go-w or +t)",
                parent.display(),
                mode & 0o7777
            )));
        }
        Ok(())
    }

    /// Refuses a directory that is a symlink, belongs to another user, or is
    /// open to group or others.
    fn check_private(&self) -> Result<()> {
        let meta = fs::symlink_metadata(&self.root)
            .map_err(|err| self.io("inspecting the host directory", err))?;
        if !meta.is_dir() {
            return Err(HostError::InvalidRequest(format!(
                "the host directory {} is not a directory (a symlink?); choose another path",
                self.root.display()
            )));
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(HostError::InvalidRequest(format!(
                "the host directory {} belongs to user {}, not to this user ({me}); choose \
                 another path",
                self.root.display(),
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(HostError::InvalidRequest(format!(
                "the host directory {} has mode {mode:o}; it must be 0700 (chmod 700 it or \
                 choose another path)",
                self.root.display()
            )));
        }
        Ok(())
    }

    fn io(&self, what: &str, err: io::Error) -> HostError {
        HostError::io(format!("{what} {}", self.root.display()), err)
    }
}

/// Removes `dir` if it is an empty directory; whether it did. `rmdir` does
/// not follow a symlink, and a directory that is not empty stays.
fn remove_if_empty(dir: &Path) -> Result<bool> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        Err(err)
            if matches!(
                err.kind(),
                io::ErrorKind::DirectoryNotEmpty
                    | io::ErrorKind::NotFound
                    | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(err) => Err(HostError::io(format!("removing {}", dir.display()), err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_creates_a_private_directory_and_refuses_open_ones() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = HostDir::new(tmp.path().join("a/b"));
        dir.prepare().expect("creates");
        let mode = fs::metadata(dir.root())
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        dir.prepare()
            .expect("an existing private directory is fine");

        fs::set_permissions(dir.root(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = dir.prepare().expect_err("group and others may enter");
        assert!(err.to_string().contains("0700"), "{err}");
    }

    #[test]
    fn remove_keeps_a_directory_a_client_is_starting_a_host_in_or_that_holds_other_files() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = HostDir::new(tmp.path().join("run/h"));
        dir.prepare().expect("creates");
        for file in [dir.log(), dir.spawn_lock(), dir.host_lock()] {
            fs::write(file, b"").expect("writes");
        }
        let spawning = File::open(dir.spawn_lock()).expect("opens");
        spawning.lock().expect("a client starts a host");
        dir.remove(true).expect("leaves it");
        assert!(dir.log().exists() && dir.host_lock().exists());
        drop(spawning);

        fs::write(dir.root().join("notes"), b"mine").expect("writes");
        dir.remove(true).expect("removes what it knows");
        assert!(!dir.log().exists() && !dir.spawn_lock().exists() && !dir.host_lock().exists());
        assert!(dir.root().join("notes").exists(), "not its file");

        fs::remove_file(dir.root().join("notes")).expect("removes");
        dir.remove(true).expect("removes the rest");
        assert!(!tmp.path().join("run").exists(), "the emptied parent too");
        assert!(tmp.path().exists());
    }

    #[test]
    fn prepare_refuses_a_parent_others_could_swap_the_directory_out_of() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let run = tmp.path().join("run");
        let dir = HostDir::new(run.join("h"));
        dir.prepare().expect("a parent of this user's");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = dir.prepare().expect_err("anyone may write to the parent");
        assert!(err.to_string().contains("sticky"), "{err}");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o1777)).expect("chmod");
        dir.prepare().expect("sticky, as /tmp is");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).expect("chmod");
        // Only root can give a directory away.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&run, Some(65534), None).expect("chown");
            let err = dir.prepare().expect_err("another user's parent");
            assert!(err.to_string().contains("belongs to user 65534"), "{err}");
        }
    }

    #[test]
    fn overlong_socket_paths_are_refused() {
        let dir = HostDir::new(PathBuf::from("/tmp").join("x".repeat(120)));
        assert!(matches!(dir.prepare(), Err(HostError::InvalidRequest(_))));
    }
}
