//! Length-prefixed frames: a JSON header and zero or more Arrow IPC payloads.
//!
//! ```text
//! u32 LE  header length H (at most MAX_HEADER_BYTES)
//! H       header: one JSON object (a request or a reply)
//! u32 LE  payload count N (at most MAX_PAYLOADS)
//! N x     u64 LE payload length L (at most MAX_PAYLOAD_BYTES), then L bytes
//! ```
//!
//! Limits keep a confused or hostile peer from making the other side
//! allocate without bound: a declared length is checked against them, and
//! buffers then grow with the bytes that actually arrive (a peer that
//! declares 4 GiB and sends 10 bytes costs 10 bytes, not 4 GiB). The
//! handshake is read with [`FrameLimits::HELLO`], far tighter than what an
//! authenticated peer may send.

use std::io::{self, Read, Write};

use crate::error::{HostError, Result};

/// Largest header accepted, in bytes.
pub const MAX_HEADER_BYTES: usize = 16 << 20;
/// Most payloads one frame may carry.
pub const MAX_PAYLOADS: usize = 16;
/// Largest payload accepted, in bytes.
pub const MAX_PAYLOAD_BYTES: u64 = 4 << 30;

/// What one frame may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest header, in bytes.
    pub header_bytes: usize,
    /// Most payloads.
    pub payloads: usize,
    /// Largest payload, in bytes.
    pub payload_bytes: u64,
}

impl FrameLimits {
    /// Frames of an authenticated connection.
    pub const DEFAULT: Self = Self {
        header_bytes: MAX_HEADER_BYTES,
        payloads: MAX_PAYLOADS,
        payload_bytes: MAX_PAYLOAD_BYTES,
    };

    /// The hello frame, read before the peer proved the token: a small
    /// header and no payloads.
    pub const HELLO: Self = Self {
        header_bytes: 4096,
        payloads: 0,
        payload_bytes: 0,
    };
}

/// One message on the socket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// The JSON header.
    pub header: Vec<u8>,
    /// Arrow IPC streams, each holding one record batch.
    pub payloads: Vec<Vec<u8>>,
}

/// Why reading a frame stopped.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed or the peer went away.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The bytes are not a frame of this protocol.
    #[error("{0}")]
    Malformed(String),
}

impl From<FrameError> for HostError {
    fn from(err: FrameError) -> Self {
        match err {
            FrameError::Io(source) => {
                HostError::io("reading a frame from the state host socket", source)
            }
            FrameError::Malformed(message) => HostError::Protocol(message),
        }
    }
}

impl Frame {
    /// Writes the frame in one buffer, so a frame is never interleaved with
    /// another writer's and costs one system call for small messages.
    pub fn write_to(&self, out: &mut impl Write) -> Result<(), FrameError> {
        if self.header.len() > MAX_HEADER_BYTES || self.payloads.len() > MAX_PAYLOADS {
            return Err(FrameError::Malformed(format!(
                "a frame may carry a header of at most {MAX_HEADER_BYTES} bytes and at most \
                 {MAX_PAYLOADS} payloads; this one has {} bytes and {} payloads",
                self.header.len(),
                self.payloads.len()
            )));
        }
        let total =
            8 + self.header.len() + self.payloads.iter().map(|p| 8 + p.len()).sum::<usize>();
        let mut buf = Vec::with_capacity(total);
        buf.extend_from_slice(&len_u32(self.header.len())?.to_le_bytes());
        buf.extend_from_slice(&self.header);
        buf.extend_from_slice(&len_u32(self.payloads.len())?.to_le_bytes());
        for payload in &self.payloads {
            let len = u64::try_from(payload.len()).map_err(|_| too_large(payload.len()))?;
            if len > MAX_PAYLOAD_BYTES {
                return Err(too_large(payload.len()));
            }
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(payload);
        }
        out.write_all(&buf)?;
        out.flush()?;
        Ok(())
    }

    /// Reads one frame within [`FrameLimits::DEFAULT`]. `Ok(None)` means
    /// the peer closed the connection cleanly between frames; EOF inside a
    /// frame is an `UnexpectedEof` error.
    pub fn read_from(input: &mut impl Read) -> Result<Option<Self>, FrameError> {
        Self::read_limited(input, &FrameLimits::DEFAULT)
    }

