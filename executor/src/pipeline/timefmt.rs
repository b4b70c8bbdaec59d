//! Dates in UTC without a time library: the civil calendar from Unix days, ISO 8601 text,
//! and the subset of `java.text.SimpleDateFormat` patterns that `TimestampConverter`
//! and `TimestampRouter` take (Connect formats and parses in UTC).
//!
//! Pattern letters supported: `y` (`yy`: two digits), `M` (`MMM`: `Jan`, `MMMM`:
//! `January`), `d`, `H`, `m`, `s`, `S`, `Z` (`+0000`), `X` (`Z` for UTC), `'quoted
//! text'`, and any character that is not a letter. Any other letter is refused when the
//! transform is configured, naming it.

/// Milliseconds in a day.
pub const MS_PER_DAY: i64 = 86_400_000;

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `(year, month 1..=12, day 1..=31)` of Unix day `days`.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Unix day of `(year, month, day)`.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The broken-down UTC time of `ms` since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parts {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    milli: u32,
}

fn parts(ms: i64) -> Parts {
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    Parts {
        year,
        month,
        day,
        hour: (in_day / 3_600_000) as u32,
        minute: (in_day / 60_000 % 60) as u32,
        second: (in_day / 1000 % 60) as u32,
        milli: (in_day % 1000) as u32,
    }
}

/// `yyyy-MM-dd`.
pub fn format_iso_date(ms: i64) -> String {
    let p = parts(ms);
    format!("{:04}-{:02}-{:02}", p.year, p.month, p.day)
}

/// `HH:mm:ss.SSS'Z'`.
pub fn format_iso_time(ms: i64) -> String {
    let p = parts(ms);
    format!(
        "{:02}:{:02}:{:02}.{:03}Z",
        p.hour, p.minute, p.second, p.milli
    )
}

/// `yyyy-MM-dd'T'HH:mm:ss.SSS'Z'`.
pub fn format_iso_timestamp(ms: i64) -> String {
    format!("{}T{}", format_iso_date(ms), format_iso_time(ms))
}

/// One piece of a parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A pattern letter repeated `count` times.
    Field(char, usize),
    /// Text written and expected as is.
    Literal(String),
}

/// A `SimpleDateFormat` pattern (the subset in the module doc), in UTC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatePattern {
    tokens: Vec<Token>,
}

