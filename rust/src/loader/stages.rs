//! The three pipeline stages, each the body of its own thread(s), joined by bounded channels:
//!
//! 1. [`IoStage`]: resolve each local slot's row (the order) and ask the kernel to read its bytes;
//! 2. [`WorkerStage`] (`n_workers` of them): transform the slot's sample ([`super::sample::work`]);
//! 3. [`Assembler`]: put finished slots back in sequence order and assemble batches.
//!
//! Tickets bound the work in flight: the I/O stage takes one per slot, the assembler returns it
//! once the slot is placed, so the re-sequencing buffer never holds more than `in_flight` slots.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::guard::FailureGuard;
use super::sample::{work, Ctx, Done, Job, Row};
use super::{Batch, Failure, Mode, TransformFactory};
use crate::clip::Transform;
use crate::error::{Error, Result};
use crate::shards::{Dataset, Reader};

/// What the assembler hands the consumer.
pub(super) enum Out {
    Batch(Box<Batch>),
    End,
    Error(Error),
}

/// Start a named thread; the OS refusing is an [`Error::Thread`].
pub(super) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|source| Error::Thread {
            name: name.to_string(),
            source,
        })
}

/// Stage 1: order + I/O.
pub(super) struct IoStage {
    pub ctx: Arc<Ctx>,
    pub ds: Arc<Dataset>,
    pub tickets: Receiver<()>,
    pub jobs: Sender<Job>,
    /// Local slots to produce (None: infinite).
    pub total: Option<u64>,
}

impl IoStage {
    pub fn run(self) {
        let c = &self.ctx.cfg;
        let b = c.local_batch() as u64;
        let slot0 = (c.process_index as u64) * b;
        let mut reader = Reader::new(self.ds.clone(), 64);
        let mut q = 0u64;
        while self.total.is_none_or(|t| q < t) {
            if self.tickets.recv().is_err() || self.ctx.stop.load(Ordering::Relaxed) {
                return;
            }
            let step = c.start_step + q / b;
            let g = step * c.batch_size as u64 + slot0 + q % b;
            if self.jobs.send(self.job(&mut reader, q, g)).is_err() {
                return;
            }
            q += 1;
        }
    }

    /// The job of local slot `q` at stream position `g`; starts reading its bytes.
    fn job(&self, reader: &mut Reader, q: u64, g: u64) -> Job {
        if self.ctx.cfg.mode == Mode::Eval && g >= self.ctx.n_rows {
            return Job::Pad { q };
        }
        let index = self.ctx.index_at(g);
        let primary = reader.sample(index);
        if let Ok(s) = &primary {
            reader.prefetch(s);
        }
        Job::Sample {
            q,
            g,
            index,
            primary,
        }
    }
}

/// Stage 2: one transform worker.
pub(super) struct WorkerStage {
    pub ctx: Arc<Ctx>,
    pub ds: Arc<Dataset>,
    pub jobs: Receiver<Job>,
    pub done: Sender<Done>,
    pub factory: TransformFactory,
    /// The transform built up front by [`super::Pipeline::start`] (the first worker gets it).
    pub first: Option<Box<dyn Transform>>,
}

/// Samples a worker transforms between two `release_free_memory` calls.
const TRIM_EVERY: u64 = 16;

/// The least time between two trims in this process, whichever worker (of any loader) asks.
const TRIM_INTERVAL: Duration = Duration::from_millis(500);

