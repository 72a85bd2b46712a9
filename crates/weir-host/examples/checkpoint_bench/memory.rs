//! Resident memory of this process, from Linux's `/proc/self/status`: the
//! current resident set (`VmRSS`) and its high-water mark (`VmHWM`), which
//! writing `5` to `/proc/self/clear_refs` resets, so each backend and size
//! gets a peak of its own in one process.

use std::path::Path;

use crate::error::{BenchError, Result, io};

/// Resident set sizes in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// Resident now.
    pub current: u64,
    /// The most resident since the last [`reset_peak`].
    pub peak: u64,
}

/// Starts a new high-water mark at the current resident set.
pub fn reset_peak() -> Result<()> {
    let path = Path::new("/proc/self/clear_refs");
    std::fs::write(path, b"5").map_err(io("reset the peak resident set in", path))
}

/// The resident set now and its peak.
pub fn resident() -> Result<Resident> {
    let path = Path::new("/proc/self/status");
    let status = std::fs::read_to_string(path).map_err(io("read", path))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.trim().strip_suffix("kB"))
            .and_then(|kib| kib.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .ok_or_else(|| BenchError::Memory(format!("{} has no {name} line", path.display())))
    };
    Ok(Resident {
        current: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
}
