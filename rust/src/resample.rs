//! Resampling, built once per (source rate, target rate, filter) and reused.
//!
//! Two filters, named as a loader setting and an export name them ([`Filter`]):
//!
//! * `"soxr-hq"` (the default): our own zero-phase Kaiser-windowed sinc, applied by FFT blocks
//!   ([`crate::fir`]), designed to soxr "HQ"'s specification, the resampler of Hugging Face
//!   `datasets` and librosa (>= 0.10), hence of BirdSet's and Bird-MAE's published pipelines:
//!   its log-mel matches soxr HQ's to < 1e-3 relative L2 at 44.1 and 48 kHz.
//! * `"rubato-bh2-1024"`: the filter before issue 36, kept bit for bit so that runs saved before
//!   the setting existed resume on the same stream: rubato's synchronous FFT resampler with a
//!   Blackman-Harris^2 windowed sinc of about `FFT_TAPS` taps (its cut-off, which rubato derives
//!   from the block size, lies higher than soxr's: 0 dB at 15.5 kHz from 48 kHz, where soxr HQ
//!   is 16 dB down; log-mel 4.5-12e-2 relative L2 from soxr HQ's).
//!
//! Either way, where the reduced rate ratio gives a small FFT block (every common audio rate: 8,
//! 16, 22.05, 24, 32, 44.1, 48, 88.2, 96 kHz ...) the FFT resampler runs; otherwise (odd rates
//! whose reduced ratio would need a huge FFT block) rubato's asynchronous windowed-sinc
//! resampler. Both measured in the tests (SNR against analytic sines, alias rejection, agreement
//! with soxr in pytest).
//!
//! The filter delay is compensated (the Kaiser filter is zero-phase; rubato's
//! `process_all_into_buffer` trims `output_delay()`), the signal is treated as zero outside the
//! input, output sample `m` lies at input time `m * src / dst` (as soxr's), and the output has
//! exactly `round(n * dst / src)` samples.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rubato::audioadapter_buffers::direct::SequentialSlice;
use rubato::{
    Async, Fft, FixedAsync, FixedSync, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};

use crate::decode::{
    bad_sample_error, first_bad_sample, panic_message, MAX_ABS_SAMPLE, MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
};
use crate::error::{Error, Result};
use crate::fir::{Design, KaiserFft};

/// Target length of the FFT resampler's input block (its sinc filter length).
const FFT_TAPS: usize = 1024;
/// Above this reduced input block, the FFT resampler gets too slow to build; use sinc.
const MAX_FFT_BLOCK: usize = 1 << 16;
/// Sinc filter length of the asynchronous fallback ("rubato-bh2-1024").
const SINC_LEN: usize = 256;
/// Longest sinc filter of the asynchronous fallback of "soxr-hq" (its cut-off is lowered where
/// this length cannot reach the specified transition band: heavy downsampling from odd rates).
const MAX_SINC_LEN_HQ: usize = 2048;
/// Most resamplers a `ResamplerCache` keeps. A real corpus has a handful of rates; a corrupt one
/// can declare any rate in range, and each resampler holds FFT plans and buffers (up to a few MB).
pub const MAX_CACHED: usize = 32;

/// Which resampler a `Resampler` uses: none, an FFT resampler (the filter's own: rubato's or
/// [`KaiserFft`]), or rubato's asynchronous sinc resampler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Copy,
    Fft,
    Sinc,
}

/// A resampling filter, by the name that a loader setting (`resampler`), an export's input
/// settings and `resample(..., resampler=...)` use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Filter {
    /// soxr "HQ"'s specification ([`crate::fir`]): what the field resamples with.
    #[default]
    SoxrHq,
    /// rubato's Blackman-Harris^2 FFT resampler, `FFT_TAPS` taps: the filter before issue 36.
    RubatoBh2,
}

impl Filter {
    pub const ALL: [Filter; 2] = [Filter::SoxrHq, Filter::RubatoBh2];
    /// What a run, loader state or export that names no filter used (saved before the setting).
    pub const LEGACY: Filter = Filter::RubatoBh2;

