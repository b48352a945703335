//! `search = { ... }`: a case's capacity search, checked (see
//! `crate::capacity` for the search itself).

use indexmap::IndexMap;
use toml::Spanned;

use super::checker::Checker;
use super::model::MAX_CASE_TIME;
use super::template::is_identifier;

/// Most probes a search may be given.
const MAX_PROBES: i64 = 1000;

/// Check `search = { ... }`: a parameter that can be searched, bounds in
/// order, a step, and limits on the search itself.
pub(super) fn search_spec(
    check: &mut Checker,
    raw: &Spanned<super::raw::RawSearch>,
    raw_tolerance: Option<&Spanned<toml::Value>>,
    matrix: &IndexMap<String, Vec<String>>,
) -> Option<crate::capacity::SearchSpec> {
    let spec = raw.get_ref();
    let tolerance = match raw_tolerance {
        None => Some(crate::capacity::Tolerance::default()),
        Some(value) => {
            match value.get_ref() {
                toml::Value::Integer(n) if *n >= 0 => u64::try_from(*n)
                    .ok()
                    .map(crate::capacity::Tolerance::Steps),
                toml::Value::String(text) if text.trim().ends_with('%') => check
                    .relative("capacity_tolerance", value)
                    .filter(|share| *share <= 1.0)
                    .map(crate::capacity::Tolerance::Share),
                _ => {
                    check
                    .error(
                        value.span(),
                        "`capacity_tolerance` is a count of steps (2) or a share (\"5%\")",
                    )
                    .help = Some("how far below the locked capacity a run may land before it is a regression".into());
                    None
                }
            }
        }
    };
    let param = spec.param.get_ref();
    let before = check.problems.len();
    if !is_identifier(param) {
        check.error(
            spec.param.span(),
            format!("`{param}` cannot be a placeholder"),
        );
    } else if matrix.contains_key(param) {
        check.error(
            spec.param.span(),
            format!("`{param}` is both a matrix key and searched: pick one"),
        );
    }
    let number = |check: &mut Checker, key: &str, value: &Spanned<i64>, low: i64, high: i64| {
        let n = *value.get_ref();
        if (low..=high).contains(&n) {
            u64::try_from(n).ok()
        } else {
            check.error(
                value.span(),
                format!("`search.{key}` must be between {low} and {high}, not {n}"),
            );
            None
        }
    };
    let top = if param == crate::capacity::CONCURRENCY {
        1024
    } else {
        i64::from(u32::MAX)
    };
    let min = spec
        .min
        .as_ref()
        .map_or(Some(1), |v| number(check, "min", v, 1, top));
    let max = number(check, "max", &spec.max, 1, top);
    let step = spec
        .step
        .as_ref()
        .map_or(Some(1), |v| number(check, "step", v, 1, top));
    if let (Some(min), Some(max)) = (min, max) {
        if max < min {
            check.error(
                spec.max.span(),
                format!("`search.max` ({max}) is below `search.min` ({min})"),
            );
        }
    }
    // Doubling then bisecting takes about 2·log2(max) probes: 2·⌈log2 max⌉
    // + 2 leaves room for a warm start's two.
    let ceil_log2 = |n: u64| u64::from(64 - n.saturating_sub(1).leading_zeros());
    let default_probes = max.map_or(20, |max| 2 * ceil_log2(max) + 2);
    let max_probes = spec.max_probes.as_ref().map_or(Some(default_probes), |v| {
        number(check, "max_probes", v, 1, MAX_PROBES)
    });
    let timeout = spec.timeout.as_ref().and_then(|text| {
        let timeout = check.bounded_duration("search.timeout", text, MAX_CASE_TIME)?;
        if timeout.is_zero() {
            check.error(text.span(), "`search.timeout` must be longer than zero");
            return None;
        }
        Some(timeout)
    });
    if check.problems.len() > before {
        return None;
    }
    Some(crate::capacity::SearchSpec {
        tolerance: tolerance?,
        param: param.clone(),
        min: min?,
        max: max?,
        step: step?,
        max_probes: u32::try_from(max_probes?).ok()?,
        timeout,
    })
}
