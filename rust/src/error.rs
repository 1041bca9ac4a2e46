//! The one error type of the core. The binding module maps each variant to a Python exception.

/// Everything that can go wrong in the audio core and the loader.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are audio in a container or codec we do not decode.
    #[error("unsupported codec: {detail}")]
    UnsupportedCodec { detail: String },
    /// The bytes claim to be audio but cannot be decoded (truncated, garbage, NaN/inf samples).
    #[error("corrupt audio: {detail}")]
    CorruptData { detail: String },
    /// Decoding worked but produced no samples, or the requested window is empty.
    #[error("empty audio: {detail}")]
    EmptyAudio { detail: String },
    /// A caller passed a value outside its domain.
    #[error("bad argument {name}: expected {expected}, got {actual}")]
    BadArgument {
        name: &'static str,
        expected: String,
        actual: String,
    },
    /// A dataset shard is unreadable or lacks what we need; names the file (and column).
    #[error("{path}: {detail}")]
    Dataset { path: String, detail: String },
    /// A loader state does not match the loader it is restored into.
    #[error("loader state mismatch: {detail}")]
    StateMismatch { detail: String },
    /// Operating-system I/O failure on a named file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn bad_argument(
        name: &'static str,
        expected: impl std::fmt::Display,
        actual: impl std::fmt::Display,
    ) -> Self {
        Error::BadArgument {
            name,
            expected: expected.to_string(),
            actual: actual.to_string(),
        }
    }
    pub fn corrupt(detail: impl Into<String>) -> Self {
        Error::CorruptData {
            detail: detail.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
