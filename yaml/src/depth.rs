//! A one-pass scan of a YAML text for how deep its flow collections (`[...]`, `{...}`) nest.
//!
//! It reads only what decides flow nesting: where values start in block context, quoted
//! scalars, comments and block scalars (`|`, `>`). Where it is unsure it counts a bracket
//! rather than skip it, so it may report more nesting than serde_yaml would parse, never less:
//! a text it passes cannot make serde_yaml's scanner slow.

/// The deepest flow nesting of `text`.
pub fn flow_depth(text: &[u8]) -> usize {
    let mut scan = Scan::new(text, usize::MAX);
    scan.run();
    scan.deepest
}

/// The line (from 1) where `text`'s flow nesting first goes deeper than `max`, if it does.
pub(crate) fn first_line_deeper_than(text: &[u8], max: usize) -> Option<usize> {
    let mut scan = Scan::new(text, max);
    scan.run();
    scan.over
}

struct Scan<'a> {
    text: &'a [u8],
    pos: usize,
    /// Line of `pos`, from 1.
    line: usize,
    /// Where the current line starts.
    line_start: usize,
    depth: usize,
    deepest: usize,
    max: usize,
    /// The line where the nesting went over `max`; the scan stops there.
    over: Option<usize>,
}

fn is_blank(b: Option<u8>) -> bool {
    matches!(b, None | Some(b' ' | b'\t' | b'\r' | b'\n'))
}

