//! A whole clip: windowed decode -> cached resample -> Kaldi fbank. The loader's unit of work.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::decode::{
    first_bad_sample, panic_message, seconds_to_frames, Source, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE,
};
use crate::error::{Error, Result};
use crate::fbank::{Fbank, FbankConfig};
use crate::resample::{Filter, ResamplerCache};

/// Where a clip starts inside its recording.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crop {
    /// At this many seconds from the start.
    Start(f64),
    /// At `f * max(0, recording_length - clip_duration)`, with `f` in [0, 1]. 0.5 is the centre crop;
    /// a uniform random `f` is a random crop. The recording length comes from the container header
    /// where it has one (decoding fully otherwise).
    Fraction(f64),
    /// At `lo_s + f * (hi_s - lo_s)` seconds, moved into `[0, recording_length - clip_duration]`
    /// (to 0 when the recording is shorter than the clip). With `lo_s = end - clip` and `hi_s =
    /// start` of an event no longer than the clip, the clip covers the event wherever `f` puts it.
    Within { lo_s: f64, hi_s: f64, f: f64 },
}

/// A log-mel feature matrix, row-major (frames x mels).
#[derive(Clone, Debug, Default)]
pub struct Features {
    pub data: Vec<f32>,
    pub n_frames: usize,
    pub n_mels: usize,
    /// True when the window was decoded by seeking; false when we fell back to a full decode.
    pub seeked: bool,
    /// Where the first frame starts in the recording, in seconds.
    pub start_s: f64,
    /// Leading frames computed from the recording itself; the rest (a recording shorter than
    /// the window, or whose data stops inside it) are zero padding.
    pub valid_frames: usize,
    /// The recording's data stops early (`decode::Damage::describe`): these features come from
    /// what it holds; a random crop was placed inside the data.
    pub damage: Option<String>,
    /// Seconds into the recording where its data ends, with `damage`.
    pub data_end_s: Option<f64>,
    /// With `ClipConfig::device_wave`: the resampled window itself (`data` is then empty and
    /// `n_frames`/`valid_frames` count the frames its fbank will have and that come from the
    /// recording); empty otherwise.
    pub wave: Vec<f32>,
}

/// Where a decoded window lies in its recording.
#[derive(Clone, Debug, PartialEq)]
pub struct WaveInfo {
    /// Decoded by seeking (false: a full decode, then cut).
    pub seeked: bool,
    /// Start of the window in the recording, in seconds.
    pub start_s: f64,
    /// Resampled samples that come from the recording (the rest is zero padding).
    pub valid: usize,
    /// Where the recording's data stopped early, and why (`decode::Damage::describe`).
    pub damage: Option<(f64, String)>,
}

/// Something that turns encoded audio bytes into features. The loader is generic over it so its
/// ordering and state logic can be tested without codecs.
pub trait Transform: Send {
    fn apply(&mut self, data: &[u8], crop: Crop) -> Result<Features>;
}

/// What a `ClipWorker` produces: `duration_s` of audio resampled to `sample_rate` with
/// `resampler`, as Kaldi log-mel features with `fbank` options (whose `sample_rate` is forced to
/// `sample_rate`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClipConfig {
    pub sample_rate: u32,
    pub duration_s: f64,
    pub fbank: FbankConfig,
    pub resampler: Filter,
    /// Some(n): a clip is its resampled window of exactly `n` samples (zero-padded or cut),
    /// its fbank left to the device (`Features::wave`); None: the fbank is computed here.
    pub device_wave: Option<usize>,
}

impl Default for ClipConfig {
    fn default() -> Self {
        ClipConfig {
            sample_rate: 32000,
            duration_s: 5.0,
            fbank: FbankConfig::default(),
            resampler: Filter::default(),
            device_wave: None,
        }
    }
}

/// Per-worker state for clips: the filterbank (window, mel matrix, FFT plan, buffers) and one
/// resampler per source rate seen, all built once and reused for every clip.
///
/// A clip is `duration_s` from the crop start. The window is decoded with a small margin on each
/// side (a whole number of the resampler's rate blocks, where the recording has it) so that the
/// resampler sees real signal instead of zeros at the clip edges; the margin is cut after
/// resampling. A recording shorter than the window is zero-padded at the end.
pub struct ClipWorker {
    cfg: ClipConfig,
    fbank: Fbank,
    resamplers: ResamplerCache,
    wave: Vec<f32>,
}

