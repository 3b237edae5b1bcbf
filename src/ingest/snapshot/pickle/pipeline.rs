//! Pipelined reading: the sink decodes a batch on a second thread while the next batch is
//! parsed.
//!
//! Parsing the pickle and decoding a snapshot's trace entries cost about the same (issue
//! 15: each about a third of a million-entry read), and one thread did both in turn. Here
//! the sink moves to a worker thread together with a replica of the arenas; each time a
//! batch into a taken list closes, the parser sends what the arenas gained since the last
//! batch (a [`Delta`]: every arena only grows between batches) and the batch's hand-overs,
//! then parses on. The worker applies the delta, hands the batch to the sink, asks it
//! which containers it consumed (the verdict) and sends that back.
//!
//! A batch's release needs its verdict, so the parser releases batch N when batch N+2
//! closes (`DEPTH`: the worker is two batches behind at most, so that neither side waits
//! on the other at every batch), with the later batches' containers above it in the
//! arenas (moved down as one block, see `release_batch_in`). The replica does the same
//! release at the same point, so the two arenas stay equal and every delta lines up.
//! Numbers are the one place where later batches sit in the way: a batch's wide integers
//! are dropped by truncating their arena, so the batches of a session write to three
//! arenas in turn (`ints` and `lane_ints`; see `TAG_INT64_LANE1`).
//!
//! The sink sees exactly the calls, in the same order and on the same arena contents, as
//! when the pickle is read on one thread; the verdicts and notes are the sink's own.
//! Anything outside that steady state (adding to a container the replica already holds,
//! a list the sink might start to take, the end of the pickle, an error) first ends the
//! session: the pending verdicts are applied, the sink comes back, and hand-overs not yet
//! sent are given to it on the parser's thread. A later batch may start a new session;
//! the worker keeps its replica, which is reused when nothing it holds changed meanwhile.

use std::collections::VecDeque;
use std::sync::mpsc;

use super::{
    ArenaLens, Batch, Blob, Chunk, Container, ContainerId, Handle, ListSink, Machine, Pickle,
    PickleError, release_batch_in,
};

/// How many closed batches the parser sends ahead of the one whose verdict it applies:
/// the batches alive at once (these and the one being parsed) must not outnumber the
/// integer lanes.
const DEPTH: usize = 2;
const LANES: u8 = 3;

/// The most sessions one read starts: each may copy the arenas, so a hand-made pickle
/// that ends a session at every batch must not make the copies quadratic.
const MAX_SESSIONS: u32 = 64;

/// The largest arenas copied to start a session (see `arena_bytes`) where the input's
/// length is not known; where it is, arenas up to what is left to read (see
/// `batch_opens`).
const MAX_REPLICA_BYTES: usize = 64 << 20;

/// About how many bytes the arenas of `p` hold.
fn arena_bytes(p: &Pickle<'_>) -> usize {
    p.items.len() * size_of::<Handle>()
        + p.containers.len() * size_of::<Container>()
        + p.chunks.len() * size_of::<Chunk>()
        + p.blobs.len() * size_of::<Blob>()
        + p.text.len()
        + p.data.len()
        + (p.ints.len() + p.lane_ints[0].len() + p.lane_ints[1].len() + p.floats.len()) * 8
        + p.bigs.len() * size_of::<super::BigInt>()
}

/// How long each arena was when the replica was last brought level with the parser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Watermark {
    pub(super) containers: usize,
    chunks: usize,
    items: usize,
    blobs: usize,
    text: usize,
    data: usize,
    ints: usize,
    lane_ints: [usize; 2],
    bigs: usize,
    floats: usize,
}

impl Watermark {
    fn of(p: &Pickle<'_>) -> Watermark {
        Watermark {
            containers: p.containers.len(),
            chunks: p.chunks.len(),
            items: p.items.len(),
            blobs: p.blobs.len(),
            text: p.text.len(),
            data: p.data.len(),
            ints: p.ints.len(),
            lane_ints: [p.lane_ints[0].len(), p.lane_ints[1].len()],
            bigs: p.bigs.len(),
            floats: p.floats.len(),
        }
    }
}

