//! RFC 3339 timestamps as metav1.Time handles them: parsed to Unix seconds (for sorting
//! managers) and printed in UTC with second precision.

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn num(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Unix seconds of an RFC 3339 timestamp (`2026-11-24T11:00:00Z`,
/// `2026-11-24T12:00:00.5+01:00`); None when it is not one.
pub(crate) fn unix_seconds(s: &str) -> Option<i64> {
    let (date, rest) = s.split_once(['T', 't'])?;
    let mut dp = date.splitn(3, '-');
    let (y, mo, d) = (num(dp.next()?)?, num(dp.next()?)?, num(dp.next()?)?);
    let (clock, offset) = if let Some(c) = rest.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else {
        let idx = rest.rfind(['+', '-'])?;
        let (c, off) = rest.split_at(idx);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':')?;
        (c, sign * (num(oh)? * 3600 + num(om)? * 60))
    };
    let clock = clock.split('.').next()?;
    let mut cp = clock.splitn(3, ':');
    let (h, mi, sec) = (num(cp.next()?)?, num(cp.next()?)?, num(cp.next()?)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset)
}

/// `2026-11-24T11:00:00Z` for Unix seconds.
pub(crate) fn format_utc(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The timestamp in metav1.Time's form (UTC, seconds); unparseable input is kept.
pub(crate) fn normalize(s: &str) -> String {
    unix_seconds(s)
        .map(format_utc)
        .unwrap_or_else(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_rfc3339() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            unix_seconds("2026-11-24T11:00:00Z")
                .map(format_utc)
                .unwrap(),
            "2026-11-24T11:00:00Z"
        );
        assert_eq!(
            normalize("2026-11-24T12:30:00.25+01:30"),
            "2026-11-24T11:00:00Z"
        );
        assert_eq!(unix_seconds("yesterday"), None);
    }
}
