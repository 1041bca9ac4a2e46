//! Kaldi-compatible log-mel filterbank (`compute-fbank-feats` / kaldi-native-fbank), with
//! Bird-MAE's defaults: 32 kHz, 128 mels, 25 ms Hanning frames every 10 ms, 1024-point FFT,
//! pre-emphasis 0.97, DC removal, no dither, snip_edges, 20 Hz to Nyquist, power spectrum,
//! natural log floored at f32 epsilon. 5 s at 32 kHz gives 498 x 128.
//!
//! An `Fbank` precomputes the window, the mel matrix (as one contiguous weight run per mel bin)
//! and the FFT plan, and reuses its buffers: build one per worker, call `compute` per clip.

mod setup;

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use crate::decode::{first_bad_sample, MAX_ABS_SAMPLE};
use crate::error::{Error, Result};
use setup::{mel_banks, validate, window, Geometry};

/// Kaldi's window functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowType {
    Hanning,
    Hamming,
    Povey,
    Rectangular,
    Blackman,
    Sine,
}

impl WindowType {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "hanning" | "hann" => WindowType::Hanning,
            "hamming" => WindowType::Hamming,
            "povey" => WindowType::Povey,
            "rectangular" => WindowType::Rectangular,
            "blackman" => WindowType::Blackman,
            "sine" => WindowType::Sine,
            _ => {
                return Err(Error::bad_argument(
                    "window_type",
                    "one of hanning, hamming, povey, rectangular, blackman, sine",
                    s,
                ))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            WindowType::Hanning => "hanning",
            WindowType::Hamming => "hamming",
            WindowType::Povey => "povey",
            WindowType::Rectangular => "rectangular",
            WindowType::Blackman => "blackman",
            WindowType::Sine => "sine",
        }
    }
}

/// Filterbank options; names follow kaldi-native-fbank's `FrameExtractionOptions`/`MelBanksOptions`.
#[derive(Clone, Debug, PartialEq)]
pub struct FbankConfig {
    pub sample_rate: f32,
    pub n_mels: usize,
    pub frame_length_ms: f32,
    pub frame_shift_ms: f32,
    pub round_to_power_of_two: bool,
    pub preemph: f32,
    pub remove_dc: bool,
    /// Standard deviation of Gaussian noise added to each frame (0 = off), as in Kaldi.
    pub dither: f32,
    /// Seed of the dither noise: the same seed and input give the same output.
    pub seed: u64,
    pub window_type: WindowType,
    pub blackman_coeff: f32,
    pub snip_edges: bool,
    pub low_freq: f32,
    /// 0 means Nyquist; negative means that far below Nyquist.
    pub high_freq: f32,
    pub use_power: bool,
    pub use_log_fbank: bool,
}

impl Default for FbankConfig {
    fn default() -> Self {
        FbankConfig {
            sample_rate: 32000.0,
            n_mels: 128,
            frame_length_ms: 25.0,
            frame_shift_ms: 10.0,
            round_to_power_of_two: true,
            preemph: 0.97,
            remove_dc: true,
            dither: 0.0,
            seed: 0,
            window_type: WindowType::Hanning,
            blackman_coeff: 0.42,
            snip_edges: true,
            low_freq: 20.0,
            high_freq: 0.0,
            use_power: true,
            use_log_fbank: true,
        }
    }
}

/// A splitmix64 stream with Box-Muller Gaussians, for seedable dither.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

/// `a . b` over 4 interleaved partial sums: a loop the compiler vectorises, where one running
/// sum waits for each add in turn (the mel weights were a third of the fbank's time).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..4 {
            acc[i] += x[i] * y[i];
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `x = ln(max(x, f32::EPSILON))` in place, Kaldi's log floor: the floor exactly
/// `f32::EPSILON.ln()`, other finite values by `ln_approx` (within 2 ulp of `f32::ln`, and a
/// loop the compiler vectorises: libm's `logf` per value was 14 % of the loader's CPU time on
/// 32 kHz wav); a row holding inf or NaN goes through `f32::ln` as it is.
fn log_floored(row: &mut [f32]) {
    if !row.iter().all(|x| x.is_finite()) {
        row.iter_mut().for_each(|x| *x = x.max(f32::EPSILON).ln());
        return;
    }
    let floor = f32::EPSILON.ln();
    for x in row.iter_mut() {
        *x = if *x <= f32::EPSILON {
            floor
        } else {
            ln_approx(*x)
        };
    }
}

