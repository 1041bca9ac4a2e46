//! The deterministic loader pipeline: I/O thread -> N transform workers -> re-sequencing and
//! batch assembly, joined by bounded channels.
//!
//! # The stream
//!
//! The global batch at step `s` is made of `batch_size` slots; slot `j` holds stream position
//! `g = s * batch_size + j`.
//!
//! * Train: the row at `g` is `Order::index_at(g)` (see [`crate::order`]): an infinite stream of
//!   epochs, each an exact permutation. View `v` of a row is cropped at
//!   `Crop::Fraction(crop_fraction(seed, epoch, index, v))`.
//! * Eval: the row at `g` is `g` itself (index order), centre crop (`Crop::Fraction(0.5)`),
//!   finite: `ceil(n / batch_size)` batches; slots with `g >= n` are padding (`valid = false`,
//!   `index = -1`).
//!
//! Process `p` of `P` owns slots `[p * b, (p + 1) * b)` with `b = batch_size / P`, so the union
//! over processes of step `s` is the single-process global batch at step `s`.
//!
//! # Failures
//!
//! The transform is deterministic on (bytes, crop), so a sample that fails always fails. In train
//! mode the owning process replaces a failed slot by the row at `g + k * batch_size` for the first
//! `k = 1, 2, ...` (at most `max_replacements`) that succeeds: the same lane of a later batch.
//! Only the owner decodes it, the choice is a pure function of the data, and the batch positions
//! never shift, so the union property, determinism and O(1) resume all hold; the price is that
//! the replacement row appears twice in that epoch. If every candidate fails, the slot is emitted
//! with `valid = false`. In eval mode a failed slot is emitted with `valid = false` (and its real
//! index), so every row is still visited exactly once.
//!
//! Because batch positions never depend on what happened before, the state of the stream is just
//! the next step: restoring costs nothing beyond opening the dataset.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};

use crate::clip::{Crop, Transform};
use crate::error::{Error, Result};
use crate::order::{crop_fraction, Order};
use crate::shards::{Dataset, Reader, SampleRef};

/// Builds one transform per worker thread.
pub type TransformFactory = Arc<dyn Fn() -> Result<Box<dyn Transform>> + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Train,
    Eval,
}

/// Everything that shapes the stream, plus the knobs that only affect speed.
#[derive(Clone, Debug)]
pub struct LoaderConfig {
    pub mode: Mode,
    /// Global batch size (all processes together).
    pub batch_size: usize,
    pub seed: u64,
    pub n_views: usize,
    pub n_frames: usize,
    pub n_mels: usize,
    pub block_size: u64,
    pub shuffle_window: u64,
    /// Normalisation: `(x - mean) / (2 * std)`.
    pub mean: f32,
    pub std: f32,
    pub max_replacements: u32,
    /// The first global step to produce.
    pub start_step: u64,
    pub process_index: usize,
    pub process_count: usize,
    // Speed only:
    pub n_workers: usize,
    /// Assembled batches queued ahead of the consumer.
    pub prefetch: usize,
    /// Samples dispatched but not yet assembled (bounds the re-sequencing buffer).
    pub in_flight: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            mode: Mode::Train,
            batch_size: 32,
            seed: 0,
            n_views: 1,
            n_frames: 512,
            n_mels: 128,
            block_size: 16,
            shuffle_window: 8192,
            mean: -7.2,
            std: 4.43,
            max_replacements: 16,
            start_step: 0,
            process_index: 0,
            process_count: 1,
            n_workers: 2,
            prefetch: 2,
            in_flight: 0,
        }
    }
}

fn at_least(name: &'static str, v: u64, min: u64) -> Result<()> {
    if v < min {
        return Err(Error::bad_argument(name, format!(">= {min}"), v));
    }
    Ok(())
}