/// What the arenas gained past a [`Watermark`].
#[derive(Default)]
struct Delta {
    containers: Vec<Container>,
    chunks: Vec<Chunk>,
    items: Vec<Handle>,
    blobs: Vec<Blob>,
    text: String,
    data: Vec<u8>,
    ints: Vec<i64>,
    lane_ints: [Vec<i64>; 2],
    bigs: Vec<super::BigInt>,
    floats: Vec<f64>,
}

impl Delta {
    /// Fills this (emptied by `apply`, its buffers kept) with what `p` gained past `w`.
    fn fill(&mut self, p: &Pickle<'_>, w: &Watermark) {
        fn tail<T: Copy>(into: &mut Vec<T>, v: &[T], from: usize) {
            into.extend_from_slice(v.get(from..).unwrap_or(&[]));
        }
        tail(&mut self.containers, &p.containers, w.containers);
        tail(&mut self.chunks, &p.chunks, w.chunks);
        tail(&mut self.items, &p.items, w.items);
        tail(&mut self.blobs, &p.blobs, w.blobs);
        self.text.push_str(p.text.get(w.text..).unwrap_or(""));
        tail(&mut self.data, &p.data, w.data);
        tail(&mut self.ints, &p.ints, w.ints);
        tail(&mut self.lane_ints[0], &p.lane_ints[0], w.lane_ints[0]);
        tail(&mut self.lane_ints[1], &p.lane_ints[1], w.lane_ints[1]);
        tail(&mut self.bigs, &p.bigs, w.bigs);
        tail(&mut self.floats, &p.floats, w.floats);
    }

    /// Appends what this holds to `p`, and empties it (`append` keeps its buffers).
    fn apply(&mut self, p: &mut Pickle<'_>) {
        p.containers.append(&mut self.containers);
        p.chunks.append(&mut self.chunks);
        p.items.append(&mut self.items);
        p.blobs.append(&mut self.blobs);
        p.text.push_str(&self.text);
        self.text.clear();
        p.data.append(&mut self.data);
        p.ints.append(&mut self.ints);
        p.lane_ints[0].append(&mut self.lane_ints[0]);
        p.lane_ints[1].append(&mut self.lane_ints[1]);
        p.bigs.append(&mut self.bigs);
        p.floats.append(&mut self.floats);
    }
}

/// Elements handed over to a taken list, held until they are sent.
#[derive(Clone, Debug)]
pub(super) struct HandOver {
    list: u32,
    /// The list's length after them.
    len: u32,
    /// Input bytes read when they were handed over.
    offset: u64,
    elements: std::ops::Range<usize>,
}

/// Which of a batch's containers the sink consumed (with its note), by index from the
/// batch's first container.
type Verdict = Vec<Option<(u32, u32)>>;

/// A batch sent to the worker and not released: where it was, and its verdict.
type Sent = (Batch, ArenaLens, Verdict);

/// A closed batch, for the worker. It comes back with the verdict, emptied, to be filled
/// again: its buffers are allocated once per read, not once per batch.
#[derive(Default)]
struct BatchJob {
    /// The arenas' gain since the last job, as they were before `release`.
    delta: Delta,
    /// How many of the oldest batches decoded to release (with their verdicts, in order)
    /// after applying `delta`.
    release: usize,
    hand_overs: Vec<HandOver>,
    elements: Vec<Handle>,
    batch: Batch,
    end: ArenaLens,
}