    pub fn name(self) -> &'static str {
        match self {
            Filter::SoxrHq => "soxr-hq",
            Filter::RubatoBh2 => "rubato-bh2-1024",
        }
    }

    /// The filter named `name`; `BadArgument` naming the known ones otherwise.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|f| f.name()).collect();
                Error::bad_argument(
                    "resampler",
                    format!("one of {}", names.join(", ")),
                    format!("{name:?}"),
                )
            })
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `round(n * dst / src)`, in integers.
pub fn output_len(n: usize, src: u32, dst: u32) -> usize {
    let (n, src, dst) = (n as u128, src as u128, dst as u128);
    ((2 * n * dst + src) / (2 * src)) as usize
}

/// Input block of the FFT resampler: at least `target` frames (about `FFT_TAPS` for rubato's), an
/// even number of minimal blocks. rubato's filter is centred at `fft_size_in / 2` (integer
/// division) and it trims `fft_size_out / 2` output frames; both are exact only when both block
/// sizes are even (the Kaiser resampler needs them even too). Among up to twice the smallest
/// such block, the first whose FFT lengths (2 * block) have only the prime factors `primes`
/// (rustfft is fastest there), else the smallest.
fn fft_chunk_with(src: u32, dst: u32, target: usize, primes: &[usize]) -> Option<usize> {
    let g = gcd(src as u64, dst as u64);
    let (min_in, min_out) = ((src as u64 / g) as usize, (dst as u64 / g) as usize);
    let k0 = target.div_ceil(min_in).max(1);
    let k0 = k0 + k0 % 2;
    let smooth = |mut n: usize| {
        for &p in primes {
            while n.is_multiple_of(p) {
                n /= p;
            }
        }
        n == 1
    };
    (k0..=2 * k0)
        .step_by(2)
        .find(|&k| smooth(2 * k * min_in) && smooth(2 * k * min_out))
        .map(|k| k * min_in)
}

/// rubato's input block ("rubato-bh2-1024"): FFT lengths with factors 2, 3, 5 and 7.
fn fft_chunk(src: u32, dst: u32, target: usize) -> usize {
    fft_chunk_with(src, dst, target, &[2, 3, 5, 7]).unwrap_or_else(|| {
        let min_in = src as usize / gcd(src as u64, dst as u64) as usize;
        let k0 = target.div_ceil(min_in).max(1);
        (k0 + k0 % 2) * min_in
    })
}

/// The Kaiser resampler's input block ("soxr-hq"): at least `FFT_TAPS` and 4 filter half
/// lengths; FFT lengths with factors 2 and 3 where there are some (measured fastest: 48 kHz
/// 1.2 ms per 6 s at 1152 against 1.8 ms at 1050), else as rubato's.
fn kaiser_chunk(src: u32, dst: u32) -> usize {
    let target = FFT_TAPS.max(4 * Design::new(src, dst).half);
    fft_chunk_with(src, dst, target, &[2, 3]).unwrap_or_else(|| fft_chunk(src, dst, target))
}

fn check_rate(name: &'static str, sr: u32) -> Result<()> {
    if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&sr) {
        return Err(Error::bad_argument(
            name,
            format!("a sample rate in [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz"),
            sr,
        ));
    }
    Ok(())
}

/// rubato's sinc resampler delays by `sinc_len * ratio / 2 - 1` output frames (measured with an
/// impulse, see the tests) but trims only the integer part of `sinc_len * ratio / 2`. Prepending
/// `p` zeros adds `p * ratio`; pick `p` that makes the total nearly whole, and the extra frames to
/// skip after rubato's trim.
fn sinc_alignment(src: u32, dst: u32, sinc_len: usize) -> (usize, usize) {
    let ratio = dst as f64 / src as f64;
    let trimmed = (sinc_len as f64 * ratio / 2.0).floor();
    let delay = sinc_len as f64 * ratio / 2.0 - 1.0;
    let min_p = (2.0 / ratio).ceil() as usize;
    let (mut best, mut best_err) = (min_p, f64::INFINITY);
    for p in min_p..min_p + 8192 {
        let t = delay + p as f64 * ratio;
        let err = (t - t.round()).abs();
        if err < best_err {
            (best, best_err) = (p, err);
        }
    }
    let total = (delay + best as f64 * ratio).round();
    (best, (total - trimmed) as usize)
}