impl LoaderConfig {
    /// Check every field against the dataset size; errors name expected and actual values.
    pub fn validate(&self, n_rows: u64) -> Result<()> {
        if n_rows == 0 {
            return Err(Error::bad_argument(
                "shards",
                "a dataset with at least one row",
                "0 rows",
            ));
        }
        at_least("batch_size", self.batch_size as u64, 1)?;
        at_least("n_workers", self.n_workers as u64, 1)?;
        at_least("process_count", self.process_count as u64, 1)?;
        at_least("n_views", self.n_views as u64, 1)?;
        at_least("n_frames", self.n_frames as u64, 1)?;
        at_least("n_mels", self.n_mels as u64, 1)?;
        at_least("block_size", self.block_size, 1)?;
        at_least("shuffle_window", self.shuffle_window, 1)?;
        at_least("prefetch", self.prefetch as u64, 1)?;
        if self.process_index >= self.process_count {
            return Err(Error::bad_argument(
                "process_index",
                format!("< process_count={}", self.process_count),
                self.process_index,
            ));
        }
        if !self.batch_size.is_multiple_of(self.process_count) {
            return Err(Error::bad_argument(
                "batch_size",
                format!("a multiple of process_count={}", self.process_count),
                self.batch_size,
            ));
        }
        if !(self.std.is_finite() && self.std > 0.0) {
            return Err(Error::bad_argument("std", "a finite value > 0", self.std));
        }
        if !self.mean.is_finite() {
            return Err(Error::bad_argument("mean", "a finite value", self.mean));
        }
        Ok(())
    }

    /// Slots of each global batch that this process produces.
    pub fn local_batch(&self) -> usize {
        self.batch_size / self.process_count
    }

    /// Number of global batches of one eval pass.
    pub fn eval_batches(&self, n_rows: u64) -> u64 {
        n_rows.div_ceil(self.batch_size as u64)
    }
}

/// A sample that failed, for stats and logs.
#[derive(Clone, Debug)]
pub struct Failure {
    pub index: u64,
    pub shard: u32,
    pub row: u64,
    pub error: String,
}

/// One local batch: this process's slice of global step `step`.
#[derive(Debug)]
pub struct Batch {
    pub step: u64,
    /// Row-major (n_views, batch, n_frames, n_mels).
    pub data: Vec<f32>,
    pub target: Vec<i64>,
    pub index: Vec<i64>,
    pub shard: Vec<i32>,
    pub valid: Vec<bool>,
    /// Samples that failed while producing this batch (replaced or marked invalid).
    pub failures: Vec<Failure>,
}

/// Counters shared by the pipeline threads. They include prefetched work.
#[derive(Default)]
struct SharedStats {
    decoded: AtomicU64,
    failures: AtomicU64,
    replaced: AtomicU64,
    invalid: AtomicU64,
    recent: Mutex<VecDeque<Failure>>,
}

/// A snapshot of the pipeline counters.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Samples transformed successfully (including prefetched ones).
    pub decoded: u64,
    /// Sample failures (a sample failing again in a later epoch counts again).
    pub failures: u64,
    /// Train slots filled by a replacement after a failure.
    pub replaced: u64,
    /// Slots emitted with `valid = false` because of failures (not eval padding).
    pub invalid: u64,
    /// The last few failures, oldest first.
    pub recent_failures: Vec<Failure>,
    pub queued_batches: usize,
}

const RECENT_FAILURES: usize = 8;

/// What [`Pipeline::recv_timeout`] returns.
pub enum Next {
    Batch(Batch),
    /// An eval pass is over.
    End,
    Timeout,
    Error(Error),
}

enum Job {
    /// Eval padding past the end of the dataset.
    Pad { q: u64 },
    Sample {
        q: u64,
        g: u64,
        index: u64,
        primary: Result<SampleRef>,
    },
}

struct Row {
    data: Vec<f32>,
    label: i64,
    index: i64,
    shard: i32,
    valid: bool,
}

enum Done {
    Slot {
        q: u64,
        row: Option<Row>,
        failures: Vec<Failure>,
    },
    Fatal(Error),
}

enum Out {
    Batch(Batch),
    End,
    Error(Error),
}

/// A running pipeline. Dropping it (or [`Pipeline::close`]) stops and joins every thread.
pub struct Pipeline {
    rx: Option<Receiver<Out>>,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<SharedStats>,
    stop: Arc<AtomicBool>,
    finished: bool,
    /// Set once the pipeline failed; every later call reports it again.
    failed: Option<String>,
}

