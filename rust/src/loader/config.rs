//! [`LoaderConfig`]: every loader setting, its defaults and its validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Train,
    Eval,
}

/// Every loader setting and run argument. Declared twice, each side in its own types: here and in
/// `birdjepa.data.LoaderConfig` (the settings, with the docstrings users read) plus the Loader's
/// run arguments (`RUN_ARGS` in src/birdjepa/data/loader_config.py); a test asserts the same names and
/// defaults. Checked once, here: [`LoaderConfig::from_json`] the types,
/// [`LoaderConfig::check_settings`] every rule of a setting (Python's `LoaderConfig.check` calls
/// it through `_rs.check_loader_settings`), [`LoaderConfig::validate`] those of the run and the
/// dataset. Adding a setting is one field here, one there, and its rule in `check_settings`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderConfig {
    pub mode: Mode,
    /// Global batch size (all processes together).
    pub batch_size: usize,
    pub seed: u64,
    pub n_workers: usize,
    pub process_index: usize,
    pub process_count: usize,
    pub n_views: usize,
    pub n_frames: usize,
    pub n_mels: usize,
    pub block_size: u64,
    pub shuffle_window: u64,
    /// Assembled batches queued ahead of the consumer.
    pub prefetch: usize,
    /// Normalisation: `(x - mean) / (2 * std)`.
    pub mean: f32,
    pub std: f32,
    /// Frames past a clip's end (a clip shorter than `n_frames`): "zero" (0.0 after
    /// normalisation, the mean), "min" (the clip's minimum log-mel value before normalising,
    /// as Bird-MAE's feature extractor pads) or "repeat" (the clip again from its start).
    pub pad: String,
    pub max_replacements: u32,
    /// "audio" (decode -> resample -> fbank) or "debug" (the codec-free test transform).
    pub transform: String,
    /// Clip duration in seconds and the target sample rate of the audio transform.
    pub clip_s: f64,
    pub sample_rate: u32,
    /// The resampling filter for recordings not at `sample_rate` (`crate::resample::Filter`):
    /// "soxr-hq" or "rubato-bh2-1024" (the filter before issue 36).
    pub resampler: String,
    /// 0: every view is its own crop of the recording (one decode per view). Otherwise one
    /// window of this many seconds (>= clip_s) is decoded, resampled and featurized once per
    /// sample, and its views are clip_s crops cut from it in frames.
    pub view_window_s: f64,
    /// Local crops per sample (multi-crop, as in DINO and LeJEPA): `local_s`-second views cut
    /// from the same decoded window as the `n_views` global views (needs `view_window_s`).
    pub n_local: usize,
    /// Duration of a local crop, seconds (0 < local_s <= clip_s).
    pub local_s: f64,
    /// Frames of a local view in the batch; None (unset): `local_s`'s Kaldi frames, at most
    /// `n_frames` ([`LoaderConfig::local_view_frames`]); never more than the crop has.
    pub local_frames: Option<usize>,
    pub audio_column: String,
    pub label_column: Option<String>,
    /// Width of the multi-hot targets of a list<int> label column (multilabel); unused for an
    /// int column, whose targets stay class ids. 0: unset (an error for a list column).
    pub n_classes: usize,
    /// The debug transform's artificial per-sample delay (tests).
    pub debug_delay_s: f64,
    /// Stop once more than this fraction of the last `failure_window` samples failed (1.0: never).
    pub max_failure_fraction: f64,
    pub failure_window: usize,
    /// Train crops: "random" (uniform over the recording) or "events" (covering one of the
    /// row's events from `events_column`, chosen and jittered by the seed; rows without events
    /// fall back to random).
    pub crop: String,
    /// The list<[start, end]> seconds column read with `crop = "events"`.
    pub events_column: String,
    /// Eval crops: "centre" (a file no longer than the clip is taken whole) or "columns" (the
    /// row's [start, end] seconds from `segment_start_column` / `segment_end_column`).
    pub segment: String,
    pub segment_start_column: String,
    pub segment_end_column: String,
    /// Relative audio paths resolve against this directory ("": the shard's directory).
    pub audio_root: String,
    /// Stored audio path prefix -> local prefix (the longest matching prefix wins); None: none.
    pub path_map: Option<BTreeMap<String, String>>,
    /// Path-only audio files above this many MB (10^6 bytes) are skipped, counted, unread.
    pub max_audio_mb: f64,
    /// Where the log-mel features are computed: "host" (here: batches carry `data`) or "device"
    /// (batches carry each sample's decoded, resampled window, `wave`, and where each view
    /// starts in it and how many of its frames are the clip's: the jitted step computes the
    /// fbank, the normalisation and the crops; `birdjepa.data.device_features`).
    pub features: String,
    /// Host features: the dtype of `data` and `local`, "float32" or "bfloat16" (rounded to
    /// nearest even while they are copied into the batch: half the bytes to the device).
    pub batch_dtype: String,
    /// Device features: the dtype of `wave`, "float32" or "int16" (x * 32768: exact for 16-bit
    /// audio at `sample_rate`, a packed corpus; anything else is rounded and counted).
    pub wave_dtype: String,
    /// The first global step to produce (the loader state, not a setting).
    #[serde(skip)]
    pub start_step: u64,
    /// Samples dispatched but not yet assembled (bounds the re-sequencing buffer); 0: default.
    #[serde(skip)]
    pub in_flight: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            mode: Mode::Train,
            batch_size: 32,
            seed: 0,
            n_workers: 2,
            process_index: 0,
            process_count: 1,
            n_views: 1,
            n_frames: 512,
            n_mels: 128,
            block_size: 16,
            shuffle_window: 8192,
            prefetch: 2,
            mean: -7.2,
            std: 4.43,
            pad: "zero".into(),
            max_replacements: 16,
            transform: "audio".into(),
            clip_s: 5.0,
            sample_rate: 32000,
            resampler: crate::resample::Filter::default().name().into(),
            view_window_s: 0.0,
            n_local: 0,
            local_s: 2.0,
            local_frames: None,
            audio_column: "audio".into(),
            label_column: Some("label".into()),
            n_classes: 0,
            debug_delay_s: 0.0,
            max_failure_fraction: 0.1,
            failure_window: 512,
            crop: "random".into(),
            events_column: "detected_events".into(),
            segment: "centre".into(),
            segment_start_column: "start_time".into(),
            segment_end_column: "end_time".into(),
            audio_root: String::new(),
            path_map: None,
            max_audio_mb: 1024.0,
            features: "host".into(),
            batch_dtype: "float32".into(),
            wave_dtype: "float32".into(),
            start_step: 0,
            in_flight: 0,
        }
    }
}

