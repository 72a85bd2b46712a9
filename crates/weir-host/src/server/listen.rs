//! The host's listeners (its Unix socket, and TCP when asked) and the files
//! it publishes in its directory, which never outlive it.

use std::fs;
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::{ServerConfig, ServerConnection, StreamOwned};
use weir_coordinator::Tls;

use super::connection;
use super::host::Host;
use crate::error::{HostError, Result};
use crate::protocol::{HostDir, Transport};

/// Where a host accepts connections.
pub(super) enum Listener {
    /// The Unix socket in the host directory.
    Unix(UnixListener, PathBuf),
    /// TCP, for clients on other executors; over TLS when configured.
    Tcp(TcpListener, SocketAddr, Option<Arc<ServerConfig>>),
}

impl Listener {
    /// Binds the Unix socket of `dir` (mode `0600`), replacing a stale one;
    /// `published` removes it when the host ends.
    pub(super) fn unix(dir: &HostDir, published: &mut Published) -> Result<Self> {
        let socket = dir.socket();
        match fs::remove_file(&socket) {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => {
                return Err(HostError::io(
                    format!("removing stale socket {}", socket.display()),
                    err,
                ));
            }
        }
        let listener = UnixListener::bind(&socket)
            .map_err(|err| HostError::io(format!("binding {}", socket.display()), err))?;
        published.file(socket.clone());
        fs::set_permissions(&socket, fs::Permissions::from_mode(0o600))
            .map_err(|err| HostError::io(format!("restricting {}", socket.display()), err))?;
        Ok(Self::Unix(listener, socket))
    }

    /// Binds `address` (`host:port`, port 0 for any free port); connections
    /// speak TLS first when `tls` is given.
    pub(super) fn tcp(address: &str, tls: Option<&Tls>) -> Result<Self> {
        let listener = TcpListener::bind(address)
            .map_err(|err| HostError::io(format!("listening on TCP address {address}"), err))?;
        let bound = listener.local_addr().map_err(|err| {
            HostError::io(format!("reading the address bound for {address}"), err)
        })?;
        if bound.ip().is_unspecified() {
            eprintln!(
                "weir-host: listening on every interface ({bound}) as asked; other executors \
                 need a reachable address, which this one is not"
            );
        }
        Ok(Self::Tcp(listener, bound, tls.map(Tls::server_config)))
    }

    /// The TCP address bound, if this is the TCP listener.
    pub(super) fn tcp_address(&self) -> Option<SocketAddr> {
        match self {
            Self::Unix(..) => None,
            Self::Tcp(_, bound, _) => Some(*bound),
        }
    }

    /// Accepts connections, each served on its own thread, until the host
    /// stops.
    pub(super) fn accept_loop(&self, host: &Arc<Host>) {
        loop {
            let accepted = match self {
                Self::Unix(listener, _) => listener.accept().map(|(s, _)| Transport::Unix(s)),
                Self::Tcp(listener, _, tls) => listener.accept().and_then(|(s, _)| {
                    s.set_nodelay(true)?;
                    // The TLS handshake runs on the connection's first read,
                    // under the deadline of the host's own handshake.
                    Ok(match tls {
                        None => Transport::Tcp(s),
                        Some(config) => Transport::TlsServer(Box::new(StreamOwned::new(
                            ServerConnection::new(Arc::clone(config))
                                .map_err(std::io::Error::other)?,
                            s,
                        ))),
                    })
                }),
            };
            if host.stopping() {
                return;
            }
            // A failed accept concerns that client only.
            let Ok(stream) = accepted else { continue };
            let Some(handshake) = host.handshake() else {
                eprintln!(
                    "weir-host: too many connections in their handshake; closing one from {}",
                    stream.peer()
                );
                continue;
            };
            let connection = host.connection();
            let host = Arc::clone(host);
            let spawned = std::thread::Builder::new()
                .name("weir-host-conn".into())
                .spawn(move || connection::serve(&host, stream, handshake, connection));
            if let Err(err) = spawned {
                eprintln!("weir-host: cannot start a connection thread: {err}");
            }
        }
    }

    /// Unblocks [`accept_loop`](Self::accept_loop) after the host set
    /// itself stopping, by connecting once.
    pub(super) fn wake(&self) {
        // A listener that is gone needs no waking.
        let _ = match self {
            Self::Unix(_, path) => UnixStream::connect(path).map(drop),
            Self::Tcp(_, bound, _) => TcpStream::connect(bound).map(drop),
        };
    }
}

/// Files and directories the host created for its own life; removed when
/// dropped, so neither an exit nor a failed start leaves them behind.
#[derive(Default)]
pub(super) struct Published {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Published {
    /// Removes `path` when the host ends.
    pub(super) fn file(&mut self, path: PathBuf) {
        self.files.push(path);
    }

    /// Removes `dir` and its contents when the host ends.
    pub(super) fn dir(&mut self, dir: PathBuf) {
        self.dirs.push(dir);
    }

    /// Writes the host's TCP address to `dir`'s address file: a temporary
    /// file renamed into place, so a reader sees all of it or nothing.
    pub(super) fn address(&mut self, dir: &HostDir, address: &str) -> Result<()> {
        let target = dir.tcp_address();
        let staged = target.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&staged)?;
            file.write_all(address.as_bytes())?;
            file.sync_all()?;
            fs::rename(&staged, &target)
        };
        let written = write();
        // Left over only if the rename failed.
        let _ = fs::remove_file(&staged);
        written.map_err(|err| HostError::io(format!("writing {}", target.display()), err))?;
        self.file(target);
        Ok(())
    }

    /// Removes the published files now (clients stop finding the host);
    /// directories stay until drop.
    pub(super) fn remove_files(&mut self) {
        for file in self.files.drain(..) {
            remove(&file, fs::remove_file(&file));
        }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.remove_files();
        for dir in self.dirs.drain(..) {
            remove(&dir, fs::remove_dir_all(&dir));
        }
    }
}

fn remove(path: &Path, outcome: std::io::Result<()>) {
    match outcome {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::NotFound => {}
        Err(err) => eprintln!("weir-host: cannot remove {}: {err}", path.display()),
    }
}
