//! Kubernetes resource quantities (`40Gi`, `15G`, `40960Mi`, `1e9`) as byte counts.
//!
//! Only what GPU memory needs: a non-negative amount with a binary or decimal
//! suffix. Millis (`500m`) make no sense for bytes and are refused.

use std::fmt;

/// What a memory quantity must look like; quoted in every error.
pub const ACCEPTED_MEMORY: &str =
    "a Kubernetes memory quantity such as 40Gi, 15G, 81920Mi or 1e9 (bytes)";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct QuantityError {
    pub value: String,
    pub reason: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a memory quantity ({}); accepted: {}",
            self.value, self.reason, ACCEPTED_MEMORY
        )
    }
}

/// Bytes in a memory quantity.
pub fn parse_bytes(value: &str) -> Result<u128, QuantityError> {
    let err = |reason| QuantityError {
        value: value.to_string(),
        reason,
    };
    let s = value.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return Err(err("no number"));
    }
    let (mantissa, exponent10, multiplier): (&str, i32, u128) = match suffix {
        "" => (number, 0, 1),
        "Ki" => (number, 0, 1 << 10),
        "Mi" => (number, 0, 1 << 20),
        "Gi" => (number, 0, 1 << 30),
        "Ti" => (number, 0, 1 << 40),
        "Pi" => (number, 0, 1 << 50),
        "k" => (number, 3, 1),
        "M" => (number, 6, 1),
        "G" => (number, 9, 1),
        "T" => (number, 12, 1),
        "P" => (number, 15, 1),
        "m" => return Err(err("milli-units are not bytes")),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(0..=18).contains(&exp) {
                return Err(err("exponent out of range 0..=18"));
            }
            (number, exp, 1)
        }
        _ => return Err(err("unknown suffix")),
    };
    // Exact decimal arithmetic: integer part and fraction digits, then scale.
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if digits.len() > 24 {
        return Err(err("too large"));
    }
    let n: u128 = digits.parse().map_err(|_| err("no number"))?;
    let scale = exponent10 - frac_part.len() as i32;
    let whole = n.checked_mul(multiplier).ok_or_else(|| err("too large"))?;
    let bytes = if scale >= 0 {
        whole
            .checked_mul(10u128.pow(scale as u32))
            .ok_or_else(|| err("too large"))?
    } else {
        // A fraction of a byte rounds up: asking for 1.5 bytes needs 2.
        whole.div_ceil(10u128.pow((-scale) as u32))
    };
    if bytes > (1u128 << 70) {
        return Err(err("too large"));
    }
    Ok(bytes)
}

/// MiB in a memory quantity, rounded up (asking for 1 byte more needs 1 MiB more).
pub fn parse_mib(value: &str) -> Result<u64, QuantityError> {
    Ok(parse_bytes(value)?.div_ceil(1 << 20) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(parse_mib("40Gi").unwrap(), 40 * 1024);
        assert_eq!(parse_mib("81920Mi").unwrap(), 81920);
        assert_eq!(parse_mib("1.5Gi").unwrap(), 1536);
        assert_eq!(parse_bytes("15G").unwrap(), 15_000_000_000);
        assert_eq!(parse_bytes("1e9").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_mib("1").unwrap(), 1);
    }

    #[test]
    fn bad_quantities_name_the_value_and_the_accepted_forms() {
        for bad in [
            "", "Gi", "40 Gi", "40GB", "-1Gi", "500m", "1.2.3G", "4e99", "abc", ".",
        ] {
            let e = parse_bytes(bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("accepted"), "{msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = parse_bytes(&s);
        }

        #[test]
        fn gi_roundtrip(n in 0u64..1_000_000) {
            proptest::prop_assert_eq!(parse_mib(&format!("{n}Gi")).unwrap(), n * 1024);
        }
    }
}
