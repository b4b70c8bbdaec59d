//! Log levels changed at run time (`/admin/loggers`, Kafka Connect's KIP-495). A logger
//! is a tracing target (`wharf_control_plane::reconcile`, or with dots:
//! `wharf_control_plane.reconcile`); `root` is the default level. The process installs
//! an [`Apply`] that swaps its tracing filter; without one, changes answer 501.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::error::RestError;
use super::request::{
    SET_LOGGER_FIELDS, empty, json_body, ok, path_part, query_pairs, unknown_field,
};
use super::{Gateway, RestResult};
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;

/// Installs a filter given as tracing directives (`info,wharf_control_plane::reconcile=debug`).
pub type Apply = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The root logger's name.
pub const ROOT: &str = "root";

/// Levels set at run time, and how to apply them.
pub struct Loggers {
    apply: Option<Apply>,
    /// Level name (Connect's spelling) and when it was set (ms since the epoch; `None`
    /// for a level the process started with).
    levels: Mutex<BTreeMap<String, (String, Option<i64>)>>,
    /// Directives of the starting filter that are not one logger's level (span filters,
    /// a target without a level): kept in every filter applied later.
    kept: Vec<String>,
}

/// Connect's (log4j's) level names and the tracing level each becomes.
fn tracing_level(level: &str) -> Option<(&'static str, &'static str)> {
    match level.to_ascii_uppercase().as_str() {
        "OFF" => Some(("OFF", "off")),
        "FATAL" => Some(("FATAL", "error")),
        "ERROR" => Some(("ERROR", "error")),
        "WARN" => Some(("WARN", "warn")),
        "INFO" => Some(("INFO", "info")),
        "DEBUG" => Some(("DEBUG", "debug")),
        "TRACE" => Some(("TRACE", "trace")),
        _ => None,
    }
}

/// Whether `logger` names a tracing target (or `root`): letters, digits, '_', '.', ':',
/// '-'; not a span filter (`[span]`) nor empty.
/// Longest logger name a level is set for, in bytes (a Rust module path or a Java
/// class name is far shorter); a longer one would be a log line of its own size.
pub const MAX_LOGGER_NAME_BYTES: usize = 256;