/// Natural log of a finite normal `x > 0`: Cephes' `logf` (the mantissa in [sqrt(1/2),
/// sqrt(2)) by a degree-9 polynomial, the exponent times ln 2 in two parts), branch-free.
#[inline(always)]
fn ln_approx(x: f32) -> f32 {
    let bits = x.to_bits();
    let e = ((bits >> 23) & 0xff) as i32 - 126; // x = m 2^e, m in [0.5, 1)
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    let e = (e - small as i32) as f32;
    let f = if small { m + m - 1.0 } else { m - 1.0 };
    let z = f * f;
    let mut y = 7.037_683_6e-2;
    for c in [
        -1.151_461e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_4e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ] {
        y = y * f + c;
    }
    y = y * f * z - 2.121_944_4e-4 * e - 0.5 * z;
    f + y + 0.693_359_4 * e
}

/// A ready-to-run filterbank: window, mel weights, FFT plan and buffers.
pub struct Fbank {
    cfg: FbankConfig,
    frame_len: usize,
    shift: usize,
    padded: usize,
    window: Vec<f32>,
    /// Per mel bin: first FFT bin and the weights of the contiguous run of bins it covers.
    mel: Vec<(usize, Vec<f32>)>,
    fft: Arc<dyn RealToComplex<f32>>,
    frame: Vec<f32>,
    fft_in: Vec<f32>,
    spec: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
    power: Vec<f32>,
}

impl std::fmt::Debug for Fbank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fbank").field("cfg", &self.cfg).finish()
    }
}

impl Fbank {
    pub fn new(cfg: FbankConfig) -> Result<Self> {
        let Geometry {
            frame_len,
            shift,
            padded,
            high_freq,
        } = validate(&cfg)?;
        let window = window(cfg.window_type, cfg.blackman_coeff, frame_len);
        let mel = mel_banks(&cfg, padded, high_freq)?;
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(padded);
        let spec = fft.make_output_vec();
        let scratch = fft.make_scratch_vec();
        Ok(Fbank {
            frame_len,
            shift,
            padded,
            window,
            mel,
            frame: vec![0.0; frame_len],
            fft_in: vec![0.0; padded],
            spec,
            scratch,
            power: vec![0.0; padded / 2 + 1],
            fft,
            cfg,
        })
    }

    pub fn config(&self) -> &FbankConfig {
        &self.cfg
    }
    pub fn n_mels(&self) -> usize {
        self.cfg.n_mels
    }
    pub fn frame_length(&self) -> usize {
        self.frame_len
    }
    pub fn frame_shift(&self) -> usize {
        self.shift
    }

    /// Number of frames Kaldi extracts from `n` samples.
    pub fn n_frames(&self, n: usize) -> usize {
        if self.cfg.snip_edges {
            if n < self.frame_len {
                0
            } else {
                1 + (n - self.frame_len) / self.shift
            }
        } else {
            (n + self.shift / 2) / self.shift
        }
    }

