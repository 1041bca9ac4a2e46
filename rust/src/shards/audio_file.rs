//! Reading the audio file a path-only row names: regular files only, at most `max_audio_mb`,
//! and watched for content changes over the run.
//!
//! * Only a regular file is read. The file is opened with `O_NONBLOCK` (opening a FIFO for
//!   reading otherwise blocks until a writer appears) and checked with `fstat` before a byte is
//!   read: a FIFO, a character or block device (`/dev/zero`, `/dev/urandom`) or a directory is
//!   [`Error::AudioFile`], a skipped sample, at once.
//! * A file above the size bound is skipped the same way, and a read never takes more than the
//!   size `fstat` gave plus one byte (a file that grows while it is read is noticed, not
//!   followed).
//! * Content, not metadata: the first read of a row records its file's metadata (size, mtime,
//!   ctime, inode, device) and a 64-bit hash of its bytes. A later read whose metadata are the
//!   same is trusted without hashing; one whose metadata differ (chmod, touch, a hard link, an
//!   identical re-copy, or a real change) hashes the bytes it read: the same hash is a metadata
//!   change only (recorded, so the next read is trusted again), a different one is
//!   [`Error::AudioFile`] "audio file changed", a skipped sample (every later read of the row too,
//!   until its content is the first one again). Cost: one hash of each file on its first read
//!   and after each metadata change, never on the reads in between.

use std::fs::{File, Metadata, OpenOptions};
use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_buffer::Buffer;

use super::Dataset;
use crate::error::{Error, Result};

/// Kinds of [`Error::AudioFile`] (how the loader counts them).
pub const NOT_REGULAR: &str = "not a regular audio file";
pub const TOO_LARGE: &str = "audio file too large";
pub const CHANGED: &str = "audio file changed";

/// Attempts at a read during which the file's size and mtime stay put.
const READ_ATTEMPTS: usize = 3;

/// What the run first read of one row's file: its metadata and content hash (0: not read yet).
#[derive(Default)]
pub(super) struct Seen {
    meta: AtomicU64,
    hash: AtomicU64,
}

impl Dataset {
    /// Row `index`'s [`Seen`] (allocated for every row on the first path-only read).
    pub(super) fn seen(&self, index: u64) -> &Seen {
        let v = self
            .seen
            .get_or_init(|| (0..self.n_rows()).map(|_| Seen::default()).collect());
        &v[index as usize]
    }
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn bad(path: &Path, kind: &'static str, detail: String) -> Error {
    Error::AudioFile {
        path: path.display().to_string(),
        kind,
        detail,
    }
}

/// File types of `st_mode` (POSIX's values).
const S_IFMT: u32 = 0o170_000;
const S_IFKINDS: [(u32, &str); 5] = [
    (0o040_000, "a directory"),
    (0o010_000, "a FIFO (named pipe)"),
    (0o020_000, "a character device"),
    (0o060_000, "a block device"),
    (0o140_000, "a socket"),
];
const S_IFREG: u32 = 0o100_000;

/// The rule "only a regular file is read" and its words: None for a regular file, else what the
/// file of `mode` (st_mode) is ("a FIFO (named pipe)", "a character device", ...). Audio files
/// ([`check_audio_file`]), shards (`Shard::open`) and Python's readers (`_rs.file_kind`) ask it.
pub fn file_kind(mode: u32) -> Option<&'static str> {
    let t = mode & S_IFMT;
    if t == S_IFREG {
        return None;
    }
    let named = S_IFKINDS.iter().find(|(k, _)| *k == t);
    Some(named.map_or("not a regular file", |(_, name)| name))
}

/// `Ok` if a file of `mode` (st_mode) and `len` bytes is a regular file of at most `max_bytes`
/// (0: no bound), else why not, naming `path`: the one statement of which audio files are read
/// (the loader's, and Python's readers' through `_rs.check_audio_file`).
pub fn check_audio_file(path: &Path, mode: u32, len: u64, max_bytes: u64) -> Result<()> {
    if let Some(kind) = file_kind(mode) {
        return Err(bad(
            path,
            NOT_REGULAR,
            format!("expected a regular audio file, got {kind}"),
        ));
    }
    if max_bytes > 0 && len > max_bytes {
        return Err(bad(
            path,
            TOO_LARGE,
            format!(
                "expected at most max_audio_mb={} MB, got {:.1} MB (raise max_audio_mb to read \
                 it)",
                max_bytes as f64 / 1e6,
                len as f64 / 1e6
            ),
        ));
    }
    Ok(())
}

