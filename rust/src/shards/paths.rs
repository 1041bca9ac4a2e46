//! Path-only audio: which columns a dataset is read with, where a stored audio path points on
//! this machine, and reading that file (watched for changes like a shard).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_buffer::Buffer;

use super::{AudioBytes, Dataset, Reader};
use crate::error::{Error, Result};
use crate::loader::{LoaderConfig, Mode};
use std::sync::Arc;

/// The columns a dataset is read with and how its stored audio paths resolve.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub audio_column: String,
    pub label_column: Option<String>,
    /// A list<[start, end]> column of event times in seconds (train crops around events).
    pub events_column: Option<String>,
    /// Two number columns holding each row's segment [start, end] in seconds (eval crops).
    pub segment_columns: Option<(String, String)>,
    /// Relative paths resolve against this directory (default: the shard's directory).
    pub audio_root: Option<PathBuf>,
    /// Stored leading path components -> local ones (the longest matching key wins).
    pub path_map: BTreeMap<String, String>,
}

impl ReadOptions {
    /// Audio and label columns only.
    pub fn columns(audio_column: &str, label_column: Option<&str>) -> Self {
        ReadOptions {
            audio_column: audio_column.to_string(),
            label_column: label_column.map(str::to_string),
            ..Default::default()
        }
    }

    /// What a loader with `cfg` reads: the events column only for train crops around events,
    /// the segment columns only for eval segments taken from columns.
    pub fn of(cfg: &LoaderConfig) -> Self {
        let train = cfg.mode == Mode::Train;
        ReadOptions {
            audio_column: cfg.audio_column.clone(),
            label_column: cfg.label_column.clone(),
            events_column: (train && cfg.crop == "events").then(|| cfg.events_column.clone()),
            segment_columns: (!train && cfg.segment == "columns").then(|| {
                (
                    cfg.segment_start_column.clone(),
                    cfg.segment_end_column.clone(),
                )
            }),
            audio_root: (!cfg.audio_root.is_empty()).then(|| PathBuf::from(&cfg.audio_root)),
            path_map: cfg.path_map.clone().unwrap_or_default(),
        }
    }

    /// The file a stored path names: `path_map` applied to its leading path components (the
    /// longest matching key wins; `/old/run1` maps `/old/run1/x.wav`, never `/old/run10/x.wav`),
    /// then a relative path joined to `audio_root` (or to `shard_dir`, the directory of the
    /// shard that stores it). birdjepa.data.paths.resolve is the same rule in Python.
    pub fn resolve(&self, stored: &str, shard_dir: &Path) -> PathBuf {
        let mapped = self
            .path_map
            .iter()
            .filter_map(|(from, to)| Some((from, to, strip_components(stored, from)?)))
            .max_by_key(|(from, _, _)| from.trim_end_matches('/').len())
            .map(|(_, to, rest)| format!("{}{rest}", to.trim_end_matches('/')));
        let p = PathBuf::from(mapped.as_deref().unwrap_or(stored));
        if p.is_absolute() {
            p
        } else {
            self.audio_root.as_deref().unwrap_or(shard_dir).join(p)
        }
    }
}

/// The rest of `stored` after the leading components `prefix` ("" or starting with '/'), or
/// None when `prefix` is not a whole-component prefix of `stored` (trailing '/'s ignored).
fn strip_components<'a>(stored: &'a str, prefix: &str) -> Option<&'a str> {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() && !stored.starts_with('/') {
        return None; // "/" maps absolute paths only
    }
    let rest = stored.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// What [`Dataset::check_paths`] found.
#[derive(Clone, Debug, Default)]
pub struct PathCheck {
    /// Rows sampled whose audio is a path (not embedded bytes).
    pub checked: usize,
    pub missing: usize,
    /// (row, stored path, resolved path) of the first missing file.
    pub example: Option<(u64, String, String)>,
}

impl Dataset {
    /// Check that the audio files of `n` rows spread evenly over the dataset exist (rows with
    /// embedded bytes are not counted). Reads only those rows' record batches.
    pub fn check_paths(self: &Arc<Self>, n: u64) -> Result<PathCheck> {
        let total = self.n_rows();
        let n = n.min(total);
        let mut reader = Reader::new(self.clone(), 2);
        let mut out = PathCheck::default();
        for i in 0..n {
            let index = (i as u128 * total as u128 / n as u128) as u64;
            let Ok(s) = reader.sample(index) else {
                continue; // a null or unreadable row: the loader reports it when it reaches it
            };
            if let AudioBytes::Path { stored, path } = s.bytes {
                out.checked += 1;
                if !path.is_file() {
                    out.missing += 1;
                    let p = path.display().to_string();
                    out.example.get_or_insert((index, stored, p));
                }
            }
        }
        Ok(out)
    }

    pub(super) fn stamp(&self, index: u64) -> &AtomicU64 {
        let v = self
            .stamps
            .get_or_init(|| (0..self.n_rows()).map(|_| AtomicU64::new(0)).collect());
        &v[index as usize]
    }
}

