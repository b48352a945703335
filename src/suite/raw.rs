//! The serde mirror of a suite file: exactly what the TOML says, with the
//! span of every value that a later check may need to point at.
//!
//! Nothing here is interpreted. Sizes and durations stay text until
//! `suite::validate` reads them, so that an error can name the line and
//! column the user wrote them at. `deny_unknown_fields` everywhere: a typo in
//! a key is an error, never a silently ignored limit.
//!
//! The keys a case shares with `[defaults]` (and a `[[pytest]]` table with
//! its tests) are listed once, in [`settings_keys!`], and spelled into each
//! table that holds them by a macro rather than by `#[serde(flatten)]`:
//! with toml, a flattened struct loses every span (`Spanned` fails to
//! read) and an unknown key's error its line and its list of valid keys.
//! A budget's keys are the budget kinds' ([`crate::suite::BudgetKind`]).

use indexmap::IndexMap;
use serde::Deserialize;
use toml::Spanned;

use super::budget::BudgetKind;

/// The keys a case shares with `[defaults]`, in the order serde lists
/// them after a table's own: every one optional, each read as its type.
/// Hands the list to `$then!`, after `$args`.
macro_rules! settings_keys {
    ($then:ident ! ($($args:tt)*)) => {
        $then! {
            ($($args)*)
            cwd: Spanned<String>,
            env: RawEnv,
            timeout: Spanned<String>,
            kill_grace: Spanned<String>,
            concurrency: Spanned<i64>,
            duration: Spanned<String>,
            budget: Spanned<RawBudget>,
            tolerance: Spanned<RawTolerance>,
            repeat: Spanned<i64>,
            limits: Spanned<RawLimits>,
            leak: Spanned<RawLeak>,
            gpus: Spanned<i64>,
            gpu_memory: Spanned<toml::Value>,
            settle_timeout: Spanned<String>,
            sites: Spanned<RawSites>,
            creep: Spanned<RawCreep>,
        }
    };
}

/// A table struct: its own fields as written, then the settings keys, and
/// `settings()` to borrow those.
macro_rules! with_settings {
    (
        (
            $(#[$attr:meta])*
            pub struct $name:ident { $($own:tt)* }
        )
        $($key:ident: $ty:ty,)*
    ) => {
        $(#[$attr])*
        pub struct $name {
            $($own)*
            $(pub $key: Option<$ty>,)*
        }

        impl $name {
            /// The keys it shares with `[defaults]`.
            pub fn settings(&self) -> RawSettingsRef<'_> {
                RawSettingsRef {
                    $($key: self.$key.as_ref(),)*
                }
            }
        }
    };
}

/// [`RawSettingsRef`], from the settings keys.
macro_rules! settings_ref {
    (() $($key:ident: $ty:ty,)*) => {
        /// Borrowed view of the shared keys, so defaults and a case are
        /// read by one piece of code.
        #[derive(Clone, Copy, Default)]
        pub struct RawSettingsRef<'a> {
            $(pub $key: Option<&'a $ty>,)*
        }
    };
}

settings_keys!(settings_ref!());

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSuiteFile {
    pub suite: Spanned<RawSuiteTable>,
    #[serde(default)]
    pub defaults: Option<Spanned<RawSettings>>,
    #[serde(default, rename = "case")]
    pub cases: Vec<Spanned<RawCase>>,
    #[serde(default)]
    pub environment: Option<Spanned<RawEnvironment>>,
    /// `[[pytest]]`: a pytest suite, one case per collected test.
    #[serde(default, rename = "pytest")]
    pub pytests: Vec<Spanned<RawPytest>>,
    /// `[[parity]]`: one case's figure against another's.
    #[serde(default, rename = "parity")]
    pub parities: Vec<Spanned<RawParity>>,
}

settings_keys!(with_settings!(
    /// `[[pytest]]`: where the tests are, how to run pytest, and any case key
    /// as a default for its tests.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawPytest {
        pub paths: Spanned<Vec<Spanned<String>>>,
        pub python: Option<Spanned<String>>,
        pub args: Option<Vec<Spanned<String>>>,
        /// `"test"` (default) or `"file"`.
        pub granularity: Option<Spanned<String>>,
        /// Each test in a process of its own, not in the table's shared
        /// session.
        pub isolate: Option<Spanned<bool>>,
        // The keys of a `[[case]]` that make no sense for a collected test:
        // read so that each is refused with a reason, not as an unknown key.
        pub name: Option<Spanned<toml::Value>>,
        pub command: Option<Spanned<toml::Value>>,
        pub matrix: Option<Spanned<toml::Value>>,
        pub search: Option<Spanned<toml::Value>>,
        pub capacity_tolerance: Option<Spanned<toml::Value>>,
        pub server: Option<Spanned<toml::Value>>,
        pub client_budget: Option<Spanned<toml::Value>>,
    }
));

