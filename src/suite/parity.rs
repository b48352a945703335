//! `[[parity]]`: one case against another of the same run, a gate that
//! holds on any hardware.
//!
//! ```toml
//! [[parity]]
//! lhs = "train-offload"
//! rhs = "train"
//! figure = "gpu_peak"
//! rule = "lhs <= 0.6 * rhs"
//! ```
//!
//! The rule is `lhs OP [K *] rhs [± AMOUNT]` (or `rhs * K`), `OP` one of
//! `<=`, `<`, `>=`, `>`, `AMOUNT` in the figure's unit: a size for a
//! memory figure, a duration for `wall_time`, a number for `output.<name>`.
//! It is read here, at load, and again by `oomgate merge` from what
//! results.json recorded ([`Parity::read`]); the judge
//! (`judge::parity`) applies it.

use toml::Spanned;

use super::case::Case;
use super::checker::Checker;
use super::raw::RawParity;

/// A figure two cases are compared on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParityFigure {
    /// `gpu_peak`: the GPU peak over the case's devices.
    GpuPeak,
    /// `host_peak`: the gated host peak.
    HostPeak,
    /// `working_peak`: the working memory (anonymous + shmem) peak.
    WorkingPeak,
    /// `probe.peak_allocated`: the allocator's peak the probe reported.
    ProbePeakAllocated,
    /// `probe.peak_reserved`.
    ProbePeakReserved,
    /// `wall_time`: the case's wall time, in seconds.
    WallTime,
    /// `output.<name>`: a number its logs printed (`metrics_from_output`).
    Output(String),
}

/// What a figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParityUnit {
    Bytes,
    Seconds,
    Number,
}

impl ParityFigure {
    /// The names a rule may compare, as a suite writes them.
    pub const NAMES: [&'static str; 7] = [
        "gpu_peak",
        "host_peak",
        "working_peak",
        "probe.peak_allocated",
        "probe.peak_reserved",
        "wall_time",
        "output.<name>",
    ];

    pub fn parse(name: &str) -> Option<ParityFigure> {
        Some(match name {
            "gpu_peak" => ParityFigure::GpuPeak,
            "host_peak" => ParityFigure::HostPeak,
            "working_peak" => ParityFigure::WorkingPeak,
            "probe.peak_allocated" => ParityFigure::ProbePeakAllocated,
            "probe.peak_reserved" => ParityFigure::ProbePeakReserved,
            "wall_time" => ParityFigure::WallTime,
            _ => ParityFigure::Output(
                name.strip_prefix("output.")
                    .filter(|n| !n.is_empty())?
                    .to_string(),
            ),
        })
    }

    pub fn name(&self) -> String {
        match self {
            ParityFigure::GpuPeak => "gpu_peak".into(),
            ParityFigure::HostPeak => "host_peak".into(),
            ParityFigure::WorkingPeak => "working_peak".into(),
            ParityFigure::ProbePeakAllocated => "probe.peak_allocated".into(),
            ParityFigure::ProbePeakReserved => "probe.peak_reserved".into(),
            ParityFigure::WallTime => "wall_time".into(),
            ParityFigure::Output(name) => format!("output.{name}"),
        }
    }

    pub fn unit(&self) -> ParityUnit {
        match self {
            ParityFigure::GpuPeak
            | ParityFigure::HostPeak
            | ParityFigure::WorkingPeak
            | ParityFigure::ProbePeakAllocated
            | ParityFigure::ProbePeakReserved => ParityUnit::Bytes,
            ParityFigure::WallTime => ParityUnit::Seconds,
            ParityFigure::Output(_) => ParityUnit::Number,
        }
    }
}

/// How the left side must stand against the right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParityOp {
    AtMost,
    Below,
    AtLeast,
    Above,
}

impl ParityOp {
    pub fn as_str(self) -> &'static str {
        match self {
            ParityOp::AtMost => "<=",
            ParityOp::Below => "<",
            ParityOp::AtLeast => ">=",
            ParityOp::Above => ">",
        }
    }

    /// Whether `lhs OP bound` holds.
    pub fn holds(self, lhs: f64, bound: f64) -> bool {
        match self {
            ParityOp::AtMost => lhs <= bound,
            ParityOp::Below => lhs < bound,
            ParityOp::AtLeast => lhs >= bound,
            ParityOp::Above => lhs > bound,
        }
    }
}