impl<'a> Scan<'a> {
    fn new(text: &'a [u8], max: usize) -> Scan<'a> {
        Scan {
            text,
            pos: 0,
            line: 1,
            line_start: 0,
            depth: 0,
            deepest: 0,
            max,
            over: None,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.text.get(self.pos + ahead).copied()
    }

    fn column(&self) -> usize {
        self.pos - self.line_start
    }

    /// Moves past one byte, keeping the line count.
    fn bump(&mut self) {
        if self.peek() == Some(b'\n') {
            self.line += 1;
            self.line_start = self.pos + 1;
        }
        self.pos += 1;
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// Moves to the end of the line (before its newline).
    fn skip_line(&mut self) {
        while !matches!(self.peek(), None | Some(b'\n')) {
            self.pos += 1;
        }
    }

    fn run(&mut self) {
        while self.pos < self.text.len() && self.over.is_none() {
            // A byte order mark at the start of a line is skipped, as serde_yaml does.
            if self.text[self.pos..].starts_with("\u{FEFF}".as_bytes()) {
                self.pos += 3;
            }
            self.block_line();
            if self.peek() == Some(b'\n') {
                self.bump();
            }
        }
    }

    /// The rest of a line in block context, from a place where a value may start.
    fn block_line(&mut self) {
        // Column of the last token that starts a node on this line (key, indicator, anchor):
        // a block scalar's content is indented deeper than the key or indicator it belongs to,
        // and a later token is further right, so a line is never skipped that YAML reads as
        // structure.
        let mut node_column: Option<usize> = None;
        loop {
            self.skip_spaces();
            let column = self.column();
            match self.peek() {
                None | Some(b'\n') => return,
                Some(b'#') => return self.skip_line(),
                Some(b'-' | b'?') if is_blank(self.peek_at(1)) => {
                    node_column = Some(column);
                    self.pos += 1;
                }
                Some(b':') if is_blank(self.peek_at(1)) => self.pos += 1,
                Some(b'-')
                    if column == 0
                        && self.text[self.pos..].starts_with(b"---")
                        && is_blank(self.peek_at(3)) =>
                {
                    self.pos += 3;
                }
                Some(b'&' | b'!') => {
                    // An anchor or a tag: the value follows it.
                    node_column = Some(column);
                    while !is_blank(self.peek()) {
                        self.pos += 1;
                    }
                }
                Some(b'[' | b'{') => {
                    self.flow();
                    if self.over.is_some() {
                        return;
                    }
                }
                Some(quote @ (b'"' | b'\'')) => {
                    node_column = Some(column);
                    self.quoted(quote);
                }
                Some(b'|' | b'>') => {
                    let indicator_column = column;
                    self.pos += 1;
                    let explicit_indent = matches!(self.peek(), Some(b'1'..=b'9'))
                        || matches!(self.peek_at(1), Some(b'1'..=b'9'));
                    self.skip_line();
                    if !explicit_indent {
                        // With an explicit indentation the content is read as block context
                        // (counted, never skipped).
                        self.block_scalar(node_column.unwrap_or(indicator_column));
                    }
                    return;
                }
                Some(_) => {
                    node_column = Some(column);
                    // A plain scalar: to the end of the line, a comment, or `: ` after a key.
                    loop {
                        match self.peek() {
                            None | Some(b'\n') => return,
                            Some(b'#')
                                if is_blank(self.text.get(self.pos.wrapping_sub(1)).copied()) =>
                            {
                                return self.skip_line();
                            }
                            Some(b':') if is_blank(self.peek_at(1)) => break,
                            Some(_) => self.pos += 1,
                        }
                    }
                }
            }
        }
    }

    /// Skips the lines of a block scalar: blank lines and lines indented deeper than `parent`.
    fn block_scalar(&mut self, parent: usize) {
        loop {
            if self.peek() != Some(b'\n') {
                return;
            }
            let next = self.pos + 1;
            let rest = &self.text[next..];
            let indent = rest.iter().take_while(|b| **b == b' ').count();
            let after = rest.get(indent).copied();
            let blank_line = matches!(after, None | Some(b'\n' | b'\r'));
            if !blank_line && indent <= parent {
                return;
            }
            self.bump();
            self.skip_line();
        }
    }

    /// Skips a quoted scalar from its opening quote (it may span lines).
    fn quoted(&mut self, quote: u8) {
        self.pos += 1;
        while let Some(b) = self.peek() {
            if b == b'\\' && quote == b'"' {
                self.pos += 1;
                if self.peek().is_some() {
                    self.bump();
                }
                continue;
            }
            if b == quote {
                self.pos += 1;
                if quote == b'\'' && self.peek() == Some(b'\'') {
                    self.pos += 1;
                    continue;
                }
                return;
            }
            self.bump();
        }
    }

    /// A flow collection from its opening bracket to the bracket that closes the outermost one.
    fn flow(&mut self) {
        // Whether a token starts here: only then does a quote open a quoted scalar.
        let mut scalar_start = true;
        // Just after a quoted scalar or a collection: a `:` here is a value indicator even
        // with no blank after it (`{"a":"b"}`, as JSON writes it).
        let mut after_node = false;
        while let Some(b) = self.peek() {
            match b {
                b'[' | b'{' => {
                    self.depth += 1;
                    self.deepest = self.deepest.max(self.depth);
                    if self.depth > self.max {
                        self.over = Some(self.line);
                        return;
                    }
                    self.pos += 1;
                    (scalar_start, after_node) = (true, false);
                }
                b']' | b'}' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.pos += 1;
                    (scalar_start, after_node) = (false, true);
                    if self.depth == 0 {
                        return;
                    }
                }
                b',' => {
                    self.pos += 1;
                    (scalar_start, after_node) = (true, false);
                }
                b':' if after_node || is_blank(self.peek_at(1)) => {
                    self.pos += 1;
                    (scalar_start, after_node) = (true, false);
                }
                b'?' if is_blank(self.peek_at(1)) => {
                    self.pos += 1;
                    (scalar_start, after_node) = (true, false);
                }
                b' ' | b'\t' | b'\r' | b'\n' => self.bump(),
                b'#' if is_blank(self.text.get(self.pos.wrapping_sub(1)).copied()) => {
                    self.skip_line();
                }
                b'"' | b'\'' if scalar_start => {
                    self.quoted(b);
                    (scalar_start, after_node) = (false, true);
                }
                _ => {
                    self.pos += 1;
                    (scalar_start, after_node) = (false, false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_depth_table() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("a: b", 0),
            ("a: [1, 2]", 1),
            ("a: {b: [1, {c: d}]}", 3),
            ("[[[]]]", 3),
            ("a: [1]\nb: [[2]]\n", 2),
            ("- [a]\n- {b: [c]}\n", 2),
            ("--- [[x]]\n", 2),
            ("a: &x [[1]]\nb: !!seq [[[2]]]\n", 3),
            // Brackets inside scalars are not flow collections.
            ("a: b [[[c\n", 0),
            ("a: 'x[[[' \n", 0),
            ("a: \"x\\\"[[[\"\n", 0),
            ("a: 'it''s [[['\n", 0),
            ("a: x # [[[\n", 0),
            ("# [[[\na: 1\n", 0),
            ("a: [\"]]]\", '[[[', 1]\n", 1),
            ("a: [b # ]]] [[[\n  , c]\n", 1),
            ("a: |\n  [[[\n  {{{\nb: [1]\n", 1),
            ("a: >-\n  [[[\n\n  [[[\nb: 1\n", 0),
            ("- |\n  [[[\n- [1]\n", 1),
            // Multi-line flow collections.
            ("a: [\n  [1],\n  [2, [3]]\n]\n", 3),
            // A quote in the middle of a plain scalar is a character, not a quote.
            ("a: [don't, [[x]]]\n", 3),
            ("a: {b:'c, [[x]]}\n", 3),
        ];
        for (text, want) in cases {
            assert_eq!(flow_depth(text.as_bytes()), *want, "{text:?}");
        }
    }

    /// Where the scan is unsure, it counts: it may say deeper than serde_yaml parses, never
    /// shallower.
    #[test]
    fn unsure_places_are_counted_not_skipped() {
        // The block scalar's content is not deeper than its key (`key` is at column 2): YAML
        // reads the next line as structure, so its brackets count.
        assert_eq!(flow_depth(b"- key: |\n  [[[x]]]\n"), 3);
        // An explicit indentation indicator: the content is scanned, not skipped.
        assert_eq!(flow_depth(b"a: |2\n  [[x]]\n"), 2);
        // A plain scalar continued on a line starting with a bracket.
        assert_eq!(flow_depth(b"a: b\n  [[c]]\n"), 2);
    }

    #[test]
    fn the_scan_stops_at_the_line_that_goes_over() {
        let text = format!("a: 1\nb: {}\n", "[".repeat(200));
        assert_eq!(first_line_deeper_than(text.as_bytes(), 128), Some(2));
        assert_eq!(first_line_deeper_than(b"a: [[1]]", 2), None);
        assert_eq!(first_line_deeper_than(b"a: [[[1]]]", 2), Some(1));
    }

    /// JSON is all flow: the scan finds exactly the nesting of any JSON text, whatever its
    /// strings hold.
    #[test]
    fn json_texts_nest_exactly_as_their_values() {
        let tricky = serde_json::json!("a [ { ' \" # ] } b");
        let mut values = vec![serde_json::json!(1), tricky.clone()];
        for _ in 0..6 {
            let last = values.last().cloned().unwrap_or_default();
            values.push(serde_json::json!([tricky, {"k # [": last, "q'": "'\"{"}, []]));
        }
        for v in values {
            for text in [
                serde_json::to_string(&v).unwrap(),
                serde_json::to_string_pretty(&v).unwrap(),
            ] {
                assert_eq!(flow_depth(text.as_bytes()), depth_of(&v), "{text}");
                let parsed: serde_json::Value = serde_yaml::from_str(&text).unwrap();
                assert_eq!(parsed, v);
            }
        }
    }

    /// Nesting of a parsed value (block and flow alike), for the comparison above.
    fn depth_of(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
            serde_json::Value::Object(m) => 1 + m.values().map(depth_of).max().unwrap_or(0),
            _ => 0,
        }
    }
}