/// `[environment]`: what to record about the software the workloads use.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnvironment {
    pub python: Option<Spanned<String>>,
    pub packages: Option<Vec<Spanned<String>>>,
    pub freeze: Option<bool>,
    pub commands: Option<IndexMap<Spanned<String>, Spanned<RawArgv>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSuiteTable {
    pub name: Spanned<String>,
    pub sample_interval: Option<Spanned<String>>,
    pub workdir: Option<Spanned<String>>,
    /// `"auto"`, `"required"` or `"off"`.
    pub gpu: Option<Spanned<String>>,
    /// `"warn"` or `"fail"`.
    pub foreign_processes: Option<Spanned<String>>,
    /// `"warn"` or `"fail"`: environment drift against the baseline.
    pub on_drift: Option<Spanned<String>>,
    pub tolerance: Option<Spanned<RawTolerance>>,
    /// Regexes of the suite's own secrets, masked in everything written.
    pub redact: Option<Vec<Spanned<String>>>,
    /// Every case's `settle_timeout`, under `[defaults]` and the case's.
    pub settle_timeout: Option<Spanned<String>>,
    /// Where runs are recorded: `sqlite:PATH` (beside the suite when
    /// relative) or `postgres://…`.
    pub history: Option<Spanned<String>>,
    /// A history that cannot be reached fails the run (exit 3).
    pub history_required: Option<bool>,
    /// Every case's `creep`, under `[defaults]` and the case's.
    pub creep: Option<Spanned<RawCreep>>,
}

/// `tolerance = { relative = "5%", absolute = "64 MiB", spread_k = 3, host = { ... }, gpu = { ... }, working = { ... } }`:
/// the flat keys apply to every figure, `host` / `gpu` / `working` override them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTolerance {
    pub relative: Option<Spanned<toml::Value>>,
    pub absolute: Option<Spanned<toml::Value>>,
    pub spread_k: Option<Spanned<toml::Value>>,
    pub host: Option<Spanned<RawToleranceFigure>>,
    pub gpu: Option<Spanned<RawToleranceFigure>>,
    pub working: Option<Spanned<RawToleranceFigure>>,
    pub outside: Option<Spanned<RawToleranceFigure>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToleranceFigure {
    pub relative: Option<Spanned<toml::Value>>,
    pub absolute: Option<Spanned<toml::Value>>,
    pub spread_k: Option<Spanned<toml::Value>>,
}

settings_keys!(with_settings!(
    /// `[defaults]`: the keys a case shares with it.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawSettings {}
));

settings_keys!(with_settings!(
    /// `[[case]]`: its own keys, then those it shares with `[defaults]`.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawCase {
        pub name: Spanned<String>,
        pub command: Spanned<Vec<Spanned<String>>>,
        pub matrix: Option<Spanned<RawMatrix>>,
        /// Capacity search; a case's own key, never a default.
        pub search: Option<Spanned<RawSearch>>,
        /// How far below the locked capacity a search may land: steps, or a
        /// share (`"5%"`).
        pub capacity_tolerance: Option<Spanned<toml::Value>>,
        /// The server the command loads; a case's own key.
        pub server: Option<Spanned<RawServer>>,
        /// Limits on the load client's figures, beside a server.
        pub client_budget: Option<Spanned<RawBudget>>,
        /// Numbers the workload prints, read from its logs.
        pub metrics_from_output: Option<Spanned<Vec<Spanned<RawOutputMetric>>>>,
    }
));