/// Bytes of RAM of this machine.
pub fn physical_memory() -> u64 {
    // SAFETY: plain sysconf queries.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64).saturating_mul(size.max(0) as u64)
}

/// The audio transform's frame length and shift (Kaldi's defaults, `FbankConfig::default()`).
const FRAME_LENGTH_MS: i64 = 25;
pub(super) const FRAME_SHIFT_MS: i64 = 10;

/// Kaldi's frame count for `s` seconds (FRAME_LENGTH_MS window, FRAME_SHIFT_MS shift, snip
/// edges; milliseconds rounded half to even): 498 for 5 s, 198 for 2 s; at least 1.
pub fn kaldi_frames(s: f64) -> usize {
    let ms = (s * 1000.0).round_ties_even() as i64;
    (1 + ms
        .saturating_sub(FRAME_LENGTH_MS)
        .div_euclid(FRAME_SHIFT_MS))
    .max(1) as usize
}

/// The shortest clip (and local crop), seconds: one frame.
pub const MIN_CLIP_S: f64 = FRAME_LENGTH_MS as f64 / 1000.0;

/// The longest `view_window_s`, seconds.
pub const MAX_WINDOW_S: f64 = 3600.0;
/// What fills the frames past a clip shorter than n_frames (`pad`), by name.
pub const PADS: [&str; 3] = ["zero", "min", "repeat"];

fn one_of(name: &'static str, v: &str, allowed: &[&str]) -> Result<()> {
    if !allowed.contains(&v) {
        return Err(Error::bad_argument(
            name,
            format!("one of {}", allowed.join(", ")),
            format!("{v:?}"),
        ));
    }
    Ok(())
}

fn at_least(name: &'static str, v: u64, min: u64) -> Result<()> {
    if v < min {
        return Err(Error::bad_argument(name, format!(">= {min}"), v));
    }
    Ok(())
}

