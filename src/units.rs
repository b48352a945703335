//! Human units: byte sizes and durations, parsed from suite files and printed
//! in reports.
//!
//! [`Bytes`] is the one type every memory figure travels in, so a figure can
//! never be mistaken for a count of pages or KiB. Parsing is delegated to
//! `bytesize` (sizes) and `humantime` (durations); this module adds what they
//! leave out for our use: a refusal of figures too large to be meant (the
//! crates saturate silently), and a refusal of a zero sampling interval.
//!
//! Sizes keep both unit systems apart on input (`MB` = 10^6, `MiB` = 2^20)
//! and always print in binary units, since that is what GPU and allocator
//! tools print.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A number of bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

/// The largest size a suite may write: 1 EiB. Anything above is a typo, and
/// refusing it keeps the saturating arithmetic of the parser out of figures.
const MAX_SIZE: u64 = 1 << 60;

/// Why a size or duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

impl Bytes {
    pub const fn from_mib(mib: u64) -> Self {
        Bytes(mib * 1024 * 1024)
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

impl FromStr for Bytes {
    type Err = UnitError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let help =
            "write a size such as `512 MiB`, `2GiB`, `1.5 GiB`, `300 MB` or a number of bytes";
        if trimmed.is_empty() {
            return Err(UnitError(format!("empty size: {help}")));
        }
        if trimmed.starts_with('-') {
            return Err(UnitError(format!("`{trimmed}` is negative: {help}")));
        }
        let parsed: bytesize::ByteSize = trimmed
            .parse()
            .map_err(|_| UnitError(format!("`{trimmed}` is not a size: {help}")))?;
        if parsed.as_u64() > MAX_SIZE {
            return Err(UnitError(format!(
                "`{trimmed}` is larger than 1 EiB, the largest size oomgate accepts"
            )));
        }
        Ok(Bytes(parsed.as_u64()))
    }
}

impl fmt::Display for Bytes {
    /// Binary units with two decimals below 10 and one above, like
    /// `nvidia-smi` and PyTorch print them: `300.0 MiB`, `1.50 GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let shown = bytesize::ByteSize(self.0).display().iec();
        // bytesize picks the unit; we pick the precision from the leading digits.
        let mut value = self.0 as f64;
        while value >= 1024.0 {
            value /= 1024.0;
        }
        if value < 10.0 {
            write!(f, "{shown:.2}")
        } else {
            write!(f, "{shown:.1}")
        }
    }
}

/// Parse a duration such as `50ms`, `30s`, `5m` or `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let trimmed = text.trim();
    humantime::parse_duration(trimmed).map_err(|e| {
        UnitError(format!(
            "`{trimmed}` is not a duration ({e}): write one such as `50ms`, `30s`, `5m` or `1h30m`"
        ))
    })
}

/// Print a duration compactly for tables and messages: `850ms`, `12.3s`, `4m05s`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        let secs = duration.as_secs();
        if secs < 3600 {
            format!("{}m{:02}s", secs / 60, secs % 60)
        } else {
            format!(
                "{}h{:02}m{:02}s",
                secs / 3600,
                (secs % 3600) / 60,
                secs % 60
            )
        }
    }
}

/// A size as reports print it, or `unknown` when it was never observed
/// (never `0 B`: an unknown figure is no zero).
pub fn bytes_or_unknown(bytes: Option<u64>) -> String {
    bytes.map_or("unknown".to_string(), |b| Bytes(b).to_string())
}

/// A measured number as people read it: six significant digits, no
/// trailing zeros (`106.377`, `0.000123457`, `1500`, `2.5e+12` for huge
/// ones). `106.37719068935117` tells a reader nothing the first six do not.
pub fn format_figure(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    if value == value.trunc() && value.abs() < 1e15 {
        return format!("{value:.0}");
    }
    let magnitude = value.abs().log10().floor();
    if !(-4.0..15.0).contains(&magnitude) {
        return format!("{value:.5e}")
            .replace("e", "e+")
            .replace("e+-", "e-")
            .replace(".00000e", "e");
    }
    let decimals = (5.0 - magnitude).clamp(0.0, 12.0) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn sizes_in_both_unit_systems() {
        let table: &[(&str, u64)] = &[
            ("512 MiB", 512 * MIB),
            ("2GiB", 2 * 1024 * MIB),
            ("1.5 GiB", 1536 * MIB),
            ("300 MB", 300_000_000),
            ("300MB", 300_000_000),
            ("1 KB", 1000),
            ("1 KiB", 1024),
            ("4096", 4096),
            ("0", 0),
            ("  64 MiB  ", 64 * MIB),
            ("64 mib", 64 * MIB),
        ];
        for (text, expected) in table {
            assert_eq!(text.parse::<Bytes>(), Ok(Bytes(*expected)), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused_with_advice() {
        for text in [
            "",
            "lots",
            "12 parsecs",
            "-5 MiB",
            "1.2.3 GiB",
            "2 EiB",
            "99999999999 GiB",
        ] {
            let err = text.parse::<Bytes>().expect_err(text);
            assert!(!err.to_string().is_empty(), "{text}");
        }
        let err = "12 parsecs".parse::<Bytes>().unwrap_err().to_string();
        assert!(err.contains("512 MiB"), "{err}");
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(300 * MIB).to_string(), "300.0 MiB");
        assert_eq!(Bytes(1536 * MIB).to_string(), "1.50 GiB");
        assert_eq!(Bytes(300_000_000).to_string(), "286.1 MiB");
        assert_eq!(Bytes(64 * 1024 * 1024 * MIB).to_string(), "64.0 TiB");
    }

    #[test]
    fn durations() {
        let table: &[(&str, Duration)] = &[
            ("50ms", Duration::from_millis(50)),
            ("30s", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1h30m", Duration::from_secs(5400)),
            ("1h 30m", Duration::from_secs(5400)),
            ("2min", Duration::from_secs(120)),
        ];
        for (text, expected) in table {
            assert_eq!(parse_duration(text), Ok(*expected), "{text}");
        }
        for bad in ["", "soon", "10", "-5s", "5 parsecs"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_print_compactly() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(format_duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(format_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m00s");
    }

    #[test]
    fn figures_show_six_significant_digits() {
        for (value, shown) in [
            (106.37719068935117, "106.377"),
            (1500.0, "1500"),
            (0.5, "0.5"),
            (0.000123456789, "0.000123457"),
            (-2.25, "-2.25"),
            (1234567.891, "1234568"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(format_figure(value), shown, "{value}");
        }
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Sizes and durations come from users: any text is an answer or a
        /// clear error, never a panic or an overflow.
        #[test]
        fn any_size_or_duration_text_is_parsed_or_refused(
            text in prop_oneof![
                "\\PC{0,40}",
                "[0-9 .eE+-]{0,30}(B|KB|KiB|MB|MiB|GB|GiB|TB|TiB|PiB|EiB|ms|s|m|h|d|us|ns)?",
            ]
        ) {
            let _ = text.parse::<Bytes>();
            let _ = parse_duration(&text);
        }
    }

    /// Long text is refused or read in time linear in its length.
    #[test]
    fn long_size_and_duration_text_is_bounded() {
        let start = std::time::Instant::now();
        for text in [
            "9".repeat(1_000_000),
            format!("1{} GiB", "0".repeat(1_000_000)),
            "1h".repeat(500_000),
            format!("0.{}1 s", "0".repeat(1_000_000)),
        ] {
            let _ = text.parse::<Bytes>();
            let _ = parse_duration(&text);
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(60));
    }
}
