//! Testbeds: one lock, a baseline per GPU model and count.
//!
//! A case's testbed is the GPU model and the number of GPUs it was given
//! (`NVIDIA H100 80GB HBM3 ×1`): its pool's GPUs under `--gpus`, else the
//! devices it could see. A case that ran on no GPU has none, and its entry
//! stays in the lock's top-level `cases`, compared as it always was. The
//! entries of each testbed are kept apart (`[testbeds."<name>".cases.<id>]`),
//! each testbed with the environment of the run that locked it, so that a
//! run on an H100 is compared with the H100's figures and its drift listed
//! against the H100 run's environment, never an A100's.
//!
//! Locks written before testbeds keep every case in the top-level
//! `cases`: they load as one testbed, the one their environment's GPU
//! model names, and compare as they did (`legacy`).

use super::{Lock, LockedCase};
use crate::environment::Environment;

/// The testbed of a case that ran on these devices (their model names, in
/// order): `NVIDIA H100 80GB HBM3 ×4`, or the models joined by ` + ` when
/// they differ. `None` for no device: a host-only case.
pub fn name_of<'a>(models: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let models: Vec<&str> = models.into_iter().collect();
    let first = *models.first()?;
    if models.iter().all(|m| *m == first) {
        Some(format!("{first} ×{}", models.len()))
    } else {
        Some(models.join(" + "))
    }
}

/// The GPU models a testbed's name holds (`A ×2` → `A`).
fn models_of(testbed: &str) -> Vec<&str> {
    match testbed.rsplit_once(" ×") {
        Some((model, count)) if count.chars().all(|c| c.is_ascii_digit()) => vec![model],
        _ => testbed.split(" + ").collect(),
    }
}

/// Whether a testbed's GPU models are the ones this environment has.
pub fn runs_on(testbed: &str, environment: &Environment) -> bool {
    let here = environment_models(environment);
    models_of(testbed).iter().all(|m| here.contains(m))
}

/// The models an environment records (`NVIDIA H100 80GB HBM3 (79.6 GiB)`
/// → `NVIDIA H100 80GB HBM3`).
fn environment_models(environment: &Environment) -> Vec<&str> {
    environment
        .gpu_models
        .iter()
        .map(|m| m.rsplit_once(" (").map_or(m.as_str(), |(name, _)| name))
        .collect()
}

/// Where a case's baseline was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The lock's top-level `cases`: a host-only case, or a lock written
    /// before testbeds.
    Legacy,
    /// This testbed's entries.
    Testbed(String),
}

/// A case's baseline in a lock, and whether its GPU figures compare.
#[derive(Debug, Clone)]
pub struct Baseline<'l> {
    pub entry: Option<&'l LockedCase>,
    pub source: Source,
    /// The environment the entry was locked with.
    pub environment: &'l Environment,
}