impl LoaderConfig {
    /// Every rule of a setting and of a relation between settings (nothing of the run or the
    /// dataset): the one check of each, worded `bad argument NAME: expected ..., got VALUE`.
    pub fn check_settings(&self) -> Result<()> {
        for (name, v) in [
            ("n_workers", self.n_workers as u64),
            ("n_views", self.n_views as u64),
            ("n_frames", self.n_frames as u64),
            ("n_mels", self.n_mels as u64),
            ("block_size", self.block_size),
            ("shuffle_window", self.shuffle_window),
            ("prefetch", self.prefetch as u64),
            ("failure_window", self.failure_window as u64),
            ("sample_rate", self.sample_rate as u64),
        ] {
            at_least(name, v, 1)?;
        }
        if !(0.0..=1.0).contains(&self.max_failure_fraction) {
            return Err(Error::bad_argument(
                "max_failure_fraction",
                "a number in [0, 1]",
                self.max_failure_fraction,
            ));
        }
        if !self.mean.is_finite() {
            return Err(Error::bad_argument("mean", "a finite value", self.mean));
        }
        if !(self.std.is_finite() && self.std > 0.0) {
            return Err(Error::bad_argument("std", "a finite value > 0", self.std));
        }
        // A clip shorter than one frame has no frame of its own: all padding, marked valid.
        if !(self.clip_s.is_finite() && self.clip_s >= MIN_CLIP_S) {
            return Err(Error::bad_argument(
                "clip_s",
                format!("seconds >= {MIN_CLIP_S} (one {FRAME_LENGTH_MS} ms frame)"),
                self.clip_s,
            ));
        }
        self.check_window()?;
        if !(self.max_audio_mb.is_finite() && self.max_audio_mb > 0.0) {
            return Err(Error::bad_argument(
                "max_audio_mb",
                "a finite number of MB > 0",
                self.max_audio_mb,
            ));
        }
        one_of("crop", &self.crop, &["random", "events"])?;
        one_of("segment", &self.segment, &["centre", "columns"])?;
        one_of("pad", &self.pad, &PADS)?;
        crate::resample::Filter::parse(&self.resampler)?;
        one_of("features", &self.features, &["host", "device"])?;
        one_of("batch_dtype", &self.batch_dtype, &["float32", "bfloat16"])?;
        one_of("wave_dtype", &self.wave_dtype, &["float32", "int16"])?;
        if self.device_features() && self.n_views > 1 && self.view_window_s == 0.0 {
            return Err(Error::bad_argument(
                "features",
                format!(
                    "\"host\" with n_views={} and no view_window_s (device features take one \
                     decoded window per sample; set view_window_s to cut the views from it)",
                    self.n_views
                ),
                format!("{:?}", self.features),
            ));
        }
        Ok(())
    }

    /// Whether batches carry the window's samples (`features = "device"`) instead of features.
    pub fn device_features(&self) -> bool {
        self.features == "device"
    }

    /// Samples of the window a device-features batch carries per sample: `window_s()` at
    /// `sample_rate`, rounded.
    pub fn wave_samples(&self) -> usize {
        (self.window_s() * self.sample_rate as f64).round() as usize
    }

    /// `view_window_s` and the local crops cut from it.
    fn check_window(&self) -> Result<()> {
        let w = self.view_window_s;
        if !(w == 0.0 || (w.is_finite() && w >= self.clip_s && w <= MAX_WINDOW_S)) {
            return Err(Error::bad_argument(
                "view_window_s",
                format!(
                    "0 (one decode per view) or seconds in [clip_s={}, {MAX_WINDOW_S}]",
                    self.clip_s
                ),
                w,
            ));
        }
        if self.n_local == 0 {
            return Ok(());
        }
        if w == 0.0 {
            return Err(Error::bad_argument(
                "view_window_s",
                format!(
                    "seconds in [clip_s={}, {MAX_WINDOW_S}] with n_local={} (local crops are cut \
                     from the one decoded window)",
                    self.clip_s, self.n_local
                ),
                w,
            ));
        }
        if !(self.local_s >= MIN_CLIP_S && self.local_s <= self.clip_s) {
            return Err(Error::bad_argument(
                "local_s",
                format!(
                    "seconds in [{MIN_CLIP_S}, clip_s={}] (at least one {FRAME_LENGTH_MS} ms \
                     frame) with n_local > 0",
                    self.clip_s
                ),
                self.local_s,
            ));
        }
        // The distinct crop starts in the window, one per frame shift: more crops than that
        // would repeat one.
        let positions = ((w - self.local_s) * 1000.0 / FRAME_SHIFT_MS as f64).round() as u64 + 1;
        if self.n_local as u64 > positions {
            return Err(Error::bad_argument(
                "n_local",
                format!(
                    "at most {positions} (the distinct {} s crop positions in a {w} s window at \
                     {FRAME_SHIFT_MS} ms frames)",
                    self.local_s
                ),
                self.n_local,
            ));
        }
        let Some(frames) = self.local_frames else {
            return Ok(()); // derived: never more than the crop has
        };
        at_least("local_frames", frames as u64, 1)?;
        let real = self.local_crop_frames();
        if frames > real {
            return Err(Error::bad_argument(
                "local_frames",
                format!(
                    "at most {real} (the frames of a local_s={} s crop; more would be \
                     zero-padding; leave it unset to derive it)",
                    self.local_s
                ),
                frames,
            ));
        }
        if frames > self.n_frames {
            return Err(Error::bad_argument(
                "local_frames",
                format!(
                    "at most n_frames={} (a local view is never longer than a view)",
                    self.n_frames
                ),
                frames,
            ));
        }
        Ok(())
    }