/// `lhs OP factor × rhs + offset`, the offset in the figure's unit
/// (bytes, seconds, or the number's own).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParityRule {
    pub op: ParityOp,
    pub factor: f64,
    pub offset: f64,
}

impl ParityRule {
    /// The bound the left side is held to.
    pub fn bound(&self, rhs: f64) -> f64 {
        self.factor * rhs + self.offset
    }
}

/// One `[[parity]]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Parity {
    /// Its check's name in every report: `parity: train-offload vs
    /// train`, the figure added when another rule compares the same two
    /// cases (`parity: a vs b (wall_time)`).
    pub name: String,
    pub lhs: String,
    pub rhs: String,
    pub figure: ParityFigure,
    /// The rule as written, for every report.
    pub text: String,
    pub rule: ParityRule,
}

impl Parity {
    /// A parity from its parts as results.json records them (`oomgate
    /// merge` judges it again): the rule read as the suite's was.
    pub fn read(
        name: &str,
        lhs: &str,
        rhs: &str,
        figure: &str,
        rule: &str,
    ) -> Result<Parity, String> {
        let figure = ParityFigure::parse(figure)
            .ok_or_else(|| format!("`{figure}` is not a figure a parity compares"))?;
        let parsed = parse_rule(rule, figure.unit())?;
        Ok(Parity {
            name: name.to_string(),
            lhs: lhs.to_string(),
            rhs: rhs.to_string(),
            figure,
            text: rule.trim().to_string(),
            rule: parsed,
        })
    }
}

/// Each rule's name: `parity: LHS vs RHS`, with the figure when two rules
/// compare the same cases, and a number when they compare the same figure.
fn name_each(parities: &mut [Parity]) {
    let pair = |p: &Parity| (p.lhs.clone(), p.rhs.clone());
    let names: Vec<String> = parities
        .iter()
        .enumerate()
        .map(|(at, parity)| {
            let base = format!("parity: {} vs {}", parity.lhs, parity.rhs);
            let same_pair: Vec<&Parity> = parities
                .iter()
                .filter(|p| pair(p) == pair(parity))
                .collect();
            if same_pair.len() == 1 {
                return base;
            }
            let figure = parity.figure.name();
            let same_figure = parities[..at]
                .iter()
                .filter(|p| pair(p) == pair(parity) && p.figure == parity.figure)
                .count();
            match same_figure {
                0 => format!("{base} ({figure})"),
                n => format!("{base} ({figure} #{})", n + 1),
            }
        })
        .collect();
    for (parity, name) in parities.iter_mut().zip(names) {
        parity.name = name;
    }
}

/// The forms a rule takes, for its error's help.
const RULE_HELP: &str = "write `lhs <= 0.6 * rhs`, `lhs >= 0.95 * rhs` or `lhs <= rhs + 512 MiB` (`<`, `<=`, `>`, `>=`; the amount in the figure's unit: a size, a duration for wall_time, a number for output.<name>)";

