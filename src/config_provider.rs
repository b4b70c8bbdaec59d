//! Config-provider references in connector config values (Kafka Connect's KIP-297
//! syntax, `${provider:path:key}` or `${provider:key}`), and the providers Wharf
//! implements: `file` (Connect's `FileConfigProvider`), `directory`
//! (`DirectoryConfigProvider`, KIP-632) and `env` (`EnvVarConfigProvider`, KIP-887).
//!
//! The control plane checks references here syntactically and stores them as written;
//! the executor that runs an instance resolves them just before the plugin's start
//! (`wharf-executor`'s `providers`), so a resolved value is never stored, shown or logged.
//!
//! A reference is read as Kafka Connect's `ConfigTransformer` reads it (its pattern
//! `\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}`): the provider is the text up to the first
//! `:`, the path the text up to the next `:` when there is one, the key the rest up to
//! `}`. There is no escape for `${`, as in Connect.

/// One reference found in a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference<'a> {
    /// The whole reference, `${...}`, as written: what errors name (never the value it
    /// stands for).
    pub text: &'a str,
    /// The provider's name, as in the executor's `--config-providers`.
    pub provider: &'a str,
    /// The path part, `None` for `${provider:key}`.
    pub path: Option<&'a str>,
    /// The key part.
    pub key: &'a str,
    /// Byte offset of `text` in the value.
    pub at: usize,
}

impl std::fmt::Display for Reference<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text)
    }
}

/// Every reference in `value`, in order.
pub fn references(value: &str) -> Vec<Reference<'_>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = value[from..].find("${") {
        let start = from + found;
        let inner_start = start + 2;
        let Some(close) = value[inner_start..].find('}') else {
            break;
        };
        let inner = &value[inner_start..inner_start + close];
        match inner.split_once(':') {
            Some((provider, rest)) => {
                let (path, key) = match rest.split_once(':') {
                    Some((path, key)) => (Some(path), key),
                    None => (None, rest),
                };
                out.push(Reference {
                    text: &value[start..inner_start + close + 1],
                    provider,
                    path,
                    key,
                    at: start,
                });
                from = inner_start + close + 1;
            }
            // Not a reference; a later `${` inside it may start one (the pattern's search
            // moves on by one character).
            None => from = start + 1,
        }
    }
    out
}

/// True when `value` holds at least one reference.
pub fn has_reference(value: &str) -> bool {
    !references(value).is_empty()
}

/// `value` with each reference replaced by what `lookup` gives for it.
///
/// # Errors
/// The first error of `lookup`.
pub fn substitute<E>(
    value: &str,
    mut lookup: impl FnMut(&Reference<'_>) -> Result<String, E>,
) -> Result<String, E> {
    let mut out = String::with_capacity(value.len());
    let mut last = 0;
    for r in references(value) {
        out.push_str(&value[last..r.at]);
        out.push_str(&lookup(&r)?);
        last = r.at + r.text.len();
    }
    out.push_str(&value[last..]);
    Ok(out)
}

/// Prefix of the environment variables the `env` provider never gives: the executor's
/// own settings (`WHARF_NATS_PASSWORD` among them). A rule both binaries know, so that
/// the control plane refuses such a reference at create rather than the executor at
/// start.
pub const RESERVED_ENV_PREFIX: &str = "WHARF_";

/// A config provider Wharf implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProviderKind {
    /// `file`: `${file:PATH:KEY}`, the value of `KEY` in the Java properties file `PATH`
    /// (Connect's `org.apache.kafka.common.config.provider.FileConfigProvider`).
    File,
    /// `directory`: `${directory:DIR:FILE}`, the content of the file `FILE` in `DIR`
    /// (`DirectoryConfigProvider`, KIP-632).
    Directory,
    /// `env`: `${env:VAR}`, the executor's environment variable `VAR`
    /// (`EnvVarConfigProvider`, KIP-887).
    Env,
}

/// Every provider Wharf implements, in the order docs list them.
pub const PROVIDER_KINDS: [ProviderKind; 3] = [
    ProviderKind::File,
    ProviderKind::Directory,
    ProviderKind::Env,
];

