//! The one binding module: maps the core to `birdjepa._rs`. Nothing outside `python/` imports pyo3.
//!
//! Submodules hold the bindings of one concern each; this file owns the exception hierarchy and the
//! mapping of `crate::error::Error` onto it.

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;

mod audio;
mod loader;

create_exception!(
    _rs,
    AudioError,
    PyValueError,
    "Audio could not be decoded or transformed."
);
create_exception!(
    _rs,
    UnsupportedCodecError,
    AudioError,
    "The codec or container is not supported."
);
create_exception!(
    _rs,
    CorruptAudioError,
    AudioError,
    "The bytes are corrupt, truncated or non-finite."
);
create_exception!(
    _rs,
    EmptyAudioError,
    AudioError,
    "The audio (or the requested window) is empty."
);
create_exception!(
    _rs,
    BadArgumentError,
    PyValueError,
    "An argument is outside its domain."
);
create_exception!(
    _rs,
    DatasetError,
    PyValueError,
    "A dataset shard is unreadable or lacks a column."
);
create_exception!(
    _rs,
    StateMismatchError,
    PyValueError,
    "A loader state does not fit this loader."
);

/// Convert a core error into the matching Python exception.
pub(crate) fn to_py(err: Error) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::UnsupportedCodec { .. } => UnsupportedCodecError::new_err(msg),
        Error::CorruptData { .. } => CorruptAudioError::new_err(msg),
        Error::EmptyAudio { .. } => EmptyAudioError::new_err(msg),
        Error::BadArgument { .. } => BadArgumentError::new_err(msg),
        Error::Dataset { .. } => DatasetError::new_err(msg),
        Error::StateMismatch { .. } => StateMismatchError::new_err(msg),
        Error::Io { .. } => PyOSError::new_err(msg),
    }
}

#[pymodule]
fn _rs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("AudioError", py.get_type::<AudioError>())?;
    m.add(
        "UnsupportedCodecError",
        py.get_type::<UnsupportedCodecError>(),
    )?;
    m.add("CorruptAudioError", py.get_type::<CorruptAudioError>())?;
    m.add("EmptyAudioError", py.get_type::<EmptyAudioError>())?;
    m.add("BadArgumentError", py.get_type::<BadArgumentError>())?;
    m.add("DatasetError", py.get_type::<DatasetError>())?;
    m.add("StateMismatchError", py.get_type::<StateMismatchError>())?;
    audio::register(m)?;
    loader::register(m)?;
    Ok(())
}
