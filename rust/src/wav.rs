//! The decoding fast path for plain PCM WAV: 16-bit integer or 32-bit float samples read
//! straight from the bytes, a window by slicing, with exactly symphonia's sample values
//! (`i16 as f32 / 32768`) and mono mix (channel sum, then times 1 / channels).
//!
//! symphonia's WAV path (probe, packets, an `AudioBuffer` per packet, planar copies) cost more
//! than the samples themselves: on 32 kHz 16-bit recordings it was a tenth of the loader's CPU
//! time (docs/issues/022-gpu-kept-busy). Anything this reader does not recognise as such a file,
//! whole, falls back to symphonia: other sample formats, a `data` chunk the bytes do not hold
//! (a truncated recording), odd block alignments, a `fmt ` chunk after `data`.

/// A RIFF/WAVE file of 16-bit PCM or 32-bit float samples whose `data` chunk is all there.
#[derive(Clone, Copy, Debug)]
pub struct WavPcm<'a> {
    samples: &'a [u8],
    pub channels: usize,
    pub sample_rate: u32,
    pub float: bool,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// WAVE_FORMAT_PCM, WAVE_FORMAT_IEEE_FLOAT, WAVE_FORMAT_EXTENSIBLE (whose sub-format GUID starts
/// with the plain tag).
const PCM: u16 = 1;
const FLOAT: u16 = 3;
const EXTENSIBLE: u16 = 0xFFFE;

impl<'a> WavPcm<'a> {
    /// The file, if `data` is one this reader takes whole (see the module docs).
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        if data.get(0..4)? != b"RIFF" || data.get(8..12)? != b"WAVE" {
            return None;
        }
        let mut fmt: Option<(u16, usize, u32, usize, u16)> = None;
        let mut at = 12usize;
        while at + 8 <= data.len() {
            let (id, size) = (&data[at..at + 4], u32_at(data, at + 4)? as usize);
            let body = at + 8;
            match id {
                b"fmt " => {
                    let f = data.get(body..body.checked_add(size)?)?;
                    let mut tag = u16_at(f, 0)?;
                    if tag == EXTENSIBLE {
                        tag = u16_at(f, 24)?;
                    }
                    let channels = u16_at(f, 2)? as usize;
                    let block = u16_at(f, 12)? as usize;
                    fmt = Some((tag, channels, u32_at(f, 4)?, block, u16_at(f, 14)?));
                }
                b"data" => {
                    let (tag, channels, sample_rate, block, bits) = fmt?;
                    let float = match (tag, bits) {
                        (PCM, 16) => false,
                        (FLOAT, 32) => true,
                        _ => return None,
                    };
                    let width = bits as usize / 8;
                    if channels == 0 || block != channels * width || size % block != 0 {
                        return None;
                    }
                    let samples = data.get(body..body.checked_add(size)?)?;
                    return Some(WavPcm {
                        samples,
                        channels,
                        sample_rate,
                        float,
                    });
                }
                _ => {}
            }
            at = body.checked_add(size)?.checked_add(size & 1)?;
        }
        None
    }

    /// Frames in the file.
    pub fn n_frames(&self) -> u64 {
        (self.samples.len() / (self.channels * self.width())) as u64
    }

    fn width(&self) -> usize {
        if self.float {
            4
        } else {
            2
        }
    }

    /// The codec's name as symphonia gives it.
    pub fn codec(&self) -> &'static str {
        if self.float {
            "pcm_f32le"
        } else {
            "pcm_s16le"
        }
    }

    /// Frames `[start, start + len)` (to the end when `len` is None, and never past it), mixed
    /// to mono; empty when `start` is at or after the end.
    pub fn read(&self, start: u64, len: Option<u64>) -> Vec<f32> {
        let n = self.n_frames();
        let (a, b) = (
            start.min(n),
            len.map_or(n, |l| start.saturating_add(l).min(n)),
        );
        let (c, w) = (self.channels, self.width());
        let bytes = &self.samples[a as usize * c * w..b as usize * c * w];
        match (self.float, c) {
            (false, 1) => bytes.chunks_exact(2).map(s16).collect(),
            (true, 1) => bytes.chunks_exact(4).map(f32le).collect(),
            (false, _) => mix(bytes, c, 2, s16),
            (true, _) => mix(bytes, c, 4, f32le),
        }
    }
}