/// Shared, read-only context of the worker threads.
struct Ctx {
    cfg: LoaderConfig,
    order: Order,
    n_rows: u64,
    stats: Arc<SharedStats>,
    stop: Arc<AtomicBool>,
}

impl Ctx {
    fn record_failure(&self, f: &Failure) {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        let mut r = self.stats.recent.lock().unwrap();
        if r.len() == RECENT_FAILURES {
            r.pop_front();
        }
        r.push_back(f.clone());
    }

    /// Stream position -> row.
    fn index_at(&self, g: u64) -> u64 {
        match self.cfg.mode {
            Mode::Train => self.order.index_at(g),
            Mode::Eval => g,
        }
    }
}

/// A failure that is the sample's fault (skip it) or the configuration's (stop the loader).
enum SampleError {
    Sample(Error),
    Fatal(Error),
}

impl From<Error> for SampleError {
    fn from(e: Error) -> Self {
        match e {
            Error::BadArgument { .. } | Error::StateMismatch { .. } => SampleError::Fatal(e),
            e => SampleError::Sample(e),
        }
    }
}

/// Transform every view of one sample into normalised, padded (n_views, n_frames, n_mels).
fn featurize(
    ctx: &Ctx,
    t: &mut dyn Transform,
    s: &SampleRef,
    g: u64,
) -> std::result::Result<Vec<f32>, SampleError> {
    let c = &ctx.cfg;
    let (tf, m) = (c.n_frames, c.n_mels);
    let mut out = vec![0f32; c.n_views * tf * m];
    let epoch = g / ctx.n_rows;
    let scale = 1.0 / (2.0 * c.std);
    for v in 0..c.n_views {
        let crop = match c.mode {
            Mode::Train => Crop::Fraction(crop_fraction(c.seed, epoch, s.index, v as u64)),
            Mode::Eval => Crop::Fraction(0.5),
        };
        let f = t.apply(s.bytes.as_slice(), crop)?;
        if f.n_mels != m || f.data.len() != f.n_frames * f.n_mels {
            return Err(SampleError::Fatal(Error::bad_argument(
                "n_mels",
                format!("transform output with {m} mel bins"),
                format!(
                    "{} mels x {} frames in {} values",
                    f.n_mels,
                    f.n_frames,
                    f.data.len()
                ),
            )));
        }
        let keep = f.n_frames.min(tf);
        let dst = &mut out[v * tf * m..v * tf * m + keep * m];
        for (d, &x) in dst.iter_mut().zip(&f.data[..keep * m]) {
            *d = (x - c.mean) * scale;
        }
        // Frames past the clip stay 0.0: the dataset mean after normalisation.
    }
    Ok(out)
}

