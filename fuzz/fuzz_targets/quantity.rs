//! Kubernetes quantity parsing (`atoll_crds::quantity::parse_milli` and the scheduler's
//! saturating `parse_milli_str`).
//!
//! Two inputs in one: any text must parse or be refused without a panic, and a parsed value must
//! round-trip (`{v}m` parses back to `v`); and a quantity built from parts (sign, digits,
//! fraction, suffix) must give exactly the value computed here with big integers, or an error
//! when that value is beyond `i128` (overflow is an error, never a wrapped or saturated value).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use num_bigint::BigInt;

#[derive(Arbitrary, Debug)]
enum Input {
    /// Arbitrary text.
    Text(String),
    /// A quantity-shaped text.
    Shaped(Shaped),
}

#[derive(Arbitrary, Debug)]
struct Shaped {
    sign: Sign,
    leading_zeros: u8,
    int: Vec<Digit>,
    /// `Some` writes a decimal point, then these digits.
    frac: Option<Vec<Digit>>,
    suffix: Suffix,
    spaces: bool,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Sign {
    None,
    Plus,
    Minus,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Digit(u8);

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Suffix {
    /// One of the named suffixes, by index.
    Named(u8),
    /// `e<exp>` or `E<exp>`.
    Exp { upper: bool, exp: i8 },
}

const NAMED: [(&str, u32, i32); 16] = [
    ("", 0, 0),
    ("Ki", 10, 0),
    ("Mi", 20, 0),
    ("Gi", 30, 0),
    ("Ti", 40, 0),
    ("Pi", 50, 0),
    ("Ei", 60, 0),
    ("n", 0, -9),
    ("u", 0, -6),
    ("m", 0, -3),
    ("k", 0, 3),
    ("M", 0, 6),
    ("G", 0, 9),
    ("T", 0, 12),
    ("P", 0, 15),
    ("E", 0, 18),
];

fn check_text(text: &str) {
    let Ok(v) = atoll_crds::quantity::parse_milli(text) else {
        // Refused: the scheduler's wrapper refuses it too.
        assert!(atoll_scheduler::placement::quantity::parse_milli_str(text).is_err());
        return;
    };
    assert!(v >= 0, "{text:?} parsed to a negative {v}");
    // Round trip through the milli-unit form and through the shortest exponent form, where
    // they stay within the 30 significant digits the parser reads (its documented limit).
    let milli = v.to_string();
    if milli.len() <= 30 {
        assert_eq!(
            atoll_crds::quantity::parse_milli(&format!("{milli}m")).ok(),
            Some(v),
            "{text:?} -> {v} does not round-trip as {v}m"
        );
    }
    let mantissa = milli.trim_end_matches('0');
    let zeros = milli.len() - mantissa.len();
    if v != 0 && mantissa.len() <= 30 {
        let short = format!("{mantissa}e{}", zeros as i64 - 3);
        assert_eq!(
            atoll_crds::quantity::parse_milli(&short).ok(),
            Some(v),
            "{text:?} -> {v} does not round-trip as {short}"
        );
    }
    // The scheduler saturates at i64::MAX, never wraps.
    let s = atoll_scheduler::placement::quantity::parse_milli_str(text);
    assert_eq!(
        s.ok(),
        Some(i64::try_from(v).unwrap_or(i64::MAX)),
        "{text:?}"
    );
}

fn check_shaped(q: &Shaped) {
    let digit = |d: &Digit| char::from(b'0' + d.0 % 10);
    let int: String = std::iter::repeat_n('0', usize::from(q.leading_zeros % 4))
        .chain(q.int.iter().map(digit))
        .collect();
    let frac: Option<String> = q.frac.as_ref().map(|f| f.iter().map(digit).collect());
    let (suffix, shift, exp) = match q.suffix {
        Suffix::Named(i) => {
            let (s, shift, exp) = NAMED[usize::from(i) % NAMED.len()];
            (s.to_owned(), shift, exp)
        }
        Suffix::Exp { upper, exp } => (
            format!("{}{exp}", if upper { 'E' } else { 'e' }),
            0,
            i32::from(exp),
        ),
    };
    let sign = match q.sign {
        Sign::None => "",
        Sign::Plus => "+",
        Sign::Minus => "-",
    };
    let number = match &frac {
        Some(f) => format!("{int}.{f}"),
        None => int.clone(),
    };
    let pad = if q.spaces { " " } else { "" };
    let text = format!("{pad}{sign}{number}{suffix}{pad}");
    let got = atoll_crds::quantity::parse_milli(&text);
    check_text(&text);

    let frac = frac.unwrap_or_default();
    if int.is_empty() && frac.is_empty() {
        assert!(got.is_err(), "{text:?} has no digits but parsed");
        return;
    }
    // `e` / `E` followed by an exponent the parser does not accept.
    if matches!(q.suffix, Suffix::Exp { .. }) && !(-40..=40).contains(&exp) {
        assert!(got.is_err(), "{text:?}: exponent out of range accepted");
        return;
    }
    let digits = format!("{int}{frac}");
    let mantissa: BigInt = digits.parse().unwrap_or_default();
    if matches!(q.sign, Sign::Minus) && mantissa != BigInt::from(0) {
        assert!(got.is_err(), "{text:?}: a negative quantity was accepted");
        return;
    }
    // milli = ceil(mantissa * 2^shift * 10^(3 + exp - frac_len))
    let exp10 = 3 + exp - i32::try_from(frac.len()).unwrap_or(i32::MAX);
    let scaled = mantissa << shift;
    let exact = if exp10 >= 0 {
        scaled * BigInt::from(10).pow(exp10.unsigned_abs())
    } else {
        let den = BigInt::from(10).pow(exp10.unsigned_abs());
        (scaled + &den - 1) / den
    };
    match got {
        Ok(v) => assert_eq!(BigInt::from(v), exact, "{text:?}"),
        Err(_) => {
            // Refusals are allowed for too many digits, and must happen beyond i128.
            let significant = digits.trim_start_matches('0').len();
            assert!(
                significant > 30
                    || exact > BigInt::from(i128::MAX)
                    || intermediate_overflows(&digits, shift),
                "{text:?} refused although its value {exact} fits"
            );
        }
    }
}

/// The parser scales by the binary suffix before dividing by a negative power of ten; a
/// mantissa that overflows there is refused even when the final value would fit.
fn intermediate_overflows(digits: &str, shift: u32) -> bool {
    let m: BigInt = digits.parse().unwrap_or_default();
    (m << shift) > BigInt::from(i128::MAX)
}

fuzz_target!(|input: Input| {
    match input {
        Input::Text(t) => check_text(&t),
        Input::Shaped(q) => check_shaped(&q),
    }
});
