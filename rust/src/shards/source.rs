//! A shard's file, read with `pread` and watched for changes.
//!
//! Why not a memory map: a mapped file that is truncated while mapped raises SIGBUS on the next
//! access past its new end, which kills the process with no message; one overwritten in place
//! changes under zero-copy arrays that were validated earlier (garbage offsets, panics).
//! `datasets` rewrites cache files, so both happen in notebooks. Reading with `pread` into owned
//! memory turns truncation into a short read, and every read is followed by an `fstat` that
//! compares size, mtime and ctime with what the shard looked like when it was opened: a shard that
//! changed is an [`Error::ShardChanged`], which stops the loader (it is not skipped: the stream's
//! order, row count and resume state were defined over the old contents, and every later row of
//! that shard would be wrong too).

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What a file looked like: size and modification/change times (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
        Stamp {
            len: m.len(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

/// An open shard file and its stamp at open.
pub(super) struct Source {
    path: PathBuf,
    file: File,
    stamp: Stamp,
}

impl Source {
    pub(super) fn new(path: &Path, file: File, m: &std::fs::Metadata) -> Source {
        Source {
            path: path.to_path_buf(),
            file,
            stamp: Stamp::of(m),
        }
    }

    /// Size of the file at open.
    pub(super) fn len(&self) -> u64 {
        self.stamp.len
    }

    /// `Err(ShardChanged)` if the file's size or times differ from those at open.
    pub(super) fn check_unchanged(&self) -> Result<()> {
        let m = self.file.metadata().map_err(|source| Error::Io {
            path: self.path.display().to_string(),
            source,
        })?;
        let now = Stamp::of(&m);
        if now == self.stamp {
            return Ok(());
        }
        let detail = if now.len != self.stamp.len {
            format!("size {} -> {} bytes", self.stamp.len, now.len)
        } else {
            format!(
                "same size ({} bytes), modified {:.3} s after it was opened",
                now.len,
                (now.mtime_ns.max(now.ctime_ns) - self.stamp.mtime_ns.max(self.stamp.ctime_ns))
                    as f64
                    / 1e9
            )
        };
        Err(Error::ShardChanged {
            path: self.path.display().to_string(),
            detail,
        })
    }

    /// Read `buf.len()` bytes at `offset`, then check that the file did not change.
    pub(super) fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if let Err(e) = self.file.read_exact_at(buf, offset) {
            self.check_unchanged()?; // a short read of a truncated file says so
            return Err(Error::Io {
                path: self.path.display().to_string(),
                source: std::io::Error::new(
                    e.kind(),
                    format!("reading {} bytes at byte {offset}: {e}", buf.len()),
                ),
            });
        }
        self.check_unchanged()
    }

    /// `len` bytes at `offset` in a fresh buffer.
    pub(super) fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read_into(&mut v, offset)?;
        Ok(v)
    }

    /// Ask the kernel to start reading `len` bytes at `offset` into the page cache.
    pub(super) fn prefetch(&self, offset: u64, len: usize) {
        // SAFETY: a plain syscall on a file descriptor we own; it only gives advice.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }
}
