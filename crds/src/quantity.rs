//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `1e3`) as whole thousandths of their
//! unit ("milli-units"), the one parser every component uses: the agent to sum its nodes, the hub
//! to check what agents report, the scheduler to divide replicas by capacity.
//!
//! Milli-units make cpu exact (`100m` = 100); fractions of a milli-unit round up, like
//! Kubernetes' `MilliValue`. Values are `i128`, so that any sum a real cluster reaches fits; a
//! quantity beyond that is refused as too large rather than wrapped or saturated, and no input
//! makes the parser panic (it is fuzzed).

use crate::Error;

/// Parses `text` into milli-units (`1` → 1000, `250m` → 250, `1Ki` → 1_024_000). Negative
/// quantities are refused: capacities, requests and allocatable amounts never are.
pub fn parse_milli(text: &str) -> Result<i128, Error> {
    let bad = |reason: &str| Error::ParseQuantity {
        quantity: text.chars().take(64).collect(),
        reason: reason.to_owned(),
    };
    let s = text.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad("expected a number such as 2, 500m or 1.5Gi"));
    }
    if frac_part.contains('.') {
        return Err(bad("more than one decimal point"));
    }
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(bad("too many digits"));
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad("not a number"))?
    };
    let frac_len = i32::try_from(frac_part.len()).map_err(|_| bad("too many digits"))?;
    let (binary_shift, decimal_exp): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        other => {
            let exp = other
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<i32>().ok())
                .filter(|e| (-40..=40).contains(e))
                .ok_or_else(|| {
                    bad("unknown suffix; use one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or e<exp>")
                })?;
            (0, exp)
        }
    };
    if negative && mantissa != 0 {
        return Err(bad("negative quantities are not allowed here"));
    }
    let too_large = || bad("too large");
    // milli = mantissa * 2^binary_shift * 10^(3 + decimal_exp - frac_len)
    let exp10 = 3 + decimal_exp - frac_len;
    let mut value = mantissa
        .checked_mul(1i128 << binary_shift)
        .ok_or_else(too_large)?;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.checked_mul(10).ok_or_else(too_large)?;
        }
    } else {
        // Round up: a fraction of a milli-unit still needs a whole one. Dividing first keeps
        // the arithmetic in range for every mantissa.
        for _ in 0..(-exp10) {
            value = value / 10 + i128::from(value % 10 != 0);
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantities_parse_to_milli_units() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("1", 1_000),
            ("250m", 250),
            ("0.5", 500),
            (".5", 500),
            ("1.5", 1_500),
            ("2k", 2_000_000),
            ("1Ki", 1_024_000),
            ("1.5Gi", 1_610_612_736_000),
            ("1G", 1_000_000_000_000),
            ("1e3", 1_000_000),
            ("100u", 1),
            ("1n", 1),
            ("1500u", 2),
            ("1500n", 1),
            ("+3", 3_000),
            ("-0", 0),
            ("8Ei", 8 * (1i128 << 60) * 1000),
            // The largest mantissa with the smallest unit: rounding must not overflow.
            (
                "999999999999999999999999999999n",
                1_000_000_000_000_000_000_000_000,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_milli(text).unwrap(), *want, "{text}");
        }
    }

    #[test]
    fn malformed_negative_and_overflowing_quantities_are_refused() {
        let cases = [
            ("", "expected a number"),
            ("abc", "expected a number"),
            ("1.2.3", "decimal point"),
            ("1Xi", "unknown suffix"),
            ("-1", "negative"),
            ("1e", "unknown suffix"),
            ("1e41", "unknown suffix"),
            ("m", "expected a number"),
            ("1234567890123456789012345678901", "too many digits"),
            ("999999999999999999999999999999e40", "too large"),
            ("999999999999999999999999999999Ei", "too large"),
        ];
        for (text, want) in cases {
            let err = parse_milli(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Any text at all: an answer, never a panic.
        #[test]
        fn any_text_parses_or_is_refused_without_panicking(text in "\\PC{0,40}") {
            let _ = parse_milli(&text);
        }

        /// Text shaped like a quantity, with extreme digit counts and exponents.
        #[test]
        fn quantity_shaped_text_never_panics(
            sign in "[+-]?",
            int in "[0-9]{0,35}",
            frac in "(\\.[0-9]{0,35})?",
            suffix in "(|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e-?[0-9]{1,3}|E[0-9]{1,3})",
        ) {
            let text = format!("{sign}{int}{frac}{suffix}");
            if let Ok(v) = parse_milli(&text) {
                prop_assert!(v >= 0, "{text} -> {v}");
            }
        }

        /// Whole numbers of a unit scale exactly.
        #[test]
        fn whole_numbers_scale_exactly(n in 0u64..u64::MAX, unit in 0usize..4) {
            let (suffix, factor): (&str, i128) =
                [("", 1_000), ("k", 1_000_000), ("Ki", 1_024_000), ("m", 1)][unit];
            prop_assert_eq!(parse_milli(&format!("{n}{suffix}")).unwrap(), i128::from(n) * factor);
        }
    }
}