/// Read a rule: `lhs OP [K *] rhs [* K] [± AMOUNT]`.
pub fn parse_rule(text: &str, unit: ParityUnit) -> Result<ParityRule, String> {
    let rest = text
        .trim()
        .strip_prefix("lhs")
        .ok_or_else(|| format!("`{}` does not start with `lhs`", text.trim()))?
        .trim_start();
    let (op, rest) = [
        ("<=", ParityOp::AtMost),
        (">=", ParityOp::AtLeast),
        ("<", ParityOp::Below),
        (">", ParityOp::Above),
    ]
    .into_iter()
    .find_map(|(word, op)| rest.strip_prefix(word).map(|rest| (op, rest)))
    .ok_or_else(|| "no `<=`, `<`, `>=` or `>` after `lhs`".to_string())?;
    let mut parts = rest.split("rhs");
    let (Some(before), Some(after), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err("the right side must name `rhs` once".into());
    };
    let factor_of = |text: &str| -> Result<f64, String> {
        let text = text.trim();
        match text.parse::<f64>() {
            Ok(k) if k.is_finite() && k > 0.0 => Ok(k),
            _ => Err(format!("`{text}` is not a factor above 0")),
        }
    };
    let before = before.trim();
    let mut factor = match before {
        "" => 1.0,
        _ => factor_of(
            before
                .strip_suffix('*')
                .or_else(|| before.strip_suffix('×'))
                .ok_or_else(|| format!("`{before}` before `rhs` is no factor: write `K * rhs`"))?,
        )?,
    };
    let after = after.trim();
    let offset;
    if let Some(k) = after.strip_prefix('*').or_else(|| after.strip_prefix('×')) {
        if !before.is_empty() {
            return Err("two factors: write one, `K * rhs`".into());
        }
        let (k, tail) = match k.find(['+', '-']) {
            Some(at) => (&k[..at], &k[at..]),
            None => (k, ""),
        };
        factor = factor_of(k)?;
        offset = amount(tail, unit)?;
    } else {
        offset = amount(after, unit).map_err(|e| {
            if after.starts_with(['+', '-']) {
                e
            } else {
                format!("`{after}` after `rhs`: {e}")
            }
        })?;
    }
    Ok(ParityRule { op, factor, offset })
}

/// `+ 512 MiB`, `- 30s`, `+ 100`: signed, in the figure's unit; empty is 0.
fn amount(text: &str, unit: ParityUnit) -> Result<f64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(0.0);
    }
    let (sign, value) = if let Some(value) = text.strip_prefix('+') {
        (1.0, value.trim())
    } else if let Some(value) = text.strip_prefix('-') {
        (-1.0, value.trim())
    } else {
        return Err("an amount follows `+` or `-`".into());
    };
    let magnitude = match unit {
        ParityUnit::Bytes => value
            .parse::<crate::units::Bytes>()
            .map(|b| b.get() as f64)
            .map_err(|e| e.to_string())?,
        ParityUnit::Seconds => crate::units::parse_duration(value)
            .map(|d| d.as_secs_f64())
            .map_err(|e| e.to_string())?,
        ParityUnit::Number => match super::output::read_number(value) {
            Some(n) => n,
            None => return Err(format!("`{value}` is not a number")),
        },
    };
    Ok(sign * magnitude)
}

