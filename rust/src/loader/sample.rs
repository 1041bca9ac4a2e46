//! One slot's work on a transform thread: read the row, featurize every view, and in train mode
//! replace a failed sample by the same lane of a later batch.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::config::FRAME_SHIFT_MS;
use super::stats::SharedStats;
use super::{Failure, LoaderConfig, Mode};
use crate::clip::{Crop, Features, Transform};
use crate::decode::panic_message;
use crate::error::{Error, Result};
use crate::order::{crop_fraction, Order};
use crate::shards::{Reader, SampleRef};

/// What the I/O thread hands a transform worker: one local slot `q`.
pub(super) enum Job {
    /// Eval padding past the end of the dataset.
    Pad { q: u64 },
    Sample {
        q: u64,
        g: u64,
        index: u64,
        primary: Result<SampleRef>,
    },
}

/// One slot's features and identity, ready to be copied into its batch.
pub(super) struct Row {
    pub(super) data: Vec<f32>,
    /// Where each view starts in its recording, seconds.
    pub(super) start_s: Vec<f64>,
    /// (n_local, local_frames, n_mels) local crops and their starts (empty without them).
    pub(super) local: Vec<f32>,
    pub(super) local_start_s: Vec<f64>,
    pub(super) label: i64,
    /// A list<int> label column's classes (empty otherwise).
    pub(super) classes: Vec<i64>,
    pub(super) index: i64,
    pub(super) shard: i32,
    pub(super) valid: bool,
}

/// What a transform worker hands the assembler.
pub(super) enum Done {
    Slot {
        q: u64,
        row: Option<Row>,
        failures: Vec<Failure>,
    },
    /// A configuration error: the pipeline stops.
    Fatal(Error),
}

/// Shared, read-only context of the worker threads.
pub(super) struct Ctx {
    pub(super) cfg: LoaderConfig,
    pub(super) order: Order,
    pub(super) n_rows: u64,
    /// Multi-hot target width: `cfg.n_classes` for a list<int> label column, else 0.
    pub(super) n_targets: usize,
    pub(super) stats: Arc<SharedStats>,
    pub(super) stop: Arc<AtomicBool>,
}

impl Ctx {
    fn record_failure(&self, f: &Failure) {
        self.stats.record_failure(f);
    }

    /// Stream position -> row.
    pub(super) fn index_at(&self, g: u64) -> u64 {
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
            Error::BadArgument { .. }
            | Error::StateMismatch { .. }
            | Error::ShardChanged { .. } => SampleError::Fatal(e),
            e => SampleError::Sample(e),
        }
    }
}

/// A sample's features: normalised, padded (n_views, n_frames, n_mels), and where each view
/// starts in the recording (seconds).
struct Featurized {
    data: Vec<f32>,
    start_s: Vec<f64>,
    /// (n_local, local_frames, n_mels) local crops and their starts (empty without them).
    local: Vec<f32>,
    local_start_s: Vec<f64>,
}

/// The transform's output checked against the configured mel bins: a mismatch is the
/// configuration's fault and stops the loader.
fn check_mels(f: &Features, m: usize) -> std::result::Result<(), SampleError> {
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
    Ok(())
}

/// Normalise `frames` (rows of `m` mels) into the start of `dst`; frames past them stay 0.0, the
/// dataset mean after normalisation.
fn put(c: &LoaderConfig, frames: &[f32], dst: &mut [f32]) {
    let scale = 1.0 / (2.0 * c.std);
    for (d, &x) in dst.iter_mut().zip(frames) {
        *d = (x - c.mean) * scale;
    }
}

/// The `view_window_s` random stream's key for the window itself (global views use keys
/// 0..n_views, local crops n_views..n_views + n_local).
const WINDOW_KEY: u64 = 1 << 32;

/// Normalise `len` frames of window `f` starting at a frame offset drawn from `fraction` over
/// the window's frames that come from the recording, into `dst` (n_frames rows); its start, s.
fn cut(c: &LoaderConfig, f: &Features, len: usize, fraction: f64, dst: &mut [f32]) -> f64 {
    let m = c.n_mels;
    let len = len.min(f.n_frames);
    let room = f.valid_frames.clamp(len, f.n_frames) - len;
    let off = (fraction * room as f64).round() as usize;
    let keep = len.min(dst.len() / m);
    put(c, &f.data[off * m..(off + keep) * m], dst);
    f.start_s + (off as i64 * FRAME_SHIFT_MS) as f64 / 1000.0
}

