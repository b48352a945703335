//! A case's definition as a run records it: one short hash per part of
//! it (its command, env, each budget, its tolerances, ...), so that
//! `oomgate merge --suite` can tell whether a part ran the case the suite
//! defines, and which part of it differs when it did not.
//!
//! The hashes are of what results.json already shows of the case: the
//! command with secret arguments masked, secret-named variables by their
//! recorded hash, params masked with the suite's secrets; the working
//! directory relative to the suite's workdir, so that shards checked out
//! in other folders agree. Nothing secret is hashed that results.json
//! does not already hold in a recorded form.

use std::collections::BTreeMap;
use std::path::Path;

use crate::redact;
use crate::suite::{BudgetKind, Case, fnv1a};

/// Whether a merge judges `part` of a definition again from the part's
/// figures when only such parts differ: the budgets measured once for
/// the whole run (each kind says: [`BudgetKind::judged_again`]) and the
/// probe's limits. The others — what runs, how often, for how long, a
/// rank's budget, the tolerances against the baseline, the leak rule —
/// cannot be judged again from what a part recorded.
pub fn judged_again(part: &str) -> bool {
    part == "limits"
        || BudgetKind::ALL
            .into_iter()
            .any(|kind| kind.name() == part && kind.judged_again())
}

/// The parts of a definition besides one per budget kind (`budget.host`).
const OTHER_PARTS: [&str; 17] = [
    "client_budget",
    "command",
    "concurrency",
    "cwd",
    "env",
    "gpus",
    "leak",
    "limits",
    "outputs",
    "params",
    "pytest",
    "repeat",
    "search",
    "server",
    "soak",
    "timeout",
    "tolerance",
];

/// The parts of a definition, in name order: a results.json names each
/// with its hash (`"command": "5b5c98ef514dbfa5"`).
pub fn parts() -> &'static [&'static str] {
    static PARTS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        let mut parts: Vec<&str> = BudgetKind::ALL
            .into_iter()
            .map(BudgetKind::name)
            .chain(OTHER_PARTS)
            .collect();
        parts.sort_unstable();
        parts
    });
    &PARTS
}

/// A case's definition as a run recorded it: one hash per part of
/// [`parts`], in its order; empty when none was recorded (results of an
/// older oomgate). Held as numbers (0 for a part not read), written as a
/// map of hex strings: a run of 10,000 cases keeps one per case, 168
/// bytes each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Definition(Box<[u64]>);

impl Definition {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A part's hash; `None` when it was not read (a hash that happens
    /// to be 0 reads so too, and differs: harmless, and never seen).
    fn part(&self, at: usize) -> Option<u64> {
        self.0.get(at).copied().filter(|hash| *hash != 0)
    }
}

impl serde::Serialize for Definition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (at, name) in parts().iter().enumerate() {
            if let Some(hash) = self.part(at) {
                map.serialize_entry(name, &format!("{hash:016x}"))?;
            }
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Definition {
    /// A part this oomgate does not know (a later one's) is left out; a
    /// hash that is not one is read as missing, and so differs.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = BTreeMap::<String, String>::deserialize(deserializer)?;
        if read.is_empty() {
            return Ok(Definition::default());
        }
        Ok(Definition(
            parts()
                .iter()
                .map(|name| {
                    read.get(*name)
                        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                        .unwrap_or(0)
                })
                .collect(),
        ))
    }
}