enum Job<'s> {
    /// The sink moves to the worker; `replica` replaces the worker's copy of the arenas
    /// (`None`: the copy it kept from the last session is still level).
    Start {
        sink: &'s mut dyn ListSink,
        replica: Option<Box<Pickle<'static>>>,
    },
    Batch(Box<BatchJob>),
    /// The session ends: bring the replica level (`delta`, then the oldest batches'
    /// releases), and give the sink back.
    End {
        delta: Box<Delta>,
        release: usize,
    },
}

enum Reply<'s> {
    /// Which of the batch's containers the sink consumed, by index from the batch's first;
    /// and the job, emptied.
    Verdict(Verdict, Box<BatchJob>),
    /// The sink stopped the read (it keeps the reason).
    Stopped,
    Ended(&'s mut dyn ListSink),
}

/// The parser's side of a pipelined read.
pub(super) struct Pipeline<'s> {
    jobs: mpsc::Sender<Job<'s>>,
    replies: mpsc::Receiver<Reply<'s>>,
    /// The sink's check of a list it has not taken (see [`ListSink::pipelining`]).
    might_take: fn(&Pickle<'_>, &[Handle], usize) -> bool,
    /// A session is on: the worker holds the sink.
    pub(super) active: bool,
    /// The worker's replica is level with the arenas up to `synced`, and nothing below
    /// it has changed since.
    pub(super) level: bool,
    /// What the worker's replica holds.
    pub(super) synced: Watermark,
    /// The batches sent whose verdicts have not been applied, oldest first, each with its
    /// verdict once received.
    pending: VecDeque<Sent>,
    hand_overs: Vec<HandOver>,
    elements: Vec<Handle>,
    /// Jobs come back to be filled again.
    spare: Vec<BatchJob>,
    sessions_left: u32,
    /// The lane of the next batch's integers.
    next_lane: u8,
}

impl Pipeline<'_> {
    /// Receives the verdicts of the `n` oldest pending batches (their jobs come back to
    /// be filled again); `false` if the sink stopped the read instead.
    fn await_verdicts(&mut self, n: usize) -> bool {
        for k in 0..n {
            match self.replies.recv() {
                Ok(Reply::Verdict(v, spent)) => {
                    self.pending[k].2 = v;
                    self.spare.push(*spent);
                }
                _ => return false,
            }
        }
        true
    }
}

