//! Bindings of the loader: `_rs.Dataset`, `_rs.Loader`, `_rs.train_indices`.
//!
//! The Python-facing API with state dicts lives in `birdjepa.data`; this layer only moves batches
//! across and releases the GIL while waiting.
//!
//! [`make_transform`] is the one function that maps a transform name to an implementation:
//! `"audio"` is the real `ClipWorker`, `"debug"` the codec-free test transform.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::to_py;
use crate::clip::{ClipConfig, ClipWorker, Transform};
use crate::debug_transform::DebugTransform;
use crate::error::{Error, Result};
use crate::fbank::FbankConfig;
use crate::loader::{Batch, LoaderConfig, Mode, Next, Pipeline, TransformFactory};
use crate::shards::Dataset;

/// Everything a transform needs from the loader configuration.
#[derive(Clone, Debug)]
pub(crate) struct TransformConfig {
    /// "audio" (the real decode -> resample -> fbank clip transform) or "debug".
    pub name: String,
    /// Clip duration in seconds and the target sample rate (for the audio transform).
    pub clip_s: f64,
    pub sample_rate: u32,
    pub n_mels: usize,
    /// DebugTransform only: frames per clip and an artificial per-sample delay.
    pub debug_frames: usize,
    pub debug_delay: Duration,
}

/// Build the transform named by `cfg.name` for one worker thread (called once per worker).
///
/// * `"debug"`: [`DebugTransform`], a deterministic test transform (features are a hash pattern
///   of the bytes and the crop; bytes starting with `CORRUPT` fail). Keep it: tests use it.
/// * `"audio"`: the real clip transform. NOT BUILT IN THIS BRANCH: the integrator replaces the
///   error below with `Ok(Box::new(ClipWorker::new(...cfg...)?))`.
pub(crate) fn make_transform(cfg: &TransformConfig) -> Result<Box<dyn Transform>> {
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
    match cfg.name.as_str() {
        "debug" => Ok(Box::new(DebugTransform::new(
            cfg.debug_frames,
            cfg.n_mels,
            cfg.debug_delay,
        ))),
        "audio" => {
            let fbank = FbankConfig {
                sample_rate: cfg.sample_rate as f32,
                n_mels: cfg.n_mels,
                ..FbankConfig::default()
            };
            Ok(Box::new(ClipWorker::new(ClipConfig {
                sample_rate: cfg.sample_rate,
                duration_s: cfg.clip_s,
                fbank,
            })?))
        }
        other => Err(Error::bad_argument(
            "transform",
            "\"audio\" or \"debug\"",
            format!("{other:?}"),
        )),
    }
}

/// Opened, indexed shards (no audio bodies read).
#[pyclass(name = "Dataset", module = "birdjepa._rs", frozen)]
pub struct PyDataset {
    inner: Arc<Dataset>,
}

#[pymethods]
impl PyDataset {
    #[new]
    #[pyo3(signature = (paths, audio_column = "audio", label_column = Some("label")))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        audio_column: &str,
        label_column: Option<&str>,
    ) -> PyResult<Self> {
        let ds = py
            .detach(|| Dataset::open(&paths, audio_column, label_column))
            .map_err(to_py)?;
        Ok(PyDataset {
            inner: Arc::new(ds),
        })
    }

    #[getter]
    fn n_rows(&self) -> u64 {
        self.inner.n_rows()
    }

    /// One (path, rows, format) tuple per shard.
    fn shards(&self) -> Vec<(String, u64, &'static str)> {
        self.inner
            .shards()
            .iter()
            .map(|s| (s.path.display().to_string(), s.n_rows, s.format.name()))
            .collect()
    }

    /// Every row's label (int64; -1 without a label column). Reads only the label column.
    fn labels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let v = py.detach(|| self.inner.labels()).map_err(to_py)?;
        Ok(PyArray1::from_vec(py, v))
    }

    /// Every row's shard number (int32).
    fn shard_ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        PyArray1::from_vec(py, self.inner.shard_ids())
    }
}

/// A failed sample as (index, shard, row, error).
type FailureTuple = (u64, u32, u64, String);
/// What `Loader.next` returns: (global step, batch dict, failures in this batch).
type PyBatch<'py> = (u64, Bound<'py, PyDict>, Vec<FailureTuple>);

/// A running pipeline producing this process's slice of every global batch.
#[pyclass(name = "Loader", module = "birdjepa._rs")]
pub struct PyLoader {
    pipe: Option<Pipeline>,
    local_batch: usize,
    n_views: usize,
    n_frames: usize,
    n_mels: usize,
}

fn parse_mode(mode: &str) -> Result<Mode> {
    match mode {
        "train" => Ok(Mode::Train),
        "eval" => Ok(Mode::Eval),
        m => Err(Error::bad_argument(
            "mode",
            "\"train\" or \"eval\"",
            format!("{m:?}"),
        )),
    }
}

