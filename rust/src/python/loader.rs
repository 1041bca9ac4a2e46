//! Bindings of the loader: `_rs.Dataset`, `_rs.Loader`, `_rs.train_indices`, and the one check
//! of its settings, `_rs.check_loader_settings`.
//!
//! The Python-facing API with state dicts lives in `birdjepa.data`; this layer only moves batches
//! across and releases the GIL while waiting. The settings cross as the JSON of `birdjepa.data.LoaderConfig`, so no setting is restated here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::to_py;
use crate::error::Error;
use crate::loader::{transform_factory, Batch, LoaderConfig, Next, Pipeline};
use crate::shards::{Dataset, LabelKind, ReadOptions};

/// Opened, indexed shards (no audio bodies read).
#[pyclass(name = "Dataset", module = "birdjepa._rs", frozen)]
pub struct PyDataset {
    inner: Arc<Dataset>,
}

#[pymethods]
impl PyDataset {
    /// `config`: the JSON of a `birdjepa.data.LoaderConfig`, whose columns (audio, label,
    /// events, segments) and path settings (`audio_root`, `path_map`) are read instead of
    /// `audio_column` / `label_column`; the Loader needs a Dataset opened with its config.
    #[new]
    #[pyo3(signature = (paths, audio_column = "audio", label_column = Some("label"), *, config = None))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        audio_column: &str,
        label_column: Option<&str>,
        config: Option<&str>,
    ) -> PyResult<Self> {
        let opts = match config {
            Some(c) => ReadOptions::of(&LoaderConfig::from_json(c).map_err(to_py)?),
            None => ReadOptions::columns(audio_column, label_column),
        };
        let ds = py
            .detach(|| Dataset::open_with(&paths, opts))
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

    /// True when the label column is a list<int> (multilabel: multi-hot targets).
    #[getter]
    fn multilabel(&self) -> bool {
        self.inner.label_kind() == LabelKind::Multi
    }

    /// Every row's label (int64; -1 without a label column; a list column: each row's first
    /// class). Reads only the label column.
    fn labels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let v = py.detach(|| self.inner.labels()).map_err(to_py)?;
        Ok(PyArray1::from_vec(py, v))
    }

    /// The label column's range as {"min": (label, path, row) | None, "max": ..., "nulls": n},
    /// or None without a label column. Reads only the label column; a uint64 label past int64
    /// is a DatasetError naming its row.
    fn label_range<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(r) = py.detach(|| self.inner.label_range()).map_err(to_py)? else {
            return Ok(None);
        };
        let at = |m: Option<(i64, u32, u64)>| {
            m.map(|(v, s, row)| {
                let path = self.inner.shards()[s as usize].path.display().to_string();
                (v, path, row)
            })
        };
        let d = PyDict::new(py);
        d.set_item("min", at(r.min))?;
        d.set_item("max", at(r.max))?;
        d.set_item("nulls", r.nulls)?;
        Ok(Some(d))
    }

    /// Whether the audio files of `n` rows spread evenly over the dataset can be read: (rows
    /// whose audio is a path, missing files, (row, stored path, resolved path) of the first
    /// missing one or None, files that are not regular files or above max_audio_mb, (row, why)
    /// of the first of those or None). Rows with embedded bytes are not counted.
    fn check_paths(&self, py: Python<'_>, n: u64) -> PyResult<PathCheckTuple> {
        let c = py.detach(|| self.inner.check_paths(n)).map_err(to_py)?;
        Ok((
            c.checked,
            c.missing,
            c.example,
            c.unusable,
            c.unusable_example,
        ))
    }

    /// Every row's shard number (int32).
    fn shard_ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i32>> {
        PyArray1::from_vec(py, self.inner.shard_ids())
    }
}

/// (rows checked, missing, (row, stored path, resolved path) of the first missing file,
/// unusable, (row, why) of the first unusable file).
type PathCheckTuple = (
    usize,
    usize,
    Option<(u64, String, String)>,
    usize,
    Option<(u64, String)>,
);