/// [`check_audio_file`] of `m`.
fn usable(path: &Path, m: &Metadata, max_bytes: u64) -> Result<()> {
    check_audio_file(path, m.mode(), m.len(), max_bytes)
}

/// Bytes of `mb` MB (10^6 bytes); 0 (no bound) for a bound <= 0.
pub fn max_audio_bytes(mb: f64) -> u64 {
    (mb * 1e6) as u64
}

/// Whether the file at `path` can be read as audio: `Err(Io)` if it is missing or cannot be
/// stat'ed, `Err(AudioFile)` if it is not a regular file or too large. Never opens it.
pub(super) fn probe(path: &Path, max_bytes: u64) -> Result<()> {
    let m = std::fs::metadata(path).map_err(|e| io(path, e))?;
    usable(path, &m, max_bytes)
}

/// Size, times, inode and device folded into one nonzero word.
fn fold(m: &Metadata) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in [
        m.len(),
        m.mtime() as u64,
        m.mtime_nsec() as u64,
        m.ctime() as u64,
        m.ctime_nsec() as u64,
        m.ino(),
        m.dev(),
    ] {
        h = (h ^ v).wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

/// A 64-bit hash of `bytes` (SipHash; nonzero). Compared within one run only.
fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(bytes);
    h.finish() | 1
}

impl Seen {
    /// Check a read's metadata `m` and `bytes` against the row's first read (recording them if
    /// this is the first).
    fn check(&self, path: &Path, m: &Metadata, bytes: &[u8]) -> Result<()> {
        let meta = fold(m);
        let first = self.hash.load(Ordering::Acquire);
        if first != 0 && self.meta.load(Ordering::Acquire) == meta {
            return Ok(()); // nothing changed: trusted without hashing
        }
        let h = content_hash(bytes);
        let want = if first != 0 {
            first
        } else {
            match self
                .hash
                .compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => h,
                Err(other) => other, // another thread read it first
            }
        };
        if h != want {
            return Err(bad(
                path,
                CHANGED,
                format!(
                    "its content changed since this run first read it (now {} bytes); the row is \
                     skipped until its first content is back: the stream was defined over it",
                    m.len()
                ),
            ));
        }
        self.meta.store(meta, Ordering::Release);
        Ok(())
    }
}

/// One read of `f` whose size and mtime did not change during it: Some(bytes, metadata after).
/// Only called on a file [`usable`] accepted (a FIFO cannot seek).
fn read_once(path: &Path, f: &mut File, max_bytes: u64) -> Result<Option<(Vec<u8>, Metadata)>> {
    use std::io::{Seek, SeekFrom};
    let before = f.metadata().map_err(|e| io(path, e))?;
    usable(path, &before, max_bytes)?;
    f.seek(SeekFrom::Start(0)).map_err(|e| io(path, e))?;
    let mut v = Vec::with_capacity(before.len() as usize);
    Read::by_ref(f)
        .take(before.len() + 1)
        .read_to_end(&mut v)
        .map_err(|e| io(path, e))?;
    let after = f.metadata().map_err(|e| io(path, e))?;
    let same = v.len() as u64 == before.len()
        && after.len() == before.len()
        && (after.mtime(), after.mtime_nsec()) == (before.mtime(), before.mtime_nsec());
    Ok(same.then_some((v, after)))
}

