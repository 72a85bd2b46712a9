//! Where a thread's wall time went, from Linux's
//! `/proc/thread-self/schedstat`: nanoseconds on a core, nanoseconds runnable
//! but waiting for one, and (the rest of the wall time) asleep, e.g. on a
//! lock. Tells a pause that computed from one that lost its core.

use std::path::Path;

use crate::error::{BenchError, Result, io};

/// The calling thread's scheduler counters, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sched {
    /// Time on a core.
    pub on_cpu: u64,
    /// Time runnable but waiting for a core.
    pub waiting_for_cpu: u64,
}

impl Sched {
    /// What this thread did between `self` and `later`.
    pub fn until(self, later: Self) -> Self {
        Self {
            on_cpu: later.on_cpu.saturating_sub(self.on_cpu),
            waiting_for_cpu: later.waiting_for_cpu.saturating_sub(self.waiting_for_cpu),
        }
    }
}

/// The calling thread's counters now.
pub fn now() -> Result<Sched> {
    let path = Path::new("/proc/thread-self/schedstat");
    let text = std::fs::read_to_string(path).map_err(io("read", path))?;
    parse(&text).ok_or_else(|| {
        BenchError::Sched(format!(
            "{} does not start with two counters: {text:?}",
            path.display()
        ))
    })
}

/// The counters a `schedstat` file starts with.
fn parse(text: &str) -> Option<Sched> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(on_cpu)), Some(Ok(waiting_for_cpu))) => Some(Sched {
            on_cpu,
            waiting_for_cpu,
        }),
        _ => None,
    }
}

/// Time on a core of every thread of this process, by name (Linux keeps 15
/// characters of it: `weir-rocksdb-fo` is the fold thread): what ran beside
/// a pause.
pub fn threads() -> Result<Vec<(String, u64)>> {
    let tasks = Path::new("/proc/self/task");
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(tasks).map_err(io("list", tasks))? {
        let dir = entry.map_err(io("list", tasks))?.path();
        // A thread that ended between the listing and the reads ran nothing.
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("schedstat")),
        ) else {
            continue;
        };
        let on_cpu = parse(&stat).map_or(0, |sched| sched.on_cpu);
        threads.push((name.trim().to_owned(), on_cpu));
    }
    Ok(threads)
}

/// The threads that used the most core time from `before` to `after`
/// (threads of one name summed), most first, as `name ms` text.
pub fn busiest(before: &[(String, u64)], after: &[(String, u64)], shown: usize) -> String {
    let mut by_name: std::collections::BTreeMap<&str, i128> = std::collections::BTreeMap::new();
    for (name, on_cpu) in after {
        *by_name.entry(name).or_default() += i128::from(*on_cpu);
    }
    for (name, on_cpu) in before {
        *by_name.entry(name).or_default() -= i128::from(*on_cpu);
    }
    let mut busy: Vec<(&str, i128)> = by_name.into_iter().filter(|(_, ns)| *ns > 0).collect();
    busy.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
    if busy.is_empty() {
        // The counters move at context switches and ticks: a pause shorter
        // than a tick that kept its core shows nothing.
        return "none counted".to_owned();
    }
    busy.iter()
        .take(shown)
        .map(|(name, ns)| format!("{name} {:.2} ms", *ns as f64 / 1e6))
        .collect::<Vec<_>>()
        .join(", ")
}