fn work(ctx: &Ctx, t: &mut dyn Transform, reader: &mut Reader, job: Job) -> Done {
    let (q, g0, index0, primary) = match job {
        Job::Pad { q } => {
            return Done::Slot {
                q,
                row: None,
                failures: vec![],
            }
        }
        Job::Sample {
            q,
            g,
            index,
            primary,
        } => (q, g, index, primary),
    };
    let tries = match ctx.cfg.mode {
        Mode::Train => ctx.cfg.max_replacements as u64 + 1,
        Mode::Eval => 1,
    };
    let mut failures = Vec::new();
    let mut candidate = primary;
    let (mut g, mut index) = (g0, index0);
    for k in 0..tries {
        if k > 0 {
            if ctx.stop.load(Ordering::Relaxed) {
                break;
            }
            g = g0 + k * ctx.cfg.batch_size as u64;
            index = ctx.index_at(g);
            candidate = reader.sample(index);
        }
        let f = match &candidate {
            Ok(s) => match featurize(ctx, t, s, g) {
                Ok(data) => {
                    ctx.stats.decoded.fetch_add(1, Ordering::Relaxed);
                    if k > 0 {
                        ctx.stats.replaced.fetch_add(1, Ordering::Relaxed);
                    }
                    let row = Row {
                        data,
                        label: s.label,
                        index: s.index as i64,
                        shard: s.shard as i32,
                        valid: true,
                    };
                    return Done::Slot {
                        q,
                        row: Some(row),
                        failures,
                    };
                }
                Err(SampleError::Fatal(e)) => return Done::Fatal(e),
                Err(SampleError::Sample(e)) => Failure {
                    index,
                    shard: s.shard,
                    row: s.row,
                    error: e.to_string(),
                },
            },
            Err(e) => {
                let (shard, row) = reader.dataset().locate(index);
                Failure {
                    index,
                    shard: shard as u32,
                    row,
                    error: e.to_string(),
                }
            }
        };
        ctx.record_failure(&f);
        failures.push(f);
    }
    // Every candidate failed: an invalid slot carrying the original row's identity.
    ctx.stats.invalid.fetch_add(1, Ordering::Relaxed);
    let (shard, _) = reader.dataset().locate(index0);
    let label = reader.sample(index0).map(|s| s.label).unwrap_or(-1);
    let n = ctx.cfg.n_views * ctx.cfg.n_frames * ctx.cfg.n_mels;
    Done::Slot {
        q,
        row: Some(Row {
            data: vec![0.0; n],
            label,
            index: index0 as i64,
            shard: shard as i32,
            valid: false,
        }),
        failures,
    }
}

impl Pipeline {
    /// Validate, then start the threads. Fails fast if the transform cannot be built.
    pub fn start(
        ds: Arc<Dataset>,
        cfg: LoaderConfig,
        factory: TransformFactory,
    ) -> Result<Pipeline> {
        let n_rows = ds.n_rows();
        cfg.validate(n_rows)?;
        // Build one transform up front so that configuration errors surface here, not in a thread.
        let mut first = Some(factory()?);
        let order = Order::new(n_rows, cfg.seed, cfg.block_size, cfg.shuffle_window);
        let stats = Arc::new(SharedStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let b = cfg.local_batch();
        let big_b = cfg.batch_size as u64;
        let in_flight = if cfg.in_flight > 0 {
            cfg.in_flight
        } else {
            (8 * cfg.n_workers).max(16)
        };
        // Local sequence numbers to produce (None: infinite).
        let total: Option<u64> = match cfg.mode {
            Mode::Train => None,
            Mode::Eval => Some(cfg.eval_batches(n_rows).saturating_sub(cfg.start_step) * b as u64),
        };
        let ctx = Arc::new(Ctx {
            cfg: cfg.clone(),
            order,
            n_rows,
            stats: stats.clone(),
            stop: stop.clone(),
        });
        let (tickets_tx, tickets_rx) = bounded::<()>(in_flight);
        for _ in 0..in_flight {
            tickets_tx.send(()).unwrap();
        }
        let (work_tx, work_rx) = bounded::<Job>(in_flight);
        let (done_tx, done_rx) = bounded::<Done>(in_flight);
        let (out_tx, out_rx) = bounded::<Out>(cfg.prefetch);
        let mut threads = Vec::new();

        // Stage 1: order + I/O. Resolves each slot's row and asks the kernel to read its bytes.
        {
            let ctx = ctx.clone();
            let ds = ds.clone();
            let slot0 = (cfg.process_index * b) as u64;
            threads.push(spawn("birdjepa-io", move || {
                let mut reader = Reader::new(ds, 64);
                let mut q = 0u64;
                while total.is_none_or(|t| q < t) {
                    if tickets_rx.recv().is_err() || ctx.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let step = ctx.cfg.start_step + q / b as u64;
                    let g = step * big_b + slot0 + q % b as u64;
                    let job = if ctx.cfg.mode == Mode::Eval && g >= ctx.n_rows {
                        Job::Pad { q }
                    } else {
                        let index = ctx.index_at(g);
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
                    };
                    if work_tx.send(job).is_err() {
                        return;
                    }
                    q += 1;
                }
            })?);
        }

        // Stage 2: transform workers.
        for w in 0..cfg.n_workers {
            let ctx = ctx.clone();
            let ds = ds.clone();
            let work_rx = work_rx.clone();
            let done_tx = done_tx.clone();
            let factory = factory.clone();
            let first = first.take();
            threads.push(spawn(&format!("birdjepa-worker-{w}"), move || {
                let mut t = match first.map_or_else(|| factory(), Ok) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = done_tx.send(Done::Fatal(e));
                        return;
                    }
                };
                let mut reader = Reader::new(ds, 16);
                while let Ok(job) = work_rx.recv() {
                    if ctx.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let done = work(&ctx, t.as_mut(), &mut reader, job);
                    let fatal = matches!(done, Done::Fatal(_));
                    if done_tx.send(done).is_err() || fatal {
                        return;
                    }
                }
            })?);
        }
        drop(work_rx);
        drop(done_tx);

