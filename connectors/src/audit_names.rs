//! Names shared by the audit sources (`postgres-audit`, `sqlite-audit`): parsing the
//! watched-table list, quoting identifiers, and deriving per-connector object names that
//! are valid identifiers and never collide between two connectors.

use std::fmt;

/// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1), in bytes; longer names are
/// silently truncated by the server, so derived names stay below it.
pub const MAX_PG_IDENT_BYTES: usize = 63;

/// Longest part of a derived name taken from the connector name, in bytes.
const MAX_SANITIZED_BYTES: usize = 28;

/// A possibly schema-qualified table name, each part exactly as stored in the catalog
/// (no case folding).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableName {
    /// Schema, or `None` when the list entry had no schema.
    pub schema: Option<String>,
    /// Table name.
    pub name: String,
}

impl TableName {
    /// This name with `default_schema` filled in when none was given.
    pub fn qualified(&self, default_schema: &str) -> TableName {
        TableName {
            schema: Some(
                self.schema
                    .clone()
                    .unwrap_or_else(|| default_schema.to_owned()),
            ),
            name: self.name.clone(),
        }
    }

    /// `"schema"."name"` (or `"name"`), quoted for SQL.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&self.name)),
            None => quote_ident(&self.name),
        }
    }
}

/// The list form: `schema.name`, a part written in double quotes only when it needs them
/// to parse back to the same name (it holds `.`, `,`, `"` or edge whitespace, or is
/// empty). `public.orders`, `public.Order Items`, `weird.na-me`, `"a.b".c`.
impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = &self.schema {
            write!(f, "{}.", list_part(s))?;
        }
        write!(f, "{}", list_part(&self.name))
    }
}

fn list_part(part: &str) -> String {
    let needs_quotes = part.is_empty()
        || part.contains(['.', ',', '"'])
        || part.trim() != part
        || part.chars().any(char::is_control);
    if needs_quotes {
        quote_ident(part)
    } else {
        part.to_owned()
    }
}

/// Quotes an identifier for SQL (PostgreSQL and SQLite): wraps it in double quotes and
/// doubles every double quote inside, so no text can leave the identifier.
pub fn quote_ident(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Quotes a text literal for SQL: single quotes doubled. Callers must not put a backslash
/// escape string (`E''`) around it.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Parses a comma-separated table list: each entry `name` or `schema.name`, each part
/// either bare (taken literally after trimming, case kept, may hold spaces) or in double
/// quotes (`""` for a quote; may hold `.` and `,`). Empty entries are skipped, duplicates
/// dropped (first kept). Errors name the offending entry.
pub fn parse_table_list(list: &str) -> Result<Vec<TableName>, String> {
    let mut tables: Vec<TableName> = Vec::new();
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut quoted_part = false;
    let mut chars = list.chars().peekable();
    let mut entry_text = String::new();

    let finish_part = |current: &mut String, quoted: bool, parts: &mut Vec<String>| {
        let part = if quoted {
            std::mem::take(current)
        } else {
            let trimmed = current.trim().to_owned();
            current.clear();
            trimmed
        };
        parts.push(part);
    };

    loop {
        let c = chars.next();
        match c {
            Some('"') if current.trim().is_empty() && !quoted_part => {
                current.clear();
                entry_text.push('"');
                // Quoted part: read until the closing quote.
                let mut closed = false;
                while let Some(q) = chars.next() {
                    entry_text.push(q);
                    if q == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            entry_text.push('"');
                            current.push('"');
                        } else {
                            closed = true;
                            break;
                        }
                    } else {
                        current.push(q);
                    }
                }
                if !closed {
                    return Err(format!("table entry {entry_text:?} has an unclosed quote"));
                }
                quoted_part = true;
            }
            Some('.') => {
                entry_text.push('.');
                finish_part(&mut current, quoted_part, &mut parts);
                quoted_part = false;
            }
            Some(',') | None => {
                finish_part(&mut current, quoted_part, &mut parts);
                quoted_part = false;
                let entry = std::mem::take(&mut parts);
                let text = std::mem::take(&mut entry_text);
                let blank = entry.len() == 1 && entry[0].is_empty() && !text.contains('"');
                if !blank {
                    let table = match entry.as_slice() {
                        [name] => TableName {
                            schema: None,
                            name: name.clone(),
                        },
                        [schema, name] => TableName {
                            schema: Some(schema.clone()),
                            name: name.clone(),
                        },
                        _ => {
                            return Err(format!(
                                "table entry {:?} has more than one unquoted dot (use \"schema\".\"name\")",
                                text.trim()
                            ));
                        }
                    };
                    if table.name.is_empty() || table.schema.as_deref() == Some("") {
                        return Err(format!("table entry {:?} has an empty name", text.trim()));
                    }
                    if table.name.contains('\0')
                        || table.schema.as_deref().is_some_and(|s| s.contains('\0'))
                    {
                        return Err(format!(
                            "table entry {:?} holds a NUL character",
                            text.trim()
                        ));
                    }
                    if !tables.contains(&table) {
                        tables.push(table);
                    }
                }
                if c.is_none() {
                    break;
                }
            }
            Some(other) => {
                entry_text.push(other);
                if quoted_part {
                    if !other.is_whitespace() {
                        return Err(format!(
                            "table entry {:?} has text after a closing quote",
                            entry_text.trim()
                        ));
                    }
                } else {
                    current.push(other);
                }
            }
        }
    }
    Ok(tables)
}