/// The definition of `case` as results record it, `workdir` the suite's.
pub fn of(case: &Case, workdir: &Path) -> Definition {
    let mut parts: Vec<(&str, String)> = Vec::new();
    let joined = |items: Vec<String>| items.join("\u{0}");
    let env = |env: &indexmap::IndexMap<String, String>| {
        let sorted: BTreeMap<&String, String> = env
            .iter()
            .map(|(name, value)| (name, redact::env_value(name, value)))
            .collect();
        format!("{sorted:?}")
    };
    parts.push(("command", joined(redact::command(&case.command))));
    let cwd = case.cwd.strip_prefix(workdir).unwrap_or(&case.cwd);
    parts.push(("cwd", cwd.display().to_string()));
    parts.push(("env", env(&case.env)));
    let params: Vec<String> = case
        .params
        .iter()
        .map(|(name, value)| format!("{name}={}", redact::mask_suite(value)))
        .collect();
    parts.push(("params", joined(params)));
    parts.push((
        "server",
        match &case.server {
            Some(server) => format!(
                "{}\u{0}{}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
                joined(redact::command(&server.command)),
                env(&server.templates.env),
                server.ready,
                server.ready_timeout,
                server.stop_signal
            ),
            None => String::new(),
        },
    ));
    parts.push(("concurrency", case.concurrency.to_string()));
    parts.push(("timeout", format!("{:?}", case.timeout)));
    parts.push(("soak", format!("{:?}", case.soak)));
    parts.push(("repeat", case.repeat.to_string()));
    parts.push(("gpus", format!("{:?}", case.gpus)));
    parts.push(("search", format!("{:?}", case.search)));
    parts.push(("pytest", format!("{:?}", case.pytest)));
    for kind in BudgetKind::ALL {
        parts.push((kind.name(), format!("{:?}", case.budget.get(kind))));
    }
    parts.push(("client_budget", format!("{:?}", case.client_budget)));
    parts.push(("tolerance", format!("{:?}", case.tolerance)));
    let limits: Vec<String> = case
        .limits
        .iter()
        .map(|l| format!("{:?} {:?} {}", l.key, l.op, l.value))
        .collect();
    parts.push(("limits", joined(limits)));
    parts.push(("leak", format!("{:?}", case.leak)));
    parts.push(("outputs", format!("{:?}", case.outputs)));
    parts.sort_unstable_by_key(|(name, _)| *name);
    debug_assert!(
        parts
            .iter()
            .map(|(name, _)| *name)
            .eq(self::parts().iter().copied())
    );
    Definition(
        parts
            .into_iter()
            .map(|(_, text)| fnv1a(text.as_bytes()))
            .collect(),
    )
}

/// The parts of two definitions that differ (one's part the other lacks
/// among them), in name order.
pub fn differences(ran: &Definition, now: &Definition) -> Vec<String> {
    parts()
        .iter()
        .enumerate()
        .filter(|&(at, _)| ran.part(at) != now.part(at))
        .map(|(_, name)| (*name).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written as a map of hex strings, read back the same; a part a later
    /// oomgate adds is left out, one missing or damaged differs, and no
    /// map at all is no definition.
    #[test]
    fn a_definition_is_written_as_a_map_and_read_back() {
        let text = "[suite]\nname = \"s\"\n[[case]]\nname = \"c\"\ncommand = [\"true\"]\n";
        let suite = crate::suite::parse(text, Path::new("s.toml"), Path::new("/w")).expect("suite");
        let defined = of(&suite.cases[0], Path::new("/w"));
        assert_eq!(defined.0.len(), parts().len());
        let json = serde_json::to_value(&defined).expect("json");
        assert_eq!(json.as_object().map(|m| m.len()), Some(parts().len()));
        assert!(
            json["command"].as_str().is_some_and(|h| h.len() == 16),
            "{json}"
        );
        let back: Definition = serde_json::from_value(json.clone()).expect("back");
        assert_eq!(back, defined);

        let mut later = json.clone();
        later["a_later_part"] = "0123456789abcdef".into();
        let read: Definition = serde_json::from_value(later).expect("read");
        assert!(differences(&read, &defined).is_empty());

        let mut damaged = json;
        damaged["command"] = "not hex".into();
        damaged.as_object_mut().expect("a map").remove("env");
        let read: Definition = serde_json::from_value(damaged).expect("read");
        assert_eq!(differences(&read, &defined), ["command", "env"]);

        let none: Definition = serde_json::from_str("{}").expect("none");
        assert!(none.is_empty());
    }
}
