//! Reading one suite value at a time — durations, sizes, shares,
//! tolerances, limits, word choices — into domain types, recording a located
//! problem for each that is wrong. `validate` walks the suite with it.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::located::Diagnostic;
use super::model::{Limit, LimitOp, Tolerances};
use super::raw::RawTolerance;
use crate::units::{Bytes, parse_duration};

pub(super) struct Checker<'s> {
    /// The suite text, for values best kept as written (floats).
    pub(super) source: &'s str,
    pub(super) problems: Vec<Diagnostic>,
}

impl Checker<'_> {
    pub(super) fn error(
        &mut self,
        span: Range<usize>,
        message: impl Into<String>,
    ) -> &mut Diagnostic {
        self.problems.push(Diagnostic::new(Some(span), message));
        let last = self.problems.len() - 1;
        &mut self.problems[last]
    }

    pub(super) fn bounded_duration(
        &mut self,
        key: &str,
        value: &Spanned<String>,
        max: Duration,
    ) -> Option<Duration> {
        let duration = self.duration(key, value)?;
        if duration > max {
            self.error(
                value.span(),
                format!(
                    "`{key}` is longer than {}, the most oomgate accepts",
                    humantime::format_duration(max)
                ),
            );
            return None;
        }
        Some(duration)
    }

    pub(super) fn duration(&mut self, key: &str, value: &Spanned<String>) -> Option<Duration> {
        match parse_duration(value.get_ref()) {
            Ok(duration) => Some(duration),
            Err(e) => {
                self.error(value.span(), format!("`{key}`: {e}"));
                None
            }
        }
    }

    /// One of a few words; the first is the default when the key is unset
    /// (and after an error, so checking goes on).
    pub(super) fn choice<T: Copy>(
        &mut self,
        key: &str,
        value: Option<&Spanned<String>>,
        words: &[(&str, T)],
    ) -> T {
        let default = words[0].1;
        let Some(value) = value else { return default };
        match words
            .iter()
            .find(|(word, _)| *word == value.get_ref().as_str())
        {
            Some((_, choice)) => *choice,
            None => {
                let list: Vec<String> = words
                    .iter()
                    .map(|(word, _)| format!("\"{word}\""))
                    .collect();
                let list = match list.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} or {last}", rest.join(", "))
                    }
                    _ => list.join(""),
                };
                self.error(
                    value.span(),
                    format!("`{key}` must be {list}, not \"{}\"", value.get_ref()),
                );
                default
            }
        }
    }

    /// A share in (0, 1]: `0.9`, or `"90%"`.
    pub(super) fn fraction(&mut self, key: &str, value: &Spanned<toml::Value>) -> Option<f64> {
        match share(value.get_ref()) {
            Some(f) if f > 0.0 && f <= 1.0 => Some(f),
            _ => {
                self.error(value.span(), format!("`{key}` must be a share of the device's memory above 0 and at most 1"))
                    .help = Some("write e.g. 0.9 or \"90%\": the case fails when its peak on any device goes above that share".into());
                None
            }
        }
    }

    /// A tolerance's relative part: `"5%"` or `0.05`, from 0 up to 10 (1000%).
    pub(super) fn relative(&mut self, key: &str, value: &Spanned<toml::Value>) -> Option<f64> {
        match share(value.get_ref()) {
            Some(f) if (0.0..=10.0).contains(&f) => Some(f),
            _ => {
                self.error(
                    value.span(),
                    format!("`{key}` must be a share such as \"5%\" or 0.05, from 0 to 1000%"),
                );
                None
            }
        }
    }

    /// How many locked spreads a figure may move: a number from 0 (off) to 100.
    pub(super) fn spread_k(&mut self, key: &str, value: &Spanned<toml::Value>) -> Option<f64> {
        let number = match value.get_ref() {
            toml::Value::Integer(n) => Some(*n as f64),
            toml::Value::Float(f) => Some(*f),
            _ => None,
        };
        match number {
            Some(k) if (0.0..=100.0).contains(&k) => Some(k),
            _ => {
                self.error(
                    value.span(),
                    format!("`{key}` must be a number from 0 to 100"),
                )
                .help = Some("a run is a regression only beyond max(tolerance, spread_k × the spread `lock --repeat` locked); 0 turns it off".into());
                None
            }
        }
    }

    /// Layer one `tolerance` table over `base`: flat keys for every figure,
    /// then `host` / `gpu` for one.
    pub(super) fn tolerance(
        &mut self,
        base: Tolerances,
        raw: Option<&Spanned<RawTolerance>>,
    ) -> Tolerances {
        let Some(raw) = raw else { return base };
        let raw = raw.get_ref();
        let mut result = base;
        let relative = raw
            .relative
            .as_ref()
            .and_then(|v| self.relative("tolerance.relative", v));
        let absolute = raw
            .absolute
            .as_ref()
            .and_then(|v| self.size("tolerance.absolute", v));
        let spread_k = raw
            .spread_k
            .as_ref()
            .and_then(|v| self.spread_k("tolerance.spread_k", v));
        for figure in [
            &mut result.host,
            &mut result.gpu,
            &mut result.working,
            &mut result.outside,
        ] {
            figure.relative = relative.unwrap_or(figure.relative);
            figure.absolute = absolute.unwrap_or(figure.absolute);
            figure.spread_k = spread_k.unwrap_or(figure.spread_k);
        }
        let Tolerances {
            host,
            gpu,
            working,
            outside,
        } = &mut result;
        for (name, specific, figure) in [
            ("host", &raw.host, host),
            ("gpu", &raw.gpu, gpu),
            ("working", &raw.working, working),
            ("outside", &raw.outside, outside),
        ] {
            let Some(specific) = specific else { continue };
            let specific = specific.get_ref();
            let relative = specific
                .relative
                .as_ref()
                .and_then(|v| self.relative(&format!("tolerance.{name}.relative"), v));
            let absolute = specific
                .absolute
                .as_ref()
                .and_then(|v| self.size(&format!("tolerance.{name}.absolute"), v));
            let spread_k = specific
                .spread_k
                .as_ref()
                .and_then(|v| self.spread_k(&format!("tolerance.{name}.spread_k"), v));
            figure.relative = relative.unwrap_or(figure.relative);
            figure.absolute = absolute.unwrap_or(figure.absolute);
            figure.spread_k = spread_k.unwrap_or(figure.spread_k);
        }
        result
    }

    /// `"<= 40 GiB"`, `">= 1500"` on a probe figure or metric.
    pub(super) fn limit(
        &mut self,
        key: &Spanned<String>,
        value: &Spanned<String>,
    ) -> Option<Limit> {
        let name = key.get_ref().trim();
        let parsed: Result<crate::probe::LimitKey, _> = name.parse();
        let limit_key = match parsed {
            Ok(limit_key) => limit_key,
            Err(unknown) => {
                self.error(key.span(), unknown.to_string()).help = Some(format!(
                    "use {}, `metric.<name>`, `metric.<name>.min` or `metric.<name>.max`",
                    crate::probe::LimitKey::PROBE
                        .map(|k| format!("`{k}`"))
                        .join(", ")
                ));
                return None;
            }
        };
        let text = value.get_ref().trim();
        let (op, rest) = [
            ("<=", LimitOp::AtMost),
            (">=", LimitOp::AtLeast),
            ("<", LimitOp::Below),
            (">", LimitOp::Above),
        ]
        .into_iter()
        .find_map(|(prefix, op)| text.strip_prefix(prefix).map(|rest| (op, rest.trim())))
        .unzip();
        let parsed = rest.and_then(|rest| {
            rest.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .or_else(|| rest.parse::<Bytes>().ok().map(|b| b.get() as f64))
        });
        match (op, parsed) {
            (Some(op), Some(limit)) => Some(Limit {
                key: limit_key,
                op,
                value: limit,
                text: text.to_string(),
            }),
            _ => {
                self.error(value.span(), format!("`{text}` is not a limit")).help =
                    Some("write a comparison and a number or size: \"<= 40 GiB\", \">= 1500\", \"< 0.5\"".into());
                None
            }
        }
    }

    pub(super) fn size(&mut self, key: &str, value: &Spanned<toml::Value>) -> Option<Bytes> {
        let parsed = match value.get_ref() {
            toml::Value::String(text) => text.parse::<Bytes>().map_err(|e| e.to_string()),
            toml::Value::Integer(n) => u64::try_from(*n)
                .map(Bytes)
                .map_err(|_| format!("`{n}` is negative: a size cannot be")),
            other => Err(format!(
                "expected a size such as \"512 MiB\", found a {}",
                other.type_str()
            )),
        };
        parsed
            .map_err(|message| self.error(value.span(), format!("`{key}`: {message}")))
            .ok()
    }
}

/// `0.9`, `1`, or `"90%"` as a number; `None` when it is neither.
fn share(value: &toml::Value) -> Option<f64> {
    match value {
        toml::Value::Float(f) => Some(*f),
        toml::Value::Integer(n) => Some(*n as f64),
        toml::Value::String(text) => text
            .trim()
            .strip_suffix('%')
            .and_then(|number| number.trim().parse::<f64>().ok())
            .map(|percent| percent / 100.0),
        _ => None,
    }
    .filter(|f| f.is_finite())
}