/// Runs `read` with a worker thread for a pipelined read, given the sink's check
/// ([`ListSink::pipelining`]; `None`: `read` runs alone).
#[allow(clippy::type_complexity)]
pub(super) fn with_worker<'s, T>(
    might_take: Option<fn(&Pickle<'_>, &[Handle], usize) -> bool>,
    read: impl FnOnce(Option<Pipeline<'s>>) -> T,
) -> T {
    let Some(might_take) = might_take else {
        return read(None);
    };
    std::thread::scope(|scope| {
        let (jobs, job_rx) = mpsc::channel::<Job<'s>>();
        let (reply_tx, replies) = mpsc::channel::<Reply<'s>>();
        let worker = std::thread::Builder::new()
            .name("snapshot-decode".into())
            .spawn_scoped(scope, move || work(job_rx, reply_tx));
        if worker.is_err() {
            // No thread to be had: read on this one.
            return read(None);
        }
        read(Some(Pipeline {
            jobs,
            replies,
            might_take,
            active: false,
            level: false,
            synced: Watermark::default(),
            pending: VecDeque::new(),
            hand_overs: Vec::new(),
            elements: Vec::new(),
            spare: Vec::new(),
            sessions_left: MAX_SESSIONS,
            next_lane: 1,
        }))
        // The pipeline (its sender) is dropped with `read`'s return: the worker's loop
        // ends and the scope joins it.
    })
}

/// The note `verdict` gives container `c` of batch `b`.
fn note_of(verdict: &[Option<(u32, u32)>], b: &Batch, c: ContainerId) -> Option<(u32, u32)> {
    verdict
        .get(c.index().wrapping_sub(b.containers))
        .copied()
        .flatten()
}

/// Releases the `n` oldest of `queue` (batches with their verdicts) in order, moving the
/// marks of those left, and of `open` (a batch still open), down as far as each release
/// moved what lay above it.
fn release_oldest<V: AsRef<[Option<(u32, u32)>]>>(
    p: &mut Pickle<'_>,
    queue: &mut VecDeque<(Batch, ArenaLens, V)>,
    n: usize,
    mut open: Option<&mut Batch>,
) {
    for _ in 0..n {
        let Some((b, end, verdict)) = queue.pop_front() else {
            return;
        };
        let shift = release_batch_in(p, &b, &end, |_, c| note_of(verdict.as_ref(), &b, c));
        for (later, later_end, _) in queue.iter_mut() {
            later.shift_down(shift, p);
            later_end.items -= shift.items;
            later_end.chunks -= shift.chunks;
        }
        if let Some(open) = open.as_deref_mut() {
            open.shift_down(shift, p);
        }
    }
}

/// The worker: applies each job to its replica and hands the batch to the sink.
fn work<'s>(jobs: mpsc::Receiver<Job<'s>>, replies: mpsc::Sender<Reply<'s>>) {
    let mut replica: Box<Pickle<'static>> = Box::new(Pickle::empty());
    let mut sink: Option<&'s mut dyn ListSink> = None;
    // The batches decoded and not released, with their verdicts, oldest first: released
    // when a job says so.
    let mut decoded: VecDeque<Sent> = VecDeque::new();
    let mut stopped = false;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Start {
                sink: s,
                replica: r,
            } => {
                if let Some(r) = r {
                    replica = r;
                }
                decoded.clear();
                sink = Some(s);
                stopped = false;
            }
            Job::Batch(mut job) => {
                let Some(s) = sink.as_deref_mut().filter(|_| !stopped) else {
                    let _ = replies.send(Reply::Stopped);
                    continue;
                };
                job.delta.apply(&mut replica);
                release_oldest(&mut replica, &mut decoded, job.release, None);
                let BatchJob {
                    hand_overs,
                    elements,
                    batch,
                    end,
                    ..
                } = &mut *job;
                let (batch, end) = (*batch, *end);
                for h in hand_overs.iter() {
                    if let Some(c) = replica.containers.get_mut(h.list as usize) {
                        c.len = h.len;
                    }
                    let taken = elements.get(h.elements.clone()).unwrap_or(&[]);
                    if s.take(&replica, ContainerId(h.list), taken, h.offset)
                        .is_err()
                    {
                        stopped = true;
                        break;
                    }
                }
                if stopped {
                    let _ = replies.send(Reply::Stopped);
                    continue;
                }
                let verdict: Verdict = (batch.containers..end.containers)
                    .map(|c| s.release(&replica, ContainerId(c as u32)))
                    .collect();
                hand_overs.clear();
                elements.clear();
                let _ = replies.send(Reply::Verdict(verdict.clone(), job));
                decoded.push_back((batch, end, verdict));
            }
            Job::End { mut delta, release } => {
                delta.apply(&mut replica);
                release_oldest(&mut replica, &mut decoded, release, None);
                decoded.clear();
                if let Some(s) = sink.take() {
                    let _ = replies.send(Reply::Ended(s));
                }
            }
        }
    }
}

