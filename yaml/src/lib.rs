//! YAML read from users and the network (override values, embedded documents, request bodies,
//! manifests), parsed into `serde_json::Value` within two bounds serde_yaml does not keep:
//!
//! - **Flow nesting** ([`MAX_FLOW_DEPTH`]): serde_yaml's scanner does work proportional to the
//!   open flow collections (`[` and `{`) for every token, so `{a: ` repeated 32,000 times
//!   (160 KB) took 2.6 s before its own depth limit refused it. The text is scanned for its
//!   flow nesting first, in one pass, and refused before serde_yaml sees it.
//! - **Alias expansion** ([`MAX_VALUES`], [`MAX_EXPANDED_BYTES`]): aliases repeat what an
//!   anchor holds, so a few hundred bytes can stand for billions of values, and an alias of a
//!   long string for gigabytes of text; serde_yaml bounds only alias jumps.

mod depth;
mod values;

use serde_json::Value;

pub use depth::flow_depth;

/// Deepest flow nesting a text may have: serde_yaml's own recursion limit, so that nothing it
/// would have parsed is refused.
pub const MAX_FLOW_DEPTH: usize = 128;

/// Most values (scalars, lists and maps) one text may expand to. A million is more than any
/// text without aliases that fits in a ConfigMap (1 MiB) holds, so only alias expansions are
/// refused.
pub const MAX_VALUES: usize = 1_000_000;

/// Most bytes one text may expand to, counting [`VALUE_BYTES`] per value plus the text of each
/// string and map key: 32 MiB, more than a text without aliases that fits in a ConfigMap
/// (1 MiB) expands to, so that only alias expansions are refused.
pub const MAX_EXPANDED_BYTES: usize = 32 * 1024 * 1024;

/// What one value costs of [`MAX_EXPANDED_BYTES`] besides its text.
pub const VALUE_BYTES: usize = 16;

/// Why a text was not read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// serde_yaml refused it (syntax, types, its own limits), or the values ran over
    /// [`MAX_VALUES`].
    #[error("{0}")]
    Parse(#[from] serde_yaml::Error),
    /// Its flow collections nest deeper than [`MAX_FLOW_DEPTH`].
    #[error(
        "flow collections ([...] or {{...}}) nested deeper than {max} levels at line {line}; \
         write the value with less nesting"
    )]
    CheckFlowDepth {
        /// The limit.
        max: usize,
        /// The line (from 1) where the nesting went over it.
        line: usize,
    },
}

impl Error {
    /// Line and column (from 1) where reading stopped, when known.
    pub fn location(&self) -> Option<(usize, usize)> {
        match self {
            Error::Parse(e) => e.location().map(|l| (l.line(), l.column())),
            Error::CheckFlowDepth { line, .. } => Some((*line, 1)),
        }
    }
}

/// Refuses a text whose flow collections nest deeper than [`MAX_FLOW_DEPTH`].
pub fn check_flow_depth(text: &[u8]) -> Result<(), Error> {
    match depth::first_line_deeper_than(text, MAX_FLOW_DEPTH) {
        Some(line) => Err(Error::CheckFlowDepth {
            max: MAX_FLOW_DEPTH,
            line,
        }),
        None => Ok(()),
    }
}

/// One YAML document (JSON is YAML too) as a value, within both bounds.
pub fn parse(text: &str) -> Result<Value, Error> {
    parse_slice(text.as_bytes())
}

/// [`parse`] of bytes (refused unless UTF-8, as serde_yaml does).
pub fn parse_slice(text: &[u8]) -> Result<Value, Error> {
    check_flow_depth(text)?;
    values::bounded(
        serde_yaml::Deserializer::from_slice(text),
        &values::Budget::new(),
    )
}

