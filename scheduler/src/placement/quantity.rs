//! Kubernetes resource quantities as `i64` milli-units for placement: the project's one parser
//! ([`atoll_crds::quantity`]), saturated at `i64::MAX` (one exbibyte is about 1.15e21
//! milli-bytes, beyond `i64`, and far more than any cluster has).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::Error;

/// Parses `quantity` into milli-units (`1` → 1000, `250m` → 250, `1Ki` → 1_024_000).
pub fn parse_milli(quantity: &Quantity) -> Result<i64, Error> {
    parse_milli_str(&quantity.0)
}

/// [`parse_milli`] on a plain string: [`atoll_crds::quantity::parse_milli`], saturated at
/// `i64::MAX` (eight exbibytes of memory in milli-bytes, more than any cluster has).
pub fn parse_milli_str(text: &str) -> Result<i64, Error> {
    atoll_crds::quantity::parse_milli(text)
        .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
        .map_err(|e| match e {
            atoll_crds::Error::ParseQuantity { quantity, reason } => {
                Error::ParseQuantity { quantity, reason }
            }
            other => Error::ParseQuantity {
                quantity: text.to_owned(),
                reason: other.to_string(),
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parsing itself is tested (and fuzzed) in `atoll_crds::quantity`; here, what the
    /// scheduler adds: saturation at `i64::MAX` and its own error.
    #[test]
    fn quantities_saturate_at_i64_max() {
        for (text, want) in [("250m", 250), ("1Ki", 1_024_000), ("8Ei", i64::MAX)] {
            assert_eq!(parse_milli_str(text).unwrap(), want, "{text}");
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
