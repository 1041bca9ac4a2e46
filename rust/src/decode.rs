//! Decoding with symphonia: whole recordings or just a window of them, mixed to mono f32.
//!
//! A window is decoded by seeking where the container allows it (WAV, FLAC and Ogg by their own
//! indexes or bisection; MP3 by scanning frame headers from the start, which is exact and reads no
//! audio data), then decoding forward and discarding to the exact first sample. The result equals
//! "decode everything, then cut" (bit-exact for PCM and FLAC; within codec round-off for lossy
//! codecs, whose first frames after a seek are pre-rolled and dropped). Where a seek fails we fall
//! back to decoding from the start and say so (`Decoded::seeked == false`).
//!
//! symphonia can panic on malformed input: every entry point runs under `catch_unwind` and maps a
//! panic to `Error::CorruptData`. Packet loops are bounded by the input size.

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::codecs::audio::{AudioDecoder, AudioDecoderOptions};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, FormatReader, SeekMode, SeekTo, TrackType};
use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::units::Timestamp;

use crate::error::{Error, Result};
use crate::wav::WavPcm;

/// The lowest sample rate we accept from a container (or as a resampling rate). Nothing real is
/// recorded below 1 kHz (even infrasound recorders use 1 kHz or more), and a header declaring
/// 1-2 Hz (one flipped bit) made the resampler to 32 kHz build a ~65M-point FFT: 4.7 s and 1.5 GB
/// per clip, kept in the resampler cache. At 1 kHz the ratio to any target is at most 768.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// The highest sample rate we accept from a container (or as an argument elsewhere).
pub const MAX_SAMPLE_RATE: u32 = 768_000;
/// The most channels we accept from a container (large microphone arrays stay well below).
pub const MAX_CHANNELS: usize = 256;
/// The largest |sample| we accept from a decoder; larger (or non-finite) samples make the
/// recording `CorruptData`, which the loader skips and counts like any other bad recording.
///
/// Why 2^16, and why reject rather than clip: decoded audio is nominally within [-1, 1]. Integer
/// PCM cannot leave it and lossy decoders overshoot by a few dB at most, but float PCM legitimately
/// may: some tools write float WAV at int16 scale (up to +-32768), so the bound admits that with
/// 2x headroom. One flipped exponent bit turns 0.3 into ~1e38 or ~1e19; such a recording is
/// corrupt, and clipping it to a bound would silently feed garbage (full-scale clicks) to training
/// instead of counting it. Numerically, with |x| <= 2^16 every later stage stays finite by a wide
/// margin: the resampler's output is bounded by 2^16 times its filter's L1 norm (a few), and a
/// fbank power bin by (2^16 * 2 * 2^20)^2 * 2^19 ~ 1e28 even at the largest allowed frame
/// (f32 overflows at 3.4e38). Before this bound, 1e20 gave +inf features and 3e38 gave NaN in the
/// resampler or a panic inside rubato.
pub const MAX_ABS_SAMPLE: f32 = 65_536.0;

/// NaN, infinite, or |v| > bound.
#[inline(always)]
fn out_of_range(v: f32, bound: f32) -> bool {
    v.abs() > bound || v.is_nan()
}

/// Index of the first sample that is non-finite or has |x| > `bound`. Branch-free per chunk so
/// that the common (all good) case vectorises.
pub fn first_bad_sample(x: &[f32], bound: f32) -> Option<usize> {
    const CHUNK: usize = 256;
    for (k, c) in x.chunks(CHUNK).enumerate() {
        if c.iter().fold(false, |acc, &v| acc | out_of_range(v, bound)) {
            return c
                .iter()
                .position(|&v| out_of_range(v, bound))
                .map(|i| k * CHUNK + i);
        }
    }
    None
}

/// `CorruptData` for a sample out of range, naming where it is: `what`, then e.g. "frame 8320".
pub fn bad_sample_error(what: &str, at: impl std::fmt::Display, v: f32) -> Error {
    if v.is_finite() {
        Error::corrupt(format!(
            "{what}: expected samples with |x| <= {MAX_ABS_SAMPLE}, got {v:e} at {at}"
        ))
    } else {
        Error::corrupt(format!(
            "{what}: expected finite samples, got a non-finite sample ({v}) at {at}"
        ))
    }
}

/// The text of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// What the container header says about a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioInfo {
    pub sample_rate: u32,
    pub channels: usize,
    /// Number of (playable) frames, where the container states it.
    pub n_frames: Option<u64>,
    /// Codec short name, e.g. "vorbis", "mp3", "flac", "pcm_s16le".
    pub codec: String,
    /// Container short name, e.g. "ogg", "mp3", "flac", "wave".
    pub container: String,
}