/// One resampler for a fixed (src, dst, filter), with its output buffer.
pub struct Resampler {
    src: u32,
    dst: u32,
    filter: Filter,
    kind: Kind,
    /// rubato's resampler: "rubato-bh2-1024", and the sinc fallback of either filter.
    inner: Option<Box<dyn rubato::Resampler<f32>>>,
    /// The Kaiser FFT resampler ("soxr-hq").
    kaiser: Option<KaiserFft>,
    /// Sinc only: zeros prepended to the input, then output frames skipped after rubato's own
    /// (integer-truncated) delay trim, so that the total delay is a whole number of frames.
    pre_zeros: usize,
    skip: usize,
    buf: Vec<f32>,
    input: Vec<f32>,
}

impl std::fmt::Debug for Resampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resampler")
            .field("src", &self.src)
            .field("dst", &self.dst)
            .field("filter", &self.filter)
            .field("kind", &self.kind)
            .finish()
    }
}

/// rubato's sinc parameters for `filter` at `src` -> `dst`: "rubato-bh2-1024" keeps its
/// `SINC_LEN` taps and rubato's own cut-off; "soxr-hq" places the cut-off of a Blackman-Harris^2
/// sinc (main lobe 16 / len of the Nyquist frequency, each side) at soxr HQ's, lower where at
/// most `MAX_SINC_LEN_HQ` taps cannot reach its transition band, so that the stopband still
/// starts at the lower Nyquist frequency.
fn sinc_parameters(src: u32, dst: u32, filter: Filter) -> (usize, Option<f32>) {
    match filter {
        Filter::RubatoBh2 => (SINC_LEN, None),
        Filter::SoxrHq => {
            let ratio = (dst as f64 / src as f64).min(1.0);
            let cutoff = Design::new(src, dst).cutoff_hz / (src.min(dst) as f64 / 2.0);
            let need = 16.0 / (ratio * (1.0 - cutoff));
            let len = ((need / 8.0).ceil() as usize * 8).clamp(SINC_LEN, MAX_SINC_LEN_HQ);
            let reach = 1.0 - 16.0 / (ratio * len as f64);
            (len, Some(cutoff.min(reach).max(0.5) as f32))
        }
    }
}

impl Resampler {
    /// Build the default filter's resampler for `src` -> `dst` Hz.
    pub fn new(src: u32, dst: u32) -> Result<Self> {
        Self::with_filter(src, dst, Filter::default())
    }

    /// Build `filter`'s resampler for `src` -> `dst` Hz, choosing FFT or sinc as described above.
    pub fn with_filter(src: u32, dst: u32, filter: Filter) -> Result<Self> {
        check_rate("src_sr", src)?;
        check_rate("dst_sr", dst)?;
        let g = gcd(src as u64, dst as u64) as usize;
        let kind = if src == dst {
            Kind::Copy
        } else if (src as usize / g).max(dst as usize / g) <= MAX_FFT_BLOCK {
            Kind::Fft
        } else {
            Kind::Sinc
        };
        Self::with_kind(src, dst, filter, kind)
    }

