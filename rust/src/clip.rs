//! A whole clip: windowed decode -> cached resample -> Kaldi fbank. The loader's unit of work.

use crate::error::Result;

/// Where a clip starts inside its recording.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crop {
    /// At this many seconds from the start.
    Start(f64),
    /// At `f * max(0, recording_length - clip_duration)`, with `f` in [0, 1]. 0.5 is the centre crop;
    /// a uniform random `f` is a random crop. The recording length comes from the container header
    /// where it has one (decoding fully otherwise).
    Fraction(f64),
}

/// A log-mel feature matrix, row-major (frames x mels).
#[derive(Clone, Debug, Default)]
pub struct Features {
    pub data: Vec<f32>,
    pub n_frames: usize,
    pub n_mels: usize,
    /// True when the window was decoded by seeking; false when we fell back to a full decode.
    pub seeked: bool,
}

/// Something that turns encoded audio bytes into features. The loader is generic over it so its
/// ordering and state logic can be tested without codecs.
pub trait Transform: Send {
    fn apply(&mut self, data: &[u8], crop: Crop) -> Result<Features>;
}