        // Stage 3: put results back in sequence order and assemble batches.
        {
            let ctx = ctx.clone();
            threads.push(spawn("birdjepa-assemble", move || {
                let c = &ctx.cfg;
                let sample_len = c.n_frames * c.n_mels;
                let new_batch = |step| Batch {
                    step,
                    data: vec![0.0; c.n_views * b * sample_len],
                    target: vec![-1; b],
                    index: vec![-1; b],
                    shard: vec![-1; b],
                    valid: vec![false; b],
                    failures: Vec::new(),
                };
                let mut batch = new_batch(c.start_step);
                let mut pending: HashMap<u64, (Option<Row>, Vec<Failure>)> = HashMap::new();
                let mut next_q = 0u64;
                if total == Some(0) {
                    let _ = out_tx.send(Out::End);
                    return;
                }
                while let Ok(done) = done_rx.recv() {
                    match done {
                        Done::Fatal(e) => {
                            let _ = out_tx.send(Out::Error(e));
                            return;
                        }
                        Done::Slot { q, row, failures } => {
                            pending.insert(q, (row, failures));
                        }
                    }
                    while let Some((row, failures)) = pending.remove(&next_q) {
                        let slot = (next_q % b as u64) as usize;
                        if let Some(row) = row {
                            for v in 0..c.n_views {
                                let dst = (v * b + slot) * sample_len;
                                batch.data[dst..dst + sample_len].copy_from_slice(
                                    &row.data[v * sample_len..(v + 1) * sample_len],
                                );
                            }
                            batch.target[slot] = row.label;
                            batch.index[slot] = row.index;
                            batch.shard[slot] = row.shard;
                            batch.valid[slot] = row.valid;
                        }
                        batch.failures.extend(failures);
                        let _ = tickets_tx.send(());
                        next_q += 1;
                        if slot == b - 1 {
                            let step = batch.step;
                            let full = std::mem::replace(&mut batch, new_batch(step + 1));
                            if out_tx.send(Out::Batch(full)).is_err() {
                                return;
                            }
                        }
                        if total == Some(next_q) {
                            let _ = out_tx.send(Out::End);
                            return;
                        }
                    }
                }
            })?);
        }

