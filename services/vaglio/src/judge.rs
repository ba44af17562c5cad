//! Phase 2, the graded judge (seed vaglio.md ch. 4): a score in [0, 1] of how well a call
//! fits the person's intent; below the threshold, the call is refused. Rule-based here:
//! no model, microseconds, zero cost.
//!
//! Policy keeps ordinary work flowing; the judge refuses what is clearly misaligned. It
//! starts at 0.70 and adds each signal that applies, then clamps to [0, 1]:
//!
//! | signal                                                                 | weight |
//! |------------------------------------------------------------------------|--------|
//! | the intent mentions a token (3+ characters) of the executor's name      | +0.10 |
//! | a string argument holds `..` and `/` (possible path traversal)          | −0.20 |
//! | an argument key is not an identifier                                    | −0.10 |
//! | the executor is declared non-critical                                   | +0.05 |
//! | data from the world reaches a sink of a critical call (issue 19)        | −0.25 |
//! | a critical call shares no word with the intent                          | −0.30 |
//! | a write to a dotfile or hidden folder the intent does not name          | −0.30 |
//!
//! A call is *critical* when its executor is declared so (fs_write, shell_exec, mail) or it
//! sends data over the network (a `method` other than GET or HEAD). "Shares no word": no
//! word of the intent (3+ characters, not a common word) matches a word of the executor's
//! name or of its arguments other than free text (`content`, `body`, `text`, `data`,
//! `message`, `headers`); words match when equal or when the shorter (4+ characters)
//! begins the longer. With the default threshold 0.30, one new signal alone still passes
//! (0.45, 0.40), so ordinary work is not refused for a word; two of them refuse (at most
//! 0.15). The seed's examples keep their scores: 0.80 and 0.50.

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

/// Up to eight short notes (the seven rule signals and a judge's own), kept inline: a
/// verdict should not pay for a heap list.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Notes {
    items: [std::borrow::Cow<'static, str>; 8],
    len: usize,
}

impl Notes {
    /// Adds a note (a ninth and later are dropped: a verdict has at most eight kinds).
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
pub struct Context<'a> {
    /// The executor is declared critical; `None` when unknown.
    pub critical: Option<bool>,
    /// The executor writes files (it holds fs:write).
    pub writes: bool,
    /// The executor reaches the network (it holds network:http).
    pub network: bool,
    /// The first argument carrying data from the world into a sink, with its first source.
    pub tainted_sink: Option<(&'a str, &'a str)>,
}

const TAINTED_SINK: f64 = 0.25;
const UNRELATED: f64 = 0.30;
const HIDDEN_WRITE: f64 = 0.30;

/// Words too common to relate a request to a call.
const COMMON: &[&str] = &[
    "the", "and", "for", "with", "from", "that", "this", "these", "those", "what", "which", "who",
    "how", "why", "when", "where", "please", "can", "could", "would", "will", "you", "your",
    "mine", "our", "are", "was", "is", "it", "its", "all", "any", "some", "into", "onto", "out",
    "about", "then", "there", "here", "now", "today", "just", "also", "not", "but", "get", "got",
    "have", "has", "had", "make", "made", "let", "one", "two", "http", "https", "www", "com",
    "org", "net", "che", "per", "con", "del", "della", "delle", "dei", "degli", "una", "uno",
    "gli", "nel", "nella", "sul", "sulla", "come", "cosa", "dove", "quando", "mio", "mia", "miei",
    "mie", "tuo", "tua", "puoi", "fammi", "oggi", "questo", "questa", "quello", "quella", "sono",
    "non", "anche", "poi", "alla", "allo",
];

/// Argument keys holding free text, not what the call does or where.
const FREE_TEXT: &[&str] = &["content", "body", "text", "data", "message", "headers"];

fn meaningful(word: &str) -> bool {
    word.chars().nth(2).is_some() && !COMMON.iter().any(|c| c.eq_ignore_ascii_case(word))
}

fn related(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short == long || (short.chars().nth(3).is_some() && long.starts_with(short))
}

/// The words of the call: its executor's name and its arguments but free text.
fn call_words(executor: &str, args: &Value, out: &mut Vec<String>) {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => {
                out.extend(words(s).filter(|w| meaningful(w)).map(str::to_lowercase))
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            Value::Object(map) => {
                for (key, v) in map {
                    if !FREE_TEXT.contains(&key.as_str()) {
                        walk(v, out);
                    }
                }
            }
            _ => {}
        }
    }
    out.extend(
        words(executor)
            .filter(|w| meaningful(w))
            .map(str::to_lowercase),
    );
    walk(args, out);
}

/// Whether no meaningful word of `intent` relates to a word of the call.
fn shares_nothing(intent: &str, executor: &str, args: &Value) -> bool {
    let mut call = Vec::new();
    call_words(executor, args, &mut call);
    !words(intent)
        .filter(|w| meaningful(w))
        .map(str::to_lowercase)
        .any(|w| call.iter().any(|c| related(&w, c)))
}

/// The first hidden name (`.bashrc`, `.config`) in a path argument of a write, unless the
/// intent names it.
fn hidden_unnamed<'a>(intent: &str, args: &'a Value) -> Option<&'a str> {
    let map = args.as_object()?;
    for (key, value) in map {
        if FREE_TEXT.contains(&key.as_str()) {
            continue;
        }
        let Some(path) = value.as_str() else {
            continue;
        };
        for part in path.split('/') {
            let Some(name) = part.strip_prefix('.') else {
                continue;
            };
            if name.is_empty() || name == "." {
                continue;
            }
            let named = intent.to_lowercase().contains(&name.to_lowercase());
            if !named {
                return Some(part);
            }
        }
    }
    None
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

/// The rule-based score (the table above): base 0.7, each signal's weight, clamped.
pub fn score(intent: &str, executor: &str, args: &Value, context: Context<'_>) -> Score {
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
    let sends = context.network
        && args
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| !(m.eq_ignore_ascii_case("GET") || m.eq_ignore_ascii_case("HEAD")));
    let critical = context.critical == Some(true) || sends;
    if context.critical == Some(false) && !sends {
        score += 0.05;
        notes.push("non-critical executor");
    }
    if critical && let Some((arg, source)) = context.tainted_sink {
        score -= TAINTED_SINK;
        notes.push(format!(
            "data from {source} in {arg} reaches a critical call"
        ));
    }
    if critical && shares_nothing(intent, executor, args) {
        score -= UNRELATED;
        notes.push("a critical call that shares nothing with the request");
    }
    if context.writes
        && let Some(name) = hidden_unnamed(intent, args)
    {
        score -= HIDDEN_WRITE;
        notes.push(format!("writes {name}, which the request does not name"));
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
                ..Context::default()
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
