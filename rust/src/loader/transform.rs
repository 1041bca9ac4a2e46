//! The one place that maps a transform name to an implementation.

use std::sync::Arc;
use std::time::Duration;

use super::{LoaderConfig, TransformFactory};
use crate::clip::{ClipConfig, ClipWorker, Transform};
use crate::debug_transform::DebugTransform;
use crate::error::{Error, Result};
use crate::fbank::FbankConfig;
use crate::resample::Filter;

/// A factory building `cfg.transform` once per worker thread, after checking its settings.
///
/// * `"audio"`: the real clip transform, [`ClipWorker`] (decode -> resample -> fbank).
/// * `"debug"`: [`DebugTransform`], a deterministic test transform (features are a hash pattern
///   of the bytes and the crop; bytes starting with `CORRUPT` fail), `debug_frames()` frames
///   per clip and `debug_delay_s` of artificial delay per sample.
pub fn transform_factory(cfg: &LoaderConfig) -> Result<TransformFactory> {
    if !(cfg.debug_delay_s.is_finite() && cfg.debug_delay_s >= 0.0) {
        return Err(Error::bad_argument(
            "debug_delay_s",
            "a finite value >= 0",
            cfg.debug_delay_s,
        ));
    }
    let cfg = cfg.clone();
    Ok(Arc::new(move || make_transform(&cfg)))
}

fn make_transform(cfg: &LoaderConfig) -> Result<Box<dyn Transform>> {
    if !(cfg.clip_s.is_finite() && cfg.clip_s > 0.0) {
        return Err(Error::bad_argument(
            "clip_s",
            "a finite duration > 0 s",
            cfg.clip_s,
        ));
    }
    if cfg.sample_rate == 0 {
        return Err(Error::bad_argument(
            "sample_rate",
            "> 0 Hz",
            cfg.sample_rate,
        ));
    }
    match cfg.transform.as_str() {
        "debug" => Ok(Box::new(
            DebugTransform::new(
                cfg.debug_frames(),
                cfg.n_mels,
                Duration::from_secs_f64(cfg.debug_delay_s),
            )
            .with_wave(cfg.device_features().then(|| cfg.wave_samples())),
        )),
        "audio" => {
            let fbank = FbankConfig {
                sample_rate: cfg.sample_rate as f32,
                n_mels: cfg.n_mels,
                ..FbankConfig::default()
            };
            Ok(Box::new(ClipWorker::new(ClipConfig {
                sample_rate: cfg.sample_rate,
                duration_s: cfg.window_s(),
                fbank,
                resampler: Filter::parse(&cfg.resampler)?,
                device_wave: cfg.device_features().then(|| cfg.wave_samples()),
            })?))
        }
        other => Err(Error::bad_argument(
            "transform",
            "\"audio\" or \"debug\"",
            format!("{other:?}"),
        )),
    }
}
