//! The built-in predicates (KIP-585): HasHeaderKey, RecordIsTombstone,
//! TopicNameMatches.

use wharf::sdk::{ConnectRecord, Predicate};

use super::record::full_match_regex;
use super::{KeyError, Keys};

/// `HasHeaderKey`: true when the record has at least one header called `name`.
pub struct HasHeaderKey {
    name: String,
}

impl HasHeaderKey {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        Ok(Self {
            name: c.required("name")?.to_owned(),
        })
    }
}

impl Predicate for HasHeaderKey {
    fn test(&self, r: &ConnectRecord) -> bool {
        r.headers.iter().any(|(k, _)| *k == self.name)
    }
}

/// `RecordIsTombstone`: true when the value is null.
pub struct RecordIsTombstone;

impl Predicate for RecordIsTombstone {
    fn test(&self, r: &ConnectRecord) -> bool {
        r.value.value.is_null()
    }
}

/// `TopicNameMatches`: true when `pattern` matches the whole topic.
pub struct TopicNameMatches {
    pattern: regex::Regex,
}

impl TopicNameMatches {
    pub(super) fn new(c: &Keys<'_>) -> Result<Self, KeyError> {
        let raw = c.required("pattern")?;
        if raw.is_empty() {
            return Err(("pattern".into(), "String must be non-empty".into()));
        }
        let pattern = full_match_regex(raw).map_err(|e| ("pattern".to_owned(), e))?;
        Ok(Self { pattern })
    }
}

impl Predicate for TopicNameMatches {
    fn test(&self, r: &ConnectRecord) -> bool {
        self.pattern.is_match(&r.topic)
    }
}

#[cfg(test)]
mod tests {
    use wharf::sdk::data::{Data, HeaderValue, Value};

    use super::super::test_support::*;
    use super::super::{build_predicate, builtin_predicate_name};

    fn test(name: &str, cfg: &[(&str, &str)], r: &wharf::sdk::ConnectRecord) -> bool {
        build_predicate(builtin_predicate_name(name).unwrap(), &config(cfg))
            .unwrap()
            .test(r)
    }

    #[test]
    fn has_header_key_matches_a_header_name() {
        let mut r = record(Data::NULL, Data::NULL);
        assert!(!test("HasHeaderKey", &[("name", "trace")], &r));
        r.headers
            .push(("trace".into(), HeaderValue::Bytes(Vec::new())));
        assert!(test(
            "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
            &[("name", "trace")],
            &r
        ));
    }

    #[test]
    fn record_is_tombstone_matches_a_null_value_only() {
        assert!(test(
            "RecordIsTombstone",
            &[],
            &record(Data::NULL, Data::NULL)
        ));
        assert!(!test(
            "RecordIsTombstone",
            &[],
            &record(Data::NULL, Data::schemaless(Value::Int64(1)))
        ));
    }

    #[test]
    fn topic_name_matches_the_whole_topic() {
        let r = record(Data::NULL, Data::NULL);
        assert!(test("TopicNameMatches", &[("pattern", "ord.*")], &r));
        assert!(!test("TopicNameMatches", &[("pattern", "ord")], &r));
        assert!(build_predicate("TopicNameMatches", &config(&[("pattern", "(")])).is_err());
        assert!(build_predicate("TopicNameMatches", &config(&[])).is_err());
    }
}
