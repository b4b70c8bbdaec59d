//! Config providers on the executor (`--config-providers`, `--config-provider-root`):
//! the references of a connector's config (`${file:PATH:KEY}`, `${directory:DIR:FILE}`,
//! `${env:VAR}`; KIP-297, KIP-632, KIP-887; parsed by [`wharf::config_provider`]) are
//! resolved here, on the executor that runs the instance, just before the plugin's
//! start. The resolved config goes to the plugin only: it is never reported, stored or
//! logged, and every error names the key and the reference, never a value.
//!
//! Paths follow the rules of the file plugins' `--file-root`: the `file` and `directory`
//! providers read only under `--config-provider-root` (a relative path is taken under
//! it, an absolute one must lie under it, `..` is refused, and a symbolic link leading
//! outside is refused). The `env` provider never gives a `WHARF_*` variable: those are
//! the executor's own settings (the NATS password among them).
//!
//! Task configs a connector computes from resolved values get their references back
//! before they leave the executor ([`reverse_task_config`], as Kafka Connect's
//! `AbstractHerder.reverseTransform` does), so that a resolved secret is never stored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use wharf::config_provider::{self, ProviderKind, Reference, check_reference, has_reference};
use wharf::sdk::ConfigMap;

pub use wharf::config_provider::RESERVED_ENV_PREFIX;

/// The config providers this executor offers, and where `file` and `directory` read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigProviders {
    enabled: BTreeSet<ProviderKind>,
    root: Option<ProviderRoot>,
}

/// The directory the `file` and `directory` providers read under, canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProviderRoot {
    /// Canonical: what every path read must lie under.
    canonical: PathBuf,
    /// As configured (made absolute): absolute paths may be written with it.
    given: PathBuf,
}

/// Why a reference could not be resolved: the reference and the reason, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference} cannot be resolved: {reason}")]
pub struct ResolveError {
    /// The reference as written.
    pub reference: String,
    /// Why.
    pub reason: String,
}

impl ConfigProviders {
    /// No provider: every reference is refused at start.
    pub fn none() -> Self {
        Self::default()
    }