/// Decoded mono samples at the native rate.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    pub samples: Vec<f32>,
    pub sample_rate: u32,
    /// Index of the first returned frame in the recording.
    pub start_frame: u64,
    /// False when a windowed decode had to fall back to decoding from the start.
    pub seeked: bool,
    /// Where the recording's data stopped inside the requested window, and why (a recorder whose
    /// battery died leaves a header that claims more than the file holds; a corrupt packet):
    /// `samples` are what came before it.
    pub damage: Option<Damage>,
}

/// Where a recording's decodable data ends before its header (or the requested window) says.
#[derive(Clone, Debug, PartialEq)]
pub struct Damage {
    /// The first frame that could not be decoded.
    pub frame: u64,
    /// Why, e.g. "truncated: the header says 2880000 frames" or the decoder's error.
    pub reason: String,
}

impl Damage {
    /// "the data ends at 54.000 s of 60.000 s (truncated: ...)" for a recording of `info`.
    pub fn describe(&self, info: &AudioInfo) -> String {
        let sr = info.sample_rate as f64;
        let of = info
            .n_frames
            .map_or(String::new(), |n| format!(" of {:.3} s", n as f64 / sr));
        format!(
            "the data ends at {:.3} s{of} ({})",
            self.frame as f64 / sr,
            self.reason
        )
    }
}

/// Run `f`, turning a panic inside symphonia into `CorruptData`.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(Error::corrupt(format!(
            "decoder panicked: {}",
            panic_message(&*payload)
        ))),
    }
}

fn map_sym(err: SymError, what: &str) -> Error {
    match err {
        SymError::Unsupported(s) => Error::UnsupportedCodec {
            detail: format!("{what}: {s}"),
        },
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Error::corrupt(format!("{what}: truncated (unexpected end of data)"))
        }
        other => Error::corrupt(format!("{what}: {other}")),
    }
}

/// An opened recording: plain PCM WAV read directly (crate::wav), anything else through
/// symphonia's demuxer and decoder for its first audio track.
pub struct Source<'a> {
    data: &'a [u8],
    info: AudioInfo,
    codec: Codec<'a>,
}

enum Codec<'a> {
    Wav(WavPcm<'a>),
    Symphonia(Box<Symphonia<'a>>),
}

struct Symphonia<'a> {
    format: Box<dyn FormatReader + 'a>,
    decoder: Box<dyn AudioDecoder>,
    track_id: u32,
    start_ts: i64,
    /// Frames to decode and drop before the wanted start after a seek (codec warm-up).
    preroll: u64,
    seek_mode: SeekMode,
    scratch: Vec<Vec<f32>>,
}

impl<'a> Source<'a> {
    /// Probe the bytes and set up a decoder. Fails on empty, unknown or corrupt headers.
    pub fn open(data: &'a [u8]) -> Result<Self> {
        guarded(|| Self::open_inner(data, true))
    }

    /// `open` without the WAV fast path: symphonia whatever the bytes (tests compare the two).
    #[cfg(test)]
    pub(crate) fn open_symphonia(data: &'a [u8]) -> Result<Self> {
        guarded(|| Self::open_inner(data, false))
    }

