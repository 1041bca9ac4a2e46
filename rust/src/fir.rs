//! Resampling with our own anti-aliasing filter: a zero-phase Kaiser-windowed sinc, applied by
//! FFT blocks (overlap-add), designed to the specification of soxr's "HQ" quality, the resampler
//! that Hugging Face `datasets` and librosa (>= 0.10) use, hence BirdSet's and Bird-MAE's
//! published pipelines.
//!
//! The specification, relative to the Nyquist frequency of the lower of the two rates: flat to
//! `PASSBAND_END`, at least `ATTENUATION_DB` down from 1.0 on (nothing aliases into the output
//! band, no image leaks into the upsampled band). The filter is the textbook Kaiser design for
//! it: an ideal low-pass at the middle of the transition band, windowed by a Kaiser window whose
//! length and shape follow Kaiser's formulas for that transition width and attenuation.
//! `PASSBAND_END` and `ATTENUATION_DB` are the values whose log-mel matched soxr HQ best
//! (docs/issues/023-field-resampling): soxr.h documents a passband end of 0.913 and HQ is its
//! 20-bit quality (about 120 dB).
//!
//! How the filter is applied (any rational ratio `L / M` in lowest terms): the input is cut
//! into blocks of `b_in = k * M` samples, each zero-padded to `2 * b_in` and transformed; its
//! spectrum is multiplied by the filter's (real: the filter is symmetric about 0, stored
//! circularly, so it adds no delay), cut (down) or zero-extended (up) to `b_out + 1 = k * L + 1`
//! bins, and transformed back to `2 * b_out` samples: the block's filtered signal, band-limited,
//! sampled at the output rate. Output sample `m` lies at input time `m * M / L` exactly (block
//! `j` starts at input `j * b_in`, output `j * b_out`), the convention soxr follows too. The
//! filtered block spans `[-c, b_in + c)` input samples (`c` the filter's half length, at most
//! `b_in / 4`), so its samples past `1.5 * b_out` of the inverse transform are the part before
//! the block's start (circular wrap) and are added there. Outside the filter's support the
//! result is the band-limited interpolation of zeros, with tails at the stopband's level.

use std::f64::consts::PI;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

use crate::error::{Error, Result};

/// End of the flat passband, as a fraction of the lower rate's Nyquist frequency.
pub const PASSBAND_END: f64 = 0.9136;
/// Start of the stopband, as a fraction of the lower rate's Nyquist frequency.
pub const STOPBAND_BEGIN: f64 = 1.0;
/// Stopband attenuation, dB.
pub const ATTENUATION_DB: f64 = 130.0;

/// The filter for one rate pair: a Kaiser-windowed sinc at the input rate, `taps[0]` at lag 0
/// and `taps[n]` at lags +-n (it is symmetric), summing to 1 over all lags.
#[derive(Clone, Debug)]
pub struct Design {
    /// Cut-off (-6 dB, the middle of the transition band), Hz.
    pub cutoff_hz: f64,
    /// Kaiser window shape parameter.
    pub beta: f64,
    /// Half the filter's length: taps at lags -half..=half (input samples).
    pub half: usize,
    pub taps: Vec<f64>,
}

/// The modified Bessel function of the first kind, order 0 (its power series).
fn bessel_i0(x: f64) -> f64 {
    let (mut sum, mut term, q) = (1.0, 1.0, x * x / 4.0);
    let mut k = 1.0;
    while term > 1e-17 * sum {
        term *= q / (k * k);
        sum += term;
        k += 1.0;
    }
    sum
}

