//! Identifiers shared by the control plane and the executors.

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
