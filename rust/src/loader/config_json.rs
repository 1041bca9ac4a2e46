//! [`LoaderConfig`] as JSON: what `birdjepa.data.LoaderConfig` sends. A value of the wrong type
//! (a string for an int, a negative or fractional count, a path_map value that is not a string)
//! or an unknown name is a [`Error::BadArgument`] naming the setting and the value it got, in the
//! words of every other check: `bad argument NAME: expected ..., got VALUE`.

use serde_path_to_error::Segment;

use super::LoaderConfig;
use crate::error::{Error, Result};

impl LoaderConfig {
    /// Parse the JSON of `birdjepa.data.LoaderConfig` plus the run arguments (missing fields take
    /// their defaults). Types are checked here; the rules, by [`LoaderConfig::check_settings`].
    pub fn from_json(json: &str) -> Result<Self> {
        let mut de = serde_json::Deserializer::from_str(json);
        let cfg: LoaderConfig =
            serde_path_to_error::deserialize(&mut de).map_err(|e| field_error(json, e))?;
        de.end().map_err(not_json)?;
        Ok(cfg)
    }

    /// Every setting as JSON (`start_step` and `in_flight` are not settings).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a LoaderConfig always serialises")
    }
}

fn not_json(e: serde_json::Error) -> Error {
    Error::bad_argument(
        "config",
        "the JSON of birdjepa.data.LoaderConfig and the Loader's run arguments",
        e,
    )
}

/// `e` as `bad argument NAME: expected ..., got VALUE`, NAME being the setting (a value inside
/// one: `path_map["/a"]`) and VALUE the JSON it holds in `json`.
fn field_error(json: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let (mut name, mut pointer) = (String::new(), String::new());
    for s in e.path().iter() {
        let key = match s {
            Segment::Map { key } => key.clone(),
            Segment::Seq { index } => index.to_string(),
            Segment::Enum { .. } | Segment::Unknown => continue,
        };
        pointer += &format!("/{}", key.replace('~', "~0").replace('/', "~1"));
        name = if name.is_empty() {
            key
        } else {
            format!("{name}[{key:?}]")
        };
    }
    let inner = e.into_inner();
    if name.is_empty() || inner.is_syntax() || inner.is_eof() {
        return not_json(inner);
    }
    let msg = inner.to_string();
    let msg = msg
        .rsplit_once(" at line ")
        .map_or(msg.as_str(), |(m, _)| m);
    let Some((problem, expected)) = msg.rsplit_once(", expected ") else {
        return Error::bad_argument(name, "a valid value", msg);
    };
    if problem.starts_with("unknown field") {
        return Error::bad_argument(
            name,
            format!(
                "a setting of birdjepa.data.LoaderConfig or a Loader run argument ({})",
                expected.replace('`', "")
            ),
            "an unknown name",
        );
    }
    let got = serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.pointer(&pointer).map(|v| v.to_string()))
        .unwrap_or_else(|| problem.to_string());
    Error::bad_argument(name, in_words(expected), got)
}

/// serde's name of an expected type in the words of the other checks.
fn in_words(expected: &str) -> String {
    match expected {
        "usize" | "u64" => "an int >= 0".into(),
        "u32" => format!("an int in [0, {}]", u32::MAX),
        "f64" | "f32" => "a number".into(),
        "a map" => "a table of strings".into(),
        other => other.replace('`', "\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(json: &str) -> String {
        LoaderConfig::from_json(json).unwrap_err().to_string()
    }

    #[test]
    fn config_json_round_trips() {
        let c = LoaderConfig {
            batch_size: 8,
            label_column: None,
            ..Default::default()
        };
        let back = LoaderConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(back.to_json(), c.to_json());
        let d = LoaderConfig::from_json("{}").unwrap();
        assert_eq!(d.to_json(), LoaderConfig::default().to_json());
    }

    #[test]
    fn type_errors_name_the_setting_and_the_value() {
        let cases = [
            (
                r#"{"n_views": "3"}"#,
                r#"n_views: expected an int >= 0, got "3""#,
            ),
            (
                r#"{"n_views": -1}"#,
                "n_views: expected an int >= 0, got -1",
            ),
            (
                r#"{"n_views": 2.5}"#,
                "n_views: expected an int >= 0, got 2.5",
            ),
            (
                r#"{"clip_s": "5"}"#,
                r#"clip_s: expected a number, got "5""#,
            ),
            (
                r#"{"mode": "test"}"#,
                r#"mode: expected "train" or "eval", got "test""#,
            ),
            (
                r#"{"path_map": [1]}"#,
                "path_map: expected a table of strings, got [1]",
            ),
            (
                r#"{"path_map": {"/a": 1}}"#,
                r#"path_map["/a"]: expected a string, got 1"#,
            ),
            (
                r#"{"sample_rate": 5000000000}"#,
                "sample_rate: expected an int in [0, 4294967295], got 5000000000",
            ),
        ];
        for (json, want) in cases {
            assert_eq!(error(json), format!("bad argument {want}"), "{json}");
        }
        let e = error(r#"{"batch_sise": 8}"#);
        assert!(
            e.starts_with(
                "bad argument batch_sise: expected a setting of birdjepa.data.LoaderConfig or \
                 a Loader run argument (one of mode, batch_size, "
            ) && e.ends_with("), got an unknown name"),
            "{e}"
        );
        assert!(error("{").starts_with("bad argument config: expected the JSON of"));
        assert!(error("{} x").starts_with("bad argument config: expected the JSON of"));
    }
}