        Ok(Pipeline {
            rx: Some(out_rx),
            threads,
            stats,
            stop,
            finished: false,
            failed: None,
        })
    }

    /// Wait up to `timeout` for the next batch.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Next {
        if let Some(msg) = &self.failed {
            return Next::Error(Error::Dataset {
                path: "<loader>".into(),
                detail: format!("the loader stopped after an error: {msg}"),
            });
        }
        if self.finished {
            return Next::End;
        }
        let Some(rx) = &self.rx else {
            return Next::Error(Error::bad_argument(
                "loader",
                "an open loader",
                "a closed loader",
            ));
        };
        match rx.recv_timeout(timeout) {
            Ok(Out::Batch(b)) => Next::Batch(b),
            Ok(Out::End) => {
                self.finished = true;
                Next::End
            }
            Ok(Out::Error(e)) => {
                self.failed = Some(e.to_string());
                Next::Error(e)
            }
            Err(RecvTimeoutError::Timeout) => Next::Timeout,
            Err(RecvTimeoutError::Disconnected) => {
                let detail = "the loader pipeline stopped unexpectedly (a thread panicked)";
                self.failed = Some(detail.into());
                Next::Error(Error::Dataset {
                    path: "<loader>".into(),
                    detail: detail.into(),
                })
            }
        }
    }

    /// Block until the next batch; `None` at the end of an eval pass.
    pub fn next_batch(&mut self) -> Option<Result<Batch>> {
        loop {
            match self.recv_timeout(Duration::from_millis(50)) {
                Next::Batch(b) => return Some(Ok(b)),
                Next::End => return None,
                Next::Error(e) => return Some(Err(e)),
                Next::Timeout => {}
            }
        }
    }

    pub fn stats(&self) -> Stats {
        let s = &self.stats;
        Stats {
            decoded: s.decoded.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            replaced: s.replaced.load(Ordering::Relaxed),
            invalid: s.invalid.load(Ordering::Relaxed),
            recent_failures: s.recent.lock().unwrap().iter().cloned().collect(),
            queued_batches: self.rx.as_ref().map_or(0, |r| r.len()),
        }
    }

    /// Stop and join every thread. Idempotent. Waits at most for in-progress transforms.
    pub fn close(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.rx = None; // disconnects the assembler, which cascades to the other stages
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.close();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| Error::Io {
            path: format!("<thread {name}>"),
            source: e,
        })
}

