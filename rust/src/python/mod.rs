//! The one binding module: maps the core to `birdjepa._rs`. Nothing outside `python/` imports pyo3.
//!
//! Submodules hold the bindings of one concern each; `exceptions` owns the exception hierarchy and
//! this file the mapping of `crate::error::Error` onto it.

use std::path::PathBuf;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::Error;

mod audio;
mod exceptions;
mod loader;

/// Convert a core error into the matching Python exception.
pub(crate) fn to_py(err: Error) -> PyErr {
    let msg = err.to_string();
    Python::attach(|py| {
        let e = match exceptions::get(py) {
            Ok(e) => e,
            Err(failed) => return failed,
        };
        let ty = match err {
            Error::UnsupportedCodec { .. } => &e.unsupported_codec,
            Error::CorruptData { .. } => &e.corrupt_audio,
            Error::EmptyAudio { .. } => &e.empty_audio,
            Error::BadArgument { .. } => &e.bad_argument,
            Error::Dataset { .. } | Error::ShardChanged { .. } | Error::AudioFile { .. } => {
                &e.dataset
            }
            Error::TooManyFailures { .. } => &e.too_many_failures,
            Error::StateMismatch { .. } => &e.state_mismatch,
            Error::Pipeline { .. } | Error::Thread { .. } => &e.loader,
            Error::Io { .. } => return PyOSError::new_err(msg),
        };
        PyErr::from_type(ty.bind(py).clone(), msg)
    })
}

/// The class [`to_py`] gives each core error variant, by variant name (for the tests).
#[pyfunction]
fn _error_classes(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let io = || std::io::Error::other("x");
    let samples = [
        (
            "UnsupportedCodec",
            Error::UnsupportedCodec { detail: "x".into() },
        ),
        ("CorruptData", Error::corrupt("x")),
        ("EmptyAudio", Error::EmptyAudio { detail: "x".into() }),
        ("BadArgument", Error::bad_argument("x", "y", "z")),
        (
            "Dataset",
            Error::Dataset {
                path: "p".into(),
                detail: "x".into(),
            },
        ),
        (
            "ShardChanged",
            Error::ShardChanged {
                path: "p".into(),
                detail: "x".into(),
            },
        ),
        (
            "AudioFile",
            Error::AudioFile {
                path: "p".into(),
                kind: "k",
                detail: "x".into(),
            },
        ),
        (
            "TooManyFailures",
            Error::TooManyFailures { detail: "x".into() },
        ),
        ("StateMismatch", Error::StateMismatch { detail: "x".into() }),
        ("Pipeline", Error::pipeline("x")),
        (
            "Thread",
            Error::Thread {
                name: "t".into(),
                source: io(),
            },
        ),
        (
            "Io",
            Error::Io {
                path: "p".into(),
                source: io(),
            },
        ),
    ];
    let d = PyDict::new(py);
    for (name, err) in samples {
        d.set_item(name, to_py(err).get_type(py))?;
    }
    Ok(d)
}

/// The file a stored audio path resolves to, by the loader's rule (`ReadOptions::resolve`); for
/// the parity test with birdjepa.data.paths.resolve.
#[pyfunction]
#[pyo3(signature = (stored, shard_dir, audio_root="", path_map=None))]
fn _resolve_audio_path(
    stored: &str,
    shard_dir: &str,
    audio_root: &str,
    path_map: Option<std::collections::BTreeMap<String, String>>,
) -> String {
    let o = crate::shards::ReadOptions {
        audio_root: (!audio_root.is_empty()).then(|| audio_root.into()),
        path_map: path_map.unwrap_or_default(),
        ..Default::default()
    };
    o.resolve(stored, std::path::Path::new(shard_dir))
        .display()
        .to_string()
}

/// The rule "only a regular file is read", in the loader's words: None for a regular file,
/// else what a file of `st_mode` is ("a FIFO (named pipe)", "a directory", ...).
#[pyfunction]
fn file_kind(st_mode: u32) -> Option<&'static str> {
    crate::shards::file_kind(st_mode)
}

/// None if a file of `st_mode` and `st_size` bytes at `path` may be read as audio (a regular
/// file of at most `max_audio_mb` MB; <= 0: no bound), else a DatasetError naming it, in the
/// loader's words.
#[pyfunction]
#[pyo3(signature = (path, st_mode, st_size, max_audio_mb))]
fn check_audio_file(path: PathBuf, st_mode: u32, st_size: u64, max_audio_mb: f64) -> PyResult<()> {
    let max = crate::shards::max_audio_bytes(max_audio_mb);
    crate::shards::check_audio_file(&path, st_mode, st_size, max).map_err(to_py)
}

/// None if a file of `st_mode` at `path` may be opened as a shard (a regular file), else a
/// DatasetError naming it, in the loader's words.
#[pyfunction]
fn check_shard_file(path: PathBuf, st_mode: u32) -> PyResult<()> {
    crate::shards::check_shard_file(&path, st_mode).map_err(to_py)
}

#[pymodule]
fn _rs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    exceptions::register(m)?;
    m.add_function(wrap_pyfunction!(_error_classes, m)?)?;
    m.add_function(wrap_pyfunction!(_resolve_audio_path, m)?)?;
    m.add_function(wrap_pyfunction!(file_kind, m)?)?;
    m.add_function(wrap_pyfunction!(check_audio_file, m)?)?;
    m.add_function(wrap_pyfunction!(check_shard_file, m)?)?;
    audio::register(m)?;
    loader::register(m)?;
    Ok(())
}