fn is_logger_name(logger: &str) -> bool {
    (1..=MAX_LOGGER_NAME_BYTES).contains(&logger.len())
        && logger
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

fn target(logger: &str) -> String {
    logger.replace('.', "::")
}

impl Loggers {
    /// Loggers as the filter `start` (tracing directives, the process's `RUST_LOG`, for
    /// example `warn,wharf_control_plane::reconcile=debug`) set them: its bare level is
    /// `root` (INFO without one, as the process's own filter defaults), each
    /// `target=level` a logger; a change at run time keeps the others. Directives that do
    /// not parse are left out, as the process's filter left them out. `apply` installs a
    /// changed filter, `None` refuses changes.
    pub fn new(start: &str, apply: Option<Apply>) -> Self {
        let mut levels = BTreeMap::new();
        levels.insert(ROOT.to_owned(), ("INFO".to_owned(), None));
        let mut kept = Vec::new();
        let parses = |d: &&str| d.parse::<tracing_subscriber::filter::Directive>().is_ok();
        for d in start
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .filter(parses)
        {
            let (logger, level) = d.split_once('=').map_or((ROOT, d), |(t, l)| (t, l));
            match tracing_level(level) {
                Some((name, _)) if is_logger_name(logger) => {
                    levels.insert(logger.to_owned(), (name.to_owned(), None));
                }
                _ => kept.push(d.to_owned()),
            }
        }
        Self {
            apply,
            levels: Mutex::new(levels),
            kept,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (String, Option<i64>)>> {
        self.levels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `{"<logger>": {"level", "last_modified"}}`.
    pub fn all(&self) -> Value {
        let levels = self.lock();
        Value::Object(
            levels
                .iter()
                .map(|(k, (l, t))| (k.clone(), json!({ "level": l, "last_modified": t })))
                .collect(),
        )
    }

    /// `{"level", "last_modified"}` of a logger with a level set.
    pub fn get(&self, logger: &str) -> Option<Value> {
        self.lock()
            .get(logger)
            .map(|(l, t)| json!({ "level": l, "last_modified": t }))
    }

    /// Sets `logger` to `level` and applies the filter; answers the loggers changed.
    ///
    /// # Errors
    /// 404 for an unknown level (as Connect), 400 for a bad logger name; 501 without an
    /// [`Apply`].
    pub fn set(&self, logger: &str, level: &str) -> Result<Vec<String>, RestError> {
        let Some((name, _)) = tracing_level(level) else {
            // 404, as Connect's LoggingResource answers an invalid level.
            return Err(RestError::NotFound(format!(
                "invalid log level {level:?}: use one of OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE"
            )));
        };
        if !is_logger_name(logger) {
            return Err(RestError::BadRequest(format!(
                "logger {:?} is not a tracing target (1 to {MAX_LOGGER_NAME_BYTES} of letters, digits, '_', '.', ':', '-')",
                crate::auth::audit::bounded_name(logger)
            )));
        }
        let Some(apply) = &self.apply else {
            return Err(RestError::LoggersUnavailable(
                "this process cannot change its log levels at run time".into(),
            ));
        };
        let mut levels = self.lock();
        let mut next = levels.clone();
        next.insert(logger.to_owned(), (name.to_owned(), Some(now_ms())));
        let directives = directives(&self.kept, &next);
        apply(&directives).map_err(RestError::BadRequest)?;
        *levels = next;
        tracing::info!(logger, level = name, "log level changed");
        Ok(vec![logger.to_owned()])
    }
}

/// The tracing filter for `levels`: the root level, the `kept` directives of the
/// starting filter, then one `target=level` each.
fn directives(kept: &[String], levels: &BTreeMap<String, (String, Option<i64>)>) -> String {
    let level = |l: &str| tracing_level(l).map_or("info", |(_, t)| t);
    let mut out = vec![
        levels
            .get(ROOT)
            .map_or("info", |(l, _)| level(l))
            .to_owned(),
    ];
    out.extend(kept.iter().cloned());
    for (k, (l, _)) in levels.iter().filter(|(k, _)| k.as_str() != ROOT) {
        out.push(format!("{}={}", target(k), level(l)));
    }
    out.join(",")
}

fn now_ms() -> i64 {
    crate::reconcile::now_ms()
}

// ---- the /admin/loggers routes ----

pub(super) async fn all_loggers(State(g): State<Gateway>) -> RestResult {
    ok(g.loggers.all())
}

pub(super) async fn logger(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    match g.loggers.get(&name) {
        Some(v) => ok(v),
        // 404, as Connect answers a logger it does not know.
        None => Err(RestError::NotFound(format!(
            "logger {:?} has no level set; GET /admin/loggers lists those that do",
            crate::auth::audit::bounded_name(&name)
        ))),
    }
}

/// `PUT /admin/loggers/{logger}` `{"level": "DEBUG"}`: 200 with the loggers changed.
pub(super) async fn set_logger(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: RawQuery,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let pairs = query_pairs(&q)?;
    if let Some((_, scope)) = pairs.iter().rev().find(|(k, _)| k == "scope")
        && !scope.eq_ignore_ascii_case("worker")
        && !scope.eq_ignore_ascii_case("cluster")
    {
        return Err(RestError::BadRequest(format!(
            "scope={scope:?}: scope is worker or cluster"
        )));
    }
    let v = json_body(&headers, body).await?;
    if let Some(e) = unknown_field(&v, "the body", SET_LOGGER_FIELDS) {
        return Err(e);
    }
    let Some(Value::String(level)) = v.get("level") else {
        return Err(RestError::BadRequest(
            "the body must be {\"level\": \"DEBUG\"}".into(),
        ));
    };
    let changed = g.loggers.set(&name, level)?;
    // KIP-976: the cluster scope answers 204 without a body (Connect applies it on every
    // worker in the background; here it is this process, docs/rest.md).
    let cluster = pairs
        .iter()
        .rev()
        .find(|(k, _)| k == "scope")
        .is_some_and(|(_, s)| s.eq_ignore_ascii_case("cluster"));
    if cluster {
        return empty(axum::http::StatusCode::NO_CONTENT);
    }
    ok(json!(changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn logger_names_are_1_to_256_bytes_of_target_characters() {
        assert!(is_logger_name("wharf_control_plane::reconcile"));
        assert!(is_logger_name(
            "org.apache.kafka.connect.runtime.WorkerSinkTask"
        ));
        assert!(is_logger_name(&"l".repeat(MAX_LOGGER_NAME_BYTES)));
        assert!(!is_logger_name(&"l".repeat(MAX_LOGGER_NAME_BYTES + 1)));
        assert!(!is_logger_name(""));
        assert!(!is_logger_name("a b"));
    }

    /// Loggers started from `start` whose applied filters land in the returned string.
    fn recording(start: &str) -> (Loggers, Arc<Mutex<String>>) {
        let seen = Arc::new(Mutex::new(String::new()));
        let s = seen.clone();
        let l = Loggers::new(
            start,
            Some(Box::new(move |d: &str| {
                *s.lock().unwrap() = d.to_owned();
                Ok(())
            })),
        );
        (l, seen)
    }

    #[test]
    fn a_level_change_applies_root_then_each_target() {
        let (l, seen) = recording("INFO");
        assert_eq!(
            l.set("wharf_control_plane.reconcile", "debug").unwrap(),
            vec!["wharf_control_plane.reconcile".to_owned()]
        );
        assert_eq!(
            *seen.lock().unwrap(),
            "info,wharf_control_plane::reconcile=debug"
        );
        assert_eq!(
            l.get("wharf_control_plane.reconcile").unwrap()["level"],
            "DEBUG"
        );
        l.set(ROOT, "WARN").unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            "warn,wharf_control_plane::reconcile=debug"
        );
    }

    #[test]
    fn a_change_keeps_what_rust_log_set() {
        let (l, seen) = recording("warn,wharf_executor=debug,[rpc]=trace,bad=loud");
        assert_eq!(l.get(ROOT).unwrap()["level"], "WARN");
        assert_eq!(l.get("wharf_executor").unwrap()["level"], "DEBUG");
        assert!(
            l.get("bad").is_none(),
            "a directive that does not parse is left out"
        );
        l.set("wharf_control_plane::admin", "INFO").unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            "warn,[rpc]=trace,wharf_control_plane::admin=info,wharf_executor=debug"
        );
    }

    #[test]
    fn without_rust_log_root_is_info() {
        let l = Loggers::new("", None);
        assert_eq!(l.get(ROOT).unwrap()["level"], "INFO");
    }

    #[test]
    fn an_unknown_level_is_refused_and_nothing_changes() {
        let l = Loggers::new("INFO", Some(Box::new(|_: &str| Ok(()))));
        assert!(matches!(l.set("x", "LOUD"), Err(RestError::NotFound(_))));
        assert!(l.get("x").is_none());
    }

    #[test]
    fn without_apply_changes_are_refused() {
        let l = Loggers::new("INFO", None);
        assert!(matches!(
            l.set("x", "DEBUG"),
            Err(RestError::LoggersUnavailable(_))
        ));
    }
}