impl<'s> Machine<'_, '_, 's> {
    /// The pipeline, if a session is on.
    #[inline]
    pub(super) fn session(&mut self) -> Option<&mut Pipeline<'s>> {
        self.pipe.as_mut().filter(|p| p.active)
    }

    /// Whether the list at `stack[target]` is taken, asked while a session is on: from the
    /// lists taken so far, or, where the sink might take a new one, by ending the session
    /// and asking the sink. `None`: no session is on.
    pub(super) fn session_takes(&mut self, target: usize) -> Option<Result<bool, PickleError>> {
        let pipe = self.pipe.as_ref().filter(|p| p.active)?;
        let list = self.stack.get(target)?.index() as u32;
        if self.taken.contains(&list) {
            return Some(Ok(true));
        }
        if !(pipe.might_take)(&self.pickle, &self.stack, target) {
            return Some(Ok(false));
        }
        match self.end_session() {
            Ok(()) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Before something changes a container the worker's replica already holds: ends the
    /// session, if one is on, and marks the replica no longer level.
    #[inline]
    pub(super) fn before_change(&mut self, container: usize) -> Result<(), PickleError> {
        match &self.pipe {
            Some(p) if container < p.synced.containers => {}
            _ => return Ok(()),
        }
        self.end_session()?;
        if let Some(p) = self.pipe.as_mut() {
            p.level = false;
        }
        Ok(())
    }

    /// When a batch opens: starts a session if none is on and one may start, and picks
    /// the batch's integer arena.
    pub(super) fn batch_opens(&mut self) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        if !pipe.active && pipe.sessions_left > 0 && !pipe.level {
            // A replica copies the arenas: worth it where they are small, or smaller than
            // what is left to read (the trace the pipeline reads faster). Where what came
            // before is most of the file (segments with long histories), a copy would
            // cost more memory than decoding beside the parser saves time on the rest:
            // read on one thread.
            let bytes = arena_bytes(&self.pickle) as u64;
            let left = self
                .src
                .len_hint()
                .map(|len| len.saturating_sub(self.src.offset()));
            if bytes > MAX_REPLICA_BYTES as u64 && left.is_none_or(|left| bytes > left) {
                pipe.sessions_left = 0;
            }
        }
        if !pipe.active && pipe.sessions_left > 0 {
            if let Some(sink) = self.sink.take() {
                let replica = (!pipe.level).then(|| Box::new(self.pickle.clone()));
                match pipe.jobs.send(Job::Start { sink, replica }) {
                    Ok(()) => {
                        pipe.sessions_left -= 1;
                        pipe.active = true;
                        if !pipe.level {
                            // A fresh copy; a copy kept level gets what was added since
                            // with the first batch.
                            pipe.synced = Watermark::of(&self.pickle);
                            pipe.level = true;
                        }
                        pipe.pending.clear();
                    }
                    Err(mpsc::SendError(job)) => {
                        // The worker is gone: go on without it.
                        if let Job::Start { sink, .. } = job {
                            self.sink = Some(sink);
                        }
                        pipe.sessions_left = 0;
                    }
                }
            }
        }
        if pipe.active {
            self.lane = pipe.next_lane;
            pipe.next_lane = (pipe.next_lane + 1) % LANES;
        }
    }

    /// Holds elements handed over to `list` during a session; `false` outside one.
    pub(super) fn hold_hand_over(&mut self, list: u32, len: u32, from: usize, offset: u64) -> bool {
        let Some(pipe) = self.pipe.as_mut().filter(|p| p.active) else {
            return false;
        };
        let start = pipe.elements.len();
        pipe.elements.extend_from_slice(&self.stack[from..]);
        pipe.hand_overs.push(HandOver {
            list,
            len,
            offset,
            elements: start..pipe.elements.len(),
        });
        true
    }

    /// A batch closed during a session: sends it to the worker, and applies the oldest
    /// verdict (releasing that batch) once `DEPTH` batches are waiting for theirs.
    pub(super) fn session_close(&mut self, b: Batch) -> Result<(), PickleError> {
        let end = ArenaLens::of(&self.pickle, b.lane);
        let Some(pipe) = self.pipe.as_mut().filter(|p| p.active) else {
            return Ok(());
        };
        let release = usize::from(pipe.pending.len() >= DEPTH);
        if !pipe.await_verdicts(release) {
            return self.session_stopped();
        }
        // The replica gets what the arenas gained as it was before the release, then does
        // the same release.
        let mut job = pipe.spare.pop().unwrap_or_default();
        job.delta.fill(&self.pickle, &pipe.synced);
        pipe.pending.push_back((b, end, Vec::new()));
        release_oldest(&mut self.pickle, &mut pipe.pending, release, None);
        pipe.synced = Watermark::of(&self.pickle);
        let Some(&(batch, end, _)) = pipe.pending.back() else {
            return Ok(());
        };
        job.release = release;
        job.batch = batch;
        job.end = end;
        // The job's emptied buffers are the next batch's.
        std::mem::swap(&mut job.hand_overs, &mut pipe.hand_overs);
        std::mem::swap(&mut job.elements, &mut pipe.elements);
        if pipe.jobs.send(Job::Batch(Box::new(job))).is_err() {
            return self.session_stopped();
        }
        Ok(())
    }

    /// The worker stopped (the sink refused a batch): end the session and stop the read.
    /// What was handed over since is dropped: the sink stopped before it.
    fn session_stopped(&mut self) -> Result<(), PickleError> {
        if let Some(p) = self.pipe.as_mut() {
            p.pending.clear();
            p.hand_overs.clear();
            p.elements.clear();
        }
        self.end_session()?;
        Err(PickleError::Stopped { offset: self.op_at })
    }

    /// Ends the session, if one is on: applies the pending verdicts, brings the replica
    /// level, takes the sink back and gives it the hand-overs not yet sent. `Err(Stopped)`
    /// if the sink stopped the read meanwhile.
    pub(super) fn end_session(&mut self) -> Result<(), PickleError> {
        let Some(pipe) = self.pipe.as_mut().filter(|p| p.active) else {
            return Ok(());
        };
        pipe.active = false;
        let stopped = !pipe.await_verdicts(pipe.pending.len());
        let mut delta = Box::new(pipe.spare.pop().map(|j| j.delta).unwrap_or_default());
        delta.fill(&self.pickle, &pipe.synced);
        let release = if stopped { 0 } else { pipe.pending.len() };
        release_oldest(
            &mut self.pickle,
            &mut pipe.pending,
            release,
            self.batch.as_mut(),
        );
        pipe.pending.clear();
        // A batch closed but not released (its closing opcode was not `APPENDS`) is not
        // looked at again: it does not need moving.
        self.closed = None;
        pipe.synced = Watermark::of(&self.pickle);
        pipe.level = !stopped;
        let hand_overs = std::mem::take(&mut pipe.hand_overs);
        let elements = std::mem::take(&mut pipe.elements);
        let sent = pipe.jobs.send(Job::End { delta, release });
        match sent.ok().and_then(|()| pipe.replies.recv().ok()) {
            Some(Reply::Ended(sink)) => self.sink = Some(sink),
            // The worker is gone (it panicked; the scope re-raises that when it ends).
            _ => {
                pipe.sessions_left = 0;
                pipe.level = false;
                return Err(PickleError::Stopped { offset: self.op_at });
            }
        }
        if stopped {
            return Err(PickleError::Stopped { offset: self.op_at });
        }
        if let Some(sink) = self.sink.as_deref_mut() {
            for h in &hand_overs {
                let taken = elements.get(h.elements.clone()).unwrap_or(&[]);
                sink.take(&self.pickle, ContainerId(h.list), taken, h.offset)
                    .map_err(|()| PickleError::Stopped { offset: self.op_at })?;
            }
        }
        Ok(())
    }
}

impl Batch {
    /// After a release below this batch moved its items and chunks down.
    fn shift_down(&mut self, shift: super::Shift, p: &Pickle<'_>) {
        if shift.items == 0 && shift.chunks == 0 {
            return;
        }
        self.items -= shift.items;
        self.chunks -= shift.chunks;
        self.last_chunk_len = self
            .chunks
            .checked_sub(1)
            .and_then(|i| p.chunks.get(i))
            .map(|c| c.len);
    }
}