impl std::fmt::Debug for ClipWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClipWorker")
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// Samples of margin decoded on each side of a window, for a `src` -> `dst` resample: the smallest
/// multiple of the reduced input block that is at least 256 (0 when no resampling or the block is
/// large), so that the margin maps to a whole number of output samples.
fn margin(src: u32, dst: u32) -> u64 {
    if src == dst {
        return 0;
    }
    let (mut a, mut b) = (src as u64, dst as u64);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let block = src as u64 / a;
    if block > 1024 {
        0
    } else {
        256u64.div_ceil(block) * block
    }
}

/// Where a `Fraction` or `Within` crop starts in a recording of `n` frames (rate `sr`), for a
/// clip of `dur` frames.
fn placement(crop: Crop, sr: u32, dur: u64) -> Result<impl Fn(u64) -> u64> {
    let (lo, hi, f) = match crop {
        Crop::Within { lo_s, hi_s, f } => (Some(lo_s), hi_s, f),
        Crop::Fraction(f) => (None, 0.0, f),
        Crop::Start(_) => unreachable!("a start is not placed"),
    };
    if !(f.is_finite() && (0.0..=1.0).contains(&f)) {
        return Err(Error::bad_argument("crop fraction", "a value in [0, 1]", f));
    }
    if !(lo.unwrap_or(0.0).is_finite() && hi.is_finite()) {
        return Err(Error::bad_argument(
            "crop bounds",
            "finite seconds",
            format!("[{lo:?}, {hi}]"),
        ));
    }
    Ok(move |n: u64| {
        let room = n.saturating_sub(dur);
        match lo {
            None => (f * room as f64).round() as u64,
            Some(lo) => {
                let s = ((lo + f * (hi - lo)) * sr as f64).round().max(0.0) as u64;
                s.min(room)
            }
        }
    })
}

impl ClipWorker {
    pub fn new(cfg: ClipConfig) -> Result<Self> {
        let cfg = Self::check(cfg)?;
        Ok(ClipWorker {
            fbank: Fbank::new(cfg.fbank.clone())?,
            cfg,
            resamplers: ResamplerCache::new(),
            wave: Vec::new(),
        })
    }