    fn open_inner(data: &'a [u8], fast_wav: bool) -> Result<Self> {
        if data.is_empty() {
            return Err(Error::EmptyAudio {
                detail: "zero-length input".into(),
            });
        }
        if let Some(wav) = WavPcm::parse(data).filter(|w| {
            fast_wav
                && (MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&w.sample_rate)
                && w.channels <= MAX_CHANNELS
        }) {
            let info = AudioInfo {
                sample_rate: wav.sample_rate,
                channels: wav.channels,
                n_frames: Some(wav.n_frames()),
                codec: wav.codec().into(),
                container: "wave".into(),
            };
            return Ok(Source {
                data,
                info,
                codec: Codec::Wav(wav),
            });
        }
        let mss = MediaSourceStream::new(
            Box::new(Cursor::new(data)),
            MediaSourceStreamOptions::default(),
        );
        let format = symphonia::default::get_probe()
            .probe(
                &Hint::new(),
                mss,
                FormatOptions::default(),
                MetadataOptions::default(),
            )
            .map_err(|e| match e {
                SymError::Unsupported(s) => Error::UnsupportedCodec {
                    detail: format!("no supported container recognised ({s})"),
                },
                other => map_sym(other, "probe"),
            })?;
        let container = format.format_info().short_name.to_string();
        let track =
            format
                .default_track(TrackType::Audio)
                .ok_or_else(|| Error::UnsupportedCodec {
                    detail: format!("{container}: no decodable audio track"),
                })?;
        let params = track
            .codec_params
            .as_ref()
            .and_then(|p| p.audio())
            .ok_or_else(|| Error::UnsupportedCodec {
                detail: format!("{container}: track has no audio codec parameters"),
            })?
            .clone();
        let track_id = track.id;
        let start_ts = track.start_ts.get();
        let n_frames = track.num_frames;
        let decoder = symphonia::default::get_codecs()
            .make_audio_decoder(&params, &AudioDecoderOptions::default())
            .map_err(|e| map_sym(e, &container))?;
        let codec = decoder.codec_info().short_name.to_string();
        let sample_rate = params
            .sample_rate
            .ok_or_else(|| Error::corrupt(format!("{container}: no sample rate")))?;
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&sample_rate) {
            return Err(Error::corrupt(format!(
                "{container}: expected a sample rate in [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz, \
                 got {sample_rate}"
            )));
        }
        let channels = params.channels.as_ref().map(|c| c.count()).unwrap_or(0);
        if !(1..=MAX_CHANNELS).contains(&channels) {
            return Err(Error::corrupt(format!(
                "{container}: expected 1 to {MAX_CHANNELS} channels, got {channels}"
            )));
        }
        // MP3: the first frame after a seek lacks its IMDCT overlap; decode two frames early.
        // Ogg/Vorbis: the demuxer already backs off one random-access period and the decoder
        // silences the first packet after a reset. PCM and FLAC frames are independent.
        let (preroll, seek_mode) = match codec.as_str() {
            "mp3" | "mp2" | "mp1" => (2 * 1152, SeekMode::Accurate),
            _ => (0, SeekMode::Accurate),
        };
        Ok(Source {
            data,
            info: AudioInfo {
                sample_rate,
                channels,
                n_frames,
                codec,
                container,
            },
            codec: Codec::Symphonia(Box::new(Symphonia {
                format,
                decoder,
                track_id,
                start_ts,
                preroll,
                seek_mode,
                scratch: Vec::new(),
            })),
        })
    }

    pub fn info(&self) -> &AudioInfo {
        &self.info
    }

    /// Decode frames `[start, start + len)` (to the end when `len` is None), mixed to mono.
    /// The result is shorter than `len` when the recording ends first, or when its data stops
    /// early (`Decoded::damage` says where and why); `EmptyAudio` when the window starts at or
    /// after the end or the damage.
    pub fn read(&mut self, start: u64, len: Option<u64>) -> Result<Decoded> {
        let d = self.read_partial(start, len)?;
        match (&d.damage, d.samples.is_empty()) {
            (Some(damage), true) => Err(Error::EmptyAudio {
                detail: format!(
                    "window starts at {:.3} s, after {}",
                    start as f64 / self.info.sample_rate as f64,
                    damage.describe(&self.info)
                ),
            }),
            _ => Ok(d),
        }
    }

    /// `read`, but a window that starts at or after the damage is an empty `Decoded` with its
    /// `damage` (the caller may place the window again inside the data).
    pub fn read_partial(&mut self, start: u64, len: Option<u64>) -> Result<Decoded> {
        if len == Some(0) {
            return Err(Error::EmptyAudio {
                detail: "requested window has zero length".into(),
            });
        }
        if let Some(n) = self.info.n_frames {
            if start >= n {
                return Err(Error::EmptyAudio {
                    detail: format!("window starts at frame {start}, recording has {n} frames"),
                });
            }
        }
        guarded(|| self.read_inner(start, len))
    }

    fn read_inner(&mut self, start: u64, len: Option<u64>) -> Result<Decoded> {
        let (samples, seeked, damage) = match &mut self.codec {
            Codec::Wav(wav) => (wav.read(start, len), true, None),
            Codec::Symphonia(sym) => sym.read(self.data, &self.info, start, len)?,
        };
        if samples.is_empty() && damage.is_some() {
            return Ok(Decoded {
                sample_rate: self.info.sample_rate,
                start_frame: start,
                seeked,
                damage,
                ..Default::default()
            });
        }
        if samples.is_empty() {
            return Err(Error::EmptyAudio {
                detail: format!("no samples decoded from frame {start}"),
            });
        }
        if let Some(bad) = first_bad_sample(&samples, MAX_ABS_SAMPLE) {
            return Err(bad_sample_error(
                &format!("{} decode", self.info.codec),
                format_args!("frame {}", start + bad as u64),
                samples[bad],
            ));
        }
        Ok(Decoded {
            samples,
            sample_rate: self.info.sample_rate,
            start_frame: start,
            seeked,
            damage,
        })
    }
}

