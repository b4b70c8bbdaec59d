//! Settings layering shared by the binaries: flag > `WHARF_*` environment variable (both
//! merged by clap) > the `--config` TOML file > the default. The option groups shared by
//! the binaries are declared once in [`flags`]; each binary declares only its own flags
//! and file keys beside them. This module reads the file and picks the winning layer.

pub mod flags;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why the `--config` file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML for these settings (an unknown key is an error when
    /// the settings type denies unknown fields: a typo must not be silently ignored).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
}

/// Why a binary's settings could not be assembled: one error type for every binary, so
/// that each says the same thing the same way.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The `--config` file could not be used.
    #[error(transparent)]
    File(#[from] FileError),
    /// A required setting is set nowhere.
    #[error(
        "missing setting {flag}: pass {flag} ..., set {env}, or put {key} = ... in the --config file"
    )]
    Missing {
        /// Flag, `--data-dir`.
        flag: &'static str,
        /// Environment variable, `WHARF_DATA_DIR`.
        env: &'static str,
        /// File key, `data_dir`.
        key: &'static str,
    },
    /// A setting is set to an unusable value.
    #[error("invalid setting {field}: {reason}")]
    Invalid {
        /// The setting (its flag or file key).
        field: &'static str,
        /// Why, and what to write instead.
        reason: String,
    },
}

/// Parses the winning layer of a setting written as text (`--log-format json`); `None`
/// when no layer set it.
///
/// # Errors
/// [`SettingsError::Invalid`] naming `field`, with the parser's reason.
pub fn parsed<T>(field: &'static str, value: Option<String>) -> Result<Option<T>, SettingsError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    value
        .map(|v| {
            v.parse().map_err(|e: T::Err| SettingsError::Invalid {
                field,
                reason: e.to_string(),
            })
        })
        .transpose()
}

/// Parses the winning layer of an optional listener address: `IP:PORT`, or `off` (or
/// nothing) for none.
///
/// # Errors
/// [`SettingsError::Invalid`] naming `field`.
pub fn optional_addr(
    field: &'static str,
    value: Option<String>,
) -> Result<Option<std::net::SocketAddr>, SettingsError> {
    optional_addr_or(field, value, None)
}

/// As [`optional_addr`] with `default` when no layer set it (`off` still turns it off).
///
/// # Errors
/// [`SettingsError::Invalid`] naming `field`.
pub fn optional_addr_or(
    field: &'static str,
    value: Option<String>,
    default: Option<std::net::SocketAddr>,
) -> Result<Option<std::net::SocketAddr>, SettingsError> {
    match value.as_deref() {
        None => Ok(default),
        Some("off") => Ok(None),
        Some(addr) => addr.parse().map(Some).map_err(|e| SettingsError::Invalid {
            field,
            reason: format!("{addr:?} is not IP:PORT or off: {e}"),
        }),
    }
}

/// Reads the TOML file at `path`; no path gives `T::default()` (every key unset).
///
/// # Errors
/// [`FileError::Read`], [`FileError::Parse`].
pub fn read_file<T: DeserializeOwned + Default>(path: Option<&Path>) -> Result<T, FileError> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| FileError::Parse {
        path: path.to_owned(),
        message: name_the_key::<T>(&text).unwrap_or_else(|| e.to_string()),
    })
}

