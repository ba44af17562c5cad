//! `[vaglio]`: where the vaglio runs, and `[vaglio.judge]`, the judge that scores how well a
//! call fits what the person asked.

use std::net::SocketAddr;
use std::num::NonZero;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ServiceConfig, ServiceName};

/// The vaglio: where it runs, and its judge.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VaglioConfig {
    pub listen: SocketAddr,
    pub url: String,
    pub store: String,
    pub judge: JudgeConfig,
    /// How long the verdict log is kept: a month's file is removed once every verdict in
    /// it is older than this many months (checked at start and daily).
    pub log_retention_months: NonZero<u32>,
    /// A verdict log line keeps at most this many bytes of the intent.
    pub log_intent_bytes: NonZero<u32>,
    /// Lines waiting for the disk at most; beyond, a verdict waits for room.
    pub log_queue_lines: NonZero<u32>,
    /// How long a verdict waits for room in the full queue; past it the call fails closed
    /// (UNAVAILABLE), never answered unlogged.
    pub log_wait_ms: NonZero<u64>,
}

impl Default for VaglioConfig {
    fn default() -> Self {
        let ServiceConfig { listen, url, store } = ServiceConfig::for_service(ServiceName::Vaglio);
        VaglioConfig {
            listen,
            url,
            store,
            judge: JudgeConfig::default(),
            log_retention_months: const { NonZero::new(12).unwrap() },
            log_intent_bytes: const { NonZero::new(2048).unwrap() },
            log_queue_lines: const { NonZero::new(1024).unwrap() },
            log_wait_ms: const { NonZero::new(5000).unwrap() },
        }
    }
}

/// The judge. The seed's `METNOS_JUDGE_KIND`, `METNOS_JUDGE_THRESHOLD` and
/// `METNOS_JUDGE_TIMEOUT_SECONDS` still set these keys (see `ENV_ALIASES`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct JudgeConfig {
    /// Which judge scores the calls the guard lets through.
    pub kind: JudgeKind,
    /// Below this score the call is refused.
    pub threshold: JudgeThreshold,
    /// How long the LLM judge may take before the rules decide instead.
    pub timeout_seconds: NonZero<u64>,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        JudgeConfig {
            kind: JudgeKind::RuleBased,
            threshold: JudgeThreshold::DEFAULT,
            timeout_seconds: const { NonZero::new(10).unwrap() },
        }
    }
}

impl JudgeConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.get())
    }
}

/// The judges there are, by the names verdicts carry.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub enum JudgeKind {
    /// Rules on the intent and the executor.
    #[default]
    #[serde(rename = "rule-based-v1")]
    RuleBased,
    /// The `middle` LLM tier, with the rules as the fallback when it fails.
    #[serde(rename = "llm-v1")]
    Llm,
}

/// A judge's threshold: a score from 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct JudgeThreshold(f64);

impl JudgeThreshold {
    pub const DEFAULT: JudgeThreshold = JudgeThreshold(0.30);

    /// The threshold `value`, if it is from 0 to 1.
    pub fn new(value: f64) -> Option<JudgeThreshold> {
        (0.0..=1.0)
            .contains(&value)
            .then_some(JudgeThreshold(value))
    }

