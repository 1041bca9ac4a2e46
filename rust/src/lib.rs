//! birdjepa's audio core: decode, resample, Kaldi fbank, Arrow shards and the loader pipeline.
//!
//! Every module here except `python` is plain Rust with no pyo3 dependency; `python` is the one
//! binding module, compiled with the `python` feature (maturin turns it on).

pub mod clip;
pub mod debug_transform;
pub mod decode;
pub mod error;
pub mod fbank;
pub mod fir;
pub mod loader;
pub mod order;
pub mod resample;
pub mod shards;
pub mod wav;

#[cfg(feature = "python")]
mod python;
