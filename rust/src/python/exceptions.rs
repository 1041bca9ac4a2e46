//! The Python exception classes of `birdjepa`, all beneath one root, `birdjepa.Error`.
//!
//! ```text
//! Exception
//! └── Error
//!     ├── AudioError (also ValueError)
//!     │   ├── UnsupportedCodecError
//!     │   ├── CorruptAudioError
//!     │   └── EmptyAudioError
//!     ├── BadArgumentError (also ValueError)
//!     ├── DatasetError (also ValueError)
//!     │   └── TooManyFailuresError
//!     ├── StateMismatchError (also ValueError)
//!     └── LoaderError (also RuntimeError)
//! ```
//!
//! The classes are created once per interpreter (several bases need `type(...)`, which
//! `create_exception!` cannot express). [`super::to_py`] maps each core error variant onto them.

use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// Every exception class, created in dependency order.
pub(crate) struct Exceptions {
    pub error: Py<PyType>,
    pub audio: Py<PyType>,
    pub unsupported_codec: Py<PyType>,
    pub corrupt_audio: Py<PyType>,
    pub empty_audio: Py<PyType>,
    pub bad_argument: Py<PyType>,
    pub dataset: Py<PyType>,
    pub too_many_failures: Py<PyType>,
    pub state_mismatch: Py<PyType>,
    pub loader: Py<PyType>,
}

static EXCEPTIONS: PyOnceLock<Exceptions> = PyOnceLock::new();

/// `type(name, bases, {"__module__": "birdjepa", "__doc__": doc})`.
fn class(py: Python<'_>, name: &str, bases: &[&Py<PyType>], doc: &str) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "birdjepa")?;
    dict.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases.iter().map(|b| b.bind(py)))?;
    let ty = py.get_type::<PyType>().call1((name, bases, dict))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

fn build(py: Python<'_>) -> PyResult<Exceptions> {
    let value = py.get_type::<PyValueError>().unbind();
    let runtime = py.get_type::<PyRuntimeError>().unbind();
    let root = py.get_type::<PyException>().unbind();
    let error = class(
        py,
        "Error",
        &[&root],
        "The root of every birdjepa exception.",
    )?;
    let audio = class(
        py,
        "AudioError",
        &[&error, &value],
        "Audio could not be decoded or transformed.",
    )?;
    let dataset = class(
        py,
        "DatasetError",
        &[&error, &value],
        "A dataset shard is unreadable, lacks a column, or changed under the loader.",
    )?;
    Ok(Exceptions {
        unsupported_codec: class(
            py,
            "UnsupportedCodecError",
            &[&audio],
            "The codec or container is not supported.",
        )?,
        corrupt_audio: class(
            py,
            "CorruptAudioError",
            &[&audio],
            "The bytes are corrupt, truncated or non-finite.",
        )?,
        empty_audio: class(
            py,
            "EmptyAudioError",
            &[&audio],
            "The audio (or the requested window) is empty.",
        )?,
        bad_argument: class(
            py,
            "BadArgumentError",
            &[&error, &value],
            "An argument is outside its domain.",
        )?,
        too_many_failures: class(
            py,
            "TooManyFailuresError",
            &[&dataset],
            "More than max_failure_fraction of the recent samples failed to load.",
        )?,
        dataset,
        state_mismatch: class(
            py,
            "StateMismatchError",
            &[&error, &value],
            "A loader state does not fit this loader.",
        )?,
        loader: class(
            py,
            "LoaderError",
            &[&error, &runtime],
            "The loader pipeline stopped (an earlier error, or a thread failed or could not start).",
        )?,
        audio,
        error,
    })
}

/// The exception classes of this interpreter, created on first use.
pub(crate) fn get(py: Python<'_>) -> PyResult<&Exceptions> {
    EXCEPTIONS.get_or_try_init(py, || build(py))
}

/// Add every class to the module under its name.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let e = get(py)?;
    for (name, ty) in [
        ("Error", &e.error),
        ("AudioError", &e.audio),
        ("UnsupportedCodecError", &e.unsupported_codec),
        ("CorruptAudioError", &e.corrupt_audio),
        ("EmptyAudioError", &e.empty_audio),
        ("BadArgumentError", &e.bad_argument),
        ("DatasetError", &e.dataset),
        ("TooManyFailuresError", &e.too_many_failures),
        ("StateMismatchError", &e.state_mismatch),
        ("LoaderError", &e.loader),
    ] {
        m.add(name, ty.bind(py))?;
    }
    Ok(())
}