    pub const fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for JudgeThreshold {
    type Error = String;

    fn try_from(value: f64) -> Result<JudgeThreshold, String> {
        JudgeThreshold::new(value).ok_or_else(|| format!("must be from 0 to 1, got {value}"))
    }
}

impl From<JudgeThreshold> for f64 {
    fn from(threshold: JudgeThreshold) -> f64 {
        threshold.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::{load, load_err, with_env, write_file};
    use super::*;

    fn judge(kind: JudgeKind, threshold: f64, timeout_seconds: u64) -> JudgeConfig {
        JudgeConfig {
            kind,
            threshold: JudgeThreshold::new(threshold).unwrap(),
            timeout_seconds: NonZero::new(timeout_seconds).unwrap(),
        }
    }

    #[test]
    fn the_judge_is_rule_based_at_0_30_with_10_seconds_by_default() {
        with_env(&[], |_| {
            assert_eq!(load()?.vaglio.judge, judge(JudgeKind::RuleBased, 0.30, 10));
            Ok(())
        });
    }

    #[test]
    fn the_judge_section_is_read_from_the_file_and_its_variables() {
        with_env(&[("METNOS_VAGLIO__JUDGE__THRESHOLD", "0.5")], |jail| {
            write_file(
                jail,
                "[vaglio.judge]\nkind = \"llm-v1\"\nthreshold = 0.9\ntimeout_seconds = 3\n",
            )?;
            assert_eq!(load()?.vaglio.judge, judge(JudgeKind::Llm, 0.5, 3));
            Ok(())
        });
    }

    #[test]
    fn the_seeds_variables_set_the_judge_and_its_own_variables_win() {
        let aliases = [
            ("METNOS_JUDGE_KIND", "llm-v1"),
            ("METNOS_JUDGE_THRESHOLD", "0.99"),
            ("METNOS_JUDGE_TIMEOUT_SECONDS", "4"),
        ];
        with_env(&aliases, |jail| {
            // Over the file, as any variable is.
            write_file(
                jail,
                "[vaglio.judge]\nthreshold = 0.1\ntimeout_seconds = 7\n",
            )?;
            assert_eq!(load()?.vaglio.judge, judge(JudgeKind::Llm, 0.99, 4));

            jail.set_env("METNOS_VAGLIO__JUDGE__KIND", "rule-based-v1");
            jail.set_env("METNOS_VAGLIO__JUDGE__THRESHOLD", "0.6");
            jail.set_env("METNOS_VAGLIO__JUDGE__TIMEOUT_SECONDS", "8");
            assert_eq!(load()?.vaglio.judge, judge(JudgeKind::RuleBased, 0.6, 8));

            // A bad alias under a good own variable is never read.
            jail.set_env("METNOS_JUDGE_KIND", "bogus");
            assert_eq!(load()?.vaglio.judge.kind, JudgeKind::RuleBased);
            Ok(())
        });
    }

    #[test]
    fn a_bad_judge_value_names_the_key_and_the_variable_it_came_from() {
        for (variable, value, expected) in [
            (
                "METNOS_JUDGE_THRESHOLD",
                "1.5",
                "config key `vaglio.judge.threshold` (from METNOS_JUDGE_THRESHOLD): must be from 0 to 1, got 1.5",
            ),
            (
                "METNOS_VAGLIO__JUDGE__THRESHOLD",
                "-0.1",
                "config key `vaglio.judge.threshold` (from METNOS_VAGLIO__JUDGE__THRESHOLD): must be from 0 to 1, got -0.1",
            ),
            (
                "METNOS_JUDGE_TIMEOUT_SECONDS",
                "0",
                "config key `vaglio.judge.timeout_seconds` (from METNOS_JUDGE_TIMEOUT_SECONDS): must be at least 1",
            ),
        ] {
            with_env(&[(variable, value)], |_| {
                assert_eq!(load_err(), expected);
                Ok(())
            });
        }
        for variable in ["METNOS_JUDGE_KIND", "METNOS_VAGLIO__JUDGE__KIND"] {
            with_env(&[(variable, "bogus")], |_| {
                let error = load_err();
                assert!(
                    error.starts_with(&format!(
                        "config key `vaglio.judge.kind` (from {variable}): "
                    )) && error.contains("`bogus`")
                        && error.contains("rule-based-v1"),
                    "{error}"
                );
                Ok(())
            });
        }
        with_env(&[], |jail| {
            write_file(jail, "[vaglio.judge]\nthreshold = 2\n")?;
            let error = load_err();
            assert!(
                error.starts_with("config key `vaglio.judge.threshold` (from ")
                    && error.contains("metnos.toml): must be from 0 to 1"),
                "{error}"
            );
            Ok(())
        });
    }

    #[test]
    fn only_the_three_seed_variables_are_aliases() {
        with_env(
            &[
                ("METNOS_JUDGE_MODEL", "bogus"),
                ("METNOS_JUDGE", "bogus"),
                ("METNOS_JUDGE__KIND", "bogus"),
                ("metnos_judge_kind", "bogus"),
            ],
            |_| {
                assert_eq!(load()?.vaglio.judge, JudgeConfig::default());
                Ok(())
            },
        );
    }
}
