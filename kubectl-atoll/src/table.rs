//! Plain-text tables and ages, the way kubectl prints them: upper-case headers, columns separated
//! by three spaces, `<none>` for a missing value, ages such as `5m` or `3d4h`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// What a cell shows when there is no value.
pub const NONE: &str = "<none>";

/// Spaces between two columns (kubectl's tabwriter padding).
const PADDING: usize = 3;

/// A table: headers and rows of cells, one cell per header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// Column headers, upper case.
    pub headers: Vec<&'static str>,
    /// Rows, each with as many cells as there are headers.
    pub rows: Vec<Vec<String>>,
}

/// Appends titled tables to a page, as `Title:` then the table, or `<none>` for an empty one.
pub fn push_sections<'a>(out: &mut String, sections: impl IntoIterator<Item = (&'a str, Table)>) {
    for (title, table) in sections {
        out.push_str(&format!("\n{title}:\n"));
        if table.rows.is_empty() {
            out.push_str(NONE);
            out.push('\n');
        } else {
            out.push_str(&table.render());
        }
    }
}

impl Table {
    /// An empty table with these headers.
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// The cells of column `header`, top to bottom; empty when there is no such column.
    pub fn column(&self, header: &str) -> Vec<&str> {
        match self.headers.iter().position(|h| *h == header) {
            Some(i) => self
                .rows
                .iter()
                .map(|r| r.get(i).map_or("", String::as_str))
                .collect(),
            None => Vec::new(),
        }
    }

    /// The table as text: every column as wide as its widest cell plus padding, the last
    /// column unpadded, one line per row, each line ending in a newline.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<&str> = self.headers.clone();
        for line in std::iter::once(header).chain(
            self.rows
                .iter()
                .map(|r| r.iter().map(String::as_str).collect()),
        ) {
            let mut text = String::new();
            for (i, (cell, width)) in line.iter().zip(&widths).enumerate() {
                text.push_str(cell);
                if i + 1 < widths.len() {
                    let pad = width + PADDING - cell.chars().count();
                    text.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A cell for an optional value: the value, or [`NONE`] when it is missing or empty.
pub fn cell(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => one_line(v),
        _ => NONE.to_owned(),
    }
}

/// `text` on one line: runs of whitespace (newlines included) become one space, so that a
/// multi-line message does not break the table.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How long ago `time` was, as kubectl prints ages (`45s`, `5m`, `3h12m`, `4d`); [`NONE`]
/// without a time.
pub fn age(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        Some(t) => human_duration(now.as_second() - t.0.as_second()),
        None => NONE.to_owned(),
    }
}

/// A duration in seconds as kubectl's `duration.HumanDuration` writes it: more precision for
/// short spans, less for long ones. A small negative value (clock skew) reads as `0s`; a
/// larger one as `<invalid>`.
pub fn human_duration(seconds: i64) -> String {
    const MINUTE: i64 = 60;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;
    const YEAR: i64 = 365 * DAY;
    let s = seconds;
    if s < -1 {
        return "<invalid>".to_owned();
    }
    let s = s.max(0);
    let with = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };
    if s < 2 * MINUTE {
        format!("{s}s")
    } else if s < 10 * MINUTE {
        with(s / MINUTE, "m", s % MINUTE, "s")
    } else if s < 3 * HOUR {
        format!("{}m", s / MINUTE)
    } else if s < 8 * HOUR {
        with(s / HOUR, "h", (s % HOUR) / MINUTE, "m")
    } else if s < 2 * DAY {
        format!("{}h", s / HOUR)
    } else if s < 8 * DAY {
        with(s / DAY, "d", (s % DAY) / HOUR, "h")
    } else if s < 2 * YEAR {
        format!("{}d", s / DAY)
    } else if s < 8 * YEAR {
        with(s / YEAR, "y", (s % YEAR) / DAY, "d")
    } else {
        format!("{}y", s / YEAR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_plus_three_spaces() {
        let mut t = Table::new(&["NAME", "READY", "MESSAGE"]);
        t.rows.push(vec!["a".into(), "True".into(), "fine".into()]);
        t.rows
            .push(vec!["longer-name".into(), "False".into(), String::new()]);
        assert_eq!(
            t.render(),
            "NAME          READY   MESSAGE\n\
             a             True    fine\n\
             longer-name   False\n"
        );
        assert_eq!(t.column("READY"), ["True", "False"]);
        assert!(t.column("MISSING").is_empty());
    }

    #[test]
    fn a_table_without_rows_renders_its_header() {
        assert_eq!(Table::new(&["A", "B"]).render(), "A   B\n");
    }

    #[test]
    fn missing_and_multi_line_values_fit_in_one_cell() {
        assert_eq!(cell(None), "<none>");
        assert_eq!(cell(Some("")), "<none>");
        assert_eq!(cell(Some("apply failed:\n  a\n  b")), "apply failed: a b");
    }

    #[test]
    fn durations_read_like_kubectl_ages() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 12 * 60, "3h12m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 5 * 3600, "2d5h"),
            (8 * 86400, "8d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds}s");
        }
    }

    #[test]
    fn age_counts_from_the_time_to_now() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let then = Time("2026-01-01T00:05:00Z".parse().unwrap());
        assert_eq!(age(Some(&then), now), "5m");
        assert_eq!(age(None, now), "<none>");
    }
}