impl<'a> Symphonia<'a> {
    /// (Frames `[start, start + len)` mixed to mono, whether they were reached by seeking, where
    /// the data stopped inside the window.)
    fn read(
        &mut self,
        data: &'a [u8],
        info: &AudioInfo,
        start: u64,
        len: Option<u64>,
    ) -> Result<(Vec<f32>, bool, Option<Damage>)> {
        let mut seeked = true;
        if start > 0 {
            // Frame 0 of a full decode is the first frame the decoder outputs, whose timestamp is
            // not always the track's start (Vorbis outputs nothing for its first packet, MP3 trims
            // the encoder delay): decode up to the first output to learn it.
            self.start_ts = self.first_output_ts(data, info)?;
            let target = start.saturating_sub(self.preroll) as i64 + self.start_ts;
            let res = self.format.seek(
                self.seek_mode,
                SeekTo::Timestamp {
                    ts: Timestamp::new(target),
                    track_id: self.track_id,
                },
            );
            if res.is_err() {
                self.rewind(data)?;
                seeked = false;
            }
            self.decoder.reset();
        }
        let first = self.decode_loop(data, info, start, len, seeked);
        match first {
            Ok((ref samples, _)) if !(seeked && start > 0 && samples.is_empty()) => {
                let (samples, damage) = first?;
                return Ok((samples, seeked, damage));
            }
            Err(e) if !(seeked && start > 0) => return Err(e),
            _ => {}
        }
        // Nothing after a seek: the data ends before the window (a truncated file seeks past
        // its end). Decode from the start to learn where it ends.
        self.rewind(data)?;
        self.decoder.reset();
        let (samples, damage) = self.decode_loop(data, info, start, len, false)?;
        Ok((samples, false, damage))
    }

    /// Re-open the demuxer at the start (its state after a failed seek is unknown).
    fn rewind(&mut self, data: &'a [u8]) -> Result<()> {
        let Codec::Symphonia(fresh) = Source::open_inner(data, false)?.codec else {
            unreachable!("open_inner without the fast path opens with symphonia")
        };
        self.format = fresh.format;
        Ok(())
    }

