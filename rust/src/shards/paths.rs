//! Path-only audio: which columns a dataset is read with, and where a stored audio path points on
//! this machine (reading the file: `audio_file.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{audio_file, AudioBytes, Dataset, Reader};
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
    /// Path-only audio files larger than this many bytes are skipped (0: no bound).
    pub max_audio_bytes: u64,
}

impl ReadOptions {
    /// Audio and label columns only (and the default `max_audio_mb`).
    pub fn columns(audio_column: &str, label_column: Option<&str>) -> Self {
        ReadOptions {
            audio_column: audio_column.to_string(),
            label_column: label_column.map(str::to_string),
            max_audio_bytes: super::max_audio_bytes(LoaderConfig::default().max_audio_mb),
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
            max_audio_bytes: super::max_audio_bytes(cfg.max_audio_mb),
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
    /// Files that exist but cannot be read as audio: not regular files (a FIFO, a device, a
    /// directory) or above `max_audio_mb`.
    pub unusable: usize,
    /// (row, why) of the first unusable file; `why` names the file.
    pub unusable_example: Option<(u64, String)>,
}

impl Dataset {
    /// Check that the audio files of `n` rows spread evenly over the dataset exist and are
    /// regular files within `max_audio_mb` (rows with embedded bytes are not counted). Reads only
    /// those rows' record batches and stats the files (never opens one: a FIFO cannot block).
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
                match audio_file::probe(&path, self.opts.max_audio_bytes) {
                    Ok(()) => {}
                    Err(e @ Error::AudioFile { .. }) => {
                        out.unusable += 1;
                        out.unusable_example.get_or_insert((index, e.to_string()));
                    }
                    Err(_) => {
                        out.missing += 1;
                        let p = path.display().to_string();
                        out.example.get_or_insert((index, stored, p));
                    }
                }
            }
        }
        Ok(out)
    }
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
}
