//! Numbers on bubblewrap's command line, read the way its C library calls
//! read them (`strtol`, `strtoul`, `strtoull`), so that every string
//! bubblewrap accepts is accepted here with the same value and every string
//! it refuses is refused: leading white space and a sign are allowed where C
//! allows them, values out of range saturate, and an `int` keeps the low 32
//! bits of a `long`.

/// What `strto*` read: the magnitude with its sign, and whether the whole
/// string was used (`*endptr == '\0'`) with at least one digit.
struct Scanned {
    negative: bool,
    /// The magnitude, `None` when it does not fit in 64 bits.
    magnitude: Option<u64>,
    complete: bool,
}

fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// The digits of `text` in `base` (0: C's prefix rules), after optional
/// white space and sign.
fn scan(text: &[u8], base: u32) -> Scanned {
    let mut rest = text;
    while let Some((first, tail)) = rest.split_first() {
        if !is_c_space(*first) {
            break;
        }
        rest = tail;
    }
    let mut negative = false;
    if let Some((sign @ (b'+' | b'-'), tail)) = rest.split_first() {
        negative = *sign == b'-';
        rest = tail;
    }
    let mut base = base;
    let has_hex_prefix = |s: &[u8]| matches!(s, [b'0', b'x' | b'X', digit, ..] if char::from(*digit).is_ascii_hexdigit());
    if (base == 0 || base == 16) && has_hex_prefix(rest) {
        rest = rest.get(2..).unwrap_or_default();
        base = 16;
    } else if base == 0 {
        base = if rest.first() == Some(&b'0') { 8 } else { 10 };
    }
    let mut magnitude = Some(0u64);
    let mut digits = 0usize;
    for byte in rest {
        let Some(digit) = char::from(*byte).to_digit(base) else {
            break;
        };
        magnitude = magnitude
            .and_then(|m| m.checked_mul(u64::from(base)))
            .and_then(|m| m.checked_add(u64::from(digit)));
        digits += 1;
    }
    Scanned {
        negative,
        magnitude,
        complete: digits > 0 && digits == rest.len(),
    }
}

/// `(int) strtol(text, &end, 10)` when `text` is non-empty and fully used,
/// as bubblewrap reads fds, uids and gids; `None` otherwise. The caller
/// refuses negative results, as bubblewrap does.
pub fn c_int(text: &[u8]) -> Option<i32> {
    let scanned = scan(text, 10);
    if !scanned.complete {
        return None;
    }
    // strtol saturates at LONG_MIN / LONG_MAX.
    let long: i64 = match (scanned.negative, scanned.magnitude) {
        (false, Some(m)) => i64::try_from(m).unwrap_or(i64::MAX),
        (false, None) => i64::MAX,
        (true, Some(m)) => 0i64.checked_sub_unsigned(m).unwrap_or(i64::MIN),
        (true, None) => i64::MIN,
    };
    // The conversion to int keeps the low 32 bits.
    let low = long.to_le_bytes();
    Some(i32::from_le_bytes([low[0], low[1], low[2], low[3]]))
}

/// `strtoul(text, &end, base)` when `text` is non-empty and fully used.
/// A minus sign negates in unsigned arithmetic; overflow gives `u64::MAX`.
pub fn c_ulong(text: &[u8], base: u32) -> Option<u64> {
    let scanned = scan(text, base);
    if !scanned.complete {
        return None;
    }
    let value = scanned.magnitude.unwrap_or(u64::MAX);
    Some(if scanned.negative && scanned.magnitude.is_some() {
        value.wrapping_neg()
    } else {
        value
    })
}

/// `--size`: bubblewrap wants a leading digit (no sign, no space), a value
/// `strtoull(text, &end, 0)` reads whole without overflow, and not zero.
pub fn c_size(text: &[u8]) -> Option<u64> {
    if !text.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let scanned = scan(text, 0);
    match (scanned.complete, scanned.magnitude) {
        (true, Some(size)) if size != 0 => Some(size),
        _ => None,
    }
}

/// The leading number libcap's `cap_from_name` reads from a capability name
/// that starts with a digit: `strtoul(text, &end, 0)`, the rest ignored.
pub fn c_leading_ulong(text: &[u8]) -> Option<u64> {
    let end = text
        .iter()
        .position(|byte| !byte.is_ascii_alphanumeric())
        .unwrap_or(text.len());
    // Read the longest prefix that parses, as strtoul stops at the first
    // character that is not a digit of the base.
    (1..=end).rev().find_map(|len| c_ulong(text.get(..len)?, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_are_read_like_strtol_into_an_int() {
        assert_eq!(c_int(b"5"), Some(5));
        assert_eq!(c_int(b"+5"), Some(5));
        assert_eq!(c_int(b" 5"), Some(5));
        assert_eq!(c_int(b"-0"), Some(0));
        assert_eq!(c_int(b"-5"), Some(-5));
        assert_eq!(c_int(b""), None);
        assert_eq!(c_int(b" "), None);
        assert_eq!(c_int(b"5 "), None);
        assert_eq!(c_int(b"0x5"), None);
        // LONG_MAX as an int is -1, LONG_MIN is 0.
        assert_eq!(c_int(b"99999999999999999999"), Some(-1));
        assert_eq!(c_int(b"-99999999999999999999"), Some(0));
        assert_eq!(c_int(b"4294967297"), Some(1));
        assert_eq!(c_int(b"2147483648"), Some(i32::MIN));
    }

    #[test]
    fn octal_modes_are_read_like_strtoul() {
        assert_eq!(c_ulong(b"0755", 8), Some(0o755));
        assert_eq!(c_ulong(b" 755", 8), Some(0o755));
        assert_eq!(c_ulong(b"-0", 8), Some(0));
        assert_eq!(c_ulong(b"-1", 8), Some(u64::MAX));
        assert_eq!(c_ulong(b"8", 8), None);
        assert_eq!(c_ulong(b"", 8), None);
    }

    #[test]
    fn sizes_take_c_prefixes_but_no_sign_or_space() {
        assert_eq!(c_size(b"65536"), Some(65536));
        assert_eq!(c_size(b"0x10"), Some(16));
        assert_eq!(c_size(b"010"), Some(8));
        assert_eq!(c_size(b"0"), None);
        assert_eq!(c_size(b" 5"), None);
        assert_eq!(c_size(b"+5"), None);
        assert_eq!(c_size(b"0x"), None);
        assert_eq!(c_size(b"99999999999999999999"), None);
    }

    #[test]
    fn leading_numbers_ignore_what_follows() {
        assert_eq!(c_leading_ulong(b"21abc"), Some(21));
        assert_eq!(c_leading_ulong(b"0x15"), Some(21));
        assert_eq!(c_leading_ulong(b"08"), Some(0));
    }
}