/// Formats tables as a list that [`parse_table_list`] reads back to the same names.
pub fn format_table_list(tables: &[TableName]) -> String {
    tables
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// ConfigDef validator for a table list.
pub fn validate_table_list(value: &str) -> Result<(), String> {
    parse_table_list(value).map(|_| ())
}

/// ConfigDef validator for a single, optionally schema-qualified table name.
pub fn validate_single_table(value: &str) -> Result<(), String> {
    parse_single_table(value).map(|_| ())
}

/// Parses exactly one table name in the list syntax.
pub fn parse_single_table(value: &str) -> Result<TableName, String> {
    let tables = parse_table_list(value)?;
    match tables.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err("value is not exactly one table name".to_owned()),
    }
}

/// 64-bit FNV-1a of `text`: stable across builds and platforms (unlike std's hasher),
/// so names derived from it are the same on every executor.
pub fn stable_hash(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// `<prefix>_<sanitized connector>_<16 hex digits of its hash>`: lowercase ASCII letters,
/// digits and `_` only, at most [`MAX_PG_IDENT_BYTES`] bytes for a prefix of up to 16
/// bytes, and distinct for distinct connector names (the hash covers the exact name).
pub fn derived_name(prefix: &str, connector: &str) -> String {
    let sanitized: String = connector
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(MAX_SANITIZED_BYTES)
        .collect();
    format!("{prefix}_{sanitized}_{:016x}", stable_hash(connector))
}

/// Splits `tables` into at most `max_tasks` contiguous, non-empty groups of near-equal
/// size, in list order (Kafka Connect's `ConnectorUtils.groupPartitions`).
pub fn split_tables(tables: &[TableName], max_tasks: u32) -> Vec<Vec<TableName>> {
    let groups = tables.len().min(max_tasks as usize);
    if groups == 0 {
        return Vec::new();
    }
    let base = tables.len() / groups;
    let extra = tables.len() % groups;
    let mut out = Vec::with_capacity(groups);
    let mut at = 0;
    for g in 0..groups {
        let size = base + usize::from(g < extra);
        out.push(tables[at..at + size].to_vec());
        at += size;
    }
    out
}

/// Source partition of a table: `{"table": "<schema.table>"}`.
pub fn source_partition(table: &TableName) -> serde_json::Value {
    serde_json::json!({ "table": table.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(n: usize) -> Vec<TableName> {
        (0..n)
            .map(|i| TableName {
                schema: Some("public".to_owned()),
                name: format!("t{i}"),
            })
            .collect()
    }

    #[test]
    fn tables_split_into_at_most_max_tasks_groups() {
        assert!(split_tables(&tables(0), 3).is_empty());
        assert_eq!(split_tables(&tables(2), 3).len(), 2);
        let groups = split_tables(&tables(5), 2);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 2]);
        assert!(split_tables(&tables(5), 0).is_empty());
    }

    fn t(schema: Option<&str>, name: &str) -> TableName {
        TableName {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    #[test]
    fn bare_and_quoted_entries_parse_to_the_exact_catalog_names() {
        let got = parse_table_list(
            r#"public.orders, public.Order Items ,"weird"."na-me", "a.b"."c,""d", x"#,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                t(Some("public"), "orders"),
                t(Some("public"), "Order Items"),
                t(Some("weird"), "na-me"),
                t(Some("a.b"), "c,\"d"),
                t(None, "x"),
            ]
        );
        assert_eq!(
            parse_table_list(format_table_list(&got).as_str()).unwrap(),
            got
        );
    }

    #[test]
    fn empty_list_is_no_tables_and_bad_entries_are_named() {
        assert!(parse_table_list("").unwrap().is_empty());
        assert!(parse_table_list(" , ").unwrap().is_empty());
        assert!(parse_table_list("a.b.c").unwrap_err().contains("a.b.c"));
        assert!(parse_table_list("\"open").unwrap_err().contains("unclosed"));
        assert!(parse_table_list("\"x\"y").is_err());
    }

    #[test]
    fn quoting_cannot_be_escaped() {
        let evil = r#"x"; DROP TABLE victim; --"#;
        assert_eq!(quote_ident(evil), r#""x""; DROP TABLE victim; --""#);
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    fn part() -> impl proptest::strategy::Strategy<Value = String> {
        // Any text without NUL (no catalog holds it), with the characters that matter.
        proptest::string::string_regex("[a-zA-Z0-9 _.,\"'\\;$\t-]{1,12}|[^\u{0}]{1,6}")
            .expect("valid regex")
    }

    proptest::proptest! {
        #[test]
        fn any_table_list_round_trips_through_its_text_form(
            names in proptest::collection::vec((proptest::option::of(part()), part()), 0..5)
        ) {
            let mut tables: Vec<TableName> = Vec::new();
            for (schema, name) in names {
                let t = TableName { schema, name };
                if !tables.contains(&t) {
                    tables.push(t);
                }
            }
            let text = format_table_list(&tables);
            proptest::prop_assert_eq!(parse_table_list(&text), Ok(tables));
        }

        #[test]
        fn a_quoted_identifier_is_one_token(ident in part()) {
            let q = quote_ident(&ident);
            let inner = &q[1..q.len() - 1];
            // Every quote inside comes in a pair: the identifier cannot be closed early.
            proptest::prop_assert!(inner.replace("\"\"", "").find('"').is_none());
            proptest::prop_assert_eq!(inner.replace("\"\"", "\""), ident);
        }
    }

    #[test]
    fn derived_names_are_short_safe_and_distinct() {
        let a = derived_name("wharf_audit", "a-b");
        let b = derived_name("wharf_audit", "a_b");
        assert_ne!(a, b);
        let long = derived_name("wharf_audit", &"X".repeat(200));
        assert!(long.len() <= MAX_PG_IDENT_BYTES, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        );
    }
}
