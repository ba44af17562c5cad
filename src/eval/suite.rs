//! A suite of `metnos eval`: tasks, their turns and what is checked after each (the
//! format is described at the top of `eval/suite.toml`, the default suite).

use std::collections::BTreeMap;

use metnos_core::Language;
use metnos_core::level::AutonomyLevel;
use serde::Deserialize;
use serde_json::Value;

/// The default suite, shipped in the repository (`eval/suite.toml`).
pub const DEFAULT: &str = include_str!("../../eval/suite.toml");

/// What `{site}` stands for in a suite's texts: the loopback server of its pages.
pub const SITE: &str = "{site}";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    #[serde(rename = "task")]
    pub tasks: Vec<Task>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub id: String,
    #[serde(default)]
    pub what: String,
    pub language: LanguageArg,
    #[serde(default)]
    pub level: Option<String>,
    #[serde(default)]
    pub files: Vec<FileSpec>,
    #[serde(default)]
    pub pages: Vec<Page>,
    #[serde(rename = "turn")]
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LanguageArg {
    En,
    It,
}

impl LanguageArg {
    pub fn language(self) -> Language {
        match self {
            LanguageArg::En => Language::English,
            LanguageArg::It => Language::Italian,
        }
    }
}

/// A file made in the throwaway home: `text` `repeat` times, then `then`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub path: String,
    pub text: String,
    #[serde(default)]
    pub repeat: Option<u32>,
    #[serde(default)]
    pub then: String,
}

impl FileSpec {
    pub fn contents(&self) -> String {
        let mut text = self.text.repeat(self.repeat.unwrap_or(1) as usize);
        text.push_str(&self.then);
        text
    }
}

/// A page served on loopback at `path`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    pub path: String,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadArg {
    New,
    Continue,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub say: String,
    #[serde(default)]
    pub thread: Option<ThreadArg>,
    #[serde(default)]
    pub approve: Option<bool>,
    #[serde(default)]
    pub card: Option<bool>,
    #[serde(default)]
    pub tools: Vec<ToolExpect>,
    #[serde(default)]
    pub forbid: Vec<String>,
    #[serde(default)]
    pub answer_has: Vec<String>,
    #[serde(default)]
    pub answer_any: Vec<String>,
    #[serde(default)]
    pub answer_match: Option<String>,
    #[serde(default)]
    pub file_has: Vec<FileHas>,
    #[serde(default)]
    pub no_file: Vec<String>,
    #[serde(default)]
    pub kind: Option<String>,
    /// What the repository's scripted model answers (its tests' ground truth).
    #[serde(default)]
    pub scripted: Vec<Value>,
}

/// A tool the turn must propose, with these arguments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolExpect {
    pub name: String,
    #[serde(default)]
    pub args: BTreeMap<String, Value>,
    #[serde(default)]
    pub args_contain: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileHas {
    pub path: String,
    pub text: String,
}

/// Why a suite cannot be run: its origin, the task and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct SuiteError {
    pub origin: String,
    pub message: String,
}