impl ProviderKind {
    /// The provider's name in references and in `--config-providers`.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::File => "file",
            ProviderKind::Directory => "directory",
            ProviderKind::Env => "env",
        }
    }

    /// The provider named `name`, `None` for one Wharf does not implement.
    pub fn from_name(name: &str) -> Option<Self> {
        PROVIDER_KINDS.into_iter().find(|k| k.name() == name)
    }
}

/// The names of every provider Wharf implements, for messages: `file, directory, env`.
pub fn implemented_names() -> String {
    PROVIDER_KINDS.map(ProviderKind::name).join(", ")
}

/// Why a reference is refused before anything is resolved (names the reference, never a
/// value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// The provider is not one Wharf implements.
    #[error(
        "{reference} names config provider {provider:?}, which Wharf does not implement (it implements {implemented}); give the value itself or use one of those"
    )]
    UnknownProvider {
        /// The reference.
        reference: String,
        /// Its provider.
        provider: String,
        /// [`implemented_names`].
        implemented: String,
    },
    /// The reference's shape does not fit its provider.
    #[error("{reference}: {rule}")]
    Malformed {
        /// The reference.
        reference: String,
        /// The provider's rule it breaks.
        rule: &'static str,
    },
}

/// The provider of `r` and a check of its shape, with no file system or environment
/// access: `file` and `directory` need a path (relative, or absolute; without `..`) and a
/// key, a `directory` key is a plain file name, and `env` takes no path.
///
/// # Errors
/// [`ReferenceError`] naming the reference.
pub fn check_reference(r: &Reference<'_>) -> Result<ProviderKind, ReferenceError> {
    let malformed = |rule| ReferenceError::Malformed {
        reference: r.text.to_owned(),
        rule,
    };
    let Some(kind) = ProviderKind::from_name(r.provider) else {
        return Err(ReferenceError::UnknownProvider {
            reference: r.text.to_owned(),
            provider: r.provider.to_owned(),
            implemented: implemented_names(),
        });
    };
    if r.key.is_empty() {
        return Err(malformed("the key after the last ':' is empty"));
    }
    match kind {
        ProviderKind::File | ProviderKind::Directory => {
            let Some(path) = r.path.filter(|p| !p.is_empty()) else {
                return Err(malformed(
                    "the file and directory providers need a path: ${file:PATH:KEY}, ${directory:DIR:FILE}",
                ));
            };
            if std::path::Path::new(path)
                .components()
                .any(|c| c == std::path::Component::ParentDir)
            {
                return Err(malformed(
                    "the path contains \"..\", which is refused whatever the executor's --config-provider-root",
                ));
            }
            if kind == ProviderKind::Directory
                && (r.key.contains('/') || r.key == "." || r.key == "..")
            {
                return Err(malformed(
                    "the directory provider's key is the name of a file directly in the directory",
                ));
            }
        }
        ProviderKind::Env => {
            if r.path.is_some_and(|p| !p.is_empty()) {
                return Err(malformed("the env provider takes no path: ${env:VARIABLE}"));
            }
            if r.key.starts_with(RESERVED_ENV_PREFIX) {
                return Err(malformed(
                    "variables named WHARF_* are the executor's own settings and never given by the env provider; give the value another name",
                ));
            }
        }
    }
    Ok(kind)
}

