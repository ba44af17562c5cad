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
