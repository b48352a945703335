//! The project the baseline tests share: a GPU case on the fake driver
//! and a host-only case, with an `[environment]` marker to drift.

use super::fake_nvml::*;
use super::{Project, Run, toml_str, workload};

/// One GPU case `c` allocating `mib` on the fake driver, plus a host-only
/// case `h`. `extra_suite` goes into `[suite]`.
pub fn suite(mib: u64, extra_suite: &str) -> String {
    format!(
        "[suite]\nname = \"b\"\nsample_interval = \"20ms\"\n{extra_suite}\n\
         [environment]\ncommands = {{ marker = [\"cat\", \"marker.txt\"] }}\n\n\
         [[case]]\nname = \"c\"\ncommand = [\"python3\", {}, \"--mib\", \"{mib}\", \"--hold\", \"300ms\"]\n\n\
         [[case]]\nname = \"h\"\ncommand = [\"python3\", {}, \"--mib\", \"16\", \"--hold\", \"100ms\"]\n",
        toml_str(&workload("gpu_alloc.py")),
        toml_str(&workload("alloc.py"))
    )
}

pub fn project(mib: u64, extra_suite: &str) -> Project {
    let project = Project::new(&suite(mib, extra_suite))
        .with_fake_gpus(&two_devices(false), Variant::Complete);
    std::fs::write(project.path().join("marker.txt"), "one").expect("marker");
    project
}

impl Project {
    pub fn rewrite_suite(&self, text: &str) {
        std::fs::write(self.suite(), text).expect("rewrite suite");
    }
}

pub fn message(run: &Run, id: &str) -> String {
    run.message(id)
}

/// The ids of every case a lock's text holds a baseline for, over its
/// testbeds and its top-level `cases`, sorted.
pub fn locked_cases(lock: &str) -> Vec<String> {
    let lock: toml::Table = toml::from_str(lock).expect("a lock");
    let cases = |table: Option<&toml::Value>| {
        table
            .and_then(toml::Value::as_table)
            .map(|cases| cases.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut ids = cases(lock.get("cases"));
    for testbed in lock
        .get("testbeds")
        .and_then(toml::Value::as_table)
        .into_iter()
        .flat_map(|testbeds| testbeds.values())
    {
        ids.extend(cases(testbed.get("cases")));
    }
    ids.sort();
    ids
}