/// The first refused reference of `value` ([`check_reference`]).
///
/// # Errors
/// [`ReferenceError`] of the first bad reference.
pub fn check_value(value: &str) -> Result<(), ReferenceError> {
    references(value)
        .iter()
        .try_for_each(|r| check_reference(r).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(v: &str) -> Vec<(&str, Option<&str>, &str)> {
        references(v)
            .into_iter()
            .map(|r| (r.provider, r.path, r.key))
            .collect()
    }

    #[test]
    fn a_file_reference_has_a_provider_a_path_and_a_key() {
        assert_eq!(
            parts("${file:/run/secrets/db.properties:password}"),
            [("file", Some("/run/secrets/db.properties"), "password")]
        );
    }

    #[test]
    fn a_reference_without_a_path_has_only_a_key() {
        assert_eq!(parts("${env:PGPASSWORD}"), [("env", None, "PGPASSWORD")]);
    }

    #[test]
    fn the_path_ends_at_the_second_colon_and_the_key_takes_the_rest() {
        assert_eq!(parts("${file:a:b:c}"), [("file", Some("a"), "b:c")]);
    }

    #[test]
    fn references_inside_text_are_found_in_order() {
        let v = "amqp://u:${file:r.properties:pw}@${env:HOST}/x";
        assert_eq!(
            parts(v),
            [("file", Some("r.properties"), "pw"), ("env", None, "HOST")]
        );
        assert_eq!(references(v)[0].text, "${file:r.properties:pw}");
    }

    #[test]
    fn text_without_a_colon_or_a_closing_brace_is_no_reference() {
        for v in [
            "plain",
            "${no colon}",
            "$file:a:b",
            "${file:unclosed",
            "a}b${",
        ] {
            assert!(references(v).is_empty(), "{v}");
        }
        assert_eq!(
            parts("${no colon} then ${file:a:b}"),
            [("file", Some("a"), "b")]
        );
    }

    #[test]
    fn substitute_replaces_each_reference_and_keeps_the_rest() {
        let out: Result<String, ()> =
            substitute("x-${env:A}-${file:p:k}-y", |r| Ok(format!("<{}>", r.key)));
        assert_eq!(out, Ok("x-<A>-<k>-y".to_owned()));
        let none: Result<String, ()> = substitute("no refs", |_| Err(()));
        assert_eq!(none, Ok("no refs".to_owned()));
    }

    #[test]
    fn substitute_stops_at_the_first_failed_lookup() {
        let out = substitute("${env:A}${env:B}", |r| {
            if r.key == "B" {
                Err(r.text.to_owned())
            } else {
                Ok(String::new())
            }
        });
        assert_eq!(out, Err("${env:B}".to_owned()));
    }

    #[test]
    fn the_three_providers_wharf_implements_are_accepted() {
        for v in [
            "${file:db.properties:password}",
            "${file:/abs/db.properties:password}",
            "${directory:/run/secrets:db-password}",
            "${env:DB_PASSWORD}",
            "${env::DB_PASSWORD}",
        ] {
            assert_eq!(check_value(v), Ok(()), "{v}");
        }
    }

    #[test]
    fn another_provider_is_refused_naming_it() {
        let e = check_value("${vault:secret/db:password}").unwrap_err();
        assert!(
            matches!(&e, ReferenceError::UnknownProvider { provider, .. } if provider == "vault")
        );
        let text = e.to_string();
        assert!(
            text.contains("\"vault\"") && text.contains("file, directory, env"),
            "{text}"
        );
    }

    #[test]
    fn file_and_directory_need_a_path_without_dot_dot() {
        for v in [
            "${file:password}",
            "${file::password}",
            "${directory:db}",
            "${file:../etc/x:k}",
            "${directory:/run/../etc:passwd}",
        ] {
            assert!(
                matches!(check_value(v), Err(ReferenceError::Malformed { .. })),
                "{v}"
            );
        }
    }

    #[test]
    fn a_directory_key_is_a_plain_file_name() {
        for v in [
            "${directory:/d:a/b}",
            "${directory:/d:..}",
            "${directory:/d:.}",
        ] {
            assert!(
                matches!(check_value(v), Err(ReferenceError::Malformed { .. })),
                "{v}"
            );
        }
    }

    #[test]
    fn env_takes_no_path_and_every_key_is_non_empty() {
        for v in ["${env:/x:VAR}", "${env:}", "${file:p:}"] {
            assert!(
                matches!(check_value(v), Err(ReferenceError::Malformed { .. })),
                "{v}"
            );
        }
    }

    #[test]
    fn the_executors_own_variables_are_refused_before_any_start() {
        for v in ["${env:WHARF_NATS_PASSWORD}", "${env::WHARF_X}"] {
            let e = check_value(v).unwrap_err();
            assert!(
                matches!(&e, ReferenceError::Malformed { .. })
                    && e.to_string().contains("own settings"),
                "{v}: {e}"
            );
        }
        assert_eq!(check_value("${env:NOT_WHARF_X}"), Ok(()));
    }

    #[test]
    fn errors_name_the_reference() {
        let e = check_value("a ${file:../x:k} b").unwrap_err().to_string();
        assert!(e.starts_with("${file:../x:k}: "), "{e}");
    }
}
