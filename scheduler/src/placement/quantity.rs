//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `1e3`) as integer milli-units.
//!
//! Milli-units make cpu exact (`100m` = 100) and keep memory in range: one exbibyte is about
//! 1.15e21 milli-bytes, beyond `i64`, so values saturate at `i64::MAX`, which is far more than
//! any cluster has. Fractions of a milli-unit round up, like Kubernetes' `MilliValue`.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::Error;

/// Parses `quantity` into milli-units (`1` → 1000, `250m` → 250, `1Ki` → 1_024_000).
pub fn parse_milli(quantity: &Quantity) -> Result<i64, Error> {
    parse_milli_str(&quantity.0)
}

/// [`parse_milli`] on a plain string.
pub fn parse_milli_str(text: &str) -> Result<i64, Error> {
    let bad = |reason: &str| Error::ParseQuantity {
        quantity: text.to_owned(),
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
    // mantissa = digits without the point, scaled by 10^-frac_len
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
    // milli = mantissa * 2^binary_shift * 10^(3 + decimal_exp - frac_len)
    let exp10 = 3 + decimal_exp - frac_len;
    let scaled = mantissa.checked_mul(1i128 << binary_shift);
    let value = match scaled {
        None => i128::MAX,
        Some(v) if exp10 >= 0 => {
            let mut v = v;
            for _ in 0..exp10 {
                v = v.saturating_mul(10);
            }
            v
        }
        Some(v) => {
            let mut div: i128 = 1;
            for _ in 0..(-exp10) {
                div = div.saturating_mul(10);
            }
            // round up: a fraction of a milli-unit still needs a whole one
            (v + div - 1) / div
        }
    };
    Ok(i64::try_from(value).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_milli_units() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("1", 1_000),
            ("250m", 250),
            ("0.5", 500),
            (".5", 500),
            ("1.5", 1_500),
            ("2k", 2_000_000),
            ("1Ki", 1_024_000),
            ("1.5Gi", 1_610_612_736_000),
            ("128Mi", 134_217_728_000),
            ("1G", 1_000_000_000_000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("100u", 1),
            ("1n", 1),
            ("110", 110_000),
            ("+3", 3_000),
            ("8Ei", i64::MAX),
        ];
        for (text, want) in cases {
            assert_eq!(parse_milli_str(text).unwrap(), *want, "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_rejected() {
        for text in ["", "abc", "1.2.3", "1Xi", "-1", "1e", "m"] {
            let err = parse_milli_str(text).unwrap_err();
            assert_eq!(err.label(), "parse_quantity", "{text}");
        }
    }
}
