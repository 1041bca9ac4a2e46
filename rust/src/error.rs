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
        name: std::borrow::Cow<'static, str>,
        expected: String,
        actual: String,
    },
    /// A dataset shard is unreadable or lacks what we need; names the file (and column).
    #[error("{path}: {detail}")]
    Dataset { path: String, detail: String },
    /// A shard changed (truncated, overwritten) after it was opened: the loader stops, since the
    /// stream was defined over the old contents. (A path-only row's own audio file that changes
    /// is an [`Error::AudioFile`], a skipped sample.)
    #[error(
        "{path}: the file changed under the loader ({detail}); re-create the Loader (or the \
             Dataset) once the file is complete"
    )]
    ShardChanged { path: String, detail: String },
    /// The audio file a path-only row names cannot be used: not a regular file (a FIFO, a
    /// device, a directory), above `max_audio_mb`, or its content changed since this run first
    /// read it. The sample is skipped (counted by `kind`).
    #[error("{path}: {detail}")]
    AudioFile {
        path: String,
        kind: &'static str,
        detail: String,
    },
    /// Too many of the recent samples failed (see `LoaderConfig::max_failure_fraction`).
    #[error("too many failed samples: {detail}")]
    TooManyFailures { detail: String },
    /// A loader state does not match the loader it is restored into.
    #[error("loader state mismatch: {detail}")]
    StateMismatch { detail: String },
    /// The loader pipeline stopped: an earlier error, or one of its threads died.
    #[error("loader pipeline: {reason}")]
    Pipeline { reason: String },
    /// The operating system refused to start a pipeline thread.
    #[error("cannot start thread {name}: {source}")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// Operating-system I/O failure on a named file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// `bad argument NAME: expected EXPECTED, got ACTUAL`: `name` is a setting's name or, for a
    /// value inside one, its path (`path_map./a`).
    pub fn bad_argument(
        name: impl Into<std::borrow::Cow<'static, str>>,
        expected: impl std::fmt::Display,
        actual: impl std::fmt::Display,
    ) -> Self {
        Error::BadArgument {
            name: name.into(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        }
    }
    /// A short name of the variant, to count errors by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::UnsupportedCodec { .. } => "unsupported codec",
            Error::CorruptData { .. } => "corrupt audio",
            Error::EmptyAudio { .. } => "empty audio",
            Error::BadArgument { .. } => "bad argument",
            Error::Dataset { .. } => "unreadable row",
            Error::ShardChanged { .. } => "shard changed",
            Error::AudioFile { kind, .. } => kind,
            Error::TooManyFailures { .. } => "too many failures",
            Error::StateMismatch { .. } => "state mismatch",
            Error::Pipeline { .. } => "pipeline",
            Error::Thread { .. } => "thread",
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                "missing audio file"
            }
            Error::Io { .. } => "I/O error",
        }
    }
    pub fn pipeline(reason: impl Into<String>) -> Self {
        Error::Pipeline {
            reason: reason.into(),
        }
    }
    pub fn corrupt(detail: impl Into<String>) -> Self {
        Error::CorruptData {
            detail: detail.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