    /// The settings ([`LoaderConfig::check_settings`]), then the run's arguments against each
    /// other and the dataset's size.
    pub fn validate(&self, n_rows: u64) -> Result<()> {
        if n_rows == 0 {
            return Err(Error::bad_argument(
                "shards",
                "a dataset with at least one row",
                "0 rows",
            ));
        }
        self.check_settings()?;
        at_least("batch_size", self.batch_size as u64, 1)?;
        at_least("process_count", self.process_count as u64, 1)?;
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
        self.check_memory(physical_memory())
    }

    /// Every setting that sizes the batches, bounded by the memory they imply: the batches
    /// alive at once (`prefetch` queued, one assembled, one handed over, the caller's) must
    /// fit in half of `ram` bytes. Without it a huge n_frames, n_views or n_classes aborts the
    /// process in a failed allocation at the first batch. Over the bound, the error names the
    /// setting furthest above its default in the largest part of a batch (features, local
    /// crops, windows, targets) or prefetch, and the most it may be with the others as they are.
    pub fn check_memory(&self, ram: u64) -> Result<()> {
        let b = self.local_batch() as u128;
        let alive = self.prefetch as u128 + 3;
        let half = ram as u128 / 2;
        let el: u128 = if self.batch_dtype == "bfloat16" { 2 } else { 4 };
        let wave_el: u128 = if self.wave_dtype == "int16" { 2 } else { 4 };
        let device = self.device_features();
        let (m, f) = (self.n_mels as u128, self.n_frames as u128);
        let views = if device {
            0
        } else {
            self.n_views as u128 * b * f * m * el
        };
        let local_rows = self.local_view_frames() as u128;
        let local = if device {
            0
        } else {
            self.n_local as u128 * b * local_rows * m * el
        };
        let wave = if device {
            b * self.wave_samples() as u128 * wave_el
        } else {
            0
        };
        let targets = 4 * b * self.n_classes as u128;
        let per_batch = views + local + wave + targets;
        if per_batch * alive <= half {
            return Ok(());
        }
        // (setting, its value, its default, the bytes per batch one unit of it costs, what)
        let unit = |total: u128, n: u128| total / n.max(1);
        let mut blame: Vec<(&'static str, f64, f64, u128, &str)> = vec![
            (
                "n_classes",
                self.n_classes as f64,
                1000.0,
                4 * b,
                "multi-hot targets",
            ),
            ("prefetch", self.prefetch as f64, 2.0, 0, "batches"),
        ];
        if device {
            let per_s = b * self.sample_rate as u128 * wave_el;
            blame.push(("view_window_s", self.window_s(), 6.0, per_s, "windows"));
        } else {
            blame.push(("n_frames", f as f64, 512.0, unit(views, f), "features"));
            blame.push((
                "n_views",
                self.n_views as f64,
                1.0,
                unit(views, self.n_views as u128),
                "features",
            ));
            blame.push((
                "n_mels",
                m as f64,
                128.0,
                unit(views + local, m),
                "features",
            ));
            blame.push((
                "n_local",
                self.n_local as f64,
                1.0,
                unit(local, self.n_local as u128),
                "local crops",
            ));
        }
        let (name, value, _, per_unit, what) = blame
            .into_iter()
            .filter(|x| x.0 == "prefetch" || x.3 > 0)
            .max_by(|x, y| (x.1 / x.2).total_cmp(&(y.1 / y.2)))
            .expect("prefetch is always a candidate");
        let most = if name == "prefetch" {
            (half / per_batch.max(1)).saturating_sub(3) as f64
        } else {
            let others = per_batch - (per_unit as f64 * value) as u128;
            ((half / alive).saturating_sub(others) / per_unit.max(1)) as f64
        };
        let most = if name == "view_window_s" {
            format!("{most} s")
        } else {
            format!("{}", most as u128)
        };
        let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
        Err(Error::bad_argument(
            name,
            format!(
                "at most {most} (the {what} of {alive} batches of {b} rows in flight take \
                 {:.3} GiB at this value; half this machine's memory is {:.3} GiB)",
                gib(per_batch * alive),
                gib(half)
            ),
            value,
        ))
    }