    /// Features of `wave`, row-major (frames x mels).
    pub fn compute(&mut self, wave: &[f32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.compute_into(wave, &mut out)?;
        Ok(out)
    }

    /// Like `compute`, writing into `out` (resized); returns the number of frames.
    ///
    /// Samples must be finite with |x| <= `MAX_ABS_SAMPLE` (which keeps every power finite, see
    /// there); the power of 1e20 overflows f32 to +inf features.
    pub fn compute_into(&mut self, wave: &[f32], out: &mut Vec<f32>) -> Result<usize> {
        if let Some(i) = first_bad_sample(wave, MAX_ABS_SAMPLE) {
            return Err(Error::bad_argument(
                "wave",
                format!("finite samples with |x| <= {MAX_ABS_SAMPLE}"),
                format!("{} at index {i}", wave[i]),
            ));
        }
        let n_frames = self.n_frames(wave.len());
        let n_mels = self.cfg.n_mels;
        out.clear();
        out.resize(n_frames * n_mels, 0.0);
        let mut rng = Rng(self.cfg.seed);
        let (fl, coeff) = (self.frame_len, self.cfg.preemph);
        for (f, row) in out.chunks_exact_mut(n_mels).enumerate() {
            // Extract the frame (reflecting at the edges when not snipping).
            let frame = &mut self.frame[..];
            if self.cfg.snip_edges {
                let s = f * self.shift;
                frame.copy_from_slice(&wave[s..s + fl]);
            } else {
                let n = wave.len() as i64;
                let s0 = (f * self.shift + self.shift / 2) as i64 - (fl / 2) as i64;
                for (j, x) in frame.iter_mut().enumerate() {
                    let mut s = s0 + j as i64;
                    // Kaldi's reflection, repeated for very short inputs.
                    while s < 0 || s >= n {
                        s = if s < 0 { -s - 1 } else { 2 * n - 1 - s };
                    }
                    *x = wave[s as usize];
                }
            }
            if self.cfg.dither != 0.0 {
                for x in frame.iter_mut() {
                    *x += self.cfg.dither * rng.gauss();
                }
            }
            // DC removal, pre-emphasis and window fused into one vectorisable pass from `frame`
            // into `fft_in`: with x' = x - mean, y[j] = (x'[j] - c x'[j-1]) w[j]
            // = (x[j] - c x[j-1] - mean (1 - c)) w[j], and y[0] = x'[0] (1 - c) w[0].
            let mean = if self.cfg.remove_dc {
                let mut acc = [0.0f32; 8];
                let chunks = frame.chunks_exact(8);
                let tail: f32 = chunks.remainder().iter().sum();
                for c in chunks {
                    for (a, &x) in acc.iter_mut().zip(c) {
                        *a += x;
                    }
                }
                (acc.iter().sum::<f32>() + tail) / fl as f32
            } else {
                0.0
            };
            let out = &mut self.fft_in[..fl];
            let bias = mean * (1.0 - coeff);
            out[0] = (frame[0] - mean) * (1.0 - coeff) * self.window[0];
            for (((o, &x), &prev), &w) in out[1..]
                .iter_mut()
                .zip(&frame[1..])
                .zip(&frame[..fl - 1])
                .zip(&self.window[1..])
            {
                *o = (x - coeff * prev - bias) * w;
            }
            self.fft_in[fl..].fill(0.0);
            self.fft
                .process_with_scratch(&mut self.fft_in, &mut self.spec, &mut self.scratch)
                .map_err(|e| Error::corrupt(format!("fft: {e}")))?;
            if self.cfg.use_power {
                for (p, c) in self.power.iter_mut().zip(&self.spec) {
                    *p = c.re * c.re + c.im * c.im;
                }
            } else {
                for (p, c) in self.power.iter_mut().zip(&self.spec) {
                    *p = (c.re * c.re + c.im * c.im).sqrt();
                }
            }
            for (o, (first, w)) in row.iter_mut().zip(&self.mel) {
                *o = dot(w, &self.power[*first..*first + w.len()]);
            }
            if self.cfg.use_log_fbank {
                log_floored(row);
            }
        }
        Ok(n_frames)
    }

    /// FFT size in use.
    pub fn fft_size(&self) -> usize {
        self.padded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_dft_power(x: &[f64], k: usize) -> f64 {
        let n = x.len();
        let (mut re, mut im) = (0.0, 0.0);
        for (i, &v) in x.iter().enumerate() {
            let t = -2.0 * std::f64::consts::PI * (k * i) as f64 / n as f64;
            re += v * t.cos();
            im += v * t.sin();
        }
        re * re + im * im
    }

    #[test]
    fn shape_matches_kaldi_framing() {
        let mut fb = Fbank::new(FbankConfig::default()).unwrap();
        assert_eq!(
            (fb.frame_length(), fb.frame_shift(), fb.fft_size()),
            (800, 320, 1024)
        );
        let out = fb.compute(&vec![0.0; 160_000]).unwrap();
        assert_eq!(out.len(), 498 * 128);
        assert!(
            out.iter().all(|&v| v == f32::EPSILON.ln()),
            "silence is the log floor"
        );
        assert_eq!(fb.n_frames(799), 0);
        assert_eq!(fb.n_frames(800), 1);
        assert_eq!(fb.n_frames(1119), 1);
        assert_eq!(fb.n_frames(1120), 2);
        let mut no_snip = Fbank::new(FbankConfig {
            snip_edges: false,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(no_snip.n_frames(160_000), 500);
        assert_eq!(no_snip.compute(&vec![0.1; 100]).unwrap().len(), 0);
        assert_eq!(no_snip.compute(&vec![0.1; 200]).unwrap().len(), 128);
    }

    /// One frame checked against a direct f64 implementation of Kaldi's recipe (naive DFT).
    #[test]
    fn single_frame_matches_direct_f64_recipe() {
        let cfg = FbankConfig::default();
        let mut fb = Fbank::new(cfg.clone()).unwrap();
        let mut s = 1u64;
        let x: Vec<f32> = (0..800)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) + (i as f32 * 0.05).sin()
            })
            .collect();
        let got = fb.compute(&x).unwrap();
        assert_eq!(got.len(), 128);
        let mut v: Vec<f64> = x.iter().map(|&a| a as f64).collect();
        let mean = v.iter().sum::<f64>() / 800.0;
        v.iter_mut().for_each(|a| *a -= mean);
        for j in (1..800).rev() {
            v[j] -= 0.97 * v[j - 1];
        }
        v[0] -= 0.97 * v[0];
        for (j, a) in v.iter_mut().enumerate() {
            *a *= 0.5 - 0.5 * (2.0 * std::f64::consts::PI * j as f64 / 799.0).cos();
        }
        v.resize(1024, 0.0);
        let power: Vec<f64> = (0..512).map(|k| naive_dft_power(&v, k)).collect();
        let mel = |f: f64| 1127.0 * (1.0 + f / 700.0).ln();
        let (lo, hi) = (mel(20.0), mel(16000.0));
        let d = (hi - lo) / 129.0;
        for (b, &g) in got.iter().enumerate() {
            let (l, c, r) = (
                lo + b as f64 * d,
                lo + (b + 1) as f64 * d,
                lo + (b + 2) as f64 * d,
            );
            let mut e = 0.0;
            for (k, p) in power.iter().enumerate() {
                let m = mel(k as f64 * 31.25);
                if m > l && m < r {
                    e += p * if m <= c {
                        (m - l) / (c - l)
                    } else {
                        (r - m) / (r - c)
                    };
                }
            }
            let want = e.max(f32::EPSILON as f64).ln();
            assert!((g as f64 - want).abs() < 1e-3, "bin {b}: {g} vs {want}");
        }
    }

    #[test]
    fn ln_approx_is_within_two_ulp_of_ln() {
        let mut worst = 0.0f64;
        let mut x = f32::EPSILON;
        while x < 1e30 {
            for k in 0..64 {
                let v = x * (1.0 + k as f32 / 64.0);
                let (got, want) = (ln_approx(v) as f64, (v as f64).ln());
                let ulp = (want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
                worst = worst.max((got - want).abs() / ulp as f64);
            }
            x *= 1.37;
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        let mut row = [0.0, 1e-9, f32::EPSILON, 1.0, 2.0, f32::INFINITY];
        log_floored(&mut row[..5]);
        let floor = f32::EPSILON.ln();
        assert_eq!(&row[..3], &[floor, floor, floor]);
        assert!(row[3].abs() <= f32::EPSILON && (row[4] - 2f32.ln()).abs() <= 1e-6);
        log_floored(&mut row[4..]);
        assert_eq!(
            row[5],
            f32::INFINITY,
            "a non-finite energy stays what f32::ln makes of it"
        );
    }

    #[test]
    fn dither_is_seeded() {
        let x = vec![0.0f32; 4000];
        let mk = |seed| {
            Fbank::new(FbankConfig {
                dither: 1.0,
                seed,
                ..Default::default()
            })
            .unwrap()
        };
        let a = mk(7).compute(&x).unwrap();
        let b = mk(7).compute(&x).unwrap();
        let c = mk(8).compute(&x).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(
            a.iter().all(|&v| v > f32::EPSILON.ln()),
            "dither lifts silence off the floor"
        );
    }

    #[test]
    fn bad_options_are_rejected() {
        let bad = [
            FbankConfig {
                sample_rate: 0.0,
                ..Default::default()
            },
            FbankConfig {
                sample_rate: 1e7,
                ..Default::default()
            },
            FbankConfig {
                n_mels: 0,
                ..Default::default()
            },
            FbankConfig {
                n_mels: 2000,
                ..Default::default()
            },
            FbankConfig {
                frame_shift_ms: 0.0,
                ..Default::default()
            },
            FbankConfig {
                frame_length_ms: f32::NAN,
                ..Default::default()
            },
            FbankConfig {
                high_freq: 17000.0,
                ..Default::default()
            },
            FbankConfig {
                low_freq: 20000.0,
                ..Default::default()
            },
            FbankConfig {
                dither: -1.0,
                ..Default::default()
            },
        ];
        for cfg in bad {
            assert!(
                matches!(Fbank::new(cfg.clone()), Err(Error::BadArgument { .. })),
                "{cfg:?}"
            );
        }
        let mut fb = Fbank::new(FbankConfig::default()).unwrap();
        assert!(matches!(
            fb.compute(&[0.0, f32::NAN]),
            Err(Error::BadArgument { .. })
        ));
        // 1e20 is finite, but its power overflows f32: +inf features before the bound.
        let mut x = vec![0.0f32; 4000];
        x[1000] = 1e20;
        assert!(matches!(fb.compute(&x), Err(Error::BadArgument { .. })));
        x[1000] = 65536.0;
        assert!(fb.compute(&x).unwrap().iter().all(|v| v.is_finite()));
    }
}