/// A failed sample as (index, shard, row, error, kind).
type FailureTuple = (u64, u32, u64, String, &'static str);
/// What `Loader.next` returns: (global step, batch dict, failures in this batch, samples of it
/// from damaged recordings, the same tuples with kind "damaged recording").
type PyBatch<'py> = (
    u64,
    Bound<'py, PyDict>,
    Vec<FailureTuple>,
    Vec<FailureTuple>,
);

/// A running pipeline producing this process's slice of every global batch.
#[pyclass(name = "Loader", module = "birdjepa._rs")]
pub struct PyLoader {
    pipe: Option<Pipeline>,
    local_batch: usize,
    n_views: usize,
    n_frames: usize,
    n_mels: usize,
    n_local: usize,
    local_frames: usize,
    /// Device features: the samples of each window (0: host features).
    wave_samples: usize,
}

impl PyLoader {
    /// Features `(views, batch, frames, mels)` (`squeeze`: no leading axis) from the float32 or
    /// the bfloat16 bits vector, whichever the batch filled.
    fn features<'py>(
        &self,
        py: Python<'py>,
        f32s: Vec<f32>,
        bf16s: Vec<u16>,
        (views, frames, squeeze): (usize, usize, bool),
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut shape = vec![views, self.local_batch, frames, self.n_mels];
        if squeeze {
            shape.remove(0);
        }
        Ok(if bf16s.is_empty() {
            PyArray1::from_vec(py, f32s).reshape(shape)?.into_any()
        } else {
            PyArray1::from_vec(py, bf16s).reshape(shape)?.into_any()
        })
    }

    fn batch_to_py<'py>(&self, py: Python<'py>, b: Batch) -> PyResult<PyBatch<'py>> {
        let d = PyDict::new(py);
        if self.wave_samples == 0 {
            let data = self.features(
                py,
                b.data,
                b.data16,
                (self.n_views, self.n_frames, self.n_views == 1),
            )?;
            d.set_item("data", data)?;
        } else {
            let shape = [self.local_batch, self.wave_samples];
            let wave = if b.wave16.is_empty() {
                PyArray1::from_vec(py, b.wave).reshape(shape)?.into_any()
            } else {
                PyArray1::from_vec(py, b.wave16).reshape(shape)?.into_any()
            };
            d.set_item("wave", wave)?;
            d.set_item("wave_rounded", b.wave_rounded)?;
            let (v, l, n) = (self.n_views, self.n_local, self.local_batch);
            for (key, x, views) in [
                ("crop_start", b.crop_start, v),
                ("crop_frames", b.crop_frames, v),
                ("local_crop_start", b.local_crop_start, l),
                ("local_crop_frames", b.local_crop_frames, l),
            ] {
                if views > 0 {
                    d.set_item(key, PyArray1::from_vec(py, x).reshape([views, n])?)?;
                }
            }
        }
        if b.target_multi.is_empty() {
            d.set_item("target", PyArray1::from_vec(py, b.target))?;
        } else {
            let n = b.target_multi.len() / self.local_batch;
            let t = PyArray1::from_vec(py, b.target_multi).reshape([self.local_batch, n])?;
            d.set_item("target", t)?;
        }
        d.set_item("index", PyArray1::from_vec(py, b.index))?;
        d.set_item("shard", PyArray1::from_vec(py, b.shard))?;
        d.set_item("valid", PyArray1::from_vec(py, b.valid))?;
        let start_s = PyArray1::from_vec(py, b.start_s);
        let start_s = if self.n_views == 1 {
            start_s.into_any()
        } else {
            start_s
                .reshape([self.n_views, self.local_batch])?
                .into_any()
        };
        d.set_item("start_s", start_s)?;
        if self.n_local > 0 {
            let (l, n) = (self.n_local, self.local_batch);
            if self.wave_samples == 0 {
                let local = self.features(py, b.local, b.local16, (l, self.local_frames, false))?;
                d.set_item("local", local)?;
            }
            let starts = PyArray1::from_vec(py, b.local_start_s).reshape([l, n])?;
            d.set_item("local_start_s", starts)?;
        }
        let tuples = |v: Vec<crate::loader::Failure>| -> Vec<FailureTuple> {
            v.into_iter()
                .map(|f| (f.index, f.shard, f.row, f.error, f.kind))
                .collect()
        };
        Ok((b.step, d, tuples(b.failures), tuples(b.damaged)))
    }
}