    /// The providers named in `names` (comma-separated, `file`, `directory`, `env`;
    /// blank: none), reading under `root`.
    ///
    /// # Errors
    /// A message naming `--config-providers` (an unknown provider) or
    /// `--config-provider-root` (missing while `file` or `directory` is enabled, not an
    /// existing directory).
    pub fn parse(names: &str, root: Option<&Path>) -> Result<Self, (&'static str, String)> {
        let mut enabled = BTreeSet::new();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let kind = ProviderKind::from_name(name).ok_or_else(|| {
                (
                    "--config-providers",
                    format!(
                        "{name:?} is not a config provider Wharf implements ({})",
                        config_provider::implemented_names()
                    ),
                )
            })?;
            enabled.insert(kind);
        }
        let needs_root =
            enabled.contains(&ProviderKind::File) || enabled.contains(&ProviderKind::Directory);
        let root = match (root, needs_root) {
            (Some(dir), _) => Some(ProviderRoot::new(dir)?),
            (None, true) => {
                return Err((
                    "--config-provider-root",
                    "is required with the file or directory provider: the directory they read under".into(),
                ));
            }
            (None, false) => None,
        };
        Ok(Self { enabled, root })
    }

    /// The providers offered, by name, for the start log line (`none` when empty).
    pub fn describe(&self) -> String {
        if self.enabled.is_empty() {
            return "none".into();
        }
        let names: Vec<_> = self.enabled.iter().map(|k| k.name()).collect();
        match &self.root {
            Some(root) => format!("{} (root {})", names.join(","), root.canonical.display()),
            None => names.join(","),
        }
    }

    /// The provider of `r` when this executor offers it, with the path it reads for
    /// `file` and `directory` decided lexically (no file system access).
    fn admit(&self, r: &Reference<'_>) -> Result<(ProviderKind, Option<PathBuf>), String> {
        let kind = check_reference(r).map_err(|e| reason_of(&e))?;
        if !self.enabled.contains(&kind) {
            return Err(format!(
                "config provider {:?} is not configured on this executor (--config-providers)",
                kind.name()
            ));
        }
        let path = match kind {
            ProviderKind::Env => None,
            ProviderKind::File | ProviderKind::Directory => {
                let root = self
                    .root
                    .as_ref()
                    .ok_or_else(|| "no --config-provider-root".to_owned())?;
                let dir_or_file = root.place(r.path.unwrap_or_default())?;
                Some(match kind {
                    ProviderKind::Directory => dir_or_file.join(r.key),
                    ProviderKind::File | ProviderKind::Env => dir_or_file,
                })
            }
        };
        Ok((kind, path))
    }

    /// What is wrong with the references of `value`, without reading anything: a
    /// provider not configured here, a path outside the root. For ValidateConfig.
    pub fn check(&self, value: &str) -> Vec<String> {
        config_provider::references(value)
            .iter()
            .filter_map(|r| {
                self.admit(r)
                    .err()
                    .map(|reason| format!("{r} cannot be resolved: {reason}"))
            })
            .collect()
    }

    /// The value of one reference.
    ///
    /// # Errors
    /// [`ResolveError`] naming the reference.
    pub fn resolve(&self, r: &Reference<'_>) -> Result<String, ResolveError> {
        let err = |reason: String| ResolveError {
            reference: r.text.to_owned(),
            reason,
        };
        let (kind, path) = self.admit(r).map_err(err)?;
        match (kind, path) {
            // `admit` refused the executor's own variables (RESERVED_ENV_PREFIX).
            (ProviderKind::Env, _) => {
                std::env::var(r.key).map_err(|e| err(format!("variable {:?}: {e}", r.key)))
            }
            (ProviderKind::File | ProviderKind::Directory, None) => Err(err("no path".to_owned())),
            (ProviderKind::File, Some(path)) => {
                let path = self.confined(&path).map_err(err)?;
                let text = read(&path).map_err(err)?;
                parse_properties(&text)
                    .remove(r.key)
                    .ok_or_else(|| err(format!("{} has no key {:?}", path.display(), r.key)))
            }
            (ProviderKind::Directory, Some(path)) => {
                let path = self.confined(&path).map_err(err)?;
                if !path.is_file() {
                    return Err(err(format!("{} is not a regular file", path.display())));
                }
                read(&path).map_err(err)
            }
        }
    }

    /// `path` resolved through the file system, refused when it leads outside the root.
    fn confined(&self, path: &Path) -> Result<PathBuf, String> {
        let root = self
            .root
            .as_ref()
            .ok_or_else(|| "no --config-provider-root".to_owned())?;
        let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if real.starts_with(&root.canonical) {
            Ok(real)
        } else {
            Err(format!(
                "{} leads outside --config-provider-root {} through a symbolic link",
                path.display(),
                root.canonical.display()
            ))
        }
    }

    /// `config` with every reference resolved, and the keys whose values had one.
    ///
    /// # Errors
    /// The first reference (in key order) that cannot be resolved, as
    /// `config[KEY]: REFERENCE cannot be resolved: WHY`.
    pub fn resolve_config(
        &self,
        config: &ConfigMap,
    ) -> Result<(ConfigMap, BTreeSet<String>), String> {
        self.resolve_config_hiding(config, &mut Vec::new())
    }

    /// As [`ConfigProviders::resolve_config`], adding to `hidden` every value a
    /// reference stood for and every whole value that held one: what a plugin's error
    /// text must never carry out of the executor ([`redact_values`]).
    ///
    /// # Errors
    /// As [`ConfigProviders::resolve_config`].
    pub fn resolve_config_hiding(
        &self,
        config: &ConfigMap,
        hidden: &mut Vec<String>,
    ) -> Result<(ConfigMap, BTreeSet<String>), String> {
        let mut out = config.clone();
        let mut resolved = BTreeSet::new();
        let mut keys: Vec<&String> = config.keys().collect();
        keys.sort();
        for key in keys {
            let value = &config[key];
            if !has_reference(value) {
                continue;
            }
            let v = config_provider::substitute(value, |r| {
                let v = self.resolve(r)?;
                hidden.push(v.clone());
                Ok::<_, ResolveError>(v)
            })
            .map_err(|e| format!("config[{key}]: {e}"))?;
            hidden.push(v.clone());
            out.insert(key.clone(), v);
            resolved.insert(key.clone());
        }
        Ok((out, resolved))
    }
}