/// Every document of a multi-document text (`---` between them), within both bounds: the
/// value budget is shared by all of them.
pub fn documents(text: &str) -> Result<Vec<Value>, Error> {
    check_flow_depth(text.as_bytes())?;
    let budget = values::Budget::new();
    serde_yaml::Deserializer::from_str(text)
        .map(|document| values::bounded(document, &budget))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn flow_nesting_past_the_limit_is_refused_before_serde_yaml_reads_it() {
        // 160 KB that took serde_yaml's scanner 2.6 s (development machine, release).
        let bomb = "{a: ".repeat(32_000);
        let started = Instant::now();
        let err = parse(&bomb).unwrap_err();
        assert!(
            matches!(err, Error::CheckFlowDepth { max: 128, line: 1 }),
            "{err}"
        );
        assert!(err.to_string().contains("deeper than 128 levels"), "{err}");
        // Not a timing test: a scan that stops at the limit is far below this on any machine.
        assert!(started.elapsed().as_secs() < 2, "{:?}", started.elapsed());
        let at_the_limit = format!(
            "{}1{}",
            "[".repeat(MAX_FLOW_DEPTH),
            "]".repeat(MAX_FLOW_DEPTH)
        );
        check_flow_depth(at_the_limit.as_bytes()).unwrap();
        let over = format!("a: 1\nb: {}1{}", "[".repeat(129), "]".repeat(129));
        assert_eq!(parse(&over).unwrap_err().location(), Some((2, 1)));
    }

    /// serde_yaml skips a byte order mark at the start of any line: it does not hide brackets
    /// from the scan. (It reads UTF-8 only: UTF-16, which a scan of the bytes would misread, is
    /// refused whatever it holds.)
    #[test]
    fn byte_order_marks_do_not_hide_the_nesting() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let with_bom = format!("\u{FEFF}{deep}");
        assert!(matches!(
            parse(&with_bom),
            Err(Error::CheckFlowDepth { .. })
        ));
        let later = format!("a: 1\n---\n\u{FEFF}{deep}");
        assert!(matches!(
            documents(&later),
            Err(Error::CheckFlowDepth { .. })
        ));
        assert_eq!(
            parse("\u{FEFF}a: [1]").unwrap(),
            serde_json::json!({"a": [1]})
        );
        let mut utf16 = vec![0xFF, 0xFE];
        for unit in "a: [1]".encode_utf16() {
            utf16.extend(unit.to_le_bytes());
        }
        assert!(matches!(parse_slice(&utf16), Err(Error::Parse(_))));
    }

    /// An anchor of 10,000 scalars repeated by 2,000 aliases: 20 million values from 40 KiB,
    /// within serde_yaml's own alias-jump limit.
    fn wide_alias_bomb() -> String {
        let scalars = vec!["x"; 10_000].join(", ");
        let aliases = vec!["*a"; 2_000].join(", ");
        format!("a: &a [{scalars}]\nb: [{aliases}]\n")
    }

    /// A 1 MiB string repeated by 2,000 aliases: 2 GiB from about 1 MiB of text, only 2,002
    /// values.
    #[test]
    fn alias_expansion_of_a_long_string_past_the_byte_limit_is_refused() {
        let text = format!(
            "a: &a {}\nb: [{}]\n",
            "x".repeat(1024 * 1024),
            vec!["*a"; 2_000].join(", ")
        );
        let started = Instant::now();
        let err = parse(&text).unwrap_err();
        assert!(err.to_string().contains("bytes"), "{err}");
        assert!(started.elapsed().as_secs() < 10);
        // The same text without the aliases is read.
        let plain = format!("a: {}\n", "x".repeat(1024 * 1024));
        assert!(parse(&plain).is_ok());
        // Every document of a text shares the byte budget.
        let many = vec![format!("a: {}", "y".repeat(1024 * 1024)); 40].join("\n---\n");
        assert!(documents(&many).unwrap_err().to_string().contains("bytes"));
    }

    #[test]
    fn alias_expansion_past_the_limit_is_refused() {
        let err = parse(&wide_alias_bomb()).unwrap_err();
        assert!(
            err.to_string().contains("more than 1000000 values"),
            "{err}"
        );
        // Shared by the documents of one text: two halves of the bomb do not pass apart.
        let half = format!(
            "a: &a [{}]\nb: [{}]\n",
            vec!["x"; 10_000].join(", "),
            vec!["*a"; 60].join(", ")
        );
        assert!(documents(&format!("{half}---\n{half}")).is_err());
        assert_eq!(documents(&format!("{half}---\n{{}}\n")).unwrap().len(), 2);
    }

    #[test]
    fn ordinary_yaml_and_json_read_as_serde_yaml_reads_them() {
        let text = "a: &x {k: v}\nb: *x\nc: [1, 2.5, true, null, 'q']\nd: |\n  [text]\n";
        let ours = parse(text).unwrap();
        let theirs: Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(
            parse_slice(br#"{"a": [1, {"b": "c"}]}"#).unwrap()["a"][1]["b"],
            "c"
        );
        let err = parse("a: [1\n").unwrap_err();
        assert!(
            matches!(err, Error::Parse(_)) && err.location().is_some(),
            "{err}"
        );
    }
}
