//! Output: aligned tables and ages as kubectl prints them, and API objects as YAML or
//! JSON. Pure functions of their inputs (the caller passes `now`), so the golden tests
//! pin them down.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::cli::Output;

/// Columns separated by three spaces, headers in capitals, the last column unpadded.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, each ending in `\n`.
    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                if i + 1 == columns {
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(width - cell.chars().count() + 3));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.headers);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

/// Prints `value` as YAML or JSON (`Output::Table` is the caller's job).
pub fn print_value(output: Output, value: &Value) -> anyhow::Result<()> {
    print!("{}", value_text(output, value)?);
    Ok(())
}

/// `value` as YAML or as pretty JSON, ending in a newline.
pub fn value_text(output: Output, value: &Value) -> anyhow::Result<String> {
    Ok(match output {
        Output::Yaml => yaml_serde::to_string(value)?,
        Output::Json | Output::Table => format!("{}\n", serde_json::to_string_pretty(value)?),
    })
}

/// Age of something created at `created`, as kubectl prints it (`45s`, `3m12s`, `5h`,
/// `2d4h`, `120d`); `<unknown>` without a time.
pub fn age(created: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match created {
        Some(created) => human_duration((now - created).to_std().unwrap_or(Duration::ZERO)),
        None => "<unknown>".into(),
    }
}

/// kubectl's `HumanDuration`.
pub fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        let d = hours / 24;
        return if h == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    format!("{}y", hours / 24 / 365)
}

/// A list of strings joined by `,`, or `<none>`.
pub fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "<none>".into()
    } else {
        items.join(",")
    }
}

/// A rate such as `12.5` or `0`.
pub fn rate(value: f64) -> String {
    if value == 0.0 {
        "0".into()
    } else if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_leave_the_last_column_unpadded() {
        let mut table = Table::new(&["NAME", "REGION", "AGE"]);
        table.row(vec!["eu-west".into(), "europe-west1".into(), "5s".into()]);
        table.row(vec!["us".into(), "".into(), "12m".into()]);
        assert_eq!(
            table.render(),
            "NAME      REGION         AGE\neu-west   europe-west1   5s\nus                       12m\n"
        );
    }

    #[test]
    fn ages_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (192, "3m12s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 60 * 7, "5h7m"),
            (30 * 3600, "30h"),
            (2 * 86400 + 4 * 3600, "2d4h"),
            (120 * 86400, "120d"),
            (3 * 365 * 86400, "3y"),
        ];
        for (seconds, text) in cases {
            assert_eq!(
                human_duration(Duration::from_secs(seconds)),
                text,
                "{seconds}"
            );
        }
    }
}