impl ProviderRoot {
    fn new(dir: &Path) -> Result<Self, (&'static str, String)> {
        let field = "--config-provider-root";
        let canonical =
            std::fs::canonicalize(dir).map_err(|e| (field, format!("{}: {e}", dir.display())))?;
        if !canonical.is_dir() {
            return Err((field, format!("{}: not a directory", dir.display())));
        }
        let given =
            std::path::absolute(dir).map_err(|e| (field, format!("{}: {e}", dir.display())))?;
        Ok(Self { canonical, given })
    }

    /// Where `requested` lies under the root, decided lexically.
    fn place(&self, requested: &str) -> Result<PathBuf, String> {
        place_under(&self.canonical, requested)
            .or_else(|e| {
                if self.given == self.canonical {
                    Err(e)
                } else {
                    place_under(&self.given, requested)
                }
            })
            .map_err(|e| {
                format!(
                    "{requested:?} {e}; providers only read under the executor's --config-provider-root {}",
                    self.canonical.display()
                )
            })
    }
}

/// Where `requested` lies under `root`, lexically: a relative path is joined to it, an
/// absolute one must start with it; `.` parts are dropped and `..` refused.
fn place_under(root: &Path, requested: &str) -> Result<PathBuf, &'static str> {
    let requested = Path::new(requested);
    let mut out = if requested.is_absolute() {
        PathBuf::new()
    } else {
        root.to_path_buf()
    };
    for part in requested.components() {
        match part {
            Component::ParentDir => return Err("contains \"..\""),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::Normal(_) => out.push(part),
        }
    }
    if out.starts_with(root) && out != root {
        Ok(out)
    } else {
        Err("is outside the root")
    }
}