    /// Build with an explicit resampler kind (for measurements).
    pub fn with_kind(src: u32, dst: u32, filter: Filter, kind: Kind) -> Result<Self> {
        check_rate("src_sr", src)?;
        check_rate("dst_sr", dst)?;
        let construction = |e: rubato::ResamplerConstructionError| {
            Error::bad_argument("sample rates", "a pair rubato can resample", e)
        };
        let mut kaiser = None;
        let inner: Option<Box<dyn rubato::Resampler<f32>>> = match (kind, filter) {
            (Kind::Copy, _) => None,
            (Kind::Fft, Filter::RubatoBh2) => Some(Box::new(
                Fft::<f32>::new_custom(
                    src as usize,
                    dst as usize,
                    fft_chunk(src, dst, FFT_TAPS),
                    1,
                    1,
                    WindowFunction::BlackmanHarris2,
                    FixedSync::Input,
                )
                .map_err(construction)?,
            )),
            (Kind::Fft, Filter::SoxrHq) => {
                let b_in = kaiser_chunk(src, dst);
                let b_out = (b_in as u64 * dst as u64 / src as u64) as usize;
                kaiser = Some(KaiserFft::new(src, dst, b_in, b_out)?);
                None
            }
            (Kind::Sinc, _) => {
                let (len, cutoff) = sinc_parameters(src, dst, filter);
                let mut params =
                    SincInterpolationParameters::new(len, WindowFunction::BlackmanHarris2)
                        .oversampling_factor(512)
                        .interpolation(SincInterpolationType::Cubic);
                if let Some(c) = cutoff {
                    params = params.f_cutoff(c);
                }
                Some(Box::new(
                    Async::<f32>::new_sinc(
                        dst as f64 / src as f64,
                        1.0,
                        &params,
                        1024,
                        1,
                        FixedAsync::Input,
                    )
                    .map_err(construction)?,
                ))
            }
        };
        let (pre_zeros, skip) = match kind {
            Kind::Sinc => sinc_alignment(src, dst, sinc_parameters(src, dst, filter).0),
            _ => (0, 0),
        };
        Ok(Resampler {
            src,
            dst,
            filter,
            kind,
            inner,
            kaiser,
            pre_zeros,
            skip,
            buf: Vec::new(),
            input: Vec::new(),
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
    pub fn filter(&self) -> Filter {
        self.filter
    }
    pub fn rates(&self) -> (u32, u32) {
        (self.src, self.dst)
    }

    /// Resample a whole signal; the output has `round(n * dst / src)` samples.
    pub fn process(&mut self, x: &[f32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.process_into(x, &mut out)?;
        Ok(out)
    }

    /// Like `process`, writing into `out` (cleared first). Samples must be finite with
    /// |x| <= `MAX_ABS_SAMPLE` (`CorruptData` naming the first bad one otherwise): rubato turns
    /// ~1e38 into NaN, or panics on it.
    pub fn process_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        let want = output_len(x.len(), self.src, self.dst);
        out.clear();
        if let Some(i) = first_bad_sample(x, MAX_ABS_SAMPLE) {
            return Err(bad_sample_error(
                "resampler input",
                format_args!("index {i}"),
                x[i],
            ));
        }
        if x.is_empty() {
            return Ok(());
        }
        if let Some(k) = self.kaiser.as_mut() {
            k.process_into(x, out, want);
            return Ok(());
        }
        let Some(r) = self.inner.as_mut() else {
            out.extend_from_slice(x);
            return Ok(());
        };
        let failed = |e: rubato::ResampleError| Error::corrupt(format!("resampler: {e}"));
        r.reset();
        let x: &[f32] = if self.pre_zeros > 0 {
            self.input.clear();
            self.input.resize(self.pre_zeros, 0.0);
            self.input.extend_from_slice(x);
            &self.input
        } else {
            x
        };
        let needed = r.process_all_needed_output_len(x.len());
        self.buf.clear();
        self.buf.resize(needed, 0.0);
        let input = SequentialSlice::new(x, 1, x.len()).expect("slice holds its own length");
        let mut output =
            SequentialSlice::new_mut(&mut self.buf[..], 1, needed).expect("sized above");
        // Inputs are validated above; a panic left in rubato is still one sample's error, not the
        // process's. The resampler is rebuilt after one (its state is unknown).
        let res = catch_unwind(AssertUnwindSafe(|| {
            r.process_all_into_buffer(&input, &mut output, x.len(), None)
        }));
        let (_, produced) = match res {
            Ok(r) => r.map_err(failed)?,
            Err(payload) => {
                let msg = panic_message(&*payload);
                *self = Self::with_kind(self.src, self.dst, self.filter, self.kind)?;
                return Err(Error::corrupt(format!("resampler panicked: {msg}")));
            }
        };
        let produced = produced.min(needed);
        let a = self.skip.min(produced);
        out.extend_from_slice(&self.buf[a..produced.min(a + want)]);
        out.resize(want, 0.0);
        Ok(())
    }
}

/// Resamplers keyed by (src, dst, filter), built on first use. One per worker thread. Holds at
/// most `MAX_CACHED`; beyond, the least recently used is dropped.
#[derive(Debug, Default)]
pub struct ResamplerCache {
    /// Each resampler with the tick of its last use.
    map: HashMap<(u32, u32, Filter), (Resampler, u64)>,
    tick: u64,
}

impl ResamplerCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The default filter's resampler for `src` -> `dst`.
    pub fn get(&mut self, src: u32, dst: u32) -> Result<&mut Resampler> {
        self.get_filter(src, dst, Filter::default())
    }

    pub fn get_filter(&mut self, src: u32, dst: u32, filter: Filter) -> Result<&mut Resampler> {
        self.tick += 1;
        let key = (src, dst, filter);
        if !self.map.contains_key(&key) {
            let r = Resampler::with_filter(src, dst, filter)?;
            if self.map.len() >= MAX_CACHED {
                let oldest = self
                    .map
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(k, _)| *k);
                if let Some(k) = oldest {
                    self.map.remove(&k);
                }
            }
            self.map.insert(key, (r, 0));
        }
        let entry = self.map.get_mut(&key).expect("inserted above");
        entry.1 = self.tick;
        Ok(&mut entry.0)
    }

    /// Number of resamplers built so far.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rubato::Resampler as _;
    use std::f64::consts::PI;

    fn sine(n: usize, sr: f64, f: f64) -> Vec<f32> {
        (0..n)
            .map(|i| (0.5 * (2.0 * PI * f * i as f64 / sr).sin()) as f32)
            .collect()
    }

    /// SNR (dB) of `y` against the analytic sine at rate `sr`, skipping `edge` samples each side.
    fn snr_db(y: &[f32], sr: f64, f: f64, edge: usize) -> f64 {
        let (mut s, mut e) = (0.0, 0.0);
        for (i, &v) in y.iter().enumerate().take(y.len() - edge).skip(edge) {
            let r = 0.5 * (2.0 * PI * f * i as f64 / sr).sin();
            s += r * r;
            e += (v as f64 - r).powi(2);
        }
        10.0 * (s / e).log10()
    }

    fn rms(y: &[f32], edge: usize) -> f64 {
        let m = &y[edge..y.len() - edge];
        (m.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / m.len() as f64).sqrt()
    }

    #[test]
    fn output_length_is_rounded_ratio() {
        assert_eq!(output_len(44100, 44100, 32000), 32000);
        assert_eq!(output_len(1, 48000, 32000), 1); // 0.667 -> 1
        assert_eq!(output_len(1, 44100, 32000), 1); // 0.726 -> 1
        assert_eq!(output_len(3, 48000, 32000), 2);
        for filter in Filter::ALL {
            for (src, n) in [
                (22050u32, 12345usize),
                (44100, 220_501),
                (48000, 7),
                (48000, 240_001),
                (16000, 1),
            ] {
                let mut r = Resampler::with_filter(src, 32000, filter).unwrap();
                let y = r.process(&vec![0.1; n]).unwrap();
                assert_eq!(
                    y.len(),
                    output_len(n, src, 32000),
                    "{filter:?} src {src} n {n}"
                );
            }
        }
    }

    #[test]
    fn sine_snr_and_alias_rejection() {
        for (filter, kind) in Filter::ALL
            .into_iter()
            .flat_map(|f| [(f, Kind::Fft), (f, Kind::Sinc)])
        {
            for src in [22050u32, 44100, 48000] {
                let mut r = Resampler::with_kind(src, 32000, filter, kind).unwrap();
                let n = src as usize; // 1 s
                                      // The FFT resampler (used for every common rate) meets the spec; the sinc fallback
                                      // (only for rate pairs whose reduced ratio needs an FFT block > 2^16) is looser.
                let spec = if kind == Kind::Fft {
                    [90.0, 80.0]
                } else {
                    [60.0, 40.0]
                };
                for (f, min_db) in [(1000.0, spec[0]), (8000.0, spec[1])] {
                    let y = r.process(&sine(n, src as f64, f)).unwrap();
                    let snr = snr_db(&y, 32000.0, f, 2000);
                    println!("{filter:?} {kind:?} {src} -> 32000, {f} Hz: SNR {snr:.1} dB");
                    assert!(
                        snr >= min_db,
                        "{filter:?} {kind:?} {src} Hz, {f} Hz tone: SNR {snr:.1} dB"
                    );
                }
            }
            let mut r = Resampler::with_kind(48000, 32000, filter, kind).unwrap();
            let y = r.process(&sine(48000, 48000.0, 20000.0)).unwrap();
            let att = -20.0 * (rms(&y, 2000) / (0.5 / 2f64.sqrt())).log10();
            println!("{filter:?} {kind:?} 48000 -> 32000, 20 kHz tone attenuated by {att:.1} dB");
            assert!(
                att >= 80.0,
                "{filter:?} {kind:?}: 20 kHz attenuated only {att:.1} dB"
            );
        }
    }

    /// An impulse comes out centred where it should (no filter delay left), to sub-sample accuracy.
    #[test]
    fn no_time_shift() {
        for (filter, kind) in Filter::ALL
            .into_iter()
            .flat_map(|f| [(f, Kind::Fft), (f, Kind::Sinc)])
        {
            for src in [16000u32, 22050, 44100, 48000] {
                let n = src as usize / 2;
                let at = n / 2;
                let mut x = vec![0.0f32; n];
                x[at] = 1.0;
                let y = Resampler::with_kind(src, 32000, filter, kind)
                    .unwrap()
                    .process(&x)
                    .unwrap();
                // Centroid of the squared response around the peak.
                let peak = (0..y.len())
                    .max_by(|&a, &b| y[a].abs().total_cmp(&y[b].abs()))
                    .unwrap();
                let (mut w, mut c) = (0.0, 0.0);
                for (i, &v) in y.iter().enumerate().take(peak + 200).skip(peak - 200) {
                    let p = (v as f64).powi(2);
                    w += p;
                    c += p * i as f64;
                }
                let got = c / w;
                let want = at as f64 * 32000.0 / src as f64;
                println!("{filter:?} {kind:?} {src}: impulse at {got:.3}, expected {want:.3}");
                assert!(
                    (got - want).abs() < 0.05,
                    "{filter:?} {kind:?} {src}: shifted {:.3}",
                    got - want
                );
            }
        }
    }

    #[test]
    fn cache_builds_once_per_pair() {
        let mut c = ResamplerCache::new();
        for _ in 0..3 {
            c.get(44100, 32000).unwrap().process(&[0.0; 100]).unwrap();
            c.get(48000, 32000).unwrap();
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(32000, 32000).unwrap().kind(), Kind::Copy);
        assert_eq!(c.get(44100, 32000).unwrap().kind(), Kind::Fft);
        assert_eq!(c.get(44101, 32000).unwrap().kind(), Kind::Fft);
        assert_eq!(c.get(700_001, 32000).unwrap().kind(), Kind::Sinc);
        assert!(matches!(c.get(0, 32000), Err(Error::BadArgument { .. })));
        for sr in [1u32, 2, 999] {
            match c.get(sr, 32000) {
                Err(e @ Error::BadArgument { .. }) => assert!(
                    e.to_string()
                        .ends_with(&format!("in [1000, 768000] Hz, got {sr}")),
                    "{e}"
                ),
                other => panic!("{sr}: {other:?}"),
            }
        }
        assert!(matches!(
            c.get(44100, 800_000),
            Err(Error::BadArgument { .. })
        ));
    }

    /// ~1e38 made rubato's FFT resampler panic ("Imaginary part of first value was non-zero") or
    /// output NaN; now it is `CorruptData` naming the index, and the resampler still works after.
    #[test]
    fn huge_or_non_finite_input_is_corrupt_not_a_panic() {
        for (filter, kind) in Filter::ALL
            .into_iter()
            .flat_map(|f| [(f, Kind::Fft), (f, Kind::Sinc)])
        {
            let mut r = Resampler::with_kind(48000, 32000, filter, kind).unwrap();
            let good = sine(48000, 48000.0, 1000.0);
            let want = r.process(&good).unwrap();
            for (v, run) in [
                (3e38f32, 100usize),
                (-3e38, 1),
                (1e20, 1),
                (f32::NAN, 1),
                (f32::NEG_INFINITY, 3),
            ] {
                let mut x = good.clone();
                x[1000..1000 + run].fill(v);
                match r.process(&x) {
                    Err(Error::CorruptData { detail }) => {
                        assert!(detail.contains("at index 1000"), "{detail}")
                    }
                    other => panic!("{filter:?} {kind:?} {v}: {other:?}"),
                }
            }
            assert_eq!(r.process(&good).unwrap(), want);
            let y = r.process(&vec![65536.0; 4800]).unwrap();
            assert!(y.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn cache_is_bounded_and_keeps_recent_pairs() {
        let mut c = ResamplerCache::new();
        for i in 0..3 * MAX_CACHED as u32 {
            c.get(44100, 32000).unwrap();
            c.get(1000 + 7 * i, 32000).unwrap();
            assert!(c.len() <= MAX_CACHED);
        }
        assert_eq!(c.len(), MAX_CACHED);
        // The pair used on every step survived every eviction.
        assert!(c.map.contains_key(&(44100, 32000, Filter::default())));
    }

    #[test]
    fn odd_rates_are_accurate() {
        for filter in Filter::ALL {
            for (src, kind) in [(44101u32, Kind::Fft), (700_001, Kind::Sinc)] {
                let mut r = Resampler::with_filter(src, 32000, filter).unwrap();
                assert_eq!(r.kind(), kind);
                let y = r.process(&sine(src as usize, src as f64, 1000.0)).unwrap();
                let snr = snr_db(&y, 32000.0, 1000.0, 2000);
                println!("{filter:?} {kind:?} {src} -> 32000, 1 kHz: SNR {snr:.1} dB");
                assert!(snr > if kind == Kind::Fft { 90.0 } else { 60.0 });
            }
        }
    }

    #[test]
    fn filters_by_name() {
        assert_eq!(Filter::default(), Filter::SoxrHq);
        assert_eq!(Filter::LEGACY, Filter::RubatoBh2);
        for f in Filter::ALL {
            assert_eq!(Filter::parse(f.name()).unwrap(), f);
        }
        assert_eq!(
            Filter::parse("soxr").unwrap_err().to_string(),
            "bad argument resampler: expected one of soxr-hq, rubato-bh2-1024, got \"soxr\""
        );
        let mut c = ResamplerCache::new();
        c.get(48000, 32000).unwrap();
        c.get_filter(48000, 32000, Filter::RubatoBh2).unwrap();
        c.get_filter(48000, 32000, Filter::SoxrHq).unwrap();
        assert_eq!(c.len(), 2);
    }

    /// The legacy filter is the one rubato built before issue 36, bit for bit: runs saved with it
    /// resume on the same stream. Reference: a rubato `Fft` built as it was then.
    #[test]
    fn legacy_filter_is_unchanged() {
        let x: Vec<f32> = (0..100_000)
            .map(|i| ((i as f64 * 0.37).sin() * 0.3 + (i as f64 * 2.9).cos() * 0.2) as f32)
            .collect();
        // The blocks rubato got before issue 36 (FFT lengths 3528/2560 and 2100/1400).
        for (src, block) in [(22050u32, 1764usize), (44100, 1764), (48000, 1050)] {
            assert_eq!(fft_chunk(src, 32000, FFT_TAPS), block);
            let mut old = Fft::<f32>::new_custom(
                src as usize,
                32000,
                block,
                1,
                1,
                WindowFunction::BlackmanHarris2,
                FixedSync::Input,
            )
            .unwrap();
            let needed = old.process_all_needed_output_len(x.len());
            let mut buf = vec![0.0f32; needed];
            let input = SequentialSlice::new(&x[..], 1, x.len()).unwrap();
            let mut output = SequentialSlice::new_mut(&mut buf[..], 1, needed).unwrap();
            let (_, n) = old
                .process_all_into_buffer(&input, &mut output, x.len(), None)
                .unwrap();
            let want = output_len(x.len(), src, 32000);
            let mut reference = buf[..n.min(want)].to_vec();
            reference.resize(want, 0.0);
            let got = Resampler::with_filter(src, 32000, Filter::RubatoBh2)
                .unwrap()
                .process(&x)
                .unwrap();
            assert!(got == reference, "{src}: the legacy filter changed");
            let new = Resampler::new(src, 32000).unwrap().process(&x).unwrap();
            assert!(
                new != reference,
                "{src}: the default filter is the legacy one"
            );
        }
    }
}