/// Transform every view of one sample.
///
/// Without `view_window_s`, each view is its own crop and transform call. With it, one window is
/// transformed and each view is `clip_frames` consecutive frames of it, at a frame offset drawn
/// uniformly over the window's frames that come from the recording: one decode, one resample and
/// one fbank per sample, whatever the number of views.
fn featurize(
    ctx: &Ctx,
    t: &mut dyn Transform,
    reader: &Reader,
    s: &SampleRef,
    g: u64,
) -> std::result::Result<Featurized, SampleError> {
    let bytes = reader.read(s)?;
    let c = &ctx.cfg;
    let (tf, m) = (c.n_frames, c.n_mels);
    let lf = c.local_frames;
    let mut out = Featurized {
        data: vec![0f32; c.n_views * tf * m],
        start_s: vec![0f64; c.n_views],
        local: vec![0f32; c.n_local * lf * m],
        local_start_s: vec![0f64; c.n_local],
    };
    let epoch = g / ctx.n_rows;
    let fraction = |v: u64| match c.mode {
        Mode::Train => crop_fraction(c.seed, epoch, s.index, v),
        Mode::Eval => 0.5,
    };
    if c.view_window_s > 0.0 {
        let f = t.apply(bytes.as_slice(), Crop::Fraction(fraction(WINDOW_KEY)))?;
        check_mels(&f, m)?;
        for v in 0..c.n_views {
            let dst = &mut out.data[v * tf * m..(v + 1) * tf * m];
            out.start_s[v] = cut(c, &f, c.clip_frames(), fraction(v as u64), dst);
        }
        for l in 0..c.n_local {
            let dst = &mut out.local[l * lf * m..(l + 1) * lf * m];
            let key = (c.n_views + l) as u64;
            out.local_start_s[l] = cut(c, &f, c.local_crop_frames(), fraction(key), dst);
        }
        return Ok(out);
    }
    for v in 0..c.n_views {
        let f = t.apply(bytes.as_slice(), Crop::Fraction(fraction(v as u64)))?;
        check_mels(&f, m)?;
        let keep = f.n_frames.min(tf);
        put(
            c,
            &f.data[..keep * m],
            &mut out.data[v * tf * m..(v + 1) * tf * m],
        );
        out.start_s[v] = f.start_s;
    }
    Ok(out)
}

/// `featurize`, with a panic in the transform turned into this sample's failure (counted and
/// replaced like any bad recording) instead of a worker thread that dies and a loader that hangs.
fn featurize_guarded(
    ctx: &Ctx,
    t: &mut dyn Transform,
    reader: &Reader,
    s: &SampleRef,
    g: u64,
) -> std::result::Result<Featurized, SampleError> {
    catch_unwind(AssertUnwindSafe(|| featurize(ctx, t, reader, s, g))).unwrap_or_else(|payload| {
        Err(SampleError::Sample(Error::corrupt(format!(
            "transform panicked: {}",
            panic_message(&*payload)
        ))))
    })
}

pub(super) fn work(ctx: &Ctx, t: &mut dyn Transform, reader: &mut Reader, job: Job) -> Done {
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
    let mut first = Some(primary);
    let (mut g, mut index) = (g0, index0);
    for k in 0..tries {
        let candidate = match first.take() {
            Some(p) => p,
            None => {
                if ctx.stop.load(Ordering::Relaxed) {
                    break;
                }
                g = g0 + k * ctx.cfg.batch_size as u64;
                index = ctx.index_at(g);
                reader.sample(index)
            }
        };
        let f = match candidate {
            Ok(s) => match featurize_guarded(ctx, t, reader, &s, g) {
                Ok(Featurized {
                    data,
                    start_s,
                    local,
                    local_start_s,
                }) => {
                    ctx.stats.decoded.fetch_add(1, Ordering::Relaxed);
                    if k > 0 {
                        ctx.stats.replaced.fetch_add(1, Ordering::Relaxed);
                    }
                    let row = Row {
                        data,
                        start_s,
                        local,
                        local_start_s,
                        label: s.label,
                        classes: s.classes,
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
                    kind: e.kind(),
                },
            },
            Err(e) => match SampleError::from(e) {
                SampleError::Fatal(e) => return Done::Fatal(e),
                SampleError::Sample(e) => {
                    let (shard, row) = reader.dataset().locate(index);
                    Failure {
                        index,
                        shard: shard as u32,
                        row,
                        error: e.to_string(),
                        kind: e.kind(),
                    }
                }
            },
        };
        ctx.record_failure(&f);
        failures.push(f);
    }
    // Every candidate failed: an invalid slot carrying the original row's identity.
    ctx.stats.invalid.fetch_add(1, Ordering::Relaxed);
    let (shard, _) = reader.dataset().locate(index0);
    let (label, classes) = reader
        .sample(index0)
        .map(|s| (s.label, s.classes))
        .unwrap_or((-1, Vec::new()));
    let n = ctx.cfg.n_views * ctx.cfg.n_frames * ctx.cfg.n_mels;
    Done::Slot {
        q,
        row: Some(Row {
            data: vec![0.0; n],
            start_s: vec![-1.0; ctx.cfg.n_views],
            local: vec![0.0; ctx.cfg.n_local * ctx.cfg.local_frames * ctx.cfg.n_mels],
            local_start_s: vec![-1.0; ctx.cfg.n_local],
            label,
            classes,
            index: index0 as i64,
            shard: shard as i32,
            valid: false,
        }),
        failures,
    }
}