/// `limits = { "probe.peak_allocated" = "<= 40 GiB", "metric.tokens_per_s" = ">= 1500" }`
pub type RawLimits = IndexMap<Spanned<String>, Spanned<String>>;

/// `search = { param = "batch", min = 1, max = 4096, step = 8 }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSearch {
    pub param: Spanned<String>,
    pub min: Option<Spanned<i64>>,
    pub max: Spanned<i64>,
    pub step: Option<Spanned<i64>>,
    pub max_probes: Option<Spanned<i64>>,
    pub timeout: Option<Spanned<String>>,
}

/// `server = { command = [...], ready = "http://127.0.0.1:{port}/health" }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub command: Spanned<Vec<Spanned<String>>>,
    /// `"http://…"`, `"tcp://host:port"` or `{ log = "regex" }`.
    pub ready: Spanned<toml::Value>,
    pub ready_timeout: Option<Spanned<String>>,
    pub stop_signal: Option<Spanned<String>>,
    pub kill_grace: Option<Spanned<String>>,
    pub env: Option<RawEnv>,
}

/// `{ name, regex, better, pick, tolerance }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutputMetric {
    pub name: Spanned<String>,
    pub regex: Spanned<String>,
    pub better: Option<Spanned<String>>,
    pub pick: Option<Spanned<String>>,
    pub tolerance: Option<Spanned<toml::Value>>,
}

/// `[[parity]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParity {
    pub lhs: Spanned<String>,
    pub rhs: Spanned<String>,
    pub figure: Spanned<String>,
    pub rule: Spanned<String>,
}

/// `sites = { depth = 1 }`: how many of the user's frames name an
/// allocation site in a torch memory snapshot.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSites {
    pub depth: Option<Spanned<i64>>,
}

/// `creep = { limit = "10%", window = "30d", action = "fail" }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCreep {
    pub limit: Spanned<toml::Value>,
    pub window: Option<Spanned<String>>,
    pub action: Option<Spanned<String>>,
}

/// `leak = { warmup = 3, max_growth = "64 MiB" }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLeak {
    pub warmup: Option<Spanned<i64>>,
    pub max_growth: Option<Spanned<toml::Value>>,
}

/// An argv list.
pub type RawArgv = Vec<Spanned<String>>;

pub type RawEnv = IndexMap<Spanned<String>, Spanned<String>>;

/// `matrix = { key = [values...] }`, keys in file order.
pub type RawMatrix = IndexMap<Spanned<String>, Spanned<Vec<Spanned<toml::Value>>>>;

/// `budget = { host = "512 MiB", gpu_fraction = 0.9 }`: each kind's value
/// as written, by [`BudgetKind`]. Read key by key: a key that is no kind's
/// is refused as serde refuses an unknown field, at the key, naming the
/// valid ones.
#[derive(Debug, Default)]
pub struct RawBudget([Option<Spanned<toml::Value>>; BudgetKind::COUNT]);

impl RawBudget {
    /// The value written for `kind`.
    pub fn get(&self, kind: BudgetKind) -> Option<&Spanned<toml::Value>> {
        self.0[kind as usize].as_ref()
    }
}

/// A budget's key: its kind.
struct BudgetKey(BudgetKind);

impl<'de> Deserialize<'de> for BudgetKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl serde::de::Visitor<'_> for Key {
            type Value = BudgetKey;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a budget's key")
            }

            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<BudgetKey, E> {
                BudgetKind::from_key(key)
                    .map(BudgetKey)
                    .ok_or_else(|| E::unknown_field(key, &BudgetKind::KEYS))
            }
        }
        deserializer.deserialize_identifier(Key)
    }
}

impl<'de> Deserialize<'de> for RawBudget {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> serde::de::Visitor<'de> for Table {
            type Value = RawBudget;

            // Serde's words for the struct this table was.
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("struct RawBudget")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawBudget, A::Error> {
                let mut budget = RawBudget::default();
                while let Some(BudgetKey(kind)) = map.next_key()? {
                    budget.0[kind as usize] = Some(map.next_value()?);
                }
                Ok(budget)
            }
        }
        deserializer.deserialize_map(Table)
    }
}