    /// Seconds the transform decodes per call: `view_window_s`, or `clip_s` without a window.
    pub fn window_s(&self) -> f64 {
        if self.view_window_s > 0.0 {
            self.view_window_s
        } else {
            self.clip_s
        }
    }

    /// Frames of one transform call from the debug transform: Kaldi's count for `window_s()`
    /// (25 ms window, 10 ms shift, snip edges), 498 for 5 s; at least 1.
    pub fn debug_frames(&self) -> usize {
        kaldi_frames(self.window_s())
    }

    /// Frames of one view: Kaldi's count for `clip_s` (498 for 5 s); at least 1.
    pub fn clip_frames(&self) -> usize {
        kaldi_frames(self.clip_s)
    }

    /// Frames of a local crop: Kaldi's count for `local_s`.
    pub fn local_crop_frames(&self) -> usize {
        kaldi_frames(self.local_s)
    }

    /// Frames of a local view in the batch: `local_frames`, or unset the crop's frames at most
    /// `n_frames`.
    pub fn local_view_frames(&self) -> usize {
        self.local_frames
            .unwrap_or_else(|| self.local_crop_frames().min(self.n_frames))
    }

    /// Slots of each global batch that this process produces.
    pub fn local_batch(&self) -> usize {
        self.batch_size / self.process_count
    }

    /// Samples dispatched but not yet assembled: `in_flight`, or by default 8 per worker (>= 16).
    pub fn in_flight_or_default(&self) -> usize {
        if self.in_flight > 0 {
            self.in_flight
        } else {
            (8 * self.n_workers).max(16)
        }
    }

    /// Number of global batches of one eval pass.
    pub fn eval_batches(&self, n_rows: u64) -> u64 {
        n_rows.div_ceil(self.batch_size as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    /// Issue 47 item 16: n_frames 1e9 or n_views 1e6 passed the validator and the first batch
    /// aborted the process (a failed allocation, SIGABRT): no message naming the setting; and
    /// a huge prefetch was blamed on n_classes.
    fn every_setting_that_sizes_the_batches_is_bounded_by_memory() {
        let base = LoaderConfig {
            batch_size: 8,
            prefetch: 2,
            ..Default::default()
        };
        let ram = 16u64 << 30;
        assert!(base.check_memory(ram).is_ok());
        for (c, name) in [
            (
                LoaderConfig {
                    n_frames: 1_000_000_000,
                    ..base.clone()
                },
                "n_frames",
            ),
            (
                LoaderConfig {
                    n_views: 1_000_000,
                    ..base.clone()
                },
                "n_views",
            ),
            (
                LoaderConfig {
                    prefetch: 1_000_000,
                    n_classes: 10,
                    ..base.clone()
                },
                "prefetch",
            ),
            (
                LoaderConfig {
                    features: "device".into(),
                    view_window_s: 3000.0,
                    batch_size: 4096,
                    ..base.clone()
                },
                "view_window_s",
            ),
        ] {
            let e = c.check_memory(ram).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("bad argument {name}: expected at most ")),
                "{name}: {e}"
            );
            assert!(e.contains("half this machine's memory is 8.000 GiB"), "{e}");
        }
        // At the bound it names, the setting fits.
        let e = LoaderConfig {
            n_frames: 1_000_000_000,
            ..base.clone()
        }
        .check_memory(ram)
        .unwrap_err()
        .to_string();
        let most: usize = e["bad argument n_frames: expected at most ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let at = LoaderConfig {
            n_frames: most,
            ..base.clone()
        };
        assert!(at.check_memory(ram).is_ok());
        let over = LoaderConfig {
            n_frames: most + 1,
            ..base.clone()
        };
        assert!(over.check_memory(ram).is_err());
    }