/// The reason part of a syntactic refusal (the reference itself is named by the caller).
fn reason_of(e: &config_provider::ReferenceError) -> String {
    match e {
        config_provider::ReferenceError::UnknownProvider { provider, .. } => format!(
            "config provider {provider:?} is not one Wharf implements ({})",
            config_provider::implemented_names()
        ),
        config_provider::ReferenceError::Malformed { rule, .. } => (*rule).to_owned(),
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The entries of a Java properties file (`java.util.Properties#load`'s format, which
/// Connect's `FileConfigProvider` reads): `key=value`, `key: value` or `key value`
/// lines, `#` and `!` comments, a trailing `\` continuing the line, and the escapes `\t`,
/// `\n`, `\r`, `\f`, `\uXXXX` and `\c` for any other `c`. A later key wins.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut logical = first.trim_start().to_owned();
        if logical.is_empty() || logical.starts_with('#') || logical.starts_with('!') {
            continue;
        }
        while ends_continued(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_entry(&logical);
        out.insert(unescape(key), unescape(value));
    }
    out
}

/// True when `line` ends with an odd number of backslashes.
fn ends_continued(line: &str) -> bool {
    line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
}

/// The raw key and raw value of a logical line: the key ends at the first unescaped
/// `=`, `:` or whitespace; then whitespace, at most one `=` or `:`, and whitespace.
fn split_entry(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut end = line.len();
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' | ' ' | '\t' | '\u{c}' => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let key = &line[..end];
    let rest = line[end..].trim_start_matches([' ', '\t', '\u{c}']);
    let rest = rest
        .strip_prefix(['=', ':'])
        .unwrap_or(rest)
        .trim_start_matches([' ', '\t', '\u{c}']);
    (key, rest)
}

fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => out.push_str(&hex),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// `text` (a plugin's error, about to become a status report or a log line) with every
/// one of `hidden` (resolved provider values, secret-typed config values) replaced by
/// [`wharf::sdk::REDACTED`]: a plugin may quote the value it was given, and what it
/// quotes must not leave the executor. Longer values go first, so that a value that
/// contains another is hidden whole; an empty value hides nothing.
pub fn redact_values(text: &str, hidden: &[String]) -> String {
    let mut values: Vec<&str> = hidden
        .iter()
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    let mut out = text.to_owned();
    for v in values {
        if out.contains(v) {
            out = out.replace(v, wharf::sdk::REDACTED);
        }
        // A value with surrounding whitespace (a directory provider's file ending in a
        // newline) is often quoted trimmed.
        let trimmed = v.trim();
        if !trimmed.is_empty() && trimmed != v && out.contains(trimmed) {
            out = out.replace(trimmed, wharf::sdk::REDACTED);
        }
    }
    out
}

/// A task config as it may leave the executor: each key whose connector config value
/// (`raw`, as stored) holds a reference gets that raw value back, as Kafka Connect's
/// `AbstractHerder.reverseTransform` does, so that a value resolved for the connector is
/// not stored in a task config.
pub fn reverse_task_config(raw: &ConfigMap, mut task_config: ConfigMap) -> ConfigMap {
    for (key, value) in raw {
        if has_reference(value)
            && let Some(slot) = task_config.get_mut(key)
        {
            slot.clone_from(value);
        }
    }
    task_config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    fn all(dir: &Path) -> ConfigProviders {
        ConfigProviders::parse("file,directory,env", Some(dir)).expect("providers")
    }

    #[test]
    fn properties_read_as_java_reads_them() {
        let p = parse_properties(
            "# comment\n! also\n\na=1\nb : two\nc three\n  d=\\\n    continued\ne=x\\\\\nf=\\u0041\\t\\=\nkey\\ with\\ space=v\ng\n",
        );
        assert_eq!(p["a"], "1");
        assert_eq!(p["b"], "two");
        assert_eq!(p["c"], "three");
        assert_eq!(p["d"], "continued");
        assert_eq!(p["e"], "x\\");
        assert_eq!(p["f"], "A\t=");
        assert_eq!(p["key with space"], "v");
        assert_eq!(p["g"], "");
        assert!(!p.contains_key("# comment"));
    }

    #[test]
    fn a_file_reference_gives_the_propertys_value() {
        let dir = root_with(&[("db.properties", "password=s3cr3t\n")]);
        let p = all(dir.path());
        let abs = format!("${{file:{}/db.properties:password}}", dir.path().display());
        let (out, keys) = p
            .resolve_config(&map(&[
                ("pw", "${file:db.properties:password}"),
                ("abs", &abs),
                ("plain", "x"),
            ]))
            .expect("resolved");
        assert_eq!(out["pw"], "s3cr3t");
        assert_eq!(out["abs"], "s3cr3t");
        assert_eq!(out["plain"], "x");
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["abs", "pw"]);
    }

    #[test]
    fn a_directory_reference_gives_the_files_content_unchanged() {
        let dir = root_with(&[("secrets/db", "pa55\n")]);
        let p = all(dir.path());
        let (out, _) = p
            .resolve_config(&map(&[("pw", "${directory:secrets:db}")]))
            .expect("resolved");
        assert_eq!(out["pw"], "pa55\n");
    }

    #[test]
    fn an_env_reference_gives_the_variable_but_never_a_wharf_setting() {
        let p = ConfigProviders::parse("env", None).expect("env alone needs no root");
        // PATH is set in every test environment.
        let (out, _) = p
            .resolve_config(&map(&[("v", "${env:PATH}")]))
            .expect("resolved");
        assert_eq!(out["v"], std::env::var("PATH").expect("PATH"));
        let e = p
            .resolve_config(&map(&[("v", "${env:WHARF_NATS_PASSWORD}")]))
            .unwrap_err();
        assert!(
            e.contains("${env:WHARF_NATS_PASSWORD}") && e.contains("own settings"),
            "{e}"
        );
    }

    #[test]
    fn an_unresolvable_reference_is_named_and_no_value() {
        let dir = root_with(&[("db.properties", "password=MARKER\n")]);
        let p = all(dir.path());
        let e = p
            .resolve_config(&map(&[("pw", "${file:db.properties:nope}")]))
            .unwrap_err();
        assert!(
            e.starts_with("config[pw]: ${file:db.properties:nope} cannot be resolved"),
            "{e}"
        );
        assert!(
            e.contains("no key \"nope\"") && !e.contains("MARKER"),
            "{e}"
        );
        let e = p
            .resolve_config(&map(&[("pw", "${file:missing:k}")]))
            .unwrap_err();
        assert!(e.contains("${file:missing:k}"), "{e}");
    }

    #[test]
    fn paths_outside_the_root_are_refused() {
        let outside = root_with(&[("db.properties", "password=MARKER\n")]);
        let dir = root_with(&[]);
        std::os::unix::fs::symlink(
            outside.path().join("db.properties"),
            dir.path().join("link"),
        )
        .expect("symlink");
        let p = all(dir.path());
        for v in [
            format!(
                "${{file:{}/db.properties:password}}",
                outside.path().display()
            ),
            "${file:link:password}".to_owned(),
            "${file:a/../../x:password}".to_owned(),
        ] {
            let e = p.resolve_config(&map(&[("pw", &v)])).unwrap_err();
            assert!(e.contains(&v) && !e.contains("MARKER"), "{e}");
        }
    }

    #[test]
    fn a_provider_not_configured_is_refused_naming_it() {
        let p = ConfigProviders::parse("env", None).expect("providers");
        let e = p
            .resolve_config(&map(&[("pw", "${file:x:y}")]))
            .unwrap_err();
        assert!(e.contains("\"file\" is not configured"), "{e}");
        assert_eq!(p.check("${file:x:y}").len(), 1);
        assert!(p.check("${env:HOME}").is_empty());
        let e = ConfigProviders::none().check("${vault:a:b}");
        assert!(
            e[0].contains("\"vault\" is not one Wharf implements"),
            "{e:?}"
        );
    }

    #[test]
    fn the_settings_are_checked() {
        assert_eq!(
            ConfigProviders::parse("file", None).unwrap_err().0,
            "--config-provider-root"
        );
        assert_eq!(
            ConfigProviders::parse("vault", None).unwrap_err().0,
            "--config-providers"
        );
        assert_eq!(
            ConfigProviders::parse("file", Some(Path::new("/nonexistent/x")))
                .unwrap_err()
                .0,
            "--config-provider-root"
        );
        assert_eq!(
            ConfigProviders::parse(" ", None),
            Ok(ConfigProviders::none())
        );
    }

    #[test]
    fn resolving_collects_every_value_a_reference_stood_for() {
        let dir = root_with(&[("db.properties", "password=s3cr3t\nuser=bob\n")]);
        let p = all(dir.path());
        let mut hidden = Vec::new();
        p.resolve_config_hiding(
            &map(&[("url", "pg://${file:db.properties:user}@h"), ("plain", "x")]),
            &mut hidden,
        )
        .expect("resolved");
        assert_eq!(hidden, ["bob", "pg://bob@h"]);
    }

    #[test]
    fn redaction_hides_every_value_longest_first_and_leaves_the_rest() {
        let hidden = vec!["s3cr3t".to_owned(), "xs3cr3ty".to_owned(), String::new()];
        assert_eq!(
            redact_values("login xs3cr3ty then s3cr3t failed", &hidden),
            "login [hidden] then [hidden] failed"
        );
        assert_eq!(redact_values("nothing here", &hidden), "nothing here");
        assert_eq!(
            redact_values("file said pa55", &["pa55\n".to_owned()]),
            "file said [hidden]"
        );
    }

    #[test]
    fn task_configs_get_the_connectors_references_back() {
        let raw = map(&[("pw", "${file:db.properties:password}"), ("host", "h")]);
        let task = map(&[("pw", "s3cr3t"), ("host", "h"), ("task.id", "0")]);
        let out = reverse_task_config(&raw, task);
        assert_eq!(out["pw"], "${file:db.properties:password}");
        assert_eq!(out["host"], "h");
        assert_eq!(out["task.id"], "0");
    }
}
