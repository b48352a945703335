//! A bisect's steps kept in the run history (`--history`, the suite's
//! `[suite] history`, `OOMGATE_HISTORY`), so that a second bisect over an
//! overlapping range runs nothing again: each step's results.json, by a
//! key of what was run where.
//!
//! The key is a 128-bit SipHash of: oomgate's version, the case, the
//! candidate (a commit with the suite's path and the build command; a
//! version or a set of pins), the environment it ran in (the packages
//! of the suite's interpreter; the bisect environment's pins), the
//! testbed (the GPUs' models, driver, CUDA and `CUDA_VISIBLE_DEVICES`),
//! `--repeat`, the flags handed to `oomgate run`, the pool's slots and the
//! allocator variables (`PYTORCH_CUDA_ALLOC_CONF`, `XLA_PYTHON_CLIENT_*`,
//! `NCCL_*`, …) the runs inherit. The same key, written beside each step,
//! is what `--resume` checks before it takes a step. A step taken from
//! the history is judged again against this bisect's good end, as a step
//! run now is: only its figures are taken, never its verdict.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher13};

use crate::history::{BisectStep, Store};

/// What every step key of this bisect shares: the testbed, the repeat,
/// the flags handed to the runs, each pool slot's GPUs, and the
/// allocator variables the runs inherit.
#[derive(Debug, Clone)]
pub struct Keys {
    shared: String,
}

impl Keys {
    pub fn new(
        repeat: Option<u32>,
        run_flags: &[std::ffi::OsString],
        gpu_slots: &[String],
    ) -> Keys {
        let gpu_off = run_flags
            .windows(2)
            .any(|w| w[0] == "--gpu" && w[1] == "off");
        let flags: Vec<String> = run_flags
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        let mut variables: Vec<String> = std::env::vars()
            .filter(|(name, _)| crate::environment::is_allocator_variable(name))
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        variables.sort();
        Keys {
            shared: format!(
                "testbed {}\nrepeat {}\nflags {}\nslots {}\nvariables {}",
                testbed(gpu_off),
                repeat.unwrap_or(1),
                flags.join(" "),
                gpu_slots.join(" | "),
                variables.join(" ")
            ),
        }
    }

    /// The key of one step: `case` at `candidate` (its identity) in
    /// `environment`.
    pub fn key(&self, case: &str, candidate: &str, environment: &str) -> String {
        let mut hasher = SipHasher13::new_with_keys(0x6f6f_6d67_6174_6562, 0x6973_6563_7473_7465);
        for part in [
            "oomgate bisect step 1",
            env!("CARGO_PKG_VERSION"),
            case,
            candidate,
            environment,
            &self.shared,
        ] {
            hasher.write(part.as_bytes());
            // A separator no part holds: ("ab", "c") is not ("a", "bc").
            hasher.write(&[0xff]);
        }
        format!("{:032x}", hasher.finish128().as_u128())
    }
}

/// The history that keeps steps.
pub struct Cache {
    store: Box<dyn Store>,
}

impl Cache {
    pub fn new(store: Box<dyn Store>) -> Cache {
        Cache { store }
    }

    /// Where the steps are kept, for messages.
    pub fn location(&self) -> String {
        self.store.location()
    }

    /// The results.json kept under `key`, if any; a history that cannot
    /// be read keeps nothing (said by the caller).
    pub fn get(&mut self, key: &str) -> Result<Option<String>, String> {
        self.store.bisect_step(key).map_err(|e| e.to_string())
    }

    pub fn keep(&mut self, step: &BisectStep) -> Result<(), String> {
        self.store.keep_bisect_step(step).map_err(|e| e.to_string())
    }
}

/// This machine's testbed: its GPUs as NVML names them, the driver and
/// CUDA, and which devices CUDA shows; "no GPU" where NVML cannot be
/// loaded or GPU figures are off.
fn testbed(gpu_off: bool) -> String {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    if gpu_off {
        return "no GPU (--gpu off)".into();
    }
    match crate::measure::nvml::Gpu::open() {
        Ok(gpu) => {
            let names: Vec<&str> = gpu.devices.iter().map(|d| d.name.as_str()).collect();
            format!(
                "{} driver {} cuda {} visible {visible}",
                names.join(" + "),
                gpu.driver_version,
                gpu.cuda_driver_version.as_deref().unwrap_or("?")
            )
        }
        Err(_) => "no GPU".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(repeat: Option<u32>, slots: &[String]) -> Keys {
        Keys::new(repeat, &["--gpu".into(), "off".into()], slots)
    }

    fn cache() -> Cache {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = crate::history::Location::parse(&format!(
            "sqlite:{}",
            dir.path().join("h.db").display()
        ))
        .expect("location");
        Cache::new(crate::history::open(&location, true).expect("history"))
    }

    #[test]
    fn a_key_changes_with_each_of_its_parts() {
        let one = keys(None, &[]);
        let base = one.key("train", "commit abc", "numpy==2.1");
        assert_eq!(base, one.key("train", "commit abc", "numpy==2.1"));
        assert_eq!(base.len(), 32);
        for other in [
            one.key("train-offload", "commit abc", "numpy==2.1"),
            one.key("train", "commit abd", "numpy==2.1"),
            one.key("train", "commit abc", "numpy==2.2"),
            one.key("train", "commit ab", "cnumpy==2.1"),
            keys(Some(3), &[]).key("train", "commit abc", "numpy==2.1"),
            keys(None, &["0,1".into()]).key("train", "commit abc", "numpy==2.1"),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn a_step_kept_is_found_by_its_key_and_kept_once() {
        let mut one = cache();
        let key = keys(None, &[]).key("train", "commit abc", "");
        assert_eq!(one.get(&key), Ok(None));
        let step = |results: &str| BisectStep {
            key: key.clone(),
            suite: "s".into(),
            case_id: "train".into(),
            candidate: "abc".into(),
            results: results.into(),
        };
        one.keep(&step("{\"first\": 1}")).expect("kept");
        one.keep(&step("{\"second\": 2}")).expect("kept again");
        assert_eq!(one.get(&key), Ok(Some("{\"first\": 1}".into())));
    }
}