/// A file's size and modification/change times folded into one nonzero word.
fn stamp(m: &std::fs::Metadata) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in [
        m.len(),
        m.mtime() as u64,
        m.mtime_nsec() as u64,
        m.ctime() as u64,
        m.ctime_nsec() as u64,
        m.ino(),
    ] {
        h = (h ^ v).wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn changed(path: &Path, detail: String) -> Error {
    Error::ShardChanged {
        path: path.display().to_string(),
        detail,
    }
}

/// Read the audio file at `path` whole. `seen` holds the file's stamp from its first read in
/// this run (0: not read yet): a file whose size or times changed during the read, or since the
/// first read, is `Error::ShardChanged` (the loader stops, as for a shard); a missing or
/// unreadable file is `Error::Io` naming it (the sample is skipped).
pub(super) fn read_file(path: &Path, seen: &AtomicU64) -> Result<Buffer> {
    let mut f = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let before = f.metadata().map_err(|e| io(path, e))?;
    let mut v = Vec::with_capacity(before.len() as usize);
    f.read_to_end(&mut v).map_err(|e| io(path, e))?;
    let after = f.metadata().map_err(|e| io(path, e))?;
    let (s0, s1) = (stamp(&before), stamp(&after));
    if s0 != s1 || v.len() as u64 != before.len() {
        return Err(changed(
            path,
            format!(
                "the audio file changed while it was read ({} -> {} bytes)",
                before.len(),
                after.len()
            ),
        ));
    }
    match seen.compare_exchange(0, s1, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => {}
        Err(old) if old == s1 => {}
        Err(_) => {
            return Err(changed(
                path,
                format!(
                    "the audio file changed since this run first read it (now {} bytes)",
                    after.len()
                ),
            ))
        }
    }
    Ok(Buffer::from_vec(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_maps_the_longest_prefix_then_joins_relative_paths() {
        let mut o = ReadOptions::columns("audio", None);
        let dir = Path::new("/data/ds");
        assert_eq!(o.resolve("/abs/a.ogg", dir), PathBuf::from("/abs/a.ogg"));
        assert_eq!(o.resolve("x/a.ogg", dir), PathBuf::from("/data/ds/x/a.ogg"));
        o.audio_root = Some("/root".into());
        assert_eq!(o.resolve("x/a.ogg", dir), PathBuf::from("/root/x/a.ogg"));
        o.path_map
            .insert("/home/u/.cache".into(), "/scratch".into());
        o.path_map
            .insert("/home/u/.cache/hf/ex".into(), "rel".into());
        assert_eq!(
            o.resolve("/home/u/.cache/z.ogg", dir),
            PathBuf::from("/scratch/z.ogg")
        );
        assert_eq!(
            o.resolve("/home/u/.cache/hf/ex/z.ogg", dir),
            PathBuf::from("/root/rel/z.ogg")
        );
    }

    #[test]
    fn path_map_matches_whole_components_not_string_prefixes() {
        let mut o = ReadOptions::columns("audio", None);
        let dir = Path::new("/data/ds");
        o.path_map.insert("/old/run1".into(), "/new".into());
        assert_eq!(
            o.resolve("/old/run1/x.wav", dir),
            PathBuf::from("/new/x.wav")
        );
        assert_eq!(
            o.resolve("/old/run10/x.wav", dir),
            PathBuf::from("/old/run10/x.wav")
        );
        assert_eq!(o.resolve("/old/run1", dir), PathBuf::from("/new"));
        o.path_map.insert("/old/".into(), "/b/".into());
        assert_eq!(
            o.resolve("/old/run10/x.wav", dir),
            PathBuf::from("/b/run10/x.wav")
        );
        o.path_map.insert("/".into(), "/mnt".into());
        assert_eq!(o.resolve("/a.wav", dir), PathBuf::from("/mnt/a.wav"));
        assert_eq!(o.resolve("a.wav", dir), PathBuf::from("/data/ds/a.wav"));
    }

    #[test]
    fn a_file_that_changes_after_its_first_read_stops_the_run() {
        let d = std::env::temp_dir().join(format!("bj-paths-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("a.bin");
        std::fs::write(&p, b"abc").unwrap();
        let seen = AtomicU64::new(0);
        assert_eq!(read_file(&p, &seen).unwrap().as_slice(), b"abc");
        assert_eq!(read_file(&p, &seen).unwrap().as_slice(), b"abc");
        std::fs::write(&p, b"abcd").unwrap();
        let e = read_file(&p, &seen).unwrap_err();
        assert!(matches!(e, Error::ShardChanged { .. }), "{e}");
        assert!(e.to_string().contains("a.bin"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let e = read_file(&p, &AtomicU64::new(0)).unwrap_err();
        assert!(matches!(e, Error::Io { .. }) && e.kind() == "missing audio file");
    }
}