    fn check(mut cfg: ClipConfig) -> Result<ClipConfig> {
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&cfg.sample_rate) {
            return Err(Error::bad_argument(
                "sample_rate",
                format!("a sample rate in [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz"),
                cfg.sample_rate,
            ));
        }
        if !(cfg.duration_s.is_finite() && cfg.duration_s > 0.0 && cfg.duration_s <= 3600.0) {
            return Err(Error::bad_argument(
                "duration_s",
                "0 < seconds <= 3600",
                cfg.duration_s,
            ));
        }
        cfg.fbank.sample_rate = cfg.sample_rate as f32;
        Ok(cfg)
    }

    pub fn config(&self) -> &ClipConfig {
        &self.cfg
    }

    /// Switch configuration, keeping the resampler cache (and the fbank when it is unchanged).
    pub fn set_config(&mut self, cfg: ClipConfig) -> Result<()> {
        let cfg = Self::check(cfg)?;
        if cfg.fbank != self.cfg.fbank {
            self.fbank = Fbank::new(cfg.fbank.clone())?;
        }
        self.cfg = cfg;
        Ok(())
    }

    /// How many resamplers this worker has built (one per source rate seen).
    pub fn resamplers_built(&self) -> usize {
        self.resamplers.len()
    }

    /// Decode the cropped window, resample it to `sample_rate` (`duration_s` of samples, zero-padded
    /// at the end when the recording is shorter) into the worker's wave buffer; returns
    /// where the window lies in the recording.
    pub fn wave(&mut self, data: &[u8], crop: Crop) -> Result<(&[f32], WaveInfo)> {
        let mut src = Source::open(data)?;
        let sr = src.info().sample_rate;
        let dst = self.cfg.sample_rate;
        let dur = seconds_to_frames("duration_s", self.cfg.duration_s, sr)?.max(1);
        let m = margin(sr, dst);
        let (decoded, left, start) = match crop {
            Crop::Start(s) => {
                let start = seconds_to_frames("start_s", s, sr)?;
                let left = if start >= m { m } else { 0 };
                let d = src.read(start - left, Some(left + dur + m))?;
                (d, left, start)
            }
            Crop::Fraction(_) | Crop::Within { .. } => {
                let place = placement(crop, sr, dur)?;
                match src.info().n_frames {
                    Some(n) => {
                        let start = place(n);
                        let left = if start >= m { m } else { 0 };
                        let d = src.read_partial(start - left, Some(left + dur + m))?;
                        match &d.damage {
                            // The data stops before the window's end: the recording is as long
                            // as the data it holds; place the crop again inside it.
                            Some(damage) if damage.frame < start + dur => {
                                let start = place(damage.frame);
                                let left = if start >= m { m } else { 0 };
                                let mut again =
                                    Source::open(data)?.read(start - left, Some(left + dur + m))?;
                                again.damage = d.damage.clone();
                                (again, left, start)
                            }
                            _ => (d, left, start),
                        }
                    }
                    None => {
                        // Length unknown: decode everything (what the data holds), then cut.
                        let mut d = src.read(0, None)?;
                        let start = place(d.samples.len() as u64);
                        let left = if start >= m { m } else { 0 };
                        let a = (start - left) as usize;
                        let b = ((start + dur + m) as usize).min(d.samples.len());
                        d.samples = d.samples[a..b].to_vec();
                        d.seeked = false;
                        (d, left, start)
                    }
                }
            }
        };
        let want = crate::resample::output_len(dur as usize, sr, dst);
        let resampler = self.resamplers.get_filter(sr, dst, self.cfg.resampler)?;
        resampler.process_into(&decoded.samples, &mut self.wave)?;
        let skip = crate::resample::output_len(left as usize, sr, dst).min(self.wave.len());
        self.wave.drain(..skip);
        // Samples from the recording: the decode's, less the left margin and the right one read.
        let got = (decoded.samples.len() as u64).saturating_sub(left);
        let real = crate::resample::output_len(got.min(dur) as usize, sr, dst);
        self.wave.resize(want, 0.0);
        let info = WaveInfo {
            seeked: decoded.seeked,
            start_s: start as f64 / sr as f64,
            valid: real.min(want),
            damage: decoded
                .damage
                .as_ref()
                .map(|d| (d.frame as f64 / sr as f64, d.describe(src.info()))),
        };
        Ok((&self.wave, info))
    }

    /// The whole clip: windowed decode -> cached resample -> fbank.
    ///
    /// Whatever the bytes, the result is features that are all finite or an error about this
    /// recording (`CorruptData` and friends, which the loader skips and counts), never a panic:
    /// a panic anywhere in the clip becomes `CorruptData` naming its message (and the resamplers,
    /// whose state it may have left half-updated, are rebuilt on next use).
    pub fn clip(&mut self, data: &[u8], crop: Crop) -> Result<Features> {
        match catch_unwind(AssertUnwindSafe(|| self.clip_inner(data, crop))) {
            Ok(r) => r,
            Err(payload) => {
                self.resamplers = ResamplerCache::new();
                Err(Error::corrupt(format!(
                    "audio transform panicked: {}",
                    panic_message(&*payload)
                )))
            }
        }
    }

    fn clip_inner(&mut self, data: &[u8], crop: Crop) -> Result<Features> {
        let (_, info) = self.wave(data, crop)?;
        if let Some(n) = self.cfg.device_wave {
            // The buffer itself goes (no copy); the next clip's resample makes a new one.
            let mut wave = std::mem::take(&mut self.wave);
            wave.resize(n, 0.0);
            return Ok(Features {
                n_mels: self.fbank.n_mels(),
                n_frames: self.fbank.n_frames(n),
                valid_frames: self.fbank.n_frames(info.valid.min(n)),
                seeked: info.seeked,
                start_s: info.start_s,
                data_end_s: info.damage.as_ref().map(|d| d.0),
                damage: info.damage.map(|d| d.1),
                wave,
                ..Default::default()
            });
        }
        let mut feats = Features {
            n_mels: self.fbank.n_mels(),
            seeked: info.seeked,
            start_s: info.start_s,
            valid_frames: self.fbank.n_frames(info.valid),
            data_end_s: info.damage.as_ref().map(|d| d.0),
            damage: info.damage.map(|d| d.1),
            ..Default::default()
        };
        // The wave comes from the recording, not from a caller: a bad sample in it is the
        // recording's fault (decode bounds samples, so this is a safety net).
        feats.n_frames = self
            .fbank
            .compute_into(&self.wave, &mut feats.data)
            .map_err(|e| match e {
                Error::BadArgument {
                    name,
                    expected,
                    actual,
                } if name == "wave" => {
                    Error::corrupt(format!("resampled wave: expected {expected}, got {actual}"))
                }
                e => e,
            })?;
        if let Some(i) = first_bad_sample(&feats.data, f32::MAX) {
            return Err(Error::corrupt(format!(
                "features: expected finite values, got {} at frame {}, mel bin {}",
                feats.data[i],
                i / feats.n_mels.max(1),
                i % feats.n_mels.max(1)
            )));
        }
        Ok(feats)
    }
}