impl PyLoader {
    fn batch_to_py<'py>(&self, py: Python<'py>, b: Batch) -> PyResult<PyBatch<'py>> {
        let d = PyDict::new(py);
        let data = PyArray1::from_vec(py, b.data);
        let data = if self.n_views == 1 {
            data.reshape([self.local_batch, self.n_frames, self.n_mels])?
                .into_any()
        } else {
            data.reshape([self.n_views, self.local_batch, self.n_frames, self.n_mels])?
                .into_any()
        };
        d.set_item("data", data)?;
        d.set_item("target", PyArray1::from_vec(py, b.target))?;
        d.set_item("index", PyArray1::from_vec(py, b.index))?;
        d.set_item("shard", PyArray1::from_vec(py, b.shard))?;
        d.set_item("valid", PyArray1::from_vec(py, b.valid))?;
        let failures = b
            .failures
            .into_iter()
            .map(|f| (f.index, f.shard, f.row, f.error))
            .collect();
        Ok((b.step, d, failures))
    }
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (
        dataset, *, mode, batch_size, seed, n_workers, process_index, process_count, start_step,
        n_views, n_frames, n_mels, block_size, shuffle_window, prefetch, mean, std,
        max_replacements, transform, clip_s, sample_rate, debug_frames, debug_delay_s
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dataset: &PyDataset,
        mode: &str,
        batch_size: usize,
        seed: u64,
        n_workers: usize,
        process_index: usize,
        process_count: usize,
        start_step: u64,
        n_views: usize,
        n_frames: usize,
        n_mels: usize,
        block_size: u64,
        shuffle_window: u64,
        prefetch: usize,
        mean: f32,
        std: f32,
        max_replacements: u32,
        transform: String,
        clip_s: f64,
        sample_rate: u32,
        debug_frames: usize,
        debug_delay_s: f64,
    ) -> PyResult<Self> {
        let cfg = LoaderConfig {
            mode: parse_mode(mode).map_err(to_py)?,
            batch_size,
            seed,
            n_views,
            n_frames,
            n_mels,
            block_size,
            shuffle_window,
            mean,
            std,
            max_replacements,
            start_step,
            process_index,
            process_count,
            n_workers,
            prefetch,
            in_flight: 0,
        };
        if !(debug_delay_s.is_finite() && debug_delay_s >= 0.0) {
            return Err(to_py(Error::bad_argument(
                "debug_delay_s",
                "a finite value >= 0",
                debug_delay_s,
            )));
        }
        let tcfg = TransformConfig {
            name: transform,
            clip_s,
            sample_rate,
            n_mels,
            debug_frames,
            debug_delay: Duration::from_secs_f64(debug_delay_s),
        };
        let factory: TransformFactory = Arc::new(move || make_transform(&tcfg));
        let ds = dataset.inner.clone();
        let local_batch = cfg.local_batch().max(1);
        let pipe = py
            .detach(|| Pipeline::start(ds, cfg, factory))
            .map_err(to_py)?;
        Ok(PyLoader {
            pipe: Some(pipe),
            local_batch,
            n_views,
            n_frames,
            n_mels,
        })
    }

    /// The next batch as (step, dict, failures), or None at the end of an eval pass.
    ///
    /// Waits with the GIL released, waking every 50 ms to let Python handle signals (Ctrl-C).
    fn next<'py>(&mut self, py: Python<'py>) -> PyResult<Option<PyBatch<'py>>> {
        loop {
            let Some(pipe) = self.pipe.as_mut() else {
                return Err(to_py(Error::bad_argument(
                    "loader",
                    "an open loader",
                    "a closed loader",
                )));
            };
            match py.detach(|| pipe.recv_timeout(Duration::from_millis(50))) {
                Next::Batch(b) => return self.batch_to_py(py, b).map(Some),
                Next::End => return Ok(None),
                Next::Error(e) => return Err(to_py(e)),
                Next::Timeout => py.check_signals()?,
            }
        }
    }

    /// Pipeline counters (they include prefetched work).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let s = self.pipe.as_ref().map(|p| p.stats()).unwrap_or_default();
        d.set_item("decoded", s.decoded)?;
        d.set_item("failures", s.failures)?;
        d.set_item("replaced", s.replaced)?;
        d.set_item("invalid", s.invalid)?;
        d.set_item("queued_batches", s.queued_batches)?;
        let recent: Vec<FailureTuple> = s
            .recent_failures
            .into_iter()
            .map(|f| (f.index, f.shard, f.row, f.error))
            .collect();
        d.set_item("recent_failures", recent)?;
        Ok(d)
    }

    /// Stop and join every thread (GIL released). Idempotent.
    fn close(&mut self, py: Python<'_>) {
        if let Some(mut p) = self.pipe.take() {
            py.detach(move || p.close());
        }
    }
}

/// The rows at train-stream positions `start .. start + count` (order diagnostics; no I/O).
#[pyfunction]
#[pyo3(signature = (n_rows, seed, block_size, shuffle_window, start, count))]
fn train_indices<'py>(
    py: Python<'py>,
    n_rows: u64,
    seed: u64,
    block_size: u64,
    shuffle_window: u64,
    start: u64,
    count: u64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let v = py
        .detach(|| {
            crate::loader::train_indices(n_rows, seed, block_size, shuffle_window, start, count)
        })
        .map_err(to_py)?;
    Ok(PyArray1::from_vec(
        py,
        v.into_iter().map(|x| x as i64).collect(),
    ))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDataset>()?;
    m.add_class::<PyLoader>()?;
    m.add_function(wrap_pyfunction!(train_indices, m)?)?;
    Ok(())
}
