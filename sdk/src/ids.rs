//! Identifiers and their rules, shared by plugins (a connector name is safe in a file name
//! or an SQL identifier), the control plane and the executors.

use std::fmt;

/// Longest connector name accepted, in characters.
pub const MAX_CONNECTOR_NAME_LEN: usize = 200;

/// A connector name that passed validation.
///
/// Rule: 1 to [`MAX_CONNECTOR_NAME_LEN`] characters from `A-Z a-z 0-9 . _ -`, the first a
/// letter or digit. Names end up in SQL identifiers, file names and NATS subjects, where
/// `/`, `%`, spaces, wildcards and invisible characters would be ambiguous or unsafe, so
/// they are refused rather than escaped. Case matters: `Orders` and `orders` differ.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectorName(String);

/// Why a connector name was refused; the message states the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "connector name {reason}: names are 1 to 200 characters from A-Z a-z 0-9 . _ - (ASCII only), starting with an ASCII letter or digit"
)]
pub struct InvalidName {
    /// What is wrong with this name in particular.
    pub reason: &'static str,
}

impl ConnectorName {
    /// Validates `name` against the naming rule.
    ///
    /// # Errors
    /// [`InvalidName`] naming the broken part of the rule.
    pub fn parse(name: &str) -> Result<Self, InvalidName> {
        if name.is_empty() {
            return Err(InvalidName { reason: "is empty" });
        }
        if name.chars().count() > MAX_CONNECTOR_NAME_LEN {
            return Err(InvalidName {
                reason: "is too long",
            });
        }
        if !name.is_ascii() {
            return Err(InvalidName {
                reason: "has a non-ASCII character (letters like é or ü are not allowed)",
            });
        }
        if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(InvalidName {
                reason: "does not start with an ASCII letter or digit",
            });
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(InvalidName {
                reason: "has a character outside A-Z a-z 0-9 . _ -",
            });
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConnectorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest executor id accepted, in bytes.
pub const MAX_EXECUTOR_ID_BYTES: usize = 200;

/// Why an executor id was refused; the message states the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{reason}: executor ids are 1 to 200 bytes from A-Z a-z 0-9 . _ - (ASCII only), and not \".\" or \"..\""
)]
pub struct InvalidExecutorId {
    /// What is wrong with this id in particular.
    pub reason: &'static str,
}

/// Checks an executor id against the one rule every place that takes one applies: the
/// executor at start (`--executor-id`, the certificate's, the kept `executor.id`),
/// `wharf-control-plane certs executor --id` and the control plane's RegisterExecutor.
///
/// Rule: 1 to [`MAX_EXECUTOR_ID_BYTES`] bytes from `A-Z a-z 0-9 . _ -`, not `.` or `..`.
/// The id is a path segment of the identity URI `spiffe://<domain>/executor/<id>` (the
/// SPIFFE ID spec allows exactly these characters there), a certificate file name
/// (`executor-<id>.pem`) and a label in listings, metrics and traces, where `/`,
/// spaces, non-ASCII and invisible characters would be ambiguous or unsafe.
///
/// # Errors
/// [`InvalidExecutorId`] naming the broken part of the rule.
pub fn check_executor_id(id: &str) -> Result<(), InvalidExecutorId> {
    let reason = if id.is_empty() {
        "is empty"
    } else if id.len() > MAX_EXECUTOR_ID_BYTES {
        "is too long"
    } else if id == "." || id == ".." {
        "is a relative directory name"
    } else if !id.is_ascii() {
        "has a non-ASCII character"
    } else if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        "has a character outside A-Z a-z 0-9 . _ -"
    } else {
        return Ok(());
    };
    Err(InvalidExecutorId { reason })
}

/// One task of a connector: its name and index (0-based).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TaskKey {
    /// Connector name.
    pub connector: String,
    /// Task index, from 0.
    pub task: u32,
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.connector, self.task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_accepted_and_case_matters() {
        assert_eq!(
            ConnectorName::parse("orders-audit.v2").unwrap().as_str(),
            "orders-audit.v2"
        );
        assert_ne!(
            ConnectorName::parse("Orders").unwrap(),
            ConnectorName::parse("orders").unwrap()
        );
    }

    #[test]
    fn unsafe_or_ambiguous_names_are_refused() {
        for bad in ["", "a/b", "a%2Fb", "  spaced  ", "-lead", "a\u{202e}b", "é"] {
            assert!(ConnectorName::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(ConnectorName::parse(&"x".repeat(201)).is_err());
        assert!(ConnectorName::parse(&"x".repeat(200)).is_ok());
    }

    #[test]
    fn generated_and_host_like_executor_ids_are_accepted() {
        for good in [
            "executor-5f0c6e1e-8a7b-4c1d-9e2f-0a1b2c3d4e5f",
            "exec-a",
            "host-1.example.com",
            "A_b.9",
            &"x".repeat(200),
        ] {
            assert_eq!(check_executor_id(good), Ok(()), "{good:?}");
        }
    }

    #[test]
    fn an_empty_executor_id_is_refused_as_empty() {
        let e = check_executor_id("").unwrap_err();
        assert_eq!(e.reason, "is empty");
        assert!(e.to_string().contains("1 to 200 bytes"), "{e}");
    }

    #[test]
    fn a_longer_executor_id_than_200_bytes_is_refused() {
        assert_eq!(
            check_executor_id(&"x".repeat(201)).unwrap_err().reason,
            "is too long"
        );
        // Bytes, not characters: 100 two-byte letters are 200 bytes but not ASCII.
        assert_eq!(
            check_executor_id(&"ü".repeat(101)).unwrap_err().reason,
            "is too long"
        );
    }

    #[test]
    fn dot_and_dot_dot_executor_ids_are_refused() {
        for bad in [".", ".."] {
            assert_eq!(
                check_executor_id(bad).unwrap_err().reason,
                "is a relative directory name"
            );
        }
        assert_eq!(check_executor_id("..."), Ok(()));
    }

    #[test]
    fn non_ascii_executor_ids_are_refused_as_non_ascii() {
        for bad in ["ü", "bad id/ü", "a\u{202e}b"] {
            assert_eq!(
                check_executor_id(bad).unwrap_err().reason,
                "has a non-ASCII character",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn executor_ids_with_slashes_spaces_or_controls_are_refused() {
        for bad in ["a/b", "a b", "a\tb", "a\nb", "a:b", "a%2Fb", " a"] {
            assert_eq!(
                check_executor_id(bad).unwrap_err().reason,
                "has a character outside A-Z a-z 0-9 . _ -",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn non_ascii_names_are_refused_as_non_ascii() {
        for bad in ["é", "café", "a\u{202e}b"] {
            let text = ConnectorName::parse(bad).unwrap_err().to_string();
            assert!(text.contains("non-ASCII"), "{bad:?}: {text}");
            assert!(text.contains("A-Z a-z 0-9 . _ -"), "{bad:?}: {text}");
        }
        let text = ConnectorName::parse("-lead").unwrap_err().to_string();
        assert!(
            text.contains("does not start with an ASCII letter or digit"),
            "{text}"
        );
    }
}