impl Transform for ClipWorker {
    fn apply(&mut self, data: &[u8], crop: Crop) -> Result<Features> {
        self.clip(data, crop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::tests::wav_bytes;

    fn tone(n: usize, sr: u32, f: f64) -> Vec<f32> {
        (0..n)
            .map(|i| (0.5 * (2.0 * std::f64::consts::PI * f * i as f64 / sr as f64).sin()) as f32)
            .collect()
    }

    #[test]
    fn clip_shape_and_resampler_reuse() {
        let mut w = ClipWorker::new(ClipConfig::default()).unwrap();
        let a = wav_bytes(&tone(44100 * 12, 44100, 1000.0), 1, 44100, 16, false);
        let b = wav_bytes(&tone(48000 * 7, 48000, 1000.0), 1, 48000, 16, false);
        for crop in [
            Crop::Start(0.0),
            Crop::Start(3.3),
            Crop::Fraction(0.5),
            Crop::Fraction(1.0),
            Crop::Within {
                lo_s: 1.0,
                hi_s: 3.0,
                f: 0.25,
            },
            Crop::Within {
                lo_s: -4.0,
                hi_s: 20.0,
                f: 1.0,
            },
        ] {
            let f = w.apply(&a, crop).unwrap();
            assert_eq!((f.n_frames, f.n_mels, f.data.len()), (498, 128, 498 * 128));
            assert!(f.seeked);
            assert_eq!(f.valid_frames, 498);
            let want = match crop {
                Crop::Start(s) => s,
                Crop::Fraction(x) => x * 7.0,
                // Inside [0, 12 s - 5 s]: 1.5 s, and 20 s moved to 7 s.
                Crop::Within { lo_s, hi_s, f } => (lo_s + f * (hi_s - lo_s)).min(7.0),
            };
            assert!((f.start_s - want).abs() < 1e-4, "{crop:?}: {}", f.start_s);
            w.apply(&b, crop).unwrap();
        }
        assert_eq!(w.resamplers_built(), 2);
        // A 2 s recording gives a full-size, zero-padded clip.
        let short = wav_bytes(&tone(32000 * 2, 32000, 500.0), 1, 32000, 16, false);
        let f = w.apply(&short, Crop::Fraction(0.5)).unwrap();
        assert_eq!(f.n_frames, 498);
        assert_eq!(f.data[497 * 128], f32::EPSILON.ln());
        assert_eq!((f.start_s, f.valid_frames), (0.0, 198)); // Kaldi frames of 2 s
    }

    /// The clip's wave equals resampling the whole recording and cutting (away from the edges the
    /// margin makes them identical up to float round-off; the Kaiser filter's half length, 137
    /// samples at 44.1 kHz, lies inside the 441-sample margin, rubato's does not), with either
    /// filter.
    #[test]
    fn window_wave_matches_whole_resample_cut() {
        let n = 44100 * 9;
        let x: Vec<f32> = (0..n)
            .map(|i| {
                let t = i as f64 / 44100.0;
                (0.3 * (2.0 * std::f64::consts::PI * (200.0 + 900.0 * t) * t).sin()) as f32
            })
            .collect();
        let bytes = wav_bytes(&x, 1, 44100, 32, true);
        for (filter, tol) in [(Filter::SoxrHq, 1e-5), (Filter::RubatoBh2, 1e-4)] {
            let mut whole = crate::resample::Resampler::with_filter(44100, 32000, filter)
                .unwrap()
                .process(&x)
                .unwrap();
            let mut w = ClipWorker::new(ClipConfig {
                resampler: filter,
                ..Default::default()
            })
            .unwrap();
            let (wave, info) = w.wave(&bytes, Crop::Start(2.5)).unwrap();
            assert_eq!((info.start_s, info.valid), (2.5, 160_000));
            let cut = &mut whole[80000..240000];
            let err = wave
                .iter()
                .zip(cut.iter_mut())
                .map(|(a, b)| (a - *b).abs())
                .fold(0.0, f32::max);
            println!("{filter:?}: max diff {err:.2e}");
            assert!(err < tol, "{filter:?}: max diff {err}");
        }
    }

    #[test]
    fn a_truncated_recording_gives_its_data_and_says_where_it_stops() {
        // 12 s declared at 44.1 kHz, the bytes hold ~6 s (a recorder whose battery died).
        let full = wav_bytes(&tone(44100 * 12, 44100, 700.0), 1, 44100, 16, false);
        let cut = &full[..44 + 2 * 44100 * 6];
        let mut w = ClipWorker::new(ClipConfig::default()).unwrap();
        // A random crop past the data is placed again inside it: whole, and flagged.
        for f in [0.5, 1.0] {
            let x = w.apply(cut, Crop::Fraction(f)).unwrap();
            assert!(
                x.start_s + 5.0 <= 6.0 + 1e-6,
                "{f}: starts at {}",
                x.start_s
            );
            assert_eq!(x.valid_frames, 498);
            assert!((x.data_end_s.unwrap() - 6.0).abs() < 0.05);
            assert!(x
                .damage
                .as_ref()
                .unwrap()
                .contains("the data ends at 6.000 s of 12.000 s"));
        }
        // A crop at a fixed start across the end: what the data holds, then padding.
        let x = w.apply(cut, Crop::Start(4.0)).unwrap();
        assert!(
            x.damage.is_some() && (150..250).contains(&x.valid_frames),
            "{}",
            x.valid_frames
        );
        // Before the end: whole and silent about it; after: empty audio naming where it ends.
        assert!(w.apply(cut, Crop::Start(0.5)).unwrap().damage.is_none());
        match w.apply(cut, Crop::Start(8.0)) {
            Err(Error::EmptyAudio { detail }) => assert!(detail.contains("after the data ends")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_crops_are_errors() {
        let mut w = ClipWorker::new(ClipConfig::default()).unwrap();
        let a = wav_bytes(&tone(32000, 32000, 1000.0), 1, 32000, 16, false);
        assert!(matches!(
            w.apply(&a, Crop::Fraction(1.5)),
            Err(Error::BadArgument { .. })
        ));
        assert!(matches!(
            w.apply(&a, Crop::Start(-1.0)),
            Err(Error::BadArgument { .. })
        ));
        assert!(matches!(
            w.apply(&a, Crop::Start(2.0)),
            Err(Error::EmptyAudio { .. })
        ));
        assert!(w.apply(&[1, 2, 3], Crop::Start(0.0)).is_err());
        assert!(ClipWorker::new(ClipConfig {
            sample_rate: 999,
            ..Default::default()
        })
        .is_err());
        assert!(ClipWorker::new(ClipConfig {
            duration_s: 0.0,
            ..Default::default()
        })
        .is_err());
    }

    /// A corrupt float WAV (one exponent bit flip gives ~3e38; 1e20 used to give +inf features)
    /// is `CorruptData` naming the frame, never NaN/inf features or a panic; the worker keeps
    /// working after it.
    #[test]
    fn corrupt_float_samples_are_corrupt_data() {
        let mut w = ClipWorker::new(ClipConfig::default()).unwrap();
        let x = tone(44100 * 6, 44100, 1000.0);
        let good = w
            .apply(&wav_bytes(&x, 1, 44100, 32, true), Crop::Start(0.0))
            .unwrap();
        for (v, run) in [(3e38f32, 100usize), (-3e38, 1), (1e20, 1), (f32::NAN, 1)] {
            let mut y = x.clone();
            y[44100..44100 + run].fill(v);
            let bytes = wav_bytes(&y, 1, 44100, 32, true);
            match w.apply(&bytes, Crop::Start(0.0)) {
                Err(Error::CorruptData { detail }) => {
                    assert!(detail.contains("at frame 44100"), "{v}: {detail}")
                }
                other => panic!("{v}: {other:?}"),
            }
            // A window that does not reach the bad sample is fine.
            assert!(w.apply(&bytes, Crop::Start(1.5)).is_ok());
        }
        let again = w
            .apply(&wav_bytes(&x, 1, 44100, 32, true), Crop::Start(0.0))
            .unwrap();
        assert_eq!(again.data, good.data);
    }

    /// A header declaring 1-2 Hz made the resampler build a ~65M-point FFT (4.7 s, 1.5 GB kept
    /// in the cache); now it is rejected before any resampler is built.
    #[test]
    fn tiny_declared_rates_are_rejected_before_resampling() {
        let mut w = ClipWorker::new(ClipConfig::default()).unwrap();
        for sr in [1u32, 2, 999] {
            let bytes = wav_bytes(&tone(4000, 8000, 100.0), 1, sr, 32, true);
            let t = std::time::Instant::now();
            match w.apply(&bytes, Crop::Fraction(0.5)) {
                Err(Error::CorruptData { detail }) => assert!(
                    detail.ends_with(&format!(
                        "expected a sample rate in [1000, 768000] Hz, got {sr}"
                    )),
                    "{detail}"
                ),
                other => panic!("{sr}: {other:?}"),
            }
            assert!(t.elapsed().as_secs_f64() < 0.1);
        }
        assert_eq!(w.resamplers_built(), 0);
    }
}
