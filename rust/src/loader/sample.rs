//! One slot's work on a transform thread: read the row, featurize every view, and in train mode
//! replace a failed sample by the same lane of a later batch.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::config::{kaldi_frames, FRAME_SHIFT_MS};
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
    /// Device features (`data` and `local` then empty): the window's samples and, per view
    /// then per local crop, its first frame in the window's fbank and how many frames are the
    /// clip's (`Crops`).
    pub(super) wave: Vec<f32>,
    /// `wave` as int16 (`wave_dtype = "int16"`, `wave` then empty) and how many of its
    /// samples were not exact.
    pub(super) wave16: Vec<i16>,
    pub(super) rounded: u64,
    pub(super) crops: Crops,
    pub(super) label: i64,
    /// A list<int> label column's classes (empty otherwise).
    pub(super) classes: Vec<i64>,
    pub(super) index: i64,
    pub(super) shard: i32,
    pub(super) valid: bool,
    /// The recording's data stops early: the features come from what it holds (kind
    /// "damaged recording", the message says where and why).
    pub(super) damaged: Option<Failure>,
}

/// What a transform worker hands the assembler.
pub(super) enum Done {
    Slot {
        q: u64,
        row: Option<Box<Row>>,
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

/// Where each view (and local crop) of a device-features sample lies in its window's fbank:
/// its first frame and how many frames from there are the clip's (the rest of the view is
/// `pad`), as `cut` places them on the host.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Crops {
    pub(super) start: Vec<i32>,
    pub(super) frames: Vec<i32>,
    pub(super) local_start: Vec<i32>,
    pub(super) local_frames: Vec<i32>,
}

impl Crops {
    /// All-zero crops of an invalid slot (zero frames: all padding, zero features).
    fn empty(c: &LoaderConfig) -> Self {
        Crops {
            start: vec![0; c.n_views],
            frames: vec![0; c.n_views],
            local_start: vec![0; c.n_local],
            local_frames: vec![0; c.n_local],
        }
    }
}

/// A sample's features: normalised, padded (n_views, n_frames, n_mels), and where each view
/// starts in the recording (seconds); with device features the window (`wave`) and its crops
/// instead of `data` and `local`.
struct Featurized {
    data: Vec<f32>,
    start_s: Vec<f64>,
    /// (n_local, local_frames, n_mels) local crops and their starts (empty without them).
    local: Vec<f32>,
    local_start_s: Vec<f64>,
    wave: Vec<f32>,
    /// `wave` as int16 with the count of inexact samples (`wave_dtype = "int16"`).
    wave16: (Vec<i16>, u64),
    crops: Crops,
    /// `Features::damage` of the sample's recording.
    damage: Option<String>,
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

/// Normalise `frames` (rows of `m` mels) into the start of `dst`; frames past them are the
/// padding: 0.0 (the dataset mean after normalisation) with `pad = "zero"`, with `pad = "min"`
/// the smallest value of `frames` normalised (Bird-MAE's extractor pads before normalising), or
/// with `pad = "repeat"` the clip again from its first frame, as often as it takes (no region
/// of the window differs from the clip, so padding carries nothing a model could learn).
fn put(c: &LoaderConfig, frames: &[f32], dst: &mut [f32]) {
    let scale = 1.0 / (2.0 * c.std);
    for (d, &x) in dst.iter_mut().zip(frames) {
        *d = (x - c.mean) * scale;
    }
    let n = frames.len();
    if n == 0 || n >= dst.len() {
        return;
    }
    if c.pad == "min" {
        let lo = frames.iter().copied().fold(f32::INFINITY, f32::min);
        dst[n..].fill((lo - c.mean) * scale);
    } else if c.pad == "repeat" {
        let (clip, tail) = dst.split_at_mut(n);
        for (k, d) in tail.iter_mut().enumerate() {
            *d = clip[k % n];
        }
    }
}

/// The `view_window_s` random stream's key for the window itself (global views use keys
/// 0..n_views, local crops n_views..n_views + n_local).
const WINDOW_KEY: u64 = 1 << 32;

/// Where a view of `len` frames of window `f` lies: the frame offset drawn from `fraction` over
/// the window's frames that come from the recording, how many frames from there are the clip's
/// in a view of `rows` rows (`clip_frames`), and its start in the recording, seconds.
fn place(
    c: &LoaderConfig,
    f: &Features,
    len: usize,
    fraction: f64,
    rows: usize,
) -> (usize, usize, f64) {
    let len = len.min(f.n_frames);
    let room = f.valid_frames.clamp(len, f.n_frames) - len;
    let off = (fraction * room as f64).round() as usize;
    let keep = clip_frames(c, f, off, len.min(rows));
    (
        off,
        keep,
        f.start_s + (off as i64 * FRAME_SHIFT_MS) as f64 / 1000.0,
    )
}

/// Normalise `len` frames of window `f` placed by `place` into `dst` (n_frames rows); its
/// start, s.
fn cut(c: &LoaderConfig, f: &Features, len: usize, fraction: f64, dst: &mut [f32]) -> f64 {
    let m = c.n_mels;
    let (off, keep, start_s) = place(c, f, len, fraction, dst.len() / m);
    put(c, &f.data[off * m..(off + keep) * m], dst);
    start_s
}

/// How many of the `want` frames from frame `off` of `f` go into a view as the clip: all of them,
/// or with `pad = "repeat"` only those computed from the recording (the rest, the fbank of the
/// zero-padded wave, is digital silence; repeat fills from the clip instead).
fn clip_frames(c: &LoaderConfig, f: &Features, off: usize, want: usize) -> usize {
    if c.pad == "repeat" {
        want.min(f.valid_frames.saturating_sub(off))
    } else {
        want
    }
}

/// Random-stream keys of the events crop's choice of event: `EVENT_KEY + key` for the call
/// whose placement uses `key` (a view without a window, or `WINDOW_KEY`).
const EVENT_KEY: u64 = 1 << 33;

/// The crop of one transform call of sample `s`, `key` its random-stream key (a view, or
/// `WINDOW_KEY`).
///
/// * Train: uniform (`Fraction`), or with `crop = "events"` and a row with events, placed to
///   cover one of them (`Within`): the event is drawn by the seed, the start jittered over the
///   event's slack (`[end - window, start]` for an event no longer than the window).
/// * Eval: the centre, or with `segment = "columns"` exactly the row's segment start.
fn crop_of(ctx: &Ctx, s: &SampleRef, epoch: u64, key: u64) -> Crop {
    let c = &ctx.cfg;
    if c.mode == Mode::Eval {
        return match s.segment {
            Some((start, _)) => Crop::Start(start),
            None => Crop::Fraction(0.5),
        };
    }
    let u = crop_fraction(c.seed, epoch, s.index, key);
    if s.events.is_empty() {
        return Crop::Fraction(u);
    }
    let n = s.events.len();
    let pick = crop_fraction(c.seed, epoch, s.index, EVENT_KEY + key) * n as f64;
    let (a, b) = s.events[(pick as usize).min(n - 1)];
    let w = c.window_s();
    let (lo_s, hi_s) = if b - a <= w { (b - w, a) } else { (a, b - w) };
    Crop::Within { lo_s, hi_s, f: u }
}

/// Frames of the row's segment (eval with `segment = "columns"`), checked: a start or end that
/// is missing, negative or not after the start is this row's error.
fn segment_frames(ctx: &Ctx, reader: &Reader, s: &SampleRef) -> Result<Option<usize>> {
    let Some((a, b)) = s.segment else {
        return Ok(None);
    };
    if a.is_finite() && b.is_finite() && a >= 0.0 && b > a {
        return Ok(Some(kaldi_frames(b - a)));
    }
    let c = &ctx.cfg;
    Err(Error::Dataset {
        path: reader.dataset().shards()[s.shard as usize]
            .path
            .display()
            .to_string(),
        detail: format!(
            "row {}, columns '{}'/'{}': expected 0 <= start < end seconds, got [{a}, {b}] (null: \
             NaN)",
            s.row, c.segment_start_column, c.segment_end_column
        ),
    })
}

/// A `segment = "columns"` start past the end of its file: the configuration's fault (say, a
/// soundscape-relative time applied to a pre-cut file), which stops the loader naming the row.
fn past_end(ctx: &Ctx, reader: &Reader, s: &SampleRef, e: Error) -> SampleError {
    match (&e, s.segment) {
        (Error::EmptyAudio { detail }, Some((start, _))) if detail.starts_with("window starts") => {
            let c = &ctx.cfg;
            SampleError::Fatal(Error::Dataset {
                path: reader.dataset().shards()[s.shard as usize]
                    .path
                    .display()
                    .to_string(),
                detail: format!(
                    "row {}, column '{}': segment start {start} s lies past the end of its \
                     audio ({detail}); segment = \"columns\" takes [start, end] inside each \
                     row's file (pre-cut files such as BirdSet's test_5s need segment = \
                     \"centre\")",
                    s.row, c.segment_start_column
                ),
            })
        }
        _ => SampleError::from(e),
    }
}

/// Transform every view of one sample.
///
/// Without `view_window_s`, each view is its own crop and transform call. With it, one window is
/// transformed and each view is `clip_frames` consecutive frames of it, at a frame offset drawn
/// uniformly over the window's frames that come from the recording: one decode, one resample and
/// one fbank per sample, whatever the number of views. An eval segment keeps only its frames.
fn featurize(
    ctx: &Ctx,
    t: &mut dyn Transform,
    reader: &Reader,
    s: &SampleRef,
    g: u64,
) -> std::result::Result<Featurized, SampleError> {
    let bytes = reader.read(s)?;
    let seg = segment_frames(ctx, reader, s).map_err(SampleError::Sample)?;
    let c = &ctx.cfg;
    let (tf, m) = (c.n_frames, c.n_mels);
    let lf = c.local_view_frames();
    let host = !c.device_features();
    let mut out = Featurized {
        data: vec![0f32; if host { c.n_views * tf * m } else { 0 }],
        start_s: vec![0f64; c.n_views],
        local: vec![0f32; if host { c.n_local * lf * m } else { 0 }],
        local_start_s: vec![0f64; c.n_local],
        wave: Vec::new(),
        wave16: (Vec::new(), 0),
        crops: Crops::default(),
        damage: None,
    };
    let epoch = g / ctx.n_rows;
    let fraction = |v: u64| match (c.mode, seg) {
        (Mode::Train, _) => crop_fraction(c.seed, epoch, s.index, v),
        (Mode::Eval, None) => 0.5,
        (Mode::Eval, Some(_)) => 0.0,
    };
    let mut apply = |key: u64| -> std::result::Result<Features, SampleError> {
        let f = t
            .apply(bytes.as_slice(), crop_of(ctx, s, epoch, key))
            .map_err(|e| past_end(ctx, reader, s, e))?;
        if host {
            check_mels(&f, m)?;
        }
        Ok(f)
    };
    let seg_len = seg.unwrap_or(usize::MAX);
    if !host {
        // The same crops as below, placed but not cut: the step cuts them from the window's
        // fbank. Without a window there is one view (check_settings), the window itself.
        let windowed = c.view_window_s > 0.0;
        let mut f = apply(if windowed { WINDOW_KEY } else { 0 })?;
        out.damage = f.damage.take();
        let mut crops = Crops::default();
        for v in 0..c.n_views {
            let (off, keep, start_s) = if windowed {
                place(c, &f, c.clip_frames().min(seg_len), fraction(v as u64), tf)
            } else {
                (
                    0,
                    clip_frames(c, &f, 0, f.n_frames.min(tf).min(seg_len)),
                    f.start_s,
                )
            };
            crops.start.push(off as i32);
            crops.frames.push(keep as i32);
            out.start_s[v] = start_s;
        }
        for l in 0..c.n_local {
            let key = (c.n_views + l) as u64;
            let (off, keep, start_s) = place(c, &f, c.local_crop_frames(), fraction(key), lf);
            crops.local_start.push(off as i32);
            crops.local_frames.push(keep as i32);
            out.local_start_s[l] = start_s;
        }
        if c.wave_dtype == "int16" {
            out.wave16 = to_int16(&f.wave);
        } else {
            out.wave = std::mem::take(&mut f.wave);
        }
        out.crops = crops;
        return Ok(out);
    }
    if c.view_window_s > 0.0 {
        let f = apply(WINDOW_KEY)?;
        out.damage = f.damage.clone();
        for v in 0..c.n_views {
            let dst = &mut out.data[v * tf * m..(v + 1) * tf * m];
            let len = c.clip_frames().min(seg_len);
            out.start_s[v] = cut(c, &f, len, fraction(v as u64), dst);
        }
        for l in 0..c.n_local {
            let dst = &mut out.local[l * lf * m..(l + 1) * lf * m];
            let key = (c.n_views + l) as u64;
            out.local_start_s[l] = cut(c, &f, c.local_crop_frames(), fraction(key), dst);
        }
        return Ok(out);
    }
    for v in 0..c.n_views {
        let f = apply(v as u64)?;
        out.damage = out.damage.or(f.damage.clone());
        let keep = clip_frames(c, &f, 0, f.n_frames.min(tf).min(seg_len));
        put(
            c,
            &f.data[..keep * m],
            &mut out.data[v * tf * m..(v + 1) * tf * m],
        );
        out.start_s[v] = f.start_s;
    }
    Ok(out)
}

/// `src` (full scale +-1) as int16 x * 32768 into `dst`, rounded to nearest even and clamped;
/// the count of samples that were not exact (16-bit audio at the loader's rate is exact). The
/// rounding adds and subtracts 1.5 * 2^23 (exact for |x| < 2^22), which vectorises where
/// `f32::round` is a call per sample.
#[allow(clippy::manual_clamp)] // clamp keeps a NaN; max/min turn it into -32768
pub(super) fn to_int16(src: &[f32]) -> (Vec<i16>, u64) {
    const MAGIC: f32 = 12_582_912.0;
    let mut inexact = false;
    let out = src
        .iter()
        .map(|&x| {
            let y = (x * 32768.0).max(-32768.0).min(32767.0);
            let r = (y + MAGIC) - MAGIC;
            inexact |= r != y;
            // SAFETY: r is finite and in [-32768, 32767]: it fits an i32, and the i16 after.
            unsafe { r.to_int_unchecked::<i32>() as i16 }
        })
        .collect();
    // Counted only when some sample was not exact (never, for 16-bit audio at the rate).
    let rounded = if inexact {
        let back = |q: i16| q as f32 / 32768.0;
        src.iter()
            .zip(&out)
            .filter(|&(&x, &q)| back(q) != x)
            .count() as u64
    } else {
        0
    };
    (out, rounded)
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

/// A failure's record: the sample's error, at row `index` (`s` when the row was read).
fn failure(reader: &Reader, index: u64, s: Option<&SampleRef>, e: Error) -> Failure {
    let (shard, row) = match s {
        Some(s) => (s.shard, s.row),
        None => {
            let (shard, row) = reader.dataset().locate(index);
            (shard as u32, row)
        }
    };
    Failure {
        index,
        shard,
        row,
        kind: e.kind(),
        error: e.to_string(),
    }
}

/// Try one candidate row: its features, or why it failed (a fatal error stops the loader).
fn attempt(
    ctx: &Ctx,
    t: &mut dyn Transform,
    reader: &Reader,
    candidate: Result<SampleRef>,
    (g, index): (u64, u64),
) -> std::result::Result<Row, std::result::Result<Failure, Error>> {
    let s = match candidate {
        Ok(s) => s,
        Err(e) => {
            return Err(match SampleError::from(e) {
                SampleError::Fatal(e) => Err(e),
                SampleError::Sample(e) => Ok(failure(reader, index, None, e)),
            })
        }
    };
    match featurize_guarded(ctx, t, reader, &s, g) {
        Ok(f) => Ok(Row {
            damaged: f.damage.map(|d| {
                ctx.stats.damaged.fetch_add(1, Ordering::Relaxed);
                let mut note = failure(reader, index, Some(&s), Error::corrupt(d));
                note.kind = "damaged recording";
                note.error = note.error.replacen("corrupt audio: ", "", 1);
                note
            }),
            data: f.data,
            start_s: f.start_s,
            local: f.local,
            local_start_s: f.local_start_s,
            rounded: f.wave16.1,
            wave16: f.wave16.0,
            wave: f.wave,
            crops: f.crops,
            label: s.label,
            classes: s.classes,
            index: s.index as i64,
            shard: s.shard as i32,
            valid: true,
        }),
        Err(SampleError::Fatal(e)) => Err(Err(e)),
        Err(SampleError::Sample(e)) => Err(Ok(failure(reader, index, Some(&s), e))),
    }
}

/// The slot of a sample whose every candidate failed: invalid, with the original row's identity.
fn invalid_row(ctx: &Ctx, reader: &mut Reader, index0: u64) -> Row {
    ctx.stats.invalid.fetch_add(1, Ordering::Relaxed);
    let (shard, _) = reader.dataset().locate(index0);
    let (label, classes) = reader
        .sample(index0)
        .map(|s| (s.label, s.classes))
        .unwrap_or((-1, Vec::new()));
    let c = &ctx.cfg;
    let (host, int16) = (!c.device_features(), c.wave_dtype == "int16");
    Row {
        data: vec![
            0.0;
            if host {
                c.n_views * c.n_frames * c.n_mels
            } else {
                0
            }
        ],
        start_s: vec![-1.0; c.n_views],
        local: vec![
            0.0;
            if host {
                c.n_local * c.local_view_frames() * c.n_mels
            } else {
                0
            }
        ],
        local_start_s: vec![-1.0; c.n_local],
        wave: vec![0.0; if host || int16 { 0 } else { c.wave_samples() }],
        wave16: vec![0; if !host && int16 { c.wave_samples() } else { 0 }],
        rounded: 0,
        crops: Crops::empty(c),
        label,
        classes,
        index: index0 as i64,
        shard: shard as i32,
        valid: false,
        damaged: None,
    }
}

/// One slot: its row (train: the first of up to `max_replacements` later rows in the same lane
/// that succeeds), or an invalid slot once every candidate failed.
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
    for k in 0..tries {
        let g = g0 + k * ctx.cfg.batch_size as u64;
        let index = if k == 0 { index0 } else { ctx.index_at(g) };
        let candidate = match first.take() {
            Some(p) => p,
            None if ctx.stop.load(Ordering::Relaxed) => break,
            None => reader.sample(index),
        };
        match attempt(ctx, t, reader, candidate, (g, index)) {
            Ok(row) => {
                ctx.stats.decoded.fetch_add(1, Ordering::Relaxed);
                if k > 0 {
                    ctx.stats.replaced.fetch_add(1, Ordering::Relaxed);
                }
                return Done::Slot {
                    q,
                    row: Some(Box::new(row)),
                    failures,
                };
            }
            Err(Err(e)) => return Done::Fatal(e),
            Err(Ok(f)) => {
                ctx.record_failure(&f);
                failures.push(f);
            }
        }
    }
    Done::Slot {
        q,
        row: Some(Box::new(invalid_row(ctx, reader, index0))),
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_zero_leaves_the_mean_and_pad_min_the_clips_minimum() {
        let mut c = LoaderConfig::default();
        let frames = [-7.2f32, 1.66, -16.06, 0.0];
        let mut zero = [9.0f32; 6];
        zero[4..].fill(0.0);
        put(&c, &frames, &mut zero);
        assert_eq!(&zero[4..], &[0.0, 0.0]);
        assert_eq!(zero[0], 0.0);
        c.pad = "min".into();
        let mut min = [0.0f32; 6];
        put(&c, &frames, &mut min);
        let want = (-16.06f32 - c.mean) * (1.0 / (2.0 * c.std));
        assert_eq!(&min[..4], &zero[..4]);
        assert_eq!(&min[4..], &[want, want]);
        // A clip that fills the frames is not padded: nothing changes.
        let mut full = [0.0f32; 4];
        put(&c, &frames, &mut full);
        assert_eq!(&full[..], &zero[..4]);
    }

    #[test]
    fn pad_repeat_tiles_the_clip_from_its_first_frame() {
        let c = LoaderConfig {
            pad: "repeat".into(),
            ..Default::default()
        };
        // Two frames of two mels, into five frames: frames 0 1 0 1 0.
        let frames = [1.0f32, 2.0, 3.0, 4.0];
        let mut dst = [9.0f32; 10];
        put(&c, &frames, &mut dst);
        let n = |x: f32| (x - c.mean) * (1.0 / (2.0 * c.std));
        let (a, b) = ([n(1.0), n(2.0)], [n(3.0), n(4.0)]);
        assert_eq!(
            dst,
            [a[0], a[1], b[0], b[1], a[0], a[1], b[0], b[1], a[0], a[1]]
        );
    }
}
