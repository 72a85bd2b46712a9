//! Where a host listens and the byte streams between a host and its clients:
//! a Unix socket on the same executor, TCP (plain or TLS) from another one.
//! All carry the same frames.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rustls::{ClientConnection, ServerConnection, StreamOwned};
use weir_coordinator::Tls;

use crate::error::{HostError, Result};

/// The address of a state host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostAddress {
    /// The Unix socket of a host on this executor (its directory's `host.sock`).
    Unix(PathBuf),
    /// `host:port` of a host on another executor.
    Tcp(String),
}

impl HostAddress {
    /// The Unix socket of the host serving directory `dir`.
    pub fn of_dir(dir: impl AsRef<Path>) -> Self {
        Self::Unix(super::HostDir::new(dir.as_ref()).socket())
    }

    /// Opens a stream to the host (over TLS when `tls` is given and the
    /// host is remote); a TCP connect gives up after `timeout`.
    pub(crate) fn connect(&self, timeout: Duration, tls: Option<&Tls>) -> io::Result<Transport> {
        match self {
            Self::Unix(path) => UnixStream::connect(path).map(Transport::Unix),
            Self::Tcp(address) => {
                let mut last = None;
                for resolved in address.to_socket_addrs()? {
                    match TcpStream::connect_timeout(&resolved, timeout) {
                        Ok(stream) => {
                            stream.set_nodelay(true)?;
                            let Some(tls) = tls else {
                                return Ok(Transport::Tcp(stream));
                            };
                            let name = tls.server_name_for(address).map_err(io::Error::other)?;
                            let connection = ClientConnection::new(tls.client_config(), name)
                                .map_err(io::Error::other)?;
                            return Ok(Transport::TlsClient(Box::new(StreamOwned::new(
                                connection, stream,
                            ))));
                        }
                        Err(err) => last = Some(err),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{address} resolves to no address"),
                    )
                }))
            }
        }
    }
}

impl fmt::Display for HostAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "{}", path.display()),
            Self::Tcp(address) => f.write_str(address),
        }
    }
}

impl FromStr for HostAddress {
    type Err = HostError;

    /// A path (starting with `/` or `.`) is a Unix socket; anything else
    /// must be `host:port` (`[v6]:port` for IPv6 literals).
    fn from_str(text: &str) -> Result<Self> {
        if text.starts_with('/') || text.starts_with('.') {
            return Ok(Self::Unix(PathBuf::from(text)));
        }
        let port = text
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(_))) if !host.is_empty() => Ok(Self::Tcp(text.to_owned())),
            _ => Err(HostError::InvalidRequest(format!(
                "{text:?} is not a state host address: give the path of its Unix socket or \
                 host:port"
            ))),
        }
    }
}

/// A connected stream to or from a host.
#[derive(Debug)]
pub enum Transport {
    /// Same executor.
    Unix(UnixStream),
    /// Another executor.
    Tcp(TcpStream),
    /// Another executor, over TLS: the host's end.
    TlsServer(Box<StreamOwned<ServerConnection, TcpStream>>),
    /// Another executor, over TLS: the client's end.
    TlsClient(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// The TCP socket underneath, if the peer is on another executor.
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Self::Unix(_) => None,
            Self::Tcp(s) => Some(s),
            Self::TlsServer(s) => Some(s.get_ref()),
            Self::TlsClient(s) => Some(s.get_ref()),
        }
    }

    /// Whether the peer is on another executor.
    pub(crate) fn is_remote(&self) -> bool {
        self.tcp().is_some()
    }

    /// Sets how long one read may block (`None`: forever).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Unix(s) => s.set_read_timeout(timeout),
            Self::Tcp(s) => s.set_read_timeout(timeout),
            Self::TlsServer(s) => s.get_ref().set_read_timeout(timeout),
            Self::TlsClient(s) => s.get_ref().set_read_timeout(timeout),
        }
    }

    /// Sets how long one write may block (`None`: forever).
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Unix(s) => s.set_write_timeout(timeout),
            Self::Tcp(s) => s.set_write_timeout(timeout),
            Self::TlsServer(s) => s.get_ref().set_write_timeout(timeout),
            Self::TlsClient(s) => s.get_ref().set_write_timeout(timeout),
        }
    }

    /// Who is at the other end, for logs.
    pub(crate) fn peer(&self) -> String {
        match self.tcp() {
            None => "a local client".to_owned(),
            Some(s) => s
                .peer_addr()
                .map_or_else(|_| "a TCP client".to_owned(), |a: SocketAddr| a.to_string()),
        }
    }

    /// Completes the host's end of a TLS handshake by `deadline`, giving
    /// each socket read only the time left: rustls' own loop would give every
    /// read the whole timeout again, so a peer trickling its hello could hold
    /// the connection for hours. A peer that leaves is seen by the next read.
    fn finish_tls_handshake(&mut self, deadline: Instant) -> io::Result<()> {
        let Self::TlsServer(tls) = self else {
            return Ok(());
        };
        let StreamOwned { conn, sock } = tls.as_mut();
        while conn.is_handshaking() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            sock.set_read_timeout(Some(left))?;
            sock.set_write_timeout(Some(left))?;
            while conn.wants_write() {
                conn.write_tls(sock)?;
            }
            if !conn.is_handshaking() {
                break;
            }
            if conn.read_tls(sock)? == 0 {
                return Ok(());
            }
            if let Err(err) = conn.process_new_packets() {
                // Tell the peer why (an alert) before giving up on it.
                let _ = conn.write_tls(sock);
                return Err(io::Error::new(io::ErrorKind::InvalidData, err));
            }
        }
        while conn.wants_write() {
            conn.write_tls(sock)?;
        }
        Ok(())
    }

    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            Self::Unix(s) => s,
            Self::Tcp(s) => s,
            Self::TlsServer(s) => s.as_mut(),
            Self::TlsClient(s) => s.as_mut(),
        }
    }
}

/// A byte stream in both directions.
trait ReadWrite: Read + Write {}

impl<T: Read + Write> ReadWrite for T {}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.stream().read(buf) {
            // A TLS peer that closes without close_notify is gone like any
            // other; frames carry their length, so a cut frame still shows.
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof && self.is_remote() => Ok(0),
            read => read,
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream().flush()
    }
}

/// Reads from a transport under one deadline for all reads together (a
/// peer trickling a byte at a time still runs out of time).
pub(crate) struct DeadlineReader<'a> {
    inner: &'a mut Transport,
    deadline: Instant,
}

impl<'a> DeadlineReader<'a> {
    /// Reads from `inner` until `deadline`.
    pub(crate) fn new(inner: &'a mut Transport, deadline: Instant) -> Self {
        Self { inner, deadline }
    }
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.inner.finish_tls_handshake(self.deadline)?;
        self.inner.set_read_timeout(Some(left))?;
        self.inner.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_paths_or_host_and_port() {
        assert_eq!(
            "/tmp/h/host.sock".parse::<HostAddress>().expect("a path"),
            HostAddress::Unix("/tmp/h/host.sock".into())
        );
        assert_eq!(
            "10.0.0.7:4100".parse::<HostAddress>().expect("tcp"),
            HostAddress::Tcp("10.0.0.7:4100".into())
        );
        assert_eq!(
            "[::1]:1".parse::<HostAddress>().expect("v6"),
            HostAddress::Tcp("[::1]:1".into())
        );
        for bad in ["", "host", "host:", ":80", "host:99999", "host:port"] {
            assert!(bad.parse::<HostAddress>().is_err(), "{bad:?}");
        }
    }
}