    #[test]
    fn n_classes_is_bounded_by_the_memory_it_implies() {
        let c = LoaderConfig {
            batch_size: 8,
            prefetch: 2,
            n_classes: 1 << 40,
            ..Default::default()
        };
        // 4 bytes x 8 rows x 5 batches = 160 bytes per class, beside 5 batches of 8 x 512 x
        // 128 float32 features (10 MiB); 16 GiB of RAM: 8 GiB usable.
        let e = c.check_memory(16 << 30).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "bad argument n_classes: expected at most 53621555 (the multi-hot \
                           targets of 5 batches of 8 rows in flight take 163840.010 GiB"
            ) && e.ends_with("half this machine's memory is 8.000 GiB), got 1099511627776"),
            "{e}"
        );
        let ok = LoaderConfig {
            n_classes: 53_621_555,
            ..c.clone()
        };
        assert!(ok.check_memory(16 << 30).is_ok());
        let over = LoaderConfig {
            n_classes: 53_621_556,
            ..c.clone()
        };
        assert!(over.check_memory(16 << 30).is_err());
        assert!(c.validate(10).is_err() && physical_memory() > 0);
    }

    #[test]
    fn local_crops_never_zero_pad_and_max_audio_mb_is_positive() {
        let local = |local_s: f64, local_frames: Option<usize>| LoaderConfig {
            view_window_s: 6.0,
            n_local: 1,
            local_s,
            local_frames,
            n_frames: 64,
            ..Default::default()
        };
        assert!(local(0.5, Some(48)).validate(10).is_ok());
        // Unset: the crop's frames, at most n_frames.
        assert_eq!(local(0.5, None).local_view_frames(), 48);
        assert_eq!(local(2.0, None).local_view_frames(), 64);
        assert_eq!(local(2.0, Some(16)).local_view_frames(), 16);
        let e = local(0.5, Some(192))
            .check_settings()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "bad argument local_frames: expected at most 48 (the frames of a local_s=0.5 s crop; \
             more would be zero-padding; leave it unset to derive it), got 192"
        );
        // Longer than a view: 2 s crops hold 198 frames, the views 64.
        let e = local(2.0, Some(128))
            .check_settings()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "bad argument local_frames: expected at most n_frames=64 (a local view is never \
             longer than a view), got 128"
        );
        // No more crops than distinct 10 ms starts: 1 s crops in a 1.05 s window have 6.
        let crops = |n_local: usize| LoaderConfig {
            view_window_s: 1.05,
            clip_s: 1.0,
            n_local,
            local_s: 1.0,
            ..Default::default()
        };
        assert!(crops(6).check_settings().is_ok());
        assert_eq!(
            crops(7).check_settings().unwrap_err().to_string(),
            "bad argument n_local: expected at most 6 (the distinct 1 s crop positions in a \
             1.05 s window at 10 ms frames), got 7"
        );
        for mb in [0.0, -1.0, f64::NAN] {
            let c = LoaderConfig {
                max_audio_mb: mb,
                ..Default::default()
            };
            assert!(c
                .validate(10)
                .unwrap_err()
                .to_string()
                .contains("max_audio_mb"));
        }
    }

    #[test]
    fn settings_are_checked_without_the_run_and_kaldi_frames_saturate() {
        let run = LoaderConfig {
            batch_size: 0,
            process_index: 3,
            ..Default::default()
        };
        assert!(run.check_settings().is_ok());
        let e = run.validate(10).unwrap_err().to_string();
        assert_eq!(e, "bad argument batch_size: expected >= 1, got 0");
        let e = LoaderConfig {
            n_workers: 0,
            ..run
        };
        let e = e.check_settings().unwrap_err().to_string();
        assert_eq!(e, "bad argument n_workers: expected >= 1, got 0");
        for (s, frames) in [(5.0, 498), (2.0, 198), (0.5, 48), (0.0, 1), (-1.0, 1)] {
            assert_eq!(kaldi_frames(s), frames, "{s}");
        }
        assert_eq!(kaldi_frames(f64::NAN), 1);
        assert_eq!(kaldi_frames(f64::NEG_INFINITY), 1);
        assert!(kaldi_frames(f64::INFINITY) > 1 << 50);
    }
}
