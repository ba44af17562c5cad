//! Phase 2, the graded judge (seed vaglio.md ch. 4): a score in [0, 1] of how well a call
//! fits the person's intent; below the threshold, the call is refused. Rule-based here:
//! no model, microseconds, zero cost.

use serde_json::Value;

/// The default threshold (`vaglio.judge.threshold`).
pub const DEFAULT_THRESHOLD: f64 = metnos_kit::config::JudgeThreshold::DEFAULT.get();
const BASE: f64 = 0.7;

/// A score with the notes that explain it.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub score: f64,
    pub notes: Notes,
}

/// Up to five short notes (the four rule signals and a judge's own), kept inline: a verdict should not pay for a heap list.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Notes {
    items: [std::borrow::Cow<'static, str>; 5],
    len: usize,
}

impl Notes {
    /// Adds a note (a sixth and later are dropped: a verdict has at most five kinds).
    pub fn push(&mut self, note: impl Into<std::borrow::Cow<'static, str>>) {
        if self.len < self.items.len() {
            self.items[self.len] = note.into();
            self.len += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.items[..self.len].iter().map(|n| n.as_ref())
    }
}

impl<const N: usize> From<[&'static str; N]> for Notes {
    fn from(notes: [&'static str; N]) -> Notes {
        let mut out = Notes::default();
        for note in notes {
            out.push(note);
        }
        out
    }
}

/// What the judge knows of the call's context.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Context {
    /// The executor is declared critical; `None` when unknown.
    pub critical: Option<bool>,
}

fn words(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// Whether `word` is one of the words of `text`, ignoring case, without allocating.
fn has_word(text: &str, word: &str) -> bool {
    words(text).any(|w| {
        w.len() == word.len()
            && (w.eq_ignore_ascii_case(word) || w.to_lowercase() == word.to_lowercase())
    })
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `intent` mentions `token` as a whole word, ignoring case; ASCII text (the
/// usual case) is searched byte-wise without splitting it into words.
fn mentions(intent: &str, token: &str) -> bool {
    if !(intent.is_ascii() && token.is_ascii()) {
        return has_word(intent, token);
    }
    // One pass over the words of the text: a word is compared only when its length fits.
    let (text, word) = (intent.as_bytes(), token.as_bytes());
    let mut start = None;
    for (i, byte) in text.iter().chain(std::iter::once(&b' ')).enumerate() {
        match (byte.is_ascii_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                if i - s == word.len() && text[s..i].eq_ignore_ascii_case(word) {
                    return true;
                }
                start = None;
            }
            _ => {}
        }
    }
    false
}

/// Whether `s` holds `..` (a byte scan: the substring searcher costs more to set up
/// than these short strings take to read).
fn has_dot_dot(s: &str) -> bool {
    s.as_bytes().windows(2).any(|pair| pair == b"..")
}

/// One walk over the arguments for the two shape signals: the key of the first string
/// holding `..` and `/`, and whether any key is not an identifier.
fn shape<'a>(value: &'a Value, key: &'a str, traversal: &mut Option<&'a str>, odd_key: &mut bool) {
    match value {
        Value::String(s) if traversal.is_none() && has_dot_dot(s) && s.contains('/') => {
            *traversal = Some(key);
        }
        Value::Array(items) => items.iter().for_each(|v| shape(v, key, traversal, odd_key)),
        Value::Object(map) => {
            for (k, v) in map {
                *odd_key |= !is_identifier(k);
                shape(v, k, traversal, odd_key);
            }
        }
        _ => {}
    }
}

/// The seed's rule-based score: base 0.7; +0.10 when the intent mentions a token (3+
/// characters) of the executor's name; −0.20 for a possible path traversal; −0.10 for an
/// argument key that is not an identifier; +0.05 for a non-critical executor; clamped.
pub fn score(intent: &str, executor: &str, args: &Value, context: Context) -> Score {
    let mut score = BASE;
    let mut notes = Notes::default();
    let mentioned = executor
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| t.chars().nth(2).is_some())
        .any(|t| mentions(intent, t));
    if mentioned {
        score += 0.10;
        notes.push("intent matches executor");
    }
    let (mut traversal, mut odd_key) = (None, false);
    shape(args, "args", &mut traversal, &mut odd_key);
    if let Some(key) = traversal {
        score -= 0.20;
        let mut note = String::with_capacity(key.len() + 32);
        note.push_str("possible path traversal ('..' in ");
        note.push_str(key);
        note.push(')');
        notes.push(note);
    }
    if odd_key {
        score -= 0.10;
        notes.push("unusual argument key");
    }
    if context.critical == Some(false) {
        score += 0.05;
        notes.push("non-critical executor");
    }
    Score {
        score: score.clamp(0.0, 1.0),
        notes,
    }
}

/// `x` with two decimals (as `{:.2}`, for values in [0, 1]), without the float formatter,
/// which costs more than the rest of a verdict.
fn push_two_decimals(out: &mut String, x: f64) {
    // x is never negative here, so adding a half and truncating rounds as `round` does.
    let hundredths = (x * 100.0 + 0.5) as u64;
    let (units, rest) = (hundredths / 100, hundredths % 100);
    out.push(char::from(b'0' + (units % 10) as u8));
    out.push('.');
    out.push(char::from(b'0' + (rest / 10) as u8));
    out.push(char::from(b'0' + (rest % 10) as u8));
}

/// The reason of a judge verdict, as the seed writes it.
pub fn reason(score: &Score, threshold: f64) -> (bool, String) {
    let approved = score.score >= threshold;
    let mut text = String::with_capacity(64);
    if approved {
        text.push_str("approved: score ");
        push_two_decimals(&mut text, score.score);
    } else {
        text.push_str("judge: score ");
        push_two_decimals(&mut text, score.score);
        text.push_str(" < threshold ");
        push_two_decimals(&mut text, threshold);
    }
    if !score.notes.is_empty() {
        text.push_str(" (");
        for (i, note) in score.notes.iter().enumerate() {
            if i > 0 {
                text.push_str("; ");
            }
            text.push_str(note);
        }
        text.push(')');
    }
    (approved, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The seed's first example: harmless path, intent mentions the executor.
    #[test]
    fn the_seeds_harmless_example_scores_0_80() {
        let s = score(
            "read my notes in /tmp/n.txt",
            "fs_read",
            &json!({"path": "/tmp/n.txt"}),
            Context::default(),
        );
        assert!((s.score - 0.80).abs() < 1e-9, "{s:?}");
        assert_eq!(
            reason(&s, DEFAULT_THRESHOLD),
            (
                true,
                "approved: score 0.80 (intent matches executor)".to_owned()
            )
        );
    }

    /// The seed's second example: a traversal lowers the score but still passes.
    #[test]
    fn a_path_traversal_costs_0_20_and_is_noted_by_key() {
        let s = score(
            "open it",
            "fs_read",
            &json!({"path": "/tmp/../etc/foo"}),
            Context::default(),
        );
        assert!((s.score - 0.50).abs() < 1e-9, "{s:?}");
        let (approved, text) = reason(&s, DEFAULT_THRESHOLD);
        assert!(approved);
        assert_eq!(
            text,
            "approved: score 0.50 (possible path traversal ('..' in path))"
        );
    }

    #[test]
    fn intent_mentioning_the_executor_scores_higher_than_a_generic_one() {
        let args = json!({"path": "/tmp/x"});
        let specific = score("please read /tmp/x", "fs_read", &args, Context::default());
        let generic = score("do the thing", "fs_read", &args, Context::default());
        assert!(specific.score > generic.score);
        // Tokens shorter than 3 characters do not count: "fs" is no signal.
        assert!((score("fs stuff", "fs_read", &args, Context::default()).score - 0.7).abs() < 1e-9);
    }

    #[test]
    fn odd_keys_and_non_critical_executors_move_the_score() {
        let s = score(
            "x",
            "web_fetch",
            &json!({"url; rm": "x"}),
            Context::default(),
        );
        assert!((s.score - 0.60).abs() < 1e-9);
        let s = score(
            "x",
            "web_fetch",
            &json!({"url": "x"}),
            Context {
                critical: Some(false),
            },
        );
        assert!((s.score - 0.75).abs() < 1e-9);
    }

    #[test]
    fn two_decimals_are_written_as_the_float_formatter_would() {
        for x in [0.0, 0.004, 0.005, 0.3, 0.456, 0.5, 0.8, 0.999, 1.0] {
            let mut mine = String::new();
            push_two_decimals(&mut mine, x);
            assert_eq!(mine, format!("{x:.2}"), "{x}");
        }
    }

    #[test]
    fn below_the_threshold_the_judge_refuses() {
        let s = score(
            "read it",
            "fs_read",
            &json!({"path": "/tmp/x"}),
            Context::default(),
        );
        let (approved, text) = reason(&s, 0.99);
        assert!(!approved);
        assert_eq!(
            text,
            "judge: score 0.80 < threshold 0.99 (intent matches executor)"
        );
    }
}