/// Read the audio file at `path` whole (see the module docs). A missing or unreadable file is
/// `Error::Io` naming it; one that is not a regular file, above `max_bytes` (0: no bound), being
/// written during every attempt, or whose content changed since `seen` recorded it is
/// `Error::AudioFile`. Every error skips the sample; none blocks.
pub(super) fn read_file(path: &Path, max_bytes: u64, seen: &Seen) -> Result<Buffer> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| io(path, e))?;
    usable(path, &f.metadata().map_err(|e| io(path, e))?, max_bytes)?;
    for _ in 0..READ_ATTEMPTS {
        if let Some((v, m)) = read_once(path, &mut f, max_bytes)? {
            seen.check(path, &m, &v)?;
            return Ok(Buffer::from_vec(v));
        }
    }
    Err(bad(
        path,
        CHANGED,
        format!("it changed during each of {READ_ATTEMPTS} reads of it (being written?)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bj-audio-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn kind(e: &Error) -> &'static str {
        e.kind()
    }

    /// Set a file's mtime `s` seconds into the future (a `touch` that certainly changes it).
    fn touch(p: &Path, s: i64) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let t = libc::timespec {
            tv_sec: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64
                + s,
            tv_nsec: 0,
        };
        // SAFETY: a valid C string and two valid timespecs.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) },
            0
        );
    }

    #[test]
    fn fifos_devices_and_directories_are_skipped_at_once() {
        let d = dir("special");
        let fifo = d.join("a.wav");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let sub = d.join("b.wav");
        std::fs::create_dir(&sub).unwrap();
        let t0 = Instant::now();
        for (p, words) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (Path::new("/dev/urandom"), "a character device"),
            (sub.as_path(), "a directory"),
        ] {
            for e in [
                read_file(p, 0, &Seen::default()).unwrap_err(),
                probe(p, 0).unwrap_err(),
            ] {
                assert_eq!(kind(&e), NOT_REGULAR, "{e}");
                let m = e.to_string();
                assert!(
                    m.contains(&p.display().to_string()) && m.contains(words),
                    "{m}"
                );
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let e = probe(&d.join("gone.wav"), 0).unwrap_err();
        assert_eq!(kind(&e), "missing audio file");
    }

    #[test]
    fn a_file_above_the_bound_is_skipped_and_named() {
        let d = dir("big");
        let p = d.join("big.wav");
        std::fs::write(&p, vec![7u8; 3_000_001]).unwrap();
        let e = read_file(&p, 3_000_000, &Seen::default()).unwrap_err();
        assert_eq!(kind(&e), TOO_LARGE);
        let m = e.to_string();
        assert!(
            m.contains("big.wav") && m.contains("max_audio_mb=3 MB") && m.contains("got 3.0 MB"),
            "{m}"
        );
        assert_eq!(kind(&probe(&p, 3_000_000).unwrap_err()), TOO_LARGE);
        assert_eq!(
            read_file(&p, 3_000_001, &Seen::default()).unwrap().len(),
            3_000_001
        );
    }

    #[test]
    fn metadata_changes_pass_and_content_changes_are_skipped() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("changes");
        let p = d.join("a.wav");
        std::fs::write(&p, b"abcdef").unwrap();
        let seen = Seen::default();
        assert_eq!(read_file(&p, 0, &seen).unwrap().as_slice(), b"abcdef");
        // chmod, touch, a hard link, an identical re-copy (a new inode): not errors.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_file(&p, 0, &seen).unwrap().as_slice(), b"abcdef");
        touch(&p, 5);
        assert_eq!(read_file(&p, 0, &seen).unwrap().as_slice(), b"abcdef");
        std::fs::hard_link(&p, d.join("link.wav")).unwrap();
        assert_eq!(read_file(&p, 0, &seen).unwrap().as_slice(), b"abcdef");
        let copy = d.join("copy.wav");
        std::fs::write(&copy, b"abcdef").unwrap();
        std::fs::rename(&copy, &p).unwrap();
        assert_eq!(read_file(&p, 0, &seen).unwrap().as_slice(), b"abcdef");
        // Same size, other bytes (mtime restored, as rsync -t would): skipped, every time.
        let before = std::fs::metadata(&p).unwrap();
        std::fs::write(&p, b"abcdeX").unwrap();
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let t = libc::timespec {
            tv_sec: before.mtime(),
            tv_nsec: before.mtime_nsec(),
        };
        // SAFETY: a valid C string and two valid timespecs.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) },
            0
        );
        for _ in 0..2 {
            let e = read_file(&p, 0, &seen).unwrap_err();
            assert_eq!(kind(&e), CHANGED, "{e}");
            assert!(e.to_string().contains("a.wav: its content changed"), "{e}");
        }
        // Its first content back: read again.
        std::fs::write(&p, b"abcdef").unwrap();
        assert_eq!(read_file(&p, 0, &seen).unwrap().as_slice(), b"abcdef");
        // Another size: skipped.
        std::fs::write(&p, b"abcdefgh").unwrap();
        assert_eq!(kind(&read_file(&p, 0, &seen).unwrap_err()), CHANGED);
        // A missing file is an I/O error naming it (skipped, counted as missing).
        std::fs::remove_file(&p).unwrap();
        let e = read_file(&p, 0, &Seen::default()).unwrap_err();
        assert!(matches!(e, Error::Io { .. }) && e.kind() == "missing audio file");
    }
}
