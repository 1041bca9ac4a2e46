//! Bindings of the audio core: decode, info, resample, fbank, clip. All release the GIL while
//! they work. Resamplers, filterbanks and the clip worker are cached per thread.

use std::cell::RefCell;

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::to_py;
use crate::clip::{ClipConfig, ClipWorker, Crop};
use crate::decode::{self as core_decode, Source};
use crate::error::{Error, Result};
use crate::fbank::{Fbank, FbankConfig, WindowType};
use crate::resample::{Filter, ResamplerCache};

thread_local! {
    static RESAMPLERS: RefCell<ResamplerCache> = RefCell::new(ResamplerCache::new());
    static FBANK: RefCell<Option<Fbank>> = const { RefCell::new(None) };
    static WORKER: RefCell<Option<ClipWorker>> = const { RefCell::new(None) };
}

/// The option names `fbank` and `clip` accept (besides `sample_rate`).
pub(crate) const FBANK_OPTIONS: &[&str] = &[
    "n_mels",
    "frame_length_ms",
    "frame_shift_ms",
    "round_to_power_of_two",
    "preemph",
    "remove_dc",
    "dither",
    "seed",
    "window_type",
    "blackman_coeff",
    "snip_edges",
    "low_freq",
    "high_freq",
    "use_power",
    "use_log_fbank",
];

/// Build an `FbankConfig` from keyword options; unknown keys raise TypeError naming the key.
fn fbank_config(sample_rate: f32, opts: Option<&Bound<'_, PyDict>>) -> PyResult<FbankConfig> {
    let mut c = FbankConfig {
        sample_rate,
        ..Default::default()
    };
    let Some(opts) = opts else { return Ok(c) };
    for (k, v) in opts.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "n_mels" => c.n_mels = v.extract()?,
            "frame_length_ms" => c.frame_length_ms = v.extract()?,
            "frame_shift_ms" => c.frame_shift_ms = v.extract()?,
            "round_to_power_of_two" => c.round_to_power_of_two = v.extract()?,
            "preemph" => c.preemph = v.extract()?,
            "remove_dc" => c.remove_dc = v.extract()?,
            "dither" => c.dither = v.extract()?,
            "seed" => c.seed = v.extract()?,
            "window_type" => {
                let s: String = v.extract()?;
                c.window_type = WindowType::parse(&s).map_err(to_py)?;
            }
            "blackman_coeff" => c.blackman_coeff = v.extract()?,
            "snip_edges" => c.snip_edges = v.extract()?,
            "low_freq" => c.low_freq = v.extract()?,
            "high_freq" => c.high_freq = v.extract()?,
            "use_power" => c.use_power = v.extract()?,
            "use_log_fbank" => c.use_log_fbank = v.extract()?,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "unknown fbank option {key:?} (known: sample_rate, {})",
                    FBANK_OPTIONS.join(", ")
                )))
            }
        }
    }
    Ok(c)
}

fn to_matrix(py: Python<'_>, data: Vec<f32>, n_mels: usize) -> PyResult<Bound<'_, PyArray2<f32>>> {
    let rows = data.len().checked_div(n_mels).unwrap_or(0);
    let arr = Array2::from_shape_vec((rows, n_mels), data)
        .map_err(|e| to_py(Error::corrupt(format!("feature shape: {e}"))))?;
    Ok(arr.into_pyarray(py))
}

/// Where a recording's data stops early, for Python: {"end_s", "message"} (None: intact).
fn damage_dict<'py>(
    py: Python<'py>,
    end_s: Option<f64>,
    message: Option<String>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let (Some(end_s), Some(message)) = (end_s, message) else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("end_s", end_s)?;
    d.set_item("message", message)?;
    Ok(Some(d))
}

/// Decode bytes to mono float32 at the native rate: `(wave, sample_rate, seeked, damage)`,
/// `damage` None or {"end_s", "message"} where the data stops early (the wave is what it holds).
#[pyfunction]
#[pyo3(signature = (data, *, start_s=None, duration_s=None))]
fn decode<'py>(
    py: Python<'py>,
    data: &[u8],
    start_s: Option<f64>,
    duration_s: Option<f64>,
) -> PyResult<DecodeResult<'py>> {
    let (d, info) = py
        .detach(
            || -> Result<(core_decode::Decoded, core_decode::AudioInfo)> {
                let mut src = Source::open(data)?;
                let info = src.info().clone();
                let sr = info.sample_rate;
                let start = core_decode::seconds_to_frames("start_s", start_s.unwrap_or(0.0), sr)?;
                let len = duration_s
                    .map(|d| core_decode::seconds_to_frames("duration_s", d, sr))
                    .transpose()?;
                Ok((src.read(start, len)?, info))
            },
        )
        .map_err(to_py)?;
    let sr = d.sample_rate as f64;
    let damage = damage_dict(
        py,
        d.damage.as_ref().map(|x| x.frame as f64 / sr),
        d.damage.as_ref().map(|x| x.describe(&info)),
    )?;
    Ok((d.samples.into_pyarray(py), d.sample_rate, d.seeked, damage))
}