impl DatePattern {
    /// Parses `pattern`.
    ///
    /// # Errors
    /// A pattern letter outside the supported subset, or an unclosed quote.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        let mut tokens = Vec::new();
        let chars: Vec<char> = pattern.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                let mut text = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(format!("unterminated quote in date pattern {pattern:?}"));
                        }
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            text.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(ch) => {
                            text.push(*ch);
                            i += 1;
                        }
                    }
                }
                if text.is_empty() {
                    text.push('\'');
                }
                tokens.push(Token::Literal(text));
            } else if c.is_ascii_alphabetic() {
                let mut n = 1;
                while chars.get(i + n) == Some(&c) {
                    n += 1;
                }
                if !matches!(c, 'y' | 'M' | 'd' | 'H' | 'm' | 's' | 'S' | 'Z' | 'X') {
                    return Err(format!(
                        "date pattern letter '{c}' is not supported by Wharf (supported: y M d H m s S Z X and quoted text)"
                    ));
                }
                tokens.push(Token::Field(c, n));
                i += n;
            } else {
                tokens.push(Token::Literal(c.to_string()));
                i += 1;
            }
        }
        Ok(Self { tokens })
    }

    /// `ms` since the epoch as text in UTC.
    pub fn format(&self, ms: i64) -> String {
        let p = parts(ms);
        let mut out = String::new();
        for t in &self.tokens {
            match t {
                Token::Literal(s) => out.push_str(s),
                Token::Field(c, n) => {
                    let n = *n;
                    let num = |v: i64| format!("{v:0n$}");
                    match c {
                        'y' if n == 2 => out.push_str(&format!("{:02}", p.year.rem_euclid(100))),
                        'y' => out.push_str(&num(p.year)),
                        'M' if n >= 4 => out.push_str(MONTHS[(p.month - 1) as usize]),
                        'M' if n == 3 => out.push_str(&MONTHS[(p.month - 1) as usize][..3]),
                        'M' => out.push_str(&num(i64::from(p.month))),
                        'd' => out.push_str(&num(i64::from(p.day))),
                        'H' => out.push_str(&num(i64::from(p.hour))),
                        'm' => out.push_str(&num(i64::from(p.minute))),
                        's' => out.push_str(&num(i64::from(p.second))),
                        'S' => out.push_str(&num(i64::from(p.milli))),
                        'Z' => out.push_str("+0000"),
                        _ => out.push('Z'),
                    }
                }
            }
        }
        out
    }

    /// Reads `text` written in this pattern (UTC) into ms since the epoch.
    ///
    /// # Errors
    /// Text that does not follow the pattern.
    pub fn parse_text(&self, text: &str) -> Result<i64, String> {
        let bad = || format!("Could not parse timestamp: value ({text}) does not match pattern");
        let (mut year, mut month, mut day, mut hour, mut minute, mut second, mut milli) =
            (1970_i64, 1_u32, 1_u32, 0_u32, 0_u32, 0_u32, 0_u32);
        let mut rest = text;
        for (i, t) in self.tokens.iter().enumerate() {
            match t {
                Token::Literal(s) => rest = rest.strip_prefix(s.as_str()).ok_or_else(bad)?,
                Token::Field('Z' | 'X', _) => {
                    if let Some(r) = rest.strip_prefix('Z') {
                        rest = r;
                    } else if let Some(r) = rest
                        .strip_prefix("+0000")
                        .or_else(|| rest.strip_prefix("+00:00"))
                    {
                        rest = r;
                    } else {
                        return Err(format!("{} (only UTC offsets are read)", bad()));
                    }
                }
                Token::Field('M', n) if *n >= 3 => {
                    let found = MONTHS.iter().position(|m| {
                        let name = if *n == 3 { &m[..3] } else { m };
                        rest.starts_with(name)
                    });
                    let k = found.ok_or_else(bad)?;
                    rest = &rest[if *n == 3 { 3 } else { MONTHS[k].len() }..];
                    month = k as u32 + 1;
                }
                Token::Field(c, n) => {
                    let next_numeric = matches!(self.tokens.get(i + 1), Some(Token::Field(..)));
                    let digits = rest.chars().take_while(char::is_ascii_digit).count();
                    let take = if next_numeric {
                        (*n).min(digits)
                    } else {
                        digits
                    };
                    if take == 0 {
                        return Err(bad());
                    }
                    let v: i64 = rest[..take].parse().map_err(|_| bad())?;
                    rest = &rest[take..];
                    let small = u32::try_from(v).map_err(|_| bad())?;
                    match c {
                        'y' if *n == 2 && take == 2 => year = 2000 + v,
                        'y' => year = v,
                        'M' => month = small,
                        'd' => day = small,
                        'H' => hour = small,
                        'm' => minute = small,
                        's' => second = small,
                        _ => milli = small,
                    }
                }
            }
        }
        if !rest.is_empty() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
            return Err(bad());
        }
        Ok(days_from_civil(year, month, day) * MS_PER_DAY
            + i64::from(hour) * 3_600_000
            + i64::from(minute) * 60_000
            + i64::from(second) * 1000
            + i64::from(milli))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip() {
        for days in [-719_468, -1, 0, 1, 19_000, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }

    #[test]
    fn timestamp_routers_default_pattern_formats_the_day() {
        let p = DatePattern::parse("yyyyMMdd").unwrap();
        assert_eq!(p.format(1_704_067_200_000), "20240101");
        assert_eq!(p.parse_text("20240101").unwrap(), 1_704_067_200_000);
    }

    #[test]
    fn quoted_text_and_milliseconds_are_formatted_and_read_back() {
        let p = DatePattern::parse("yyyy-MM-dd'T'HH:mm:ss.SSSX").unwrap();
        let ms = 1_704_067_200_123 + 3_723_000;
        let text = p.format(ms);
        assert_eq!(text, "2024-01-01T01:02:03.123Z");
        assert_eq!(p.parse_text(&text).unwrap(), ms);
    }

    #[test]
    fn an_unsupported_letter_is_refused_by_name() {
        let e = DatePattern::parse("yyyy-ww").unwrap_err();
        assert!(e.contains("'w'"), "{e}");
    }
}