/// Give the freed pages of the allocator's arenas back to the kernel. glibc keeps what a thread
/// freed in that thread's arena (and raises its mmap threshold after the first large free, so
/// the decode/resample buffers of 0.3-2 MB end up there too): without this each transform
/// thread held about 18 MB more than its live set, and peak RSS grew past buffers + 300 MB at
/// 16 workers (docs/issues/009-multi-crop).
///
/// `malloc_trim` walks every arena of the process, not the caller's: after an XLA compile it
/// walks hundreds of MB the compiler freed, and each madvise interrupts every core running a
/// thread of the process (TLB shootdowns). Called by each worker every 16 samples it cost the
/// workers 30-50 % of their time in a training process (docs/issues/022-gpu-kept-busy, section 7),
/// so at most one call per `TRIM_INTERVAL` runs, process-wide.
fn release_free_memory() {
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // +1: 0 means "never trimmed", so the first call trims.
    let now = EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1;
    let last = LAST_MS.load(Ordering::Relaxed);
    let due = last == 0 || now.saturating_sub(last) >= TRIM_INTERVAL.as_millis() as u64;
    if !due
        || LAST_MS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the kernel; no pointer is invalidated.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl WorkerStage {
    pub fn run(self) {
        let WorkerStage {
            ctx,
            ds,
            jobs,
            done,
            factory,
            first,
        } = self;
        let mut t = match first.map_or_else(|| factory(), Ok) {
            Ok(t) => t,
            Err(e) => {
                let _ = done.send(Done::Fatal(e));
                return;
            }
        };
        let mut reader = Reader::new(ds, 16);
        let mut n = 0u64;
        while let Ok(job) = jobs.recv() {
            if ctx.stop.load(Ordering::Relaxed) {
                return;
            }
            let d = work(&ctx, t.as_mut(), &mut reader, job);
            n += 1;
            if n.is_multiple_of(TRIM_EVERY) {
                release_free_memory();
            }
            let fatal = matches!(d, Done::Fatal(_));
            if done.send(d).is_err() || fatal {
                return;
            }
        }
    }
}

/// Stage 3: re-sequencing and batch assembly.
pub(super) struct Assembler {
    pub ctx: Arc<Ctx>,
    pub ds: Arc<Dataset>,
    pub guard: FailureGuard,
    pub done: Receiver<Done>,
    pub tickets: Sender<()>,
    pub out: Sender<Out>,
    pub total: Option<u64>,
}

impl Assembler {
    pub fn run(mut self) {
        let b = self.ctx.cfg.local_batch();
        let mut batch = self.new_batch(self.ctx.cfg.start_step);
        let mut pending: HashMap<u64, (Option<Box<Row>>, Vec<Failure>)> = HashMap::new();
        let mut next_q = 0u64;
        if self.total == Some(0) {
            let _ = self.out.send(Out::End);
            return;
        }
        while let Ok(done) = self.done.recv() {
            match done {
                Done::Fatal(e) => {
                    let _ = self.out.send(Out::Error(e));
                    return;
                }
                Done::Slot { q, row, failures } => {
                    pending.insert(q, (row, failures));
                }
            }
            while let Some((row, failures)) = pending.remove(&next_q) {
                let slot = (next_q % b as u64) as usize;
                self.guard
                    .record(&failures, row.as_ref().is_some_and(|r| r.valid));
                let end = self.total == Some(next_q + 1);
                if let Err(e) = self.guard.check(&self.ds, end) {
                    let _ = self.out.send(Out::Error(e));
                    return;
                }
                if let Some(row) = row {
                    self.place(&mut batch, slot, *row);
                }
                batch.failures.extend(failures);
                let _ = self.tickets.send(());
                next_q += 1;
                if slot == b - 1 {
                    let step = batch.step;
                    let full = std::mem::replace(&mut batch, self.new_batch(step + 1));
                    if self.out.send(Out::Batch(Box::new(full))).is_err() {
                        return;
                    }
                }
                if self.total == Some(next_q) {
                    let _ = self.out.send(Out::End);
                    return;
                }
            }
        }
    }

    /// An empty local batch: zero data, padding identity everywhere.
    fn new_batch(&self, step: u64) -> Batch {
        let c = &self.ctx.cfg;
        let b = c.local_batch();
        let (host, half) = (!c.device_features(), c.batch_dtype == "bfloat16");
        let int16 = c.wave_dtype == "int16";
        let sized = |on: bool, n: usize| if on { n } else { 0 };
        let views = c.n_views * b * c.n_frames * c.n_mels;
        let locals = c.n_local * b * c.local_view_frames() * c.n_mels;
        let wave = b * c.wave_samples();
        Batch {
            step,
            data: vec![0.0; sized(host && !half, views)],
            data16: vec![0; sized(host && half, views)],
            local16: vec![0; sized(host && half, locals)],
            wave: vec![0.0; sized(!host && !int16, wave)],
            wave16: vec![0; sized(!host && int16, wave)],
            wave_rounded: 0,
            crop_start: vec![0; sized(!host, c.n_views * b)],
            crop_frames: vec![0; sized(!host, c.n_views * b)],
            local_crop_start: vec![0; sized(!host, c.n_local * b)],
            local_crop_frames: vec![0; sized(!host, c.n_local * b)],
            target: vec![-1; b],
            target_multi: vec![0.0; b * self.ctx.n_targets],
            index: vec![-1; b],
            shard: vec![-1; b],
            valid: vec![false; b],
            start_s: vec![-1.0; c.n_views * b],
            local: vec![0.0; sized(host && !half, locals)],
            local_start_s: vec![-1.0; c.n_local * b],
            failures: Vec::new(),
            damaged: Vec::new(),
        }
    }

    /// Copy `row` into `slot` of `batch`; views (and local crops) are interleaved as
    /// (n_views, batch, ...).
    fn place(&self, batch: &mut Batch, slot: usize, row: Row) {
        let c = &self.ctx.cfg;
        let b = c.local_batch();
        let (views, locals) = ((c.n_views, b, slot), (c.n_local, b, slot));
        interleave(&mut batch.start_s, &row.start_s, views, |x| x);
        interleave(&mut batch.local_start_s, &row.local_start_s, locals, |x| x);
        if c.batch_dtype == "bfloat16" {
            interleave(&mut batch.data16, &row.data, views, bf16_bits);
            interleave(&mut batch.local16, &row.local, locals, bf16_bits);
        } else {
            interleave(&mut batch.data, &row.data, views, |x| x);
            interleave(&mut batch.local, &row.local, locals, |x| x);
        }
        if c.device_features() {
            if c.wave_dtype == "int16" {
                let n = row.wave16.len();
                batch.wave16[slot * n..(slot + 1) * n].copy_from_slice(&row.wave16);
                batch.wave_rounded += row.rounded;
            } else {
                let n = row.wave.len();
                batch.wave[slot * n..(slot + 1) * n].copy_from_slice(&row.wave);
            }
            let k = &row.crops;
            interleave(&mut batch.crop_start, &k.start, views, |x| x);
            interleave(&mut batch.crop_frames, &k.frames, views, |x| x);
            interleave(&mut batch.local_crop_start, &k.local_start, locals, |x| x);
            interleave(&mut batch.local_crop_frames, &k.local_frames, locals, |x| x);
        }
        batch.target[slot] = row.label;
        let n = self.ctx.n_targets;
        for &c in &row.classes {
            if c < 0 {
                // A null label list: unlabelled, the whole row -1 (masked by the objectives).
                batch.target_multi[slot * n..(slot + 1) * n].fill(-1.0);
                break;
            }
            // In range: the pipeline checked every label against n_classes at start.
            batch.target_multi[slot * n + c as usize] = 1.0;
        }
        batch.damaged.extend(row.damaged);
        batch.index[slot] = row.index;
        batch.shard[slot] = row.shard;
        batch.valid[slot] = row.valid;
    }
}

/// Copy a sample's `n` views `src` (n, len) into slot `slot` of a batch laid out as (n, batch,
/// len), converting each value with `f`; nothing when `src` is empty.
fn interleave<S: Copy, D>(
    dst: &mut [D],
    src: &[S],
    (n, b, slot): (usize, usize, usize),
    f: impl Fn(S) -> D,
) {
    if n == 0 || src.is_empty() {
        return;
    }
    let len = src.len() / n;
    for v in 0..n {
        let at = (v * b + slot) * len;
        for (d, &x) in dst[at..at + len]
            .iter_mut()
            .zip(&src[v * len..(v + 1) * len])
        {
            *d = f(x);
        }
    }
}

/// The bfloat16 nearest to `x` (ties to even), as its bits: what XLA's convert gives, so a
/// step that casts its float32 input to bfloat16 sees the same values either way. Features are
/// finite (the transform checks them).
pub(super) fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}