    /// Timestamp of the first decoded frame, decoding from the current (start) position.
    fn first_output_ts(&mut self, data: &[u8], info: &AudioInfo) -> Result<i64> {
        for _ in 0..data.len() + 64 {
            let packet = match self.format.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) | Err(SymError::ResetRequired) => {
                    return Err(Error::EmptyAudio {
                        detail: "stream has no audio frames".into(),
                    })
                }
                Err(e) => return Err(map_sym(e, &info.container)),
            };
            if packet.track_id != self.track_id {
                continue;
            }
            let ts = packet.pts.get() + packet.trim_start.get() as i64;
            let buf = self
                .decoder
                .decode(&packet)
                .map_err(|e| map_sym(e, &info.codec))?;
            if buf.frames() > 0 {
                return Ok(ts);
            }
        }
        Err(Error::corrupt("no audio output within the input size"))
    }

    fn decode_loop(
        &mut self,
        data: &[u8],
        info: &AudioInfo,
        start: u64,
        len: Option<u64>,
        seeked: bool,
    ) -> Result<(Vec<f32>, Option<Damage>)> {
        let end = len.map(|l| start.saturating_add(l));
        let cap = end.map(|e| (e - start) as usize).unwrap_or(
            info.n_frames
                .map(|n| n.saturating_sub(start) as usize)
                .unwrap_or(0),
        );
        // The declared length only sizes the first reservation (a lying header must not reserve
        // gigabytes); the vector grows with what is actually decoded.
        let mut out: Vec<f32> = Vec::with_capacity(cap.min(1 << 22));
        let channels = info.channels;
        let inv = 1.0 / channels as f32;
        // Timestamp (relative to the track start) of the next decoded frame; anchored on the first
        // non-empty buffer after a seek, then counted, exactly as a full decode counts.
        let mut pos: Option<i64> = if seeked && start > 0 { None } else { Some(0) };
        let max_packets = data.len() as u64 + 1024;
        let mut n_packets = 0u64;
        let mut reached_eof = false;
        loop {
            n_packets += 1;
            if n_packets > max_packets {
                return Err(Error::corrupt(
                    "packet count exceeds input size (stuck demuxer)",
                ));
            }
            // Past the first good frame, a demuxer or decoder error ends the data there: what
            // came before is kept (`damage`); before it, the recording is simply unreadable.
            let stop = |e: SymError, what: &str, pos: Option<i64>| match (pos, map_sym(e, what)) {
                (Some(p), Error::CorruptData { detail } | Error::UnsupportedCodec { detail }) => {
                    Ok(Damage {
                        frame: p.max(0) as u64,
                        reason: detail,
                    })
                }
                (_, e) => Err(e),
            };
            let packet = match self.format.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) | Err(SymError::ResetRequired) => {
                    reached_eof = true;
                    break;
                }
                Err(e) => {
                    let d = stop(e, &info.container, pos.or((start == 0).then_some(0)))?;
                    return Ok((out, Some(d)));
                }
            };
            if packet.track_id != self.track_id {
                continue;
            }
            let anchor = packet.pts.get() + packet.trim_start.get() as i64 - self.start_ts;
            let buf = match self.decoder.decode(&packet) {
                Ok(buf) => buf,
                Err(e) => {
                    let d = stop(e, &info.codec, pos.or((start == 0).then_some(0)))?;
                    return Ok((out, Some(d)));
                }
            };
            let n = buf.frames();
            if n == 0 {
                continue;
            }
            if buf.num_planes() != channels {
                return Err(Error::corrupt(format!(
                    "decoded {} channels, header says {channels}",
                    buf.num_planes()
                )));
            }
            let p0 = *pos.get_or_insert(anchor);
            pos = Some(p0 + n as i64);
            // Overlap of [p0, p0 + n) with [start, end).
            let lo = (start as i64).max(p0);
            let hi = end.map_or(p0 + n as i64, |e| (e as i64).min(p0 + n as i64));
            if hi > lo {
                buf.copy_to_vecs_planar::<f32>(&mut self.scratch);
                let (a, b) = ((lo - p0) as usize, (hi - p0) as usize);
                if channels == 1 {
                    out.extend_from_slice(&self.scratch[0][a..b]);
                } else {
                    let base = out.len();
                    out.extend_from_slice(&self.scratch[0][a..b]);
                    for plane in &self.scratch[1..channels] {
                        for (o, &x) in out[base..].iter_mut().zip(&plane[a..b]) {
                            *o += x;
                        }
                    }
                    for o in &mut out[base..] {
                        *o *= inv;
                    }
                }
            }
            if let Some(e) = end {
                if p0 + n as i64 >= e as i64 {
                    break;
                }
            }
        }
        if reached_eof {
            if let (Some(total), Some(p)) = (info.n_frames, pos) {
                let wanted_end = end.map_or(total, |e| e.min(total));
                if (p.max(0) as u64) < wanted_end {
                    let reason = format!(
                        "{}: truncated: the header says {total} frames",
                        info.container
                    );
                    let frame = p.max(0) as u64;
                    return Ok((out, Some(Damage { frame, reason })));
                }
            }
        }
        Ok((out, None))
    }
}

/// Container header facts without decoding any audio.
pub fn info(data: &[u8]) -> Result<AudioInfo> {
    Source::open(data).map(|s| s.info)
}

/// Decode a whole recording to mono f32 at its native rate.
pub fn decode(data: &[u8]) -> Result<Decoded> {
    Source::open(data)?.read(0, None)
}

/// Convert seconds to a frame count at `sr`, validating the value.
pub fn seconds_to_frames(name: &'static str, s: f64, sr: u32) -> Result<u64> {
    if !s.is_finite() || s < 0.0 {
        return Err(Error::bad_argument(name, "a finite number >= 0", s));
    }
    Ok((s * sr as f64).round() as u64)
}