#[pymethods]
impl PyLoader {
    /// Start the pipeline at global step `start_step`. `config` is the JSON of
    /// `birdjepa.data.LoaderConfig` (see `crate::loader::LoaderConfig`).
    #[new]
    #[pyo3(signature = (dataset, config, *, start_step))]
    fn new(py: Python<'_>, dataset: &PyDataset, config: &str, start_step: u64) -> PyResult<Self> {
        let cfg = LoaderConfig {
            start_step,
            ..LoaderConfig::from_json(config).map_err(to_py)?
        };
        let factory = transform_factory(&cfg).map_err(to_py)?;
        let ds = dataset.inner.clone();
        let (local_batch, n_views, n_frames, n_mels) = (
            cfg.local_batch().max(1),
            cfg.n_views,
            cfg.n_frames,
            cfg.n_mels,
        );
        let (n_local, local_frames) = (cfg.n_local, cfg.local_view_frames());
        let wave_samples = if cfg.device_features() {
            cfg.wave_samples()
        } else {
            0
        };
        let pipe = py
            .detach(|| Pipeline::start(ds, cfg, factory))
            .map_err(to_py)?;
        Ok(PyLoader {
            pipe: Some(pipe),
            local_batch,
            n_views,
            n_frames,
            n_mels,
            n_local,
            local_frames,
            wave_samples,
        })
    }

    /// The next batch as (step, dict, failures, damaged), or None at the end of an eval pass.
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
                Next::Batch(b) => return self.batch_to_py(py, *b).map(Some),
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
        d.set_item("damaged", s.damaged)?;
        d.set_item("queued_batches", s.queued_batches)?;
        let recent: Vec<FailureTuple> = s
            .recent_failures
            .into_iter()
            .map(|f| (f.index, f.shard, f.row, f.error, f.kind))
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

/// `LoaderConfig::default()` as JSON: the names and defaults `birdjepa.data.LoaderConfig` mirrors.
#[pyfunction]
fn loader_config_defaults() -> String {
    LoaderConfig::default().to_json()
}

/// The one check of the loader settings for Python (`birdjepa.data.LoaderConfig.check`): parse
/// `config` (the JSON of a LoaderConfig, run arguments optional; a wrong type or unknown name is
/// a BadArgumentError naming it), check every setting (`LoaderConfig::check_settings`), and
/// return what is derived from them: {"local_frames": the frames of a local view}.
#[pyfunction]
fn check_loader_settings<'py>(py: Python<'py>, config: &str) -> PyResult<Bound<'py, PyDict>> {
    let cfg = LoaderConfig::from_json(config).map_err(to_py)?;
    cfg.check_settings().map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("local_frames", cfg.local_view_frames())?;
    Ok(d)
}

/// Kaldi's frame count of `seconds` of audio (25 ms frames every 10 ms, snip edges): 498 for 5 s,
/// 198 for 2 s; at least 1 (also for NaN or seconds <= 0.025). The loader's
/// (`crate::loader::kaldi_frames`).
#[pyfunction]
fn kaldi_frames(seconds: f64) -> usize {
    crate::loader::kaldi_frames(seconds)
}

/// Bytes of RAM of this machine: what the loader bounds the batches in flight by
/// (`crate::loader::physical_memory`), and the training config its heads and crops.
#[pyfunction]
fn physical_memory() -> u64 {
    crate::loader::physical_memory()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDataset>()?;
    m.add_class::<PyLoader>()?;
    m.add_function(wrap_pyfunction!(train_indices, m)?)?;
    m.add_function(wrap_pyfunction!(loader_config_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(check_loader_settings, m)?)?;
    m.add_function(wrap_pyfunction!(kaldi_frames, m)?)?;
    m.add_function(wrap_pyfunction!(physical_memory, m)?)?;
    m.add("MAX_WINDOW_S", crate::loader::MAX_WINDOW_S)?;
    m.add("PADS", crate::loader::PADS.to_vec())?;
    Ok(())
}