/// The first top-level key of `text` that alone does not deserialize into `T`, named with
/// its line and the reason: `key lease_ms (line 2): invalid type: string "abc", expected
/// u32`. Why: the binaries' file settings gather shared groups with `#[serde(flatten)]`,
/// through which toml loses its key paths and spans, and a wrong value was reported at
/// line 1 without its key. `None` when no single key fails (a syntax error, whose own
/// message names its line).
fn name_the_key<T: DeserializeOwned>(text: &str) -> Option<String> {
    let table: toml::Table = text.parse().ok()?;
    table.iter().find_map(|(key, value)| {
        let alone = toml::Table::from_iter([(key.clone(), value.clone())]);
        let e = toml::Value::Table(alone).try_into::<T>().err()?;
        let line = text
            .lines()
            .position(|l| {
                l.trim_start()
                    .strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
            .map(|i| format!(" (line {})", i + 1))
            .unwrap_or_default();
        Some(format!("key {key}{line}: {}", e.message()))
    })
}

/// The winning layer of one setting: the flag or environment value (`cli`, already merged
/// by clap), else the file's, else `default`.
pub fn layer<T>(cli: Option<T>, file: Option<T>, default: impl FnOnce() -> T) -> T {
    cli.or(file).unwrap_or_else(default)
}

/// As [`layer`] for a setting without a default.
///
/// # Errors
/// [`SettingsError::Missing`] naming the flag `flag`, the variable `env` and the key `key`.
pub fn required<T>(
    cli: Option<T>,
    file: Option<T>,
    (flag, env, key): (&'static str, &'static str, &'static str),
) -> Result<T, SettingsError> {
    cli.or(file)
        .ok_or(SettingsError::Missing { flag, env, key })
}

/// The long flags of `command` whose values are unsigned or signed integers, with their
/// leading `--`: the flags a binary's tests give a negative number, which must be refused
/// naming the flag (`allow_negative_numbers` on each), not taken as an unknown argument.
pub fn numeric_flags(command: &clap::Command) -> Vec<String> {
    use std::any::TypeId;
    let numeric = [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
    ];
    command
        .get_arguments()
        .filter(|a| numeric.iter().any(|t| a.get_value_parser().type_id() == *t))
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect()
}

/// Asserts that `--FLAG -5` is refused naming `--FLAG` for every flag of
/// [`numeric_flags`], and that each of `expected` is one of them (so that a flag the
/// test names cannot silently stop being checked). For the binaries' tests.
///
/// # Panics
/// When a flag accepts `-5`, its error does not name it, or an `expected` flag is not
/// numeric.
pub fn assert_negative_numbers_name_their_flag<P: clap::Parser>(bin: &str, expected: &[&str]) {
    let flags = numeric_flags(&P::command());
    for flag in &flags {
        let err = P::try_parse_from([bin, flag.as_str(), "-5"])
            .err()
            .unwrap_or_else(|| panic!("{flag} -5 was accepted"));
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ValueValidation,
            "{flag}: {err}"
        );
        assert!(err.to_string().contains(flag.as_str()), "{flag}: {err}");
    }
    for flag in expected {
        assert!(
            flags.iter().any(|f| f == flag),
            "{flag} not among {flags:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Keys {
        a: Option<u32>,
    }

    #[test]
    fn the_flag_wins_then_the_file_then_the_default() {
        assert_eq!(layer(Some(1), Some(2), || 3), 1);
        assert_eq!(layer(None, Some(2), || 3), 2);
        assert_eq!(layer(None, None, || 3), 3);
    }

    #[test]
    fn a_missing_required_setting_names_flag_env_and_key() {
        let err = required::<u32>(None, None, ("--data-dir", "WHARF_DATA_DIR", "data_dir"))
            .expect_err("missing");
        let text = err.to_string();
        for part in ["--data-dir", "WHARF_DATA_DIR", "data_dir ="] {
            assert!(text.contains(part), "{text}");
        }
        assert_eq!(required(None, Some(2), ("--a", "A", "a")).expect("file"), 2);
    }

    /// Shaped like the binaries' file settings: a group gathered with `flatten`.
    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Flattened {
        a: Option<u32>,
        #[serde(flatten)]
        group: Group,
    }

    #[derive(Debug, Default, serde::Deserialize)]
    struct Group {
        lease_ms: Option<u32>,
    }

    #[test]
    fn a_wrong_value_behind_flatten_names_its_key_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("x.toml");
        for (text, key, line) in [
            ("a = 1\nlease_ms = \"abc\"\n", "lease_ms", 2),
            ("lease_ms = 5\n\n  a = -5\n", "a", 3),
            ("a = 1\nzz = 2\n", "zz", 2),
        ] {
            std::fs::write(&file, text).expect("write");
            let err = read_file::<Flattened>(Some(&file)).expect_err(text);
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("key {key} (line {line}):")),
                "{text:?}: {msg}"
            );
        }
        std::fs::write(&file, "a = 1\nlease_ms = 7\n").expect("write");
        let ok = read_file::<Flattened>(Some(&file)).expect("valid");
        assert_eq!((ok.a, ok.group.lease_ms), (Some(1), Some(7)));
    }

    #[test]
    fn no_file_is_every_key_unset() {
        let k: Keys = read_file(None).expect("default");
        assert_eq!(k.a, None);
    }

    #[test]
    fn an_unknown_key_is_named_and_a_missing_file_is_a_read_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("x.toml");
        std::fs::write(&file, "b = 1\n").expect("write");
        let err = read_file::<Keys>(Some(&file)).expect_err("unknown key");
        assert!(
            matches!(&err, FileError::Parse { .. }) && err.to_string().contains('b'),
            "{err}"
        );
        let err = read_file::<Keys>(Some(&dir.path().join("none.toml"))).expect_err("missing");
        assert!(matches!(err, FileError::Read { .. }), "{err}");
    }
}
