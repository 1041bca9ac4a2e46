//! Building a filterbank: option checks, frame geometry, the analysis window and the mel
//! triangles. Numerics follow kaldi-native-fbank exactly (double where it uses double).

use super::{FbankConfig, WindowType};
use crate::decode::MAX_SAMPLE_RATE;
use crate::error::{Error, Result};

pub(super) fn mel_scale(f: f32) -> f32 {
    1127.0 * (1.0 + f / 700.0).ln()
}

/// Frame sizes in samples and the upper band edge in Hz, derived from a validated config.
pub(super) struct Geometry {
    pub(super) frame_len: usize,
    pub(super) shift: usize,
    /// FFT size: `frame_len`, rounded up to a power of two if asked.
    pub(super) padded: usize,
    pub(super) high_freq: f32,
}

/// Check every option against its domain; errors name expected and actual values.
pub(super) fn validate(cfg: &FbankConfig) -> Result<Geometry> {
    let sr = cfg.sample_rate;
    if !(sr.is_finite() && sr > 0.0 && sr <= MAX_SAMPLE_RATE as f32) {
        return Err(Error::bad_argument(
            "sample_rate",
            format!("0 < rate <= {MAX_SAMPLE_RATE}"),
            sr,
        ));
    }
    let (frame_len, shift) = frame_sizes(cfg)?;
    check_options(cfg)?;
    let padded = if cfg.round_to_power_of_two {
        frame_len.next_power_of_two()
    } else {
        frame_len
    };
    Ok(Geometry {
        frame_len,
        shift,
        padded,
        high_freq: band_high(cfg)?,
    })
}

/// (frame length, frame shift) in samples.
fn frame_sizes(cfg: &FbankConfig) -> Result<(usize, usize)> {
    let sr = cfg.sample_rate;
    for (name, v) in [
        ("frame_length_ms", cfg.frame_length_ms),
        ("frame_shift_ms", cfg.frame_shift_ms),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(Error::bad_argument(
                name,
                "a positive number of milliseconds",
                v,
            ));
        }
    }
    // Kaldi truncates (samp_freq * 0.001 * ms) computed in double.
    let frame_len = (sr as f64 * 0.001 * cfg.frame_length_ms as f64) as usize;
    let shift = (sr as f64 * 0.001 * cfg.frame_shift_ms as f64) as usize;
    if !(2..=1 << 20).contains(&frame_len) {
        return Err(Error::bad_argument(
            "frame_length_ms",
            "2 to 2^20 samples per frame",
            frame_len,
        ));
    }
    if shift < 1 {
        return Err(Error::bad_argument(
            "frame_shift_ms",
            "at least one sample",
            shift,
        ));
    }
    Ok((frame_len, shift))
}

/// The scalar options: pre-emphasis, dither, Blackman coefficient, number of mel bins.
fn check_options(cfg: &FbankConfig) -> Result<()> {
    if !(cfg.preemph.is_finite() && (0.0..=1.0).contains(&cfg.preemph)) {
        return Err(Error::bad_argument(
            "preemph",
            "a value in [0, 1]",
            cfg.preemph,
        ));
    }
    if !(cfg.dither.is_finite() && cfg.dither >= 0.0) {
        return Err(Error::bad_argument(
            "dither",
            "a finite value >= 0",
            cfg.dither,
        ));
    }
    if !cfg.blackman_coeff.is_finite() {
        return Err(Error::bad_argument(
            "blackman_coeff",
            "a finite value",
            cfg.blackman_coeff,
        ));
    }
    if cfg.n_mels < 3 || cfg.n_mels > 4096 {
        return Err(Error::bad_argument("n_mels", "3 to 4096", cfg.n_mels));
    }
    Ok(())
}

/// The upper band edge in Hz (`high_freq <= 0` is an offset from Nyquist), after checking both
/// edges.
fn band_high(cfg: &FbankConfig) -> Result<f32> {
    let nyquist = 0.5 * cfg.sample_rate;
    let high = if cfg.high_freq <= 0.0 {
        nyquist + cfg.high_freq
    } else {
        cfg.high_freq
    };
    if !(cfg.low_freq.is_finite() && cfg.low_freq >= 0.0 && cfg.low_freq < nyquist) {
        return Err(Error::bad_argument(
            "low_freq",
            format!("0 <= low_freq < {nyquist}"),
            cfg.low_freq,
        ));
    }
    if !(cfg.high_freq.is_finite() && high > cfg.low_freq && high <= nyquist) {
        return Err(Error::bad_argument(
            "high_freq",
            format!("low_freq < high <= {nyquist} (0 = Nyquist, negative = offset from it)"),
            cfg.high_freq,
        ));
    }
    Ok(high)
}

/// The analysis window of `frame_len` samples, computed in double as Kaldi does.
pub(super) fn window(window_type: WindowType, blackman_coeff: f32, frame_len: usize) -> Vec<f32> {
    let a = 2.0 * std::f64::consts::PI / (frame_len - 1) as f64;
    (0..frame_len)
        .map(|i| {
            let x = a * i as f64;
            let w = match window_type {
                WindowType::Hanning => 0.5 - 0.5 * x.cos(),
                WindowType::Sine => (0.5 * x).sin(),
                WindowType::Hamming => 0.54 - 0.46 * x.cos(),
                WindowType::Povey => (0.5 - 0.5 * x.cos()).powf(0.85),
                WindowType::Rectangular => 1.0,
                WindowType::Blackman => {
                    let c = blackman_coeff as f64;
                    c - 0.5 * x.cos() + (0.5 - c) * (2.0 * x).cos()
                }
            };
            w as f32
        })
        .collect()
}

/// The mel triangles in float, as kaldi-native-fbank computes them: per bin, the first FFT bin
/// and the weights of the contiguous run of FFT bins it covers.
pub(super) fn mel_banks(
    cfg: &FbankConfig,
    padded: usize,
    high: f32,
) -> Result<Vec<(usize, Vec<f32>)>> {
    let bin_width = cfg.sample_rate / padded as f32;
    let (mel_lo, mel_hi) = (mel_scale(cfg.low_freq), mel_scale(high));
    let delta = (mel_hi - mel_lo) / (cfg.n_mels + 1) as f32;
    (0..cfg.n_mels)
        .map(|b| {
            let left = mel_lo + b as f32 * delta;
            let center = mel_lo + (b + 1) as f32 * delta;
            let right = mel_lo + (b + 2) as f32 * delta;
            mel_triangle(padded / 2, bin_width, [left, center, right]).ok_or_else(|| {
                Error::bad_argument(
                    "n_mels",
                    format!("few enough bins that each covers an FFT bin (FFT size {padded})"),
                    cfg.n_mels,
                )
            })
        })
        .collect()
}

/// One mel triangle over the first `n_fft_bins` FFT bins; `None` if it covers none of them.
fn mel_triangle(
    n_fft_bins: usize,
    bin_width: f32,
    [left, center, right]: [f32; 3],
) -> Option<(usize, Vec<f32>)> {
    let mut first = None;
    let mut weights = Vec::new();
    for i in 0..n_fft_bins {
        let m = mel_scale(bin_width * i as f32);
        if m > left && m < right {
            let w = if m <= center {
                (m - left) / (center - left)
            } else {
                (right - m) / (right - center)
            };
            first.get_or_insert(i);
            weights.push(w);
        } else if first.is_some() {
            break;
        }
    }
    first.map(|f| (f, weights))
}