impl Design {
    /// The filter for `src` -> `dst` Hz (both > 0, different).
    pub fn new(src: u32, dst: u32) -> Self {
        let nyquist = src.min(dst) as f64 / 2.0;
        let (pass, stop) = (PASSBAND_END * nyquist, STOPBAND_BEGIN * nyquist);
        let cutoff_hz = (pass + stop) / 2.0;
        // Kaiser's formulas: beta for the attenuation, length for the transition width (in
        // radians per input sample).
        let a = ATTENUATION_DB;
        let beta = 0.1102 * (a - 8.7);
        let width = 2.0 * PI * (stop - pass) / src as f64;
        let len = ((a - 7.95) / (2.285 * width)).ceil() as usize;
        let half = len.div_ceil(2).max(1);
        let fc = cutoff_hz / src as f64; // cycles per input sample
        let i0_beta = bessel_i0(beta);
        let mut taps: Vec<f64> = (0..=half)
            .map(|n| {
                let t = n as f64;
                let sinc = if n == 0 {
                    2.0 * fc
                } else {
                    (2.0 * PI * fc * t).sin() / (PI * t)
                };
                let r = t / half as f64;
                sinc * bessel_i0(beta * (1.0 - r * r).max(0.0).sqrt()) / i0_beta
            })
            .collect();
        let dc = taps[0] + 2.0 * taps[1..].iter().sum::<f64>();
        for t in &mut taps {
            *t /= dc;
        }
        Design {
            cutoff_hz,
            beta,
            half,
            taps,
        }
    }

    /// The filter's frequency response at `k` cycles per `period` input samples (real: the
    /// filter is symmetric).
    pub fn response(&self, k: usize, period: usize) -> f64 {
        let w = 2.0 * PI * k as f64 / period as f64;
        self.taps[0]
            + 2.0
                * self.taps[1..]
                    .iter()
                    .enumerate()
                    .map(|(i, t)| t * (w * (i + 1) as f64).cos())
                    .sum::<f64>()
    }
}

/// A Kaiser FFT resampler for one rate pair, with its FFT plans and buffers.
pub struct KaiserFft {
    b_in: usize,
    b_out: usize,
    fwd: Arc<dyn RealToComplex<f32>>,
    inv: Arc<dyn ComplexToReal<f32>>,
    /// The filter's response at bins 0..min(b_in, b_out) of the `2 * b_in` transform, divided
    /// by `2 * b_in` (the transforms are unnormalised); the bins from there on are zero.
    gain: Vec<f32>,
    block: Vec<f32>,
    spectrum: Vec<Complex<f32>>,
    out_spectrum: Vec<Complex<f32>>,
    out_block: Vec<f32>,
    scratch: Vec<Complex<f32>>,
    acc: Vec<f32>,
}

impl std::fmt::Debug for KaiserFft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KaiserFft")
            .field("b_in", &self.b_in)
            .field("b_out", &self.b_out)
            .finish()
    }
}

impl KaiserFft {
    /// The resampler for `src` -> `dst` with input blocks of `b_in` and output blocks of `b_out`
    /// samples (`b_out / b_in == dst / src`, both even).
    pub fn new(src: u32, dst: u32, b_in: usize, b_out: usize) -> Result<Self> {
        let design = Design::new(src, dst);
        if 4 * design.half > b_in || b_in % 2 == 1 || b_out % 2 == 1 {
            return Err(Error::bad_argument(
                "resampler block",
                format!(
                    "an even block of at least {} input samples (4x the filter's half length)",
                    4 * design.half
                ),
                b_in,
            ));
        }
        let mut planner = RealFftPlanner::<f32>::new();
        let fwd = planner.plan_fft_forward(2 * b_in);
        let inv = planner.plan_fft_inverse(2 * b_out);
        let scratch_len = fwd.get_scratch_len().max(inv.get_scratch_len());
        let gain = (0..b_in.min(b_out))
            .map(|k| (design.response(k, 2 * b_in) / (2 * b_in) as f64) as f32)
            .collect();
        Ok(KaiserFft {
            b_in,
            b_out,
            block: fwd.make_input_vec(),
            spectrum: fwd.make_output_vec(),
            out_spectrum: inv.make_input_vec(),
            out_block: inv.make_output_vec(),
            scratch: vec![Complex::default(); scratch_len],
            fwd,
            inv,
            gain,
            acc: Vec::new(),
        })
    }