impl Suite {
    /// The suite in `text` (from `origin`, for messages), checked whole.
    pub fn parse(text: &str, origin: &str) -> Result<Suite, SuiteError> {
        let error = |message: String| SuiteError {
            origin: origin.to_owned(),
            message,
        };
        let suite: Suite = toml::from_str(text).map_err(|e| error(e.to_string()))?;
        if suite.tasks.is_empty() {
            return Err(error("the suite has no [[task]]".to_owned()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for task in &suite.tasks {
            if !seen.insert(task.id.as_str()) {
                return Err(error(format!("task id `{}` is used twice", task.id)));
            }
            task.check()
                .map_err(|m| error(format!("task `{}`: {m}", task.id)))?;
        }
        Ok(suite)
    }

    /// The task `id`.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }
}

/// A path of the throwaway home: relative, without `..`.
fn home_relative(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if path.is_empty()
        || p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!(
            "`{path}` must be a path inside the home, relative and without `..`"
        ));
    }
    Ok(())
}

impl Task {
    /// The person's level for this task (Full unless it says).
    pub fn level(&self) -> Result<AutonomyLevel, String> {
        match &self.level {
            None => Ok(AutonomyLevel::Full),
            Some(level) => AutonomyLevel::parse(level).map_err(|e| format!("level: {e}")),
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.id.is_empty()
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err("an id is letters, digits, `-` and `_`".to_owned());
        }
        self.level()?;
        if self.turns.is_empty() {
            return Err("no [[task.turn]]".to_owned());
        }
        for file in &self.files {
            home_relative(&file.path).map_err(|e| format!("files: {e}"))?;
            let size = (file.text.len() as u64)
                .saturating_mul(u64::from(file.repeat.unwrap_or(1)))
                .saturating_add(file.then.len() as u64);
            if size > MAX_FILE {
                return Err(format!(
                    "files: `{}` would be over {} MiB",
                    file.path,
                    MAX_FILE >> 20
                ));
            }
        }
        for page in &self.pages {
            let plain = page
                .path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/-_.~".contains(c));
            if !page.path.starts_with('/') || !plain {
                return Err(format!(
                    "pages: `{}` must start with / and hold only letters, digits and / - _ . ~",
                    page.path
                ));
            }
        }
        for (n, turn) in self.turns.iter().enumerate() {
            turn.check().map_err(|e| format!("turn {}: {e}", n + 1))?;
        }
        Ok(())
    }
}

impl Turn {
    fn check(&self) -> Result<(), String> {
        if self.say.trim().is_empty() {
            return Err("`say` is empty".to_owned());
        }
        if self.card == Some(true) && self.approve.is_none() {
            return Err("`card = true` needs `approve` (how the card is answered)".to_owned());
        }
        if let Some(pattern) = &self.answer_match {
            regex::Regex::new(pattern).map_err(|e| format!("answer_match: {e}"))?;
        }
        for file in &self.file_has {
            home_relative(&file.path).map_err(|e| format!("file_has: {e}"))?;
        }
        for path in &self.no_file {
            home_relative(path).map_err(|e| format!("no_file: {e}"))?;
        }
        if let Some(kind) = &self.kind
            && !KINDS.contains(&kind.as_str())
        {
            return Err(format!("kind `{kind}` is not one of {}", KINDS.join(", ")));
        }
        Ok(())
    }
}

/// The largest file a suite may have made (`text` × `repeat` + `then`).
pub const MAX_FILE: u64 = 16 << 20;

/// How a turn may end, as `kind` names it.
pub const KINDS: [&str; 6] = [
    "answer",
    "error",
    "cancelled",
    "timeout",
    "cap_steps",
    "cap_same_executor",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_suite_has_twenty_tasks_in_both_languages() {
        let suite = Suite::parse(DEFAULT, "eval/suite.toml").unwrap();
        assert_eq!(suite.tasks.len(), 20);
        let italian = suite
            .tasks
            .iter()
            .filter(|t| t.language == LanguageArg::It)
            .count();
        assert!((8..=12).contains(&italian), "{italian} Italian tasks");
        // Every turn has its ground truth, ending in an answer.
        for task in &suite.tasks {
            for turn in &task.turns {
                assert!(
                    turn.scripted
                        .last()
                        .is_some_and(|s| s.get("answer").is_some()),
                    "{}",
                    task.id
                );
            }
        }
    }

    #[test]
    fn a_bad_suite_is_named_where_it_is_wrong() {
        let e = Suite::parse("[[task]]\nid = \"a\"\nlanguage = \"fr\"\n", "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("mine.toml: ") && e.contains("fr"), "{e}");
        let escape = "[[task]]\nid = \"a\"\nlanguage = \"en\"\nfiles = [{ path = \"../x\", text = \"\" }]\n[[task.turn]]\nsay = \"hi\"\n";
        let e = Suite::parse(escape, "mine.toml").unwrap_err().to_string();
        assert!(e.contains("task `a`: files: `../x`"), "{e}");
        let regex = "[[task]]\nid = \"a\"\nlanguage = \"en\"\n[[task.turn]]\nsay = \"hi\"\nanswer_match = \"(\"\n";
        let e = Suite::parse(regex, "mine.toml").unwrap_err().to_string();
        assert!(e.contains("turn 1: answer_match"), "{e}");
        let typo = "[[task]]\nid = \"a\"\nlanguage = \"en\"\n[[task.turn]]\nsay = \"hi\"\nanswer_hass = []\n";
        let e = Suite::parse(typo, "mine.toml").unwrap_err().to_string();
        assert!(e.contains("answer_hass"), "{e}");
        let twice = "[[task]]\nid = \"a\"\nlanguage = \"en\"\n[[task.turn]]\nsay = \"hi\"\n[[task]]\nid = \"a\"\nlanguage = \"en\"\n[[task.turn]]\nsay = \"hi\"\n";
        let e = Suite::parse(twice, "mine.toml").unwrap_err().to_string();
        assert!(e.contains("`a` is used twice"), "{e}");
    }
}
