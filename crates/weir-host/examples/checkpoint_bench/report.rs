//! Measurements as flat records (the JSON `benchmarks/checkpoints.py` reads
//! and compares with the disk bandwidth and the targets).

use std::time::Duration;

use serde::Serialize;

/// One measured number.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// `load`, `memory`, `sync_pause`, `async_upload`, `incremental`,
    /// `restore` or `rescale`.
    pub benchmark: &'static str,
    /// `heap` or `rocksdb`.
    pub backend: &'static str,
    /// Keys per subtask (total keys for `rescale`).
    pub keys: u64,
    /// What was measured.
    pub metric: String,
    /// The number.
    pub value: f64,
    /// Its unit (`ms`, `s`, `bytes`, `bytes/key`, `MiB`, `MiB/s`, `ratio`,
    /// `count`).
    pub unit: &'static str,
}

/// Collects records and prints each as it comes, so a long run shows progress.
#[derive(Debug, Default)]
pub struct Records {
    /// Everything measured so far.
    pub all: Vec<Record>,
    /// Things the reader must know (caps, skipped sizes).
    pub notes: Vec<String>,
}

impl Records {
    /// Adds one record.
    pub fn add(
        &mut self,
        benchmark: &'static str,
        backend: &'static str,
        keys: u64,
        metric: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) {
        let record = Record {
            benchmark,
            backend,
            keys,
            metric: metric.into(),
            value,
            unit,
        };
        eprintln!(
            "  {:<13} {:<8} {:>9} {:<28} {:>14.4} {}",
            record.benchmark, record.backend, record.keys, record.metric, record.value, record.unit
        );
        self.all.push(record);
    }

    /// Adds p50 and p99 of `samples` (in ms) as `<metric>_p50` / `_p99`.
    pub fn add_percentiles(
        &mut self,
        benchmark: &'static str,
        backend: &'static str,
        keys: u64,
        metric: &str,
        samples: &[Duration],
    ) {
        for (label, q) in [("p50", 0.50), ("p99", 0.99), ("max", 1.0)] {
            self.add(
                benchmark,
                backend,
                keys,
                format!("{metric}_{label}"),
                ms(percentile(samples, q)),
                "ms",
            );
        }
    }

    /// Records a note for the output.
    pub fn note(&mut self, note: String) {
        eprintln!("  note: {note}");
        self.notes.push(note);
    }
}

/// The `q` quantile by nearest rank (p99 of 20 samples is the largest, as it
/// should be with so few).
pub fn percentile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank: ceil(q * n), 1-based.
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Milliseconds as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// MiB per second of `bytes` moved in `d`.
pub fn mib_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / f64::from(1 << 20) / d.as_secs_f64().max(1e-9)
}
