//! The audit trail's records: one per mutating admin call of an identified caller,
//! accepted or refused (see
//! [`crate::auth::audit`] and docs/security.md, "Audit trail").

use serde::{Deserialize, Serialize};

/// Default most entries kept; the oldest are removed beyond it.
pub const DEFAULT_AUDIT_MAX_ENTRIES: u64 = 100_000;
/// Default age after which an entry is removed, in days.
pub const DEFAULT_AUDIT_MAX_AGE_DAYS: u32 = 90;
/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// Default page size of ListAuditEntries.
pub const DEFAULT_AUDIT_PAGE_SIZE: usize = 100;
/// Largest page size of ListAuditEntries.
pub const MAX_AUDIT_PAGE_SIZE: usize = 1_000;

/// One admin call in the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Unique and ordered by time: [`AuditEntry::id_for`].
    pub id: String,
    /// When the call was answered, in milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// The authenticated principal's name; `-` when the caller was not authenticated.
    pub principal: String,
    /// Its role (`viewer`, `operator`, `admin`), empty when not authenticated.
    pub role: String,
    /// How it authenticated (`token`, `certificate`, `forwarded-certificate`,
    /// `anonymous`), or `none`.
    pub auth_method: String,
    /// The RPC, e.g. `DeleteConnector`.
    pub rpc: String,
    /// The connector it named (empty when none).
    pub connector: String,
    /// For DeleteConnector: `cleanup`, `keep_resources`, `force` or
    /// `force_keep_resources`; empty otherwise.
    pub deletion_mode: String,
    /// `OK`, or the gRPC status code's name (`PERMISSION_DENIED`, ...).
    pub outcome: String,
    /// The status message when not OK.
    pub message: String,
    /// URL of the follower replica that forwarded the call to this leader, or empty.
    pub forwarded_by: String,
}

impl AuditEntry {
    /// `<time_ms, 20 digits>-<nonce, 16 hex digits>`: sorts by time as text, in every
    /// backend.
    pub fn id_for(time_ms: i64, nonce: u64) -> String {
        format!("{:020}-{nonce:016x}", time_ms.max(0))
    }
}

/// How much of the trail is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditRetention {
    /// Most entries kept; the oldest go first.
    pub max_entries: u64,
    /// Entries older than this many days are removed.
    pub max_age_days: u32,
}

impl Default for AuditRetention {
    fn default() -> Self {
        Self {
            max_entries: DEFAULT_AUDIT_MAX_ENTRIES,
            max_age_days: DEFAULT_AUDIT_MAX_AGE_DAYS,
        }
    }
}

impl AuditRetention {
    /// The id below which entries are too old at `now_ms`.
    pub fn cutoff_id(&self, now_ms: i64) -> String {
        let cutoff = now_ms.saturating_sub(i64::from(self.max_age_days).saturating_mul(DAY_MS));
        AuditEntry::id_for(cutoff, 0)
    }
}

/// A read of the trail: entries in time order (oldest first), filtered, one page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditQuery {
    /// Only this connector's entries (None: all).
    pub connector: Option<String>,
    /// Entries at or after this time, in ms since the epoch.
    pub since_ms: i64,
    /// Entries before this time, in ms since the epoch (None: no bound).
    pub until_ms: Option<i64>,
    /// Entries after this id (the previous page's last; None: from the start).
    pub after: Option<String>,
    /// Page size, 1 to [`MAX_AUDIT_PAGE_SIZE`].
    pub limit: usize,
}

impl AuditQuery {
    /// The id range `[start, end)` to scan.
    pub fn range(&self) -> (String, String) {
        let since = AuditEntry::id_for(self.since_ms, 0);
        let start = match &self.after {
            // The smallest id greater than `after`.
            Some(a) if *a >= since => format!("{a}\u{0}"),
            Some(_) | None => since,
        };
        let end = match self.until_ms {
            Some(u) => AuditEntry::id_for(u, 0),
            // Greater than every id (ids are digits, '-' and hex).
            None => "~".to_owned(),
        };
        (start, end)
    }

    /// Whether `e` passes the connector filter (the range does the rest).
    pub fn matches(&self, e: &AuditEntry) -> bool {
        self.connector.as_ref().is_none_or(|c| *c == e.connector)
    }
}

/// One page of [`AuditQuery`] results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditPage {
    /// Entries, oldest first.
    pub entries: Vec<AuditEntry>,
    /// Where the next page starts (the last entry's id), None when this is the last.
    pub next_after: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_as_text() {
        let a = AuditEntry::id_for(999, u64::MAX);
        let b = AuditEntry::id_for(1_000, 0);
        assert!(a < b);
        assert!(b.as_str() < "~");
    }

    #[test]
    fn a_page_token_starts_after_itself_and_since_until_bound_the_range() {
        let q = AuditQuery {
            since_ms: 10,
            until_ms: Some(20),
            after: Some(AuditEntry::id_for(15, 3)),
            ..Default::default()
        };
        let (start, end) = q.range();
        assert!(start > AuditEntry::id_for(15, 3));
        assert!(start < AuditEntry::id_for(15, 4));
        assert_eq!(end, AuditEntry::id_for(20, 0));
        let q = AuditQuery {
            since_ms: 10,
            after: Some(AuditEntry::id_for(5, 0)),
            ..Default::default()
        };
        assert_eq!(q.range().0, AuditEntry::id_for(10, 0));
    }

    #[test]
    fn the_age_cutoff_is_max_age_days_before_now() {
        let r = AuditRetention {
            max_entries: 1,
            max_age_days: 1,
        };
        assert_eq!(r.cutoff_id(DAY_MS + 5), AuditEntry::id_for(5, 0));
    }
}
