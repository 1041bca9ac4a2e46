//! `DebugTransform`: a deterministic stand-in for the audio transform, for tests and benchmarks.
//!
//! It does not decode audio. Its "features" are a reproducible pattern derived from a hash of the
//! bytes and the crop, so tests can check that the loader hands each worker the right bytes and
//! crop and puts results back in order, without codecs. Values are log-mel-like (around the
//! Bird-MAE mean of -7.2 with spread ~4) so normalisation keeps them O(1).
//!
//! Failure modes, for testing skips: bytes that start with `CORRUPT` give `CorruptData`, empty
//! bytes give `EmptyAudio`. An optional per-call delay simulates a slow decoder.

use std::time::Duration;

use crate::clip::{Crop, Features, Transform};
use crate::error::{Error, Result};
use crate::order::{hash_words, splitmix64, unit_f64};

/// Deterministic test transform (see the module documentation).
#[derive(Clone, Debug)]
pub struct DebugTransform {
    /// Frames produced per clip (the loader pads or crops to its `n_frames`).
    pub n_frames: usize,
    pub n_mels: usize,
    /// Sleep this long per call (simulates a slow decoder).
    pub delay: Duration,
    /// Some(n): device features: the output is a wave of `n` samples in [-0.5, 0.5) from the same
    /// hash (`Features::wave`), `data` empty.
    pub wave: Option<usize>,
}

impl DebugTransform {
    pub fn new(n_frames: usize, n_mels: usize, delay: Duration) -> Self {
        DebugTransform {
            n_frames,
            n_mels,
            delay,
            wave: None,
        }
    }

    /// The same transform giving `n`-sample waves (device features) instead of features.
    pub fn with_wave(self, n: Option<usize>) -> Self {
        DebugTransform { wave: n, ..self }
    }
}

/// FNV-1a over the bytes, finalised with splitmix64.
pub fn hash_bytes(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for chunk in data.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    splitmix64(h ^ data.len() as u64)
}

impl Transform for DebugTransform {
    fn apply(&mut self, data: &[u8], crop: Crop) -> Result<Features> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        if data.is_empty() {
            return Err(Error::EmptyAudio {
                detail: "DebugTransform: no bytes".into(),
            });
        }
        if data.starts_with(b"CORRUPT") {
            return Err(Error::corrupt("DebugTransform: bytes start with CORRUPT"));
        }
        let crop_bits = match crop {
            Crop::Start(s) => s.to_bits() ^ 0x5157,
            Crop::Fraction(f) => f.to_bits(),
            Crop::Within { lo_s, hi_s, f } => {
                hash_words(&[lo_s.to_bits(), hi_s.to_bits(), f.to_bits()])
            }
        };
        let key = hash_words(&[hash_bytes(data), crop_bits]);
        let (mut out, mut wave) = (Vec::new(), Vec::new());
        if let Some(n) = self.wave {
            wave = (0..n as u64)
                .map(|i| (unit_f64(splitmix64(key ^ i)) - 0.5) as f32)
                .collect();
        } else {
            out.reserve(self.n_frames * self.n_mels);
            for i in 0..(self.n_frames * self.n_mels) as u64 {
                out.push((-7.2 + 8.0 * (unit_f64(splitmix64(key ^ i)) - 0.5)) as f32);
            }
        }
        Ok(Features {
            wave,
            data: out,
            n_frames: self.n_frames,
            n_mels: self.n_mels,
            seeked: true,
            // No recording length here: a fraction stands in for the start.
            start_s: match crop {
                Crop::Start(s) => s,
                Crop::Fraction(f) => f,
                Crop::Within { lo_s, hi_s, f } => (lo_s + f * (hi_s - lo_s)).max(0.0),
            },
            valid_frames: self.n_frames,
            damage: None,
            data_end_s: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_crop_dependent() {
        let mut t = DebugTransform::new(5, 3, Duration::ZERO);
        let a = t.apply(b"hello", Crop::Fraction(0.5)).unwrap();
        let b = t.apply(b"hello", Crop::Fraction(0.5)).unwrap();
        let c = t.apply(b"hello", Crop::Fraction(0.25)).unwrap();
        let d = t.apply(b"hellp", Crop::Fraction(0.5)).unwrap();
        assert_eq!(a.data, b.data);
        assert_ne!(a.data, c.data);
        assert_ne!(a.data, d.data);
        assert_eq!(a.data.len(), 15);
        assert!(a.data.iter().all(|v| (-11.3..=-3.1).contains(v)));
    }

    #[test]
    fn failure_modes() {
        let mut t = DebugTransform::new(5, 3, Duration::ZERO);
        assert!(matches!(
            t.apply(b"", Crop::Fraction(0.5)),
            Err(Error::EmptyAudio { .. })
        ));
        assert!(matches!(
            t.apply(b"CORRUPT!", Crop::Fraction(0.5)),
            Err(Error::CorruptData { .. })
        ));
    }
}
