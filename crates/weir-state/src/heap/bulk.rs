//! A restore's value entries, held back until their key group is complete so
//! that each table is sized once for them, and inserted on a thread of their
//! own while the restore decodes the next key groups.
//!
//! Inserted one by one, a key group of a restore starts from one empty
//! bucket: it splits several times (every split moves every entry) and each
//! bucket grows by doubling. That was 40% of a heap restore's time. A
//! snapshot file holds key groups one after another, so holding one key
//! group's entries costs little memory, and the restore's entries are
//! inserted with the tables' final sizes known.
//!
//! Inserting them was still a third of a restore, the rest being the
//! decoding and copying of entries on the restore's own thread. So a
//! complete key group's table is taken out of the backend and filled by a
//! builder thread, and put back when the builder is done with it; the
//! restore waits for every table at the end of the bulk load (or for one
//! table, when more entries of its key group come later).
//!
//! Only value entries are held: list items and map entries of one key are
//! several entries that merge on insert, and they go in at once.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use weir_types::KeyGroup;

use crate::backend::StateId;
use crate::bytes::SmallBytes;
use crate::heap::data::StateData;
use crate::heap::table::{DetachedGroup, Slot};

/// Key groups waiting for the builder, at most: beyond that the restore
/// waits. One keeps the entries the builder reads next in the cache they
/// were written to: with four, a restore of 10^7 keys (6 MB a key group)
/// was no faster than inserting on the restore's thread.
const QUEUED_GROUPS: usize = 1;

type Slots = Vec<Slot<SmallBytes>>;

/// The value entries of the key group being loaded, per state, and the
/// tables away at the builder.
#[derive(Debug, Default)]
pub(crate) struct BulkLoad {
    key_group: Option<(KeyGroup, usize)>,
    /// Indexed by state id; handed over at each key group.
    held: Vec<Slots>,
    /// Emptied vectors the builder gave back, for the next key groups.
    spare: Vec<Slots>,
    /// Started with the first complete key group.
    builder: Option<Builder>,
    /// Whether no builder thread could be started (tables are then filled
    /// on the restore's thread).
    inline: bool,
    /// (state, key group index) of the tables at the builder.
    away: Vec<(usize, usize)>,
}

/// One key group of one state: its table and the entries to insert into it.
#[derive(Debug)]
struct Job {
    state: usize,
    group: usize,
    table: DetachedGroup<SmallBytes>,
    slots: Slots,
}

impl Job {
    /// Inserts the entries (the vector stays, empty, for reuse).
    fn run(&mut self) {
        self.table.extend(self.slots.drain(..));
    }
}

/// The thread that fills tables, and the queues to and from it.
#[derive(Debug)]
struct Builder {
    jobs: SyncSender<Job>,
    done: Receiver<Job>,
    thread: Option<JoinHandle<()>>,
}

impl Builder {
    /// `None` when no thread can be started: the restore then inserts on its
    /// own thread.
    fn spawn() -> Option<Self> {
        let (jobs, inbox) = mpsc::sync_channel::<Job>(QUEUED_GROUPS);
        let (finished, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("weir-restore-tables".into())
            .spawn(move || {
                for mut job in inbox {
                    job.run();
                    if finished.send(job).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Self {
            jobs,
            done,
            thread: Some(thread),
        })
    }

    fn send(&mut self, job: Job) {
        if self.jobs.send(job).is_err() {
            self.failed();
        }
    }

    /// The next table done.
    fn next(&mut self) -> Job {
        self.done.recv().unwrap_or_else(|_| self.failed())
    }

    /// The builder only stops early by panicking (allocation failure): the
    /// restore panics with it, as inserting on its own thread would have.
    fn failed(&mut self) -> ! {
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            _ => unreachable!("the builder runs until its queue closes"),
        }
    }

    /// Ends the thread once every table is back.
    fn close(mut self) {
        drop(self.jobs);
        if let Some(Err(panic)) = self.thread.take().map(JoinHandle::join) {
            std::panic::resume_unwind(panic);
        }
    }
}

impl BulkLoad {
    /// Holds `slot`, a value entry of `state` in `key_group` (index `group`
    /// of the backend's range), first handing over what another key group
    /// held.
    pub(crate) fn hold(
        &mut self,
        data: &mut [StateData],
        state: StateId,
        (key_group, group): (KeyGroup, usize),
        slot: Slot<SmallBytes>,
    ) {
        if self.key_group.is_some_and(|(held, _)| held != key_group) {
            self.hand_over(data);
        }
        self.key_group = Some((key_group, group));
        let state = state.0 as usize;
        if self.held.len() <= state {
            self.held.resize_with(state + 1, Vec::new);
        }
        self.held[state].push(slot);
    }

    /// Inserts every entry held or handed over into `data` and waits for
    /// the builder; entries of a key go in the order they came (a later one
    /// replaces an earlier one).
    pub(crate) fn finish(mut self, data: &mut [StateData]) {
        self.hand_over(data);
        while !self.away.is_empty() {
            self.wait(data);
        }
        if let Some(builder) = self.builder.take() {
            builder.close();
        }
    }

    /// Sends the held key group's tables to the builder (or fills them here
    /// when there is none).
    fn hand_over(&mut self, data: &mut [StateData]) {
        let Some((_, group)) = self.key_group.take() else {
            return;
        };
        for state in 0..self.held.len() {
            if self.held[state].is_empty() {
                continue;
            }
            // Its earlier entries first: the table must be back to take more.
            while self.away.contains(&(state, group)) {
                self.wait(data);
            }
            let slots =
                std::mem::replace(&mut self.held[state], self.spare.pop().unwrap_or_default());
            let StateData::Bytes(table) = &mut data[state] else {
                unreachable!("only value entries are held, and value states hold byte tables");
            };
            let mut job = Job {
                state,
                group,
                table: table.detach_group(group),
                slots,
            };
            if self.builder.is_none() && !self.inline {
                self.builder = Builder::spawn();
                self.inline = self.builder.is_none();
            }
            match &mut self.builder {
                Some(builder) => {
                    builder.send(job);
                    self.away.push((state, group));
                }
                None => {
                    job.run();
                    self.put_back(data, job);
                }
            }
        }
        self.collect_done(data);
    }

    /// Puts back the tables the builder has finished, without waiting.
    fn collect_done(&mut self, data: &mut [StateData]) {
        while let Some(job) = self.builder.as_ref().and_then(|b| b.done.try_recv().ok()) {
            self.put_back(data, job);
        }
    }

    /// Waits for the builder's next table and puts it back.
    fn wait(&mut self, data: &mut [StateData]) {
        if let Some(builder) = &mut self.builder {
            let job = builder.next();
            self.put_back(data, job);
        }
    }

    fn put_back(&mut self, data: &mut [StateData], job: Job) {
        let Job {
            state,
            group,
            table,
            slots,
        } = job;
        let StateData::Bytes(tables) = &mut data[state] else {
            unreachable!("only value entries are held, and value states hold byte tables");
        };
        tables.attach_group(group, table);
        self.away.retain(|&away| away != (state, group));
        self.spare.push(slots);
    }
}