/// The rows at stream positions `start..start + count` of the train order (diagnostics).
/// `n_rows`, `block_size` and `shuffle_window` must be at least 1.
pub fn train_indices(
    n_rows: u64,
    seed: u64,
    block_size: u64,
    shuffle_window: u64,
    start: u64,
    count: u64,
) -> Result<Vec<u64>> {
    for (name, v) in [
        ("n_rows", n_rows),
        ("block_size", block_size),
        ("shuffle_window", shuffle_window),
    ] {
        if v == 0 {
            return Err(Error::bad_argument(name, ">= 1", 0));
        }
    }
    let o = Order::new(n_rows, seed, block_size, shuffle_window);
    Ok((start..start + count).map(|g| o.index_at(g)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debug_transform::DebugTransform;
    use crate::shards::testutil::*;
    use crate::shards::Format;
    use std::path::PathBuf;

    fn dataset(name: &str, corrupt: &[u64]) -> Arc<Dataset> {
        let d = tmpdir(name);
        let mut paths: Vec<PathBuf> = Vec::new();
        for (k, r) in [(0u64, 0..300u64), (1, 300..500), (2, 500..777)] {
            let p = d.join(format!("s{k}.arrow"));
            write_shard(
                &p,
                r,
                50,
                if k == 1 { Format::File } else { Format::Stream },
            );
            paths.push(p);
        }
        if !corrupt.is_empty() {
            // Rewrite shard 0 with corrupt payloads at the given rows.
            let p = &paths[0];
            let f = std::fs::File::create(p).unwrap();
            let b0 = hf_batch(0..0, |_| 0);
            let mut w = arrow_ipc::writer::StreamWriter::try_new(f, &b0.schema()).unwrap();
            let mut bytes = arrow_array::builder::BinaryBuilder::new();
            let mut paths_b = arrow_array::builder::StringBuilder::new();
            for i in 0..300u64 {
                if corrupt.contains(&i) {
                    bytes.append_value(b"CORRUPT");
                } else {
                    bytes.append_value(payload(i));
                }
                paths_b.append_value("x");
            }
            let base = hf_batch(0..300, |i| (i % 10) as i64);
            let audio = base
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::StructArray>()
                .unwrap();
            let audio = arrow_array::StructArray::new(
                audio.fields().clone(),
                vec![Arc::new(bytes.finish()), Arc::new(paths_b.finish())],
                None,
            );
            let batch = arrow_array::RecordBatch::try_new(
                base.schema(),
                vec![Arc::new(audio), base.column(1).clone()],
            )
            .unwrap();
            w.write(&batch).unwrap();
            w.finish().unwrap();
        }
        Arc::new(Dataset::open(&paths, "audio", Some("label")).unwrap())
    }

    fn debug_factory(delay_ms: u64) -> TransformFactory {
        Arc::new(move || {
            Ok(
                Box::new(DebugTransform::new(6, 4, Duration::from_millis(delay_ms)))
                    as Box<dyn Transform>,
            )
        })
    }

    fn cfg(mode: Mode) -> LoaderConfig {
        LoaderConfig {
            mode,
            batch_size: 16,
            seed: 7,
            n_frames: 8,
            n_mels: 4,
            block_size: 8,
            shuffle_window: 64,
            ..Default::default()
        }
    }

    fn take(ds: &Arc<Dataset>, c: LoaderConfig, n: usize) -> Vec<Batch> {
        let mut p = Pipeline::start(ds.clone(), c, debug_factory(0)).unwrap();
        (0..n)
            .map_while(|_| p.next_batch().map(|b| b.unwrap()))
            .collect()
    }

    fn same(a: &[Batch], b: &[Batch]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x.step, y.step);
            assert_eq!(x.index, y.index);
            assert_eq!(x.target, y.target);
            assert_eq!(x.valid, y.valid);
            assert_eq!(
                x.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn deterministic_across_worker_counts_and_resume() {
        let ds = dataset("pipe-det", &[]);
        let base = take(
            &ds,
            LoaderConfig {
                n_workers: 1,
                ..cfg(Mode::Train)
            },
            120,
        );
        for w in [2, 8] {
            same(
                &base,
                &take(
                    &ds,
                    LoaderConfig {
                        n_workers: w,
                        ..cfg(Mode::Train)
                    },
                    120,
                ),
            );
        }
        for s in [1u64, 48, 49, 97] {
            let resumed = take(
                &ds,
                LoaderConfig {
                    start_step: s,
                    n_workers: 3,
                    ..cfg(Mode::Train)
                },
                120 - s as usize,
            );
            same(&base[s as usize..], &resumed);
        }
        // Epochs are permutations: 777 rows, 120 * 16 = 1920 positions >= 2 epochs.
        let flat: Vec<i64> = base.iter().flat_map(|b| b.index.clone()).collect();
        for e in 0..2 {
            let mut ep: Vec<i64> = flat[e * 777..(e + 1) * 777].to_vec();
            ep.sort();
            assert_eq!(ep, (0..777).collect::<Vec<_>>());
        }
        // Padding and normalisation: frames 6 and 7 are zero; the rest are normalised.
        let b = &base[0];
        let m = 4;
        assert!(b.data[6 * m..8 * m].iter().all(|&v| v == 0.0));
        assert!(b.data[..6 * m].iter().all(|&v| v.abs() < 1.0 && v != 0.0));
    }

    #[test]
    fn processes_union_to_the_global_batch() {
        let ds = dataset("pipe-union", &[3, 4, 100]);
        let c = LoaderConfig {
            n_views: 2,
            ..cfg(Mode::Train)
        };
        let whole = take(&ds, c.clone(), 60);
        let parts: Vec<Vec<Batch>> = (0..4)
            .map(|p| {
                take(
                    &ds,
                    LoaderConfig {
                        process_index: p,
                        process_count: 4,
                        ..c.clone()
                    },
                    60,
                )
            })
            .collect();
        let t = c.n_frames * c.n_mels;
        for (s, w) in whole.iter().enumerate() {
            let idx: Vec<i64> = parts.iter().flat_map(|p| p[s].index.clone()).collect();
            assert_eq!(idx, w.index);
            for v in 0..2 {
                let mut data = Vec::new();
                for p in &parts {
                    data.extend_from_slice(&p[s].data[v * 4 * t..(v + 1) * 4 * t]);
                }
                assert_eq!(data, w.data[v * 16 * t..(v + 1) * 16 * t]);
            }
        }
        // Corrupt rows never appear; they were replaced.
        let flat: Vec<i64> = whole.iter().flat_map(|b| b.index.clone()).collect();
        assert!(!flat.iter().any(|i| [3, 4, 100].contains(i)));
        assert!(whole.iter().all(|b| b.valid.iter().all(|&v| v)));
        let n_fail: usize = whole.iter().map(|b| b.failures.len()).sum();
        assert!(n_fail >= 3, "{n_fail}");
    }

    #[test]
    fn eval_is_finite_ordered_and_padded() {
        let ds = dataset("pipe-eval", &[10]);
        let c = LoaderConfig {
            n_workers: 3,
            ..cfg(Mode::Eval)
        };
        let all = take(&ds, c.clone(), 1000);
        assert_eq!(all.len(), 777usize.div_ceil(16));
        let flat: Vec<i64> = all.iter().flat_map(|b| b.index.clone()).collect();
        let want: Vec<i64> = (0..777)
            .chain(std::iter::repeat_n(-1, 49 * 16 - 777))
            .collect();
        assert_eq!(flat, want);
        let valid: Vec<bool> = all.iter().flat_map(|b| b.valid.clone()).collect();
        assert!(!valid[10] && valid[11] && !valid[777]);
        same(&all, &take(&ds, c.clone(), 1000));
        let resumed = take(
            &ds,
            LoaderConfig {
                start_step: 40,
                ..c
            },
            1000,
        );
        same(&all[40..], &resumed);
    }

    #[test]
    fn bad_arguments_name_expected_and_actual() {
        let ds = dataset("pipe-args", &[]);
        let e = |c: LoaderConfig| {
            Pipeline::start(ds.clone(), c, debug_factory(0))
                .err()
                .unwrap()
                .to_string()
        };
        assert!(e(LoaderConfig {
            batch_size: 0,
            ..cfg(Mode::Train)
        })
        .contains("batch_size"));
        assert!(e(LoaderConfig {
            n_workers: 0,
            ..cfg(Mode::Train)
        })
        .contains("n_workers"));
        let msg = e(LoaderConfig {
            process_count: 3,
            ..cfg(Mode::Train)
        });
        assert!(
            msg.contains("multiple of process_count=3") && msg.contains("16"),
            "{msg}"
        );
    }

    /// A transform whose output has the wrong number of mel bins: a configuration error.
    struct WrongMels;
    impl Transform for WrongMels {
        fn apply(&mut self, _: &[u8], _: Crop) -> Result<crate::clip::Features> {
            Ok(crate::clip::Features {
                data: vec![0.0; 6],
                n_frames: 2,
                n_mels: 3,
                seeked: true,
            })
        }
    }

    #[test]
    fn configuration_errors_stop_the_loader_and_stick() {
        let ds = dataset("pipe-fatal", &[]);
        let f: TransformFactory = Arc::new(|| Ok(Box::new(WrongMels) as Box<dyn Transform>));
        let mut p = Pipeline::start(ds, cfg(Mode::Train), f).unwrap();
        let e = p.next_batch().unwrap().err().unwrap().to_string();
        assert!(
            e.contains("n_mels") && e.contains("4 mel bins") && e.contains("3 mels"),
            "{e}"
        );
        let again = p.next_batch().unwrap().err().unwrap().to_string();
        assert!(again.contains("stopped after an error"), "{again}");
    }

    #[test]
    fn close_joins_quickly_with_a_slow_transform() {
        let ds = dataset("pipe-close", &[]);
        let mut p = Pipeline::start(
            ds,
            LoaderConfig {
                n_workers: 4,
                ..cfg(Mode::Train)
            },
            debug_factory(20),
        )
        .unwrap();
        let _ = p.next_batch();
        let t = std::time::Instant::now();
        p.close();
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn train_indices_rejects_zero_sizes_and_covers_every_row() {
        for (args, name) in [
            ((0, 1, 1), "n_rows"),
            ((10, 0, 1), "block_size"),
            ((10, 1, 0), "shuffle_window"),
        ] {
            let e = train_indices(args.0, 0, args.1, args.2, 0, 5)
                .unwrap_err()
                .to_string();
            assert!(e.contains(name) && e.contains(">= 1"), "{e}");
        }
        let mut epoch = train_indices(10, 3, 2, 4, 0, 10).unwrap();
        epoch.sort_unstable();
        assert_eq!(epoch, (0..10).collect::<Vec<u64>>());
    }
}