/// Decode `[start_s, start_s + duration_s)` (to the end when `duration_s` is None).
pub fn decode_window(data: &[u8], start_s: f64, duration_s: Option<f64>) -> Result<Decoded> {
    let mut src = Source::open(data)?;
    let sr = src.info.sample_rate;
    let start = seconds_to_frames("start_s", start_s, sr)?;
    let len = duration_s
        .map(|d| seconds_to_frames("duration_s", d, sr))
        .transpose()?;
    src.read(start, len)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal RIFF/WAVE writer: `fmt` 1 (PCM) or 3 (IEEE float), interleaved samples in [-1, 1].
    pub(crate) fn wav_bytes(
        samples: &[f32],
        channels: u16,
        sr: u32,
        bits: u16,
        float: bool,
    ) -> Vec<u8> {
        let bps = (bits / 8) as u32;
        let mut body = Vec::with_capacity(samples.len() * bps as usize);
        for &x in samples {
            // Integer PCM uses symphonia's (and libsndfile's) scale: full scale = 2^(bits-1).
            let q = |scale: f64| (x as f64 * scale).round().clamp(-scale, scale - 1.0);
            match (float, bits) {
                (true, 32) => body.extend_from_slice(&x.to_le_bytes()),
                (true, 64) => body.extend_from_slice(&(x as f64).to_le_bytes()),
                (false, 8) => body.push((q(128.0) as i16 + 128) as u8),
                (false, 16) => body.extend_from_slice(&(q(32768.0) as i16).to_le_bytes()),
                (false, 24) => body.extend_from_slice(&(q(8_388_608.0) as i32).to_le_bytes()[..3]),
                (false, 32) => body.extend_from_slice(&(q(2_147_483_648.0) as i32).to_le_bytes()),
                _ => panic!("unsupported format"),
            }
        }
        let mut v = Vec::new();
        v.extend_from_slice(b"RIFF");
        v.extend_from_slice(&(36 + body.len() as u32).to_le_bytes());
        v.extend_from_slice(b"WAVEfmt ");
        v.extend_from_slice(&16u32.to_le_bytes());
        v.extend_from_slice(&(if float { 3u16 } else { 1u16 }).to_le_bytes());
        v.extend_from_slice(&channels.to_le_bytes());
        v.extend_from_slice(&sr.to_le_bytes());
        v.extend_from_slice(&(sr * bps * channels as u32).to_le_bytes());
        v.extend_from_slice(&(bps as u16 * channels).to_le_bytes());
        v.extend_from_slice(&bits.to_le_bytes());
        v.extend_from_slice(b"data");
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(&body);
        v
    }

    fn tone(n: usize, sr: u32, f: f64, amp: f64) -> Vec<f32> {
        (0..n)
            .map(|i| (amp * (2.0 * std::f64::consts::PI * f * i as f64 / sr as f64).sin()) as f32)
            .collect()
    }

    #[test]
    fn pcm_formats_decode_to_the_written_values() {
        let x = tone(4000, 16000, 440.0, 0.8);
        for (bits, float, tol) in [
            (8u16, false, 0.5 / 128.0),
            (16, false, 0.5 / 32768.0),
            (24, false, 1e-6),
            (32, false, 1e-6),
            (32, true, 0.0),
        ] {
            let bytes = wav_bytes(&x, 1, 16000, bits, float);
            let d = decode(&bytes).unwrap();
            assert_eq!(d.sample_rate, 16000);
            assert_eq!(d.samples.len(), x.len(), "bits {bits}");
            let err = d
                .samples
                .iter()
                .zip(&x)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                err <= tol as f32 + 1e-7,
                "bits {bits} float {float}: err {err}"
            );
        }
    }

    #[test]
    fn stereo_is_mixed_to_mono_mean() {
        let l = tone(3000, 8000, 300.0, 0.5);
        let r = tone(3000, 8000, 700.0, 0.25);
        let inter: Vec<f32> = l.iter().zip(&r).flat_map(|(a, b)| [*a, *b]).collect();
        let d = decode(&wav_bytes(&inter, 2, 8000, 32, true)).unwrap();
        assert_eq!(d.samples.len(), 3000);
        for i in 0..3000 {
            assert!((d.samples[i] - 0.5 * (l[i] + r[i])).abs() < 1e-6);
        }
        let i = info(&wav_bytes(&inter, 2, 8000, 16, false)).unwrap();
        assert_eq!(
            (i.sample_rate, i.channels, i.n_frames),
            (8000, 2, Some(3000))
        );
        assert_eq!(i.container, "wave");
    }

    #[test]
    fn window_equals_full_decode_cut() {
        let x = tone(48000 * 3, 48000, 1000.0, 0.5);
        let bytes = wav_bytes(&x, 1, 48000, 16, false);
        let full = decode(&bytes).unwrap().samples;
        for (s, d) in [(0.0, 0.5), (1.2345, 0.7), (2.9, 1.0)] {
            let w = decode_window(&bytes, s, Some(d)).unwrap();
            assert!(w.seeked);
            let a = (s * 48000.0f64).round() as usize;
            let b = (a + (d * 48000.0f64).round() as usize).min(full.len());
            assert_eq!(w.samples, full[a..b].to_vec(), "window {s} {d}");
        }
        assert!(matches!(
            decode_window(&bytes, 3.5, Some(1.0)),
            Err(Error::EmptyAudio { .. })
        ));
        assert!(matches!(
            decode_window(&bytes, -1.0, Some(1.0)),
            Err(Error::BadArgument { .. })
        ));
    }

    #[test]
    fn nan_samples_are_corrupt() {
        let mut x = tone(1000, 8000, 100.0, 0.5);
        x[500] = f32::NAN;
        assert!(matches!(
            decode(&wav_bytes(&x, 1, 8000, 32, true)),
            Err(Error::CorruptData { .. })
        ));
        x[500] = f32::INFINITY;
        assert!(matches!(
            decode(&wav_bytes(&x, 1, 8000, 32, true)),
            Err(Error::CorruptData { .. })
        ));
    }

    #[test]
    fn absurd_sample_rates_are_rejected() {
        let x = tone(1000, 8000, 100.0, 0.5);
        for sr in [0u32, 1, 2, 999, 768_001, 1_000_000] {
            let t = std::time::Instant::now();
            match decode(&wav_bytes(&x, 1, sr, 16, false)) {
                Err(Error::CorruptData { detail }) => assert!(
                    detail.ends_with(&format!(
                        "expected a sample rate in [1000, 768000] Hz, got {sr}"
                    )),
                    "{detail}"
                ),
                other => panic!("sr {sr}: {other:?}"),
            }
            assert!(
                t.elapsed().as_secs_f64() < 0.1,
                "sr {sr}: {:?}",
                t.elapsed()
            );
        }
        for sr in [1000u32, 768_000] {
            assert_eq!(
                decode(&wav_bytes(&x, 1, sr, 16, false))
                    .unwrap()
                    .sample_rate,
                sr
            );
        }
    }

    /// One flipped exponent bit turns 0.3 into ~1e38: a float WAV with a huge (or non-finite)
    /// sample is corrupt, naming the frame; int16-scale float WAVs (|x| <= 32768) are fine.
    #[test]
    fn huge_float_samples_are_corrupt_naming_the_frame() {
        let x = tone(2000, 8000, 100.0, 0.5);
        for (v, bits) in [
            (3e38f64, 32u16),
            (-3e38, 32),
            (1e20, 32),
            (65537.0, 32),
            (1e300, 64),
            (f64::NAN, 32),
            (f64::INFINITY, 64),
        ] {
            let mut y = x.clone();
            y[1234] = v as f32;
            let bytes = if bits == 64 {
                // wav_bytes writes f64 from f32: patch the exact f64 in.
                let mut b = wav_bytes(&y, 1, 8000, 64, true);
                b[44 + 1234 * 8..44 + 1235 * 8].copy_from_slice(&v.to_le_bytes());
                b
            } else {
                wav_bytes(&y, 1, 8000, 32, true)
            };
            match decode(&bytes) {
                Err(Error::CorruptData { detail }) => {
                    assert!(detail.contains("at frame 1234"), "{v}: {detail}");
                    assert!(
                        detail.contains("expected finite samples")
                            || detail.contains("expected samples with |x| <= 65536"),
                        "{detail}"
                    );
                }
                other => panic!("{v}: {other:?}"),
            }
            let w = decode_window(&bytes, 0.1, Some(0.1));
            assert!(matches!(w, Err(Error::CorruptData { .. })), "{v}: {w:?}");
        }
        let scaled: Vec<f32> = x.iter().map(|v| v * 65536.0).collect();
        let d = decode(&wav_bytes(&scaled, 1, 8000, 32, true)).unwrap();
        assert_eq!(d.samples, scaled);
    }

    #[test]
    fn first_bad_sample_finds_the_first() {
        let mut x = vec![0.5f32; 1000];
        assert_eq!(first_bad_sample(&x, 1.0), None);
        x[700] = f32::NAN;
        x[900] = 2.0;
        assert_eq!(first_bad_sample(&x, 1.0), Some(700));
        x[3] = -1.5;
        assert_eq!(first_bad_sample(&x, 1.0), Some(3));
        assert_eq!(first_bad_sample(&[], 1.0), None);
    }

    #[test]
    fn absurd_channel_counts_are_rejected() {
        let mut b = wav_bytes(&[0.1; 1000], 1, 8000, 16, false);
        for ch in [0u16, 257, 65535] {
            b[22..24].copy_from_slice(&ch.to_le_bytes());
            assert!(decode(&b).is_err(), "{ch} channels accepted");
        }
    }

    /// Every container's magic followed by junk, and truncations of it: an error, never a panic.
    #[test]
    fn every_container_magic_with_garbage_is_an_error() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut junk = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect()
        };
        // Ogg page header (version 0, BOS) with a Vorbis identification packet prefix.
        let mut ogg = b"OggS\x00\x02".to_vec();
        ogg.extend_from_slice(&[0; 20]);
        ogg.extend_from_slice(&[1, 30, 1]);
        ogg.extend_from_slice(b"vorbis");
        let flac = b"fLaC\x00\x00\x00\x22".to_vec();
        let mp3 = vec![0xFF, 0xFB, 0x90, 0x64];
        let id3 = b"ID3\x03\x00\x00\x00\x00\x00\x10".to_vec();
        // A WAV header declaring more data than follows: PCM junk is just noise, so the bytes
        // that hold whole frames are a truncated recording (what it holds, and where it stops).
        let wav = wav_bytes(&[0.1; 100_000], 1, 8000, 16, false)[..44].to_vec();
        for magic in [ogg, flac, mp3, id3, wav] {
            for n in [0usize, 1, 17, 300, 5000, 40000] {
                let mut d = magic.clone();
                d.extend(junk(n));
                match decode(&d) {
                    Ok(x) if magic.starts_with(b"RIFF") && n >= 2 => {
                        assert_eq!(x.damage.map(|x| x.frame), Some(x.samples.len() as u64))
                    }
                    r => assert!(
                        r.is_err(),
                        "magic {:?} + {n} junk bytes decoded",
                        &magic[..4]
                    ),
                }
                // A window may lie inside valid-looking data (PCM junk is just noise); either
                // way it must come back, finite.
                if let Ok(w) = decode_window(&d, 0.5, Some(1.0)) {
                    assert!(w.samples.iter().all(|x| x.is_finite()));
                }
                for cut in [1, 3, d.len() / 2] {
                    match decode(&d[..cut.min(d.len())]) {
                        Ok(x) if magic.starts_with(b"RIFF") => assert!(x.damage.is_some()),
                        r => assert!(r.is_err()),
                    }
                }
            }
        }
    }

    #[test]
    fn truncated_recordings_yield_what_they_hold() {
        let x = tone(2 * 20000, 16000, 440.0, 0.5);
        for bits in [16u16, 24] {
            let good = wav_bytes(&x, 2, 16000, bits, false);
            let intact = decode(&good).unwrap();
            assert_eq!((intact.samples.len(), intact.damage.clone()), (20000, None));
            for cut in [1000usize, good.len() / 2, good.len() - 3] {
                let bytes = &good[..cut];
                let d = decode(bytes).unwrap();
                let damage = d.damage.clone().expect("a truncated file says so");
                assert!(d.samples.len() < 20000 && damage.frame as usize == d.samples.len());
                assert!(damage.reason.contains("truncated"), "{damage:?}");
                assert_eq!(d.samples[..], intact.samples[..d.samples.len()]);
                let end = damage.frame;
                // A window before the damage is whole and says nothing; one across it is what
                // the data holds; one after it is empty audio naming where the data ends.
                let mut src = Source::open(bytes).unwrap();
                let before = src.read(0, Some(end / 2)).unwrap();
                assert_eq!(
                    (before.samples.len() as u64, before.damage),
                    (end / 2, None)
                );
                let across = Source::open(bytes)
                    .unwrap()
                    .read(end / 2, Some(end))
                    .unwrap();
                assert_eq!(
                    across.samples[..],
                    intact.samples[end as usize / 2..end as usize]
                );
                assert!(across.damage.is_some());
                if end + 2 < 20000 {
                    match Source::open(bytes).unwrap().read(end + 1, Some(1)) {
                        Err(Error::EmptyAudio { detail }) => {
                            assert!(detail.contains("after the data ends at"), "{detail}")
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn malformed_inputs_error_without_panicking() {
        let x = tone(20000, 16000, 440.0, 0.5);
        let good = wav_bytes(&x, 2, 16000, 16, false);
        assert!(matches!(decode(&[]), Err(Error::EmptyAudio { .. })));
        // Truncated in the header or before the first frame: an error (never a panic).
        for cut in [1usize, 4, 11, 12, 30, 43, 44, 45] {
            let r = decode(&good[..cut]);
            assert!(r.is_err(), "truncated at {cut} decoded fine");
        }
        // Random bytes.
        let mut s = 0x1234_5678_9abc_def0u64;
        for len in [1usize, 7, 100, 5000] {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect();
            assert!(decode(&junk).is_err());
        }
        // A valid header with garbage after it.
        let mut g = good[..44].to_vec();
        g.extend((0..5000).map(|i| (i * 37 % 251) as u8));
        // PCM garbage is just noise; the data stops before the header's 20,000 frames: what it
        // holds (1,250 stereo frames), and where it stopped.
        let d = decode(&g).unwrap();
        assert_eq!(d.samples.len(), 1250);
        assert_eq!(d.damage.map(|x| x.frame), Some(1250));
    }
}