type DecodeResult<'py> = (
    Bound<'py, PyArray1<f32>>,
    u32,
    bool,
    Option<Bound<'py, PyDict>>,
);

/// Container facts: sample_rate, channels, n_frames (None when unknown), codec, container.
#[pyfunction]
fn info<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let i = py
        .detach(|| Source::open(data).map(|s| s.info().clone()))
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("sample_rate", i.sample_rate)?;
    d.set_item("channels", i.channels)?;
    d.set_item("n_frames", i.n_frames)?;
    d.set_item("codec", i.codec)?;
    d.set_item("container", i.container)?;
    Ok(d)
}

/// Resample a mono float32 wave from `src_sr` to `dst_sr` Hz (`round(n * dst / src)` samples)
/// with the filter named `resampler` ("soxr-hq" or "rubato-bh2-1024").
#[pyfunction]
#[pyo3(signature = (wave, src_sr, dst_sr, *, resampler="soxr-hq"))]
fn resample<'py>(
    py: Python<'py>,
    wave: PyReadonlyArray1<'py, f32>,
    src_sr: u32,
    dst_sr: u32,
    resampler: &str,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let filter = Filter::parse(resampler).map_err(to_py)?;
    let x = wave.as_slice().map_err(|e| {
        to_py(Error::bad_argument(
            "wave",
            "a contiguous 1-D float32 array",
            e,
        ))
    })?;
    let y = py
        .detach(|| {
            if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                return Err(Error::bad_argument(
                    "wave",
                    "finite samples",
                    format!("{} at index {i}", x[i]),
                ));
            }
            RESAMPLERS.with_borrow_mut(|c| c.get_filter(src_sr, dst_sr, filter)?.process(x))
        })
        .map_err(to_py)?;
    Ok(y.into_pyarray(py))
}

/// Kaldi log-mel filterbank of a mono float32 wave: (frames, n_mels) float32.
#[pyfunction]
#[pyo3(signature = (wave, *, sample_rate=32000.0, **opts))]
fn fbank<'py>(
    py: Python<'py>,
    wave: PyReadonlyArray1<'py, f32>,
    sample_rate: f32,
    opts: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let cfg = fbank_config(sample_rate, opts)?;
    let x = wave.as_slice().map_err(|e| {
        to_py(Error::bad_argument(
            "wave",
            "a contiguous 1-D float32 array",
            e,
        ))
    })?;
    let n_mels = cfg.n_mels;
    let data = py
        .detach(|| {
            FBANK.with_borrow_mut(|slot| {
                if slot.as_ref().map(|f| f.config()) != Some(&cfg) {
                    *slot = Some(Fbank::new(cfg)?);
                }
                slot.as_mut().expect("set above").compute(x)
            })
        })
        .map_err(to_py)?;
    to_matrix(py, data, n_mels)
}

/// Features of one clip: decode the window, resample (with the filter named `resampler`),
/// fbank. Returns `(features, seeked, damage)`, `damage` None or {"end_s", "message"} where the
/// recording's data stops early (the window is what it holds, zero-padded).
#[pyfunction]
#[pyo3(signature = (data, *, start_s=0.0, duration_s=5.0, sample_rate=32000, resampler="soxr-hq", **opts))]
#[allow(clippy::too_many_arguments)]
fn clip<'py>(
    py: Python<'py>,
    data: &[u8],
    start_s: f64,
    duration_s: f64,
    sample_rate: u32,
    resampler: &str,
    opts: Option<&Bound<'py, PyDict>>,
) -> PyResult<ClipResult<'py>> {
    let fb = fbank_config(sample_rate as f32, opts)?;
    let cfg = ClipConfig {
        sample_rate,
        duration_s,
        fbank: fb,
        resampler: Filter::parse(resampler).map_err(to_py)?,
        device_wave: None,
    };
    let feats = py
        .detach(|| {
            WORKER.with_borrow_mut(|slot| {
                match slot {
                    Some(w) => w.set_config(cfg)?,
                    None => *slot = Some(ClipWorker::new(cfg)?),
                }
                slot.as_mut()
                    .expect("set above")
                    .clip(data, Crop::Start(start_s))
            })
        })
        .map_err(to_py)?;
    let damage = damage_dict(py, feats.data_end_s, feats.damage)?;
    let seeked = feats.seeked;
    Ok((to_matrix(py, feats.data, feats.n_mels)?, seeked, damage))
}

type ClipResult<'py> = (Bound<'py, PyArray2<f32>>, bool, Option<Bound<'py, PyDict>>);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add_function(wrap_pyfunction!(resample, m)?)?;
    m.add_function(wrap_pyfunction!(fbank, m)?)?;
    m.add_function(wrap_pyfunction!(clip, m)?)?;
    m.add("FBANK_OPTIONS", FBANK_OPTIONS.to_vec())?;
    let names: Vec<&str> = Filter::ALL.iter().map(|f| f.name()).collect();
    m.add("RESAMPLERS", names)?;
    m.add("DEFAULT_RESAMPLER", Filter::default().name())?;
    m.add("LEGACY_RESAMPLER", Filter::LEGACY.name())?;
    Ok(())
}