impl Lock {
    /// A case's baseline: its testbed's entry (`testbed`: where it ran;
    /// `chosen`: `--baseline-testbed`, compared with whatever this case
    /// ran on), else a legacy entry of the same GPU model. A testbed the
    /// lock lacks is no baseline: never another testbed's figures.
    pub fn baseline_for<'l>(
        &'l self,
        id: &str,
        testbed: Option<&str>,
        chosen: Option<&str>,
    ) -> Baseline<'l> {
        let legacy = Baseline {
            entry: self.cases.get(id),
            source: Source::Legacy,
            environment: &self.environment,
        };
        let Some(testbed) = testbed else {
            // A case that ran on no GPU this time (NVML missing, `gpu =
            // "off"`) is held to the entry its GPUs had: a locked GPU
            // figure it cannot measure fails, never passes unseen.
            if legacy.entry.is_some() {
                return legacy;
            }
            return self
                .testbeds
                .iter()
                .find_map(|(name, bed)| {
                    bed.cases.get(id).map(|entry| Baseline {
                        entry: Some(entry),
                        source: Source::Testbed(name.clone()),
                        environment: &bed.environment,
                    })
                })
                .unwrap_or(legacy);
        };
        if let Some(chosen) = chosen {
            return match self.testbeds.get_key_value(chosen) {
                Some((name, bed)) => Baseline {
                    entry: bed.cases.get(id),
                    source: Source::Testbed(name.clone()),
                    environment: &bed.environment,
                },
                // A lock of before testbeds is the one testbed it names.
                None => legacy,
            };
        }
        if let Some((name, bed)) = self.testbeds.get_key_value(testbed) {
            if let Some(entry) = bed.cases.get(id) {
                return Baseline {
                    entry: Some(entry),
                    source: Source::Testbed(name.clone()),
                    environment: &bed.environment,
                };
            }
        }
        // A legacy entry stands for its lock's GPU model only.
        let locked_models = environment_models(&self.environment);
        let same_model = !locked_models.is_empty()
            && models_of(testbed).iter().all(|m| locked_models.contains(m));
        if legacy.entry.is_some() && (same_model || locked_models.is_empty()) {
            return legacy;
        }
        Baseline {
            entry: None,
            source: Source::Testbed(testbed.to_string()),
            environment: self
                .testbeds
                .get(testbed)
                .map_or(&self.environment, |b| &b.environment),
        }
    }

    /// A case's entry for what is known before it runs (its packing
    /// figure, its locked capacity, its past wall time): the testbed of
    /// this machine's GPU model, else the legacy one, else any.
    pub fn entry_here(&self, id: &str, now: &Environment) -> Option<&LockedCase> {
        let here = environment_models(now);
        self.testbeds
            .iter()
            .filter(|(name, _)| models_of(name).iter().all(|m| here.contains(m)))
            .find_map(|(_, bed)| bed.cases.get(id))
            .or_else(|| self.cases.get(id))
            .or_else(|| self.testbeds.values().find_map(|bed| bed.cases.get(id)))
    }

    /// Every entry: `(testbed, id, entry)`, the legacy ones first.
    pub fn entries(&self) -> impl Iterator<Item = (Option<&str>, &str, &LockedCase)> {
        self.cases
            .iter()
            .map(|(id, c)| (None, id.as_str(), c))
            .chain(self.testbeds.iter().flat_map(|(name, bed)| {
                bed.cases
                    .iter()
                    .map(move |(id, c)| (Some(name.as_str()), id.as_str(), c))
            }))
    }

    /// Whether the lock has an entry for the case, in any testbed.
    pub fn has_case(&self, id: &str) -> bool {
        self.entries().any(|(_, case, _)| case == id)
    }

    /// The environment drift is listed against for a run on `now`: the
    /// testbed of its GPU model, else the lock's own.
    pub fn environment_for(&self, now: &Environment) -> &Environment {
        let here = environment_models(now);
        self.testbeds
            .iter()
            .filter(|(name, _)| models_of(name).iter().all(|m| here.contains(m)))
            .map(|(_, bed)| &bed.environment)
            .next()
            .unwrap_or(&self.environment)
    }

    /// `new` locked over this lock: each of its testbeds' entries replace
    /// the same cases' entries of that testbed (and a legacy entry of the
    /// same GPU model, which it supersedes); every other testbed's
    /// entries, and this lock's other cases, are kept.
    pub fn relock(mut self, new: Lock) -> Lock {
        let legacy_models: Vec<String> = environment_models(&self.environment)
            .into_iter()
            .map(String::from)
            .collect();
        for (name, bed) in new.testbeds {
            let same_model = !legacy_models.is_empty()
                && models_of(&name)
                    .iter()
                    .all(|m| legacy_models.iter().any(|l| l == m));
            if same_model {
                for id in bed.cases.keys() {
                    self.cases.remove(id);
                }
            }
            let into = self.testbeds.entry(name).or_default();
            into.locked_at = bed.locked_at;
            into.environment = bed.environment;
            into.cases.extend(bed.cases);
        }
        let new_host: Vec<String> = new.cases.keys().cloned().collect();
        self.cases.extend(new.cases);
        if !new_host.is_empty() || self.cases.is_empty() {
            self.locked_at = new.locked_at;
            self.environment = new.environment;
        }
        self.version = new.version;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn environment(models: &[&str]) -> Environment {
        Environment {
            gpu_models: models.iter().map(|m| format!("{m} (79.6 GiB)")).collect(),
            ..Environment::default()
        }
    }

    fn entry(gpu: u64) -> LockedCase {
        LockedCase {
            gpu_peak_bytes: Some(gpu),
            ..LockedCase::empty()
        }
    }

    fn lock(models: &[&str]) -> Lock {
        Lock {
            version: super::super::LOCK_VERSION,
            suite: "s".into(),
            locked_at: "t".into(),
            environment: environment(models),
            cases: BTreeMap::new(),
            testbeds: BTreeMap::new(),
        }
    }

    #[test]
    fn testbed_names() {
        assert_eq!(name_of(["H100", "H100"]), Some("H100 ×2".into()));
        assert_eq!(name_of(["H100", "A100"]), Some("H100 + A100".into()));
        assert_eq!(name_of([]), None);
        assert_eq!(
            models_of("NVIDIA H100 80GB HBM3 ×4"),
            ["NVIDIA H100 80GB HBM3"]
        );
        assert_eq!(models_of("H100 + A100"), ["H100", "A100"]);
    }

    /// Each testbed's run is held to its own figures; a testbed the lock
    /// lacks has no baseline; an old lock is the testbed it names.
    #[test]
    fn each_testbed_is_compared_with_its_own() {
        let mut lock = lock(&["A100"]);
        lock.cases.insert("host-only".into(), entry(0));
        lock.cases.insert("old".into(), entry(1));
        for (name, gpu) in [("A100 ×1", 10), ("H100 ×1", 20)] {
            let bed = lock.testbeds.entry(name.into()).or_default();
            bed.environment = environment(&[name.trim_end_matches(" ×1")]);
            bed.cases.insert("train".into(), entry(gpu));
        }
        let found = lock.baseline_for("train", Some("H100 ×1"), None);
        assert_eq!(found.entry.and_then(|e| e.gpu_peak_bytes), Some(20));
        assert_eq!(found.source, Source::Testbed("H100 ×1".into()));
        let found = lock.baseline_for("train", Some("A100 ×1"), None);
        assert_eq!(found.entry.and_then(|e| e.gpu_peak_bytes), Some(10));
        let found = lock.baseline_for("train", Some("L4 ×1"), None);
        assert!(found.entry.is_none(), "no L4 testbed: no baseline");
        assert_eq!(found.source, Source::Testbed("L4 ×1".into()));
        let found = lock.baseline_for("train", Some("H100 ×1"), Some("A100 ×1"));
        assert_eq!(
            found.entry.and_then(|e| e.gpu_peak_bytes),
            Some(10),
            "--baseline-testbed"
        );
        // The legacy entry of an old lock stands for its own model.
        let found = lock.baseline_for("old", Some("A100 ×1"), None);
        assert_eq!(found.source, Source::Legacy);
        assert!(
            lock.baseline_for("old", Some("H100 ×1"), None)
                .entry
                .is_none()
        );
        let found = lock.baseline_for("host-only", None, None);
        assert_eq!(found.source, Source::Legacy);
        assert!(found.entry.is_some());
    }

    /// A lock on one testbed adds or replaces only its own entries.
    #[test]
    fn relocking_keeps_the_other_testbeds() {
        let mut old = lock(&["A100"]);
        old.cases.insert("train".into(), entry(1));
        let bed = old.testbeds.entry("A100 ×1".into()).or_default();
        bed.cases.insert("serve".into(), entry(2));
        let mut new = lock(&["H100"]);
        let bed = new.testbeds.entry("H100 ×1".into()).or_default();
        bed.cases.insert("train".into(), entry(3));
        let merged = old.relock(new);
        assert_eq!(
            merged.cases["train"].gpu_peak_bytes,
            Some(1),
            "the A100's legacy entry stays"
        );
        assert_eq!(
            merged.testbeds["A100 ×1"].cases["serve"].gpu_peak_bytes,
            Some(2)
        );
        assert_eq!(
            merged.testbeds["H100 ×1"].cases["train"].gpu_peak_bytes,
            Some(3)
        );
        // Relocked on the legacy entry's own model: it is superseded.
        let mut again = lock(&["A100"]);
        let bed = again.testbeds.entry("A100 ×1".into()).or_default();
        bed.cases.insert("train".into(), entry(4));
        let merged = merged.relock(again);
        assert!(!merged.cases.contains_key("train"));
        assert_eq!(
            merged.testbeds["A100 ×1"].cases["train"].gpu_peak_bytes,
            Some(4)
        );
    }
}
