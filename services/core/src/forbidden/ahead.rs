// How a rule table's fully built automaton is made: the same builder at build time for
// the forbidden core's two tables (`build.rs` includes this file, and they are loaded
// from the bytes it writes) and at run time for any other table.

/// The rules are ASCII patterns on bytes.
pub fn syntax() -> regex_automata::util::syntax::Config {
    regex_automata::util::syntax::Config::new()
        .unicode(false)
        .utf8(false)
}

/// Every rule's matches reported (the first in table order is worked out on a hit), one
/// start state for all of them, no acceleration (it pays on long texts; these are a few
/// dozen bytes).
pub fn builder() -> regex_automata::dfa::dense::Builder {
    let mut builder = regex_automata::dfa::dense::Builder::new();
    builder
        .configure(
            regex_automata::dfa::dense::Config::new()
                .match_kind(regex_automata::MatchKind::All)
                .starts_for_each_pattern(false)
                .accelerate(false),
        )
        .syntax(syntax());
    builder
}

/// The fully built automaton of `patterns` as bytes in the target's byte order (big
/// endian when `big_endian`), for a build script to write and `RuleSet::with_prebuilt`
/// to load.
#[allow(dead_code, reason = "used by the build scripts that include this file")]
pub fn bytes(patterns: &[&str], big_endian: bool) -> Vec<u8> {
    let dfa = builder().build_many(patterns).expect("valid rules");
    let (bytes, pad) = if big_endian {
        dfa.to_bytes_big_endian()
    } else {
        dfa.to_bytes_little_endian()
    };
    bytes[pad..].to_vec()
}