    /// Resample `x` (zero outside it) into `out` (cleared first): `want` samples from output
    /// time 0.
    pub fn process_into(&mut self, x: &[f32], out: &mut Vec<f32>, want: usize) {
        let (b_in, b_out) = (self.b_in, self.b_out);
        let wrap = b_out / 2; // the tail of each inverse transform that lies before its block
        let blocks = x.len().div_ceil(b_in);
        // acc[i] is output sample i - b_out: room for the first block's wrapped part.
        self.acc.clear();
        self.acc.resize((blocks + 2) * b_out + want, 0.0);
        for (j, chunk) in x.chunks(b_in).enumerate() {
            self.block[..chunk.len()].copy_from_slice(chunk);
            self.block[chunk.len()..].fill(0.0);
            self.fwd
                .process_with_scratch(&mut self.block, &mut self.spectrum, &mut self.scratch)
                .expect("buffers sized by the plan");
            let n = self.gain.len();
            for ((o, s), g) in self.out_spectrum[..n]
                .iter_mut()
                .zip(&self.spectrum[..n])
                .zip(&self.gain)
            {
                *o = s * *g;
            }
            self.out_spectrum[0].im = 0.0;
            self.out_spectrum[n..].fill(Complex::default());
            self.inv
                .process_with_scratch(
                    &mut self.out_spectrum,
                    &mut self.out_block,
                    &mut self.scratch,
                )
                .expect("buffers sized by the plan; bins 0 and Nyquist are real");
            let base = b_out + j * b_out;
            let ahead = 2 * b_out - wrap;
            for (a, v) in self.acc[base..base + ahead]
                .iter_mut()
                .zip(&self.out_block[..ahead])
            {
                *a += v;
            }
            for (a, v) in self.acc[base - wrap..base]
                .iter_mut()
                .zip(&self.out_block[ahead..])
            {
                *a += v;
            }
        }
        out.clear();
        out.extend_from_slice(&self.acc[b_out..b_out + want]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(x: f64) -> f64 {
        20.0 * x.abs().max(1e-300).log10()
    }

    /// The design meets its specification: flat passband, -6 dB at the cut-off, the stated
    /// attenuation from the lower Nyquist frequency on, unit gain at DC.
    #[test]
    fn design_meets_the_specification() {
        for (src, dst) in [
            (48000u32, 32000u32),
            (44100, 32000),
            (22050, 32000),
            (16000, 32000),
        ] {
            let d = Design::new(src, dst);
            let nyquist = src.min(dst) as f64 / 2.0;
            // Response at `f` Hz, on a fine grid.
            let period = 1 << 20;
            let at = |f: f64| d.response((f / src as f64 * period as f64).round() as usize, period);
            assert!((at(0.0) - 1.0).abs() < 1e-12);
            let ripple = (0..=200)
                .map(|i| db(at(PASSBAND_END * nyquist * i as f64 / 200.0)))
                .fold(0.0f64, |m, v| m.max(v.abs()));
            let stop = (0..=400)
                .map(|i| {
                    let f = nyquist + (src as f64 / 2.0 - nyquist) * i as f64 / 400.0;
                    db(at(f.min(src as f64 / 2.0)))
                })
                .fold(f64::NEG_INFINITY, f64::max);
            let cut = db(at(d.cutoff_hz));
            println!(
                "{src} -> {dst}: {} taps, beta {:.2}, passband ripple {ripple:.2e} dB, \
                 -6 dB point {cut:.2} dB, stopband peak {stop:.1} dB",
                2 * d.half + 1,
                d.beta
            );
            assert!(ripple < 1e-3, "{src}: passband ripple {ripple} dB");
            assert!((cut + 6.02).abs() < 0.1, "{src}: {cut} dB at the cut-off");
            assert!(
                stop < -ATTENUATION_DB + 3.0,
                "{src}: stopband peak {stop} dB"
            );
        }
    }

    #[test]
    fn bessel_i0_matches_known_values() {
        assert_eq!(bessel_i0(0.0), 1.0);
        assert!((bessel_i0(1.0) - 1.266_065_877_752_008_4).abs() < 1e-15);
        assert!((bessel_i0(10.0) / 2_815.716_628_466_254 - 1.0).abs() < 1e-14);
    }
}