/// `[[parity]]` tables, checked against the suite's cases: each side a
/// case's id, the figure one both have, the rule readable.
pub(super) fn checked(
    check: &mut Checker,
    raw: &[Spanned<RawParity>],
    cases: &[Case],
) -> Vec<Parity> {
    let mut parities = Vec::new();
    for table in raw {
        let table = table.get_ref();
        let mut sides_known = true;
        for (key, side) in [("lhs", &table.lhs), ("rhs", &table.rhs)] {
            if cases.iter().any(|c| c.id == *side.get_ref()) {
                continue;
            }
            sides_known = false;
            let closest = cases
                .iter()
                .map(|c| (strsim::jaro_winkler(&c.id, side.get_ref()), &c.id))
                .filter(|(score, _)| *score > 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let diagnostic = check.error(
                side.span(),
                format!(
                    "`{key}` names `{}`, which is no case of the suite",
                    side.get_ref()
                ),
            );
            diagnostic.help = Some(match closest {
                Some((_, id)) => format!(
                    "did you mean `{id}`? a side is a `[[case]]`'s id, its matrix values in"
                ),
                None => {
                    "a side is a `[[case]]`'s id, its matrix values in (`oomgate list` shows them)"
                        .into()
                }
            });
        }
        if table.lhs.get_ref() == table.rhs.get_ref() {
            check.error(
                table.rhs.span(),
                format!(
                    "`lhs` and `rhs` are both `{}`: a parity compares two cases",
                    table.lhs.get_ref()
                ),
            );
        }
        let figure = ParityFigure::parse(table.figure.get_ref());
        let Some(figure) = figure else {
            check
                .error(
                    table.figure.span(),
                    format!(
                        "`{}` is not a figure a parity compares",
                        table.figure.get_ref()
                    ),
                )
                .help = Some(format!("one of {}", ParityFigure::NAMES.join(", ")));
            continue;
        };
        if let (ParityFigure::Output(name), true) = (&figure, sides_known) {
            for side in [&table.lhs, &table.rhs] {
                let reads = cases
                    .iter()
                    .find(|c| c.id == *side.get_ref())
                    .is_some_and(|c| c.outputs.iter().any(|o| o.name == *name));
                if !reads {
                    check.error(
                        table.figure.span(),
                        format!(
                            "case `{}` reads no `{name}` from its output: add it to its `metrics_from_output`",
                            side.get_ref()
                        ),
                    );
                }
            }
        }
        let rule = match parse_rule(table.rule.get_ref(), figure.unit()) {
            Ok(rule) => rule,
            Err(e) => {
                check
                    .error(table.rule.span(), format!("parity rule: {e}"))
                    .help = Some(RULE_HELP.into());
                continue;
            }
        };
        parities.push(Parity {
            name: String::new(),
            lhs: table.lhs.get_ref().clone(),
            rhs: table.rhs.get_ref().clone(),
            figure,
            text: table.rule.get_ref().trim().to_string(),
            rule,
        });
    }
    name_each(&mut parities);
    parities
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_of_rule_reads_as_a_factor_and_an_offset() {
        let rule = |text: &str, unit| parse_rule(text, unit).expect(text);
        let mib = 1024.0 * 1024.0;
        assert_eq!(
            rule("lhs <= 0.6 * rhs", ParityUnit::Bytes),
            ParityRule {
                op: ParityOp::AtMost,
                factor: 0.6,
                offset: 0.0
            }
        );
        assert_eq!(
            rule("lhs>=0.95*rhs", ParityUnit::Number),
            ParityRule {
                op: ParityOp::AtLeast,
                factor: 0.95,
                offset: 0.0
            }
        );
        assert_eq!(
            rule("lhs <= rhs + 512 MiB", ParityUnit::Bytes),
            ParityRule {
                op: ParityOp::AtMost,
                factor: 1.0,
                offset: 512.0 * mib
            }
        );
        assert_eq!(
            rule("lhs < rhs * 2 - 1 GiB", ParityUnit::Bytes),
            ParityRule {
                op: ParityOp::Below,
                factor: 2.0,
                offset: -1024.0 * mib
            }
        );
        assert_eq!(
            rule("lhs <= rhs + 30s", ParityUnit::Seconds),
            ParityRule {
                op: ParityOp::AtMost,
                factor: 1.0,
                offset: 30.0
            }
        );
        assert_eq!(
            rule("lhs > rhs + 1,000", ParityUnit::Number),
            ParityRule {
                op: ParityOp::Above,
                factor: 1.0,
                offset: 1000.0
            }
        );
        assert_eq!(rule("lhs >= rhs", ParityUnit::Number).factor, 1.0);
    }

    #[test]
    fn a_rule_that_does_not_read_says_why() {
        let error = |text: &str, unit| parse_rule(text, unit).expect_err(text);
        assert!(error("rhs >= lhs", ParityUnit::Bytes).contains("does not start with `lhs`"));
        assert!(error("lhs == rhs", ParityUnit::Bytes).contains("no `<=`"));
        assert!(error("lhs <= 0.6 * 2", ParityUnit::Bytes).contains("name `rhs` once"));
        assert!(error("lhs <= -1 * rhs", ParityUnit::Bytes).contains("not a factor above 0"));
        assert!(error("lhs <= 2 * rhs * 3", ParityUnit::Bytes).contains("two factors"));
        assert!(error("lhs <= rhs + lots", ParityUnit::Bytes).contains("not a size"));
        assert!(error("lhs <= rhs + 5", ParityUnit::Seconds).contains("5"));
        assert!(error("lhs <= rhs 5", ParityUnit::Number).contains("follows `+` or `-`"));
    }
}
