//! Text bounds shared by the binaries: messages from elsewhere (agents, API servers, users) are
//! cut before they go into Events, conditions and status, whose sizes are limited.

/// `text` cut to at most `max` bytes at a character boundary, ending in `…` when it was cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_a_character_boundary_within_the_limit() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdefghij", 6), "abc…");
        let cut = truncate(&"é".repeat(100), 10);
        assert!(cut.len() <= 10 && cut.ends_with('…'), "{cut}");
        assert_eq!(truncate("abc", 0), "…");
    }
}