    /// Reads one frame, refusing any declared length beyond `limits` before
    /// reading it.
    pub fn read_limited(
        input: &mut impl Read,
        limits: &FrameLimits,
    ) -> Result<Option<Self>, FrameError> {
        let mut len = [0u8; 4];
        if !read_first(input, &mut len)? {
            return Ok(None);
        }
        let header_len = u64::from(u32::from_le_bytes(len));
        if header_len > limits.header_bytes as u64 {
            return Err(FrameError::Malformed(format!(
                "a frame header of {header_len} bytes exceeds the limit of {}; is the peer a \
                 Weir state host client of the same version?",
                limits.header_bytes
            )));
        }
        let header = read_exactly(input, header_len)?;
        input.read_exact(&mut len)?;
        let count = u32::from_le_bytes(len) as usize;
        if count > limits.payloads {
            return Err(FrameError::Malformed(format!(
                "a frame with {count} payloads exceeds the limit of {}",
                limits.payloads
            )));
        }
        let mut payloads = Vec::with_capacity(count);
        for _ in 0..count {
            let mut len = [0u8; 8];
            input.read_exact(&mut len)?;
            let len = u64::from_le_bytes(len);
            if len > limits.payload_bytes {
                return Err(FrameError::Malformed(format!(
                    "a payload of {len} bytes exceeds the limit of {}",
                    limits.payload_bytes
                )));
            }
            payloads.push(read_exactly(input, len)?);
        }
        Ok(Some(Self { header, payloads }))
    }
}

/// Reads exactly `len` bytes into a buffer that grows as they arrive.
fn read_exactly(input: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let read = input.take(len).read_to_end(&mut buf)?;
    if (read as u64) < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(buf)
}

/// Fills `buf` from `input`; `false` if the stream ended before its first byte.
fn read_first(input: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

fn len_u32(len: usize) -> Result<u32, FrameError> {
    u32::try_from(len).map_err(|_| too_large(len))
}

fn too_large(len: usize) -> FrameError {
    FrameError::Malformed(format!(
        "a payload of {len} bytes exceeds the limit of {MAX_PAYLOAD_BYTES}; send smaller batches"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_back_to_back() {
        let a = Frame {
            header: br#"{"op":"status"}"#.to_vec(),
            payloads: vec![],
        };
        let b = Frame {
            header: b"{}".to_vec(),
            payloads: vec![vec![1, 2, 3], vec![]],
        };
        let mut buf = Vec::new();
        a.write_to(&mut buf).expect("writes");
        b.write_to(&mut buf).expect("writes");
        let mut input = &buf[..];
        assert_eq!(Frame::read_from(&mut input).expect("reads"), Some(a));
        assert_eq!(Frame::read_from(&mut input).expect("reads"), Some(b));
        assert_eq!(Frame::read_from(&mut input).expect("clean end"), None);
    }

    #[test]
    fn a_truncated_frame_is_an_unexpected_eof() {
        let mut buf = Vec::new();
        Frame {
            header: b"{}".to_vec(),
            payloads: vec![vec![7; 10]],
        }
        .write_to(&mut buf)
        .expect("writes");
        for cut in 1..buf.len() {
            let err = Frame::read_from(&mut &buf[..cut]).expect_err("truncated");
            assert!(
                matches!(err, FrameError::Io(ref e) if e.kind() == io::ErrorKind::UnexpectedEof),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocating() {
        let mut buf = u32::MAX.to_le_bytes().to_vec();
        buf.extend_from_slice(&[0; 16]);
        assert!(matches!(
            Frame::read_from(&mut &buf[..]),
            Err(FrameError::Malformed(_))
        ));
        let mut buf = 2u32.to_le_bytes().to_vec();
        buf.extend_from_slice(b"{}");
        buf.extend_from_slice(&1000u32.to_le_bytes());
        assert!(matches!(
            Frame::read_from(&mut &buf[..]),
            Err(FrameError::Malformed(_))
        ));
    }
}