#[inline(always)]
fn s16(b: &[u8]) -> f32 {
    i16::from_le_bytes([b[0], b[1]]) as f32 / 32_768.0
}

#[inline(always)]
fn f32le(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Interleaved frames of `c` channels of `w`-byte samples, averaged as symphonia does.
fn mix(bytes: &[u8], c: usize, w: usize, sample: fn(&[u8]) -> f32) -> Vec<f32> {
    let inv = 1.0 / c as f32;
    bytes
        .chunks_exact(c * w)
        .map(|f| {
            let mut acc = sample(&f[..w]);
            for ch in 1..c {
                acc += sample(&f[ch * w..(ch + 1) * w]);
            }
            acc * inv
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::tests::wav_bytes;
    use crate::decode::Source;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1.9
            })
            .collect()
    }

    /// `bytes` with a JUNK chunk of odd size (and its pad byte) before `data`.
    fn with_junk_chunk(bytes: &[u8]) -> Vec<u8> {
        let at = bytes.windows(4).position(|w| w == b"data").unwrap();
        let mut v = bytes[..at].to_vec();
        v.extend_from_slice(b"JUNK");
        v.extend_from_slice(&5u32.to_le_bytes());
        v.extend_from_slice(b"junk!\0");
        v.extend_from_slice(&bytes[at..]);
        let riff = (v.len() - 8) as u32;
        v[4..8].copy_from_slice(&riff.to_le_bytes());
        v
    }

    /// Both paths on the same windows: the same samples bit for bit, the same info.
    fn same_as_symphonia(bytes: &[u8], fast: bool) {
        let windows = [
            (0, None),
            (0, Some(1000)),
            (1234, Some(4321)),
            (7000, None),
            (7999, Some(9)),
        ];
        for (start, len) in windows {
            let mut a = Source::open(bytes).unwrap();
            let mut b = Source::open_symphonia(bytes).unwrap();
            let (ia, ib) = (a.info().clone(), b.info().clone());
            assert_eq!(
                (
                    ia.sample_rate,
                    ia.channels,
                    ia.n_frames,
                    &ia.codec,
                    &ia.container
                ),
                (
                    ib.sample_rate,
                    ib.channels,
                    ib.n_frames,
                    &ib.codec,
                    &ib.container
                )
            );
            let (x, y) = (a.read(start, len).unwrap(), b.read(start, len).unwrap());
            assert_eq!(x.samples, y.samples, "window {start} {len:?}");
            assert_eq!((x.start_frame, x.seeked), (y.start_frame, y.seeked));
        }
        assert_eq!(WavPcm::parse(bytes).is_some(), fast);
    }

    #[test]
    fn fast_path_equals_symphonia() {
        for channels in [1u16, 2, 3] {
            let x = noise(8000 * channels as usize, channels as u64);
            for (bits, float) in [(16, false), (32, true)] {
                let bytes = wav_bytes(&x, channels, 32000, bits, float);
                same_as_symphonia(&bytes, true);
                same_as_symphonia(&with_junk_chunk(&bytes), true);
            }
        }
    }

    #[test]
    fn other_files_go_through_symphonia() {
        let x = noise(8000, 9);
        for (bits, float) in [(24, false), (8, false), (32, false)] {
            same_as_symphonia(&wav_bytes(&x, 1, 32000, bits, float), false);
        }
        // A truncated recording: the data chunk claims more than the bytes hold.
        let bytes = wav_bytes(&x, 1, 32000, 16, false);
        let cut = &bytes[..bytes.len() - 1000];
        assert!(WavPcm::parse(cut).is_none());
        let (a, b) = (
            Source::open(cut).unwrap().read(0, None).unwrap(),
            Source::open_symphonia(cut).unwrap().read(0, None).unwrap(),
        );
        assert_eq!((a.samples, a.damage), (b.samples, b.damage));
        // Not RIFF/WAVE, or a data chunk before its fmt chunk.
        assert!(WavPcm::parse(b"RIFX\0\0\0\0WAVE").is_none());
        let at = bytes.windows(4).position(|w| w == b"data").unwrap();
        let mut swapped = bytes[..12].to_vec();
        swapped.extend_from_slice(&bytes[at..]);
        swapped.extend_from_slice(&bytes[12..at]);
        assert!(WavPcm::parse(&swapped).is_none());
    }
}
