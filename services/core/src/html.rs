//! Escaping for channels that render HTML (Telegram's `parse_mode=HTML`).

/// Escapes `&`, `<`, `>` and `"`, so caller text is shown as text, never as markup.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// A character a person cannot see but that changes what text says or how it reads
/// (format characters such as bidi overrides, zero-width joiners and the Unicode tags that
/// smuggle ASCII, line and paragraph separators, variation selectors), and the letters and
/// symbols that draw as a blank though they are no space (the Hangul fillers, the blank
/// Braille pattern, the musical null notehead, the combining grapheme joiner, the Khmer
/// inherent vowels).
pub fn is_invisible(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    matches!(
        get_general_category(c),
        GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || matches!(
        c,
        '\u{FE00}'..='\u{FE0F}'
            | '\u{E0100}'..='\u{E01EF}'
            | '\u{180B}'..='\u{180D}'
            | '\u{180F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{3164}'
            | '\u{FFA0}'
            | '\u{2800}'
            | '\u{1D159}'
            | '\u{034F}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{2065}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Whether `text` holds a character [`is_invisible`] names.
pub fn holds_invisible(text: &str) -> bool {
    text.chars().any(is_invisible)
}

/// `text` on one line as a person sees it: control characters become spaces, invisible
/// ones are taken out (the line then begins with "⚠ "), at most `max` characters (then
/// "…" says it was cut).
pub fn one_visible_line(text: &str, max: usize) -> String {
    let visible: Vec<char> = text
        .chars()
        .filter(|c| !is_invisible(*c))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut line: String = visible.iter().take(max).collect();
    if visible.len() > max {
        line.push('…');
    }
    if holds_invisible(text) {
        line.insert_str(0, "⚠ ");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::{escape_html, is_invisible};

    #[test]
    fn blanks_that_are_no_space_and_smuggled_tags_are_invisible() {
        for c in [
            '\u{200B}',
            '\u{202E}',
            '\u{2066}',
            '\u{00AD}',
            '\u{3164}',
            '\u{115F}',
            '\u{1160}',
            '\u{FFA0}',
            '\u{2800}',
            '\u{034F}',
            '\u{17B4}',
            '\u{E0041}',
            '\u{E0001}',
            '\u{E007F}',
            '\u{FE0F}',
            '\u{2065}',
            '\u{FFF0}',
            '\u{E0080}',
            '\u{E01F0}',
            '\u{1D159}',
        ] {
            assert!(is_invisible(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'è', '한', '⠁', '😀', '\u{3000}'] {
            assert!(!is_invisible(c), "U+{:04X}", c as u32);
        }
    }

    /// Sixteenth review of issue 38: a digest row dropped invisible characters and cut its
    /// text without a word.
    #[test]
    fn a_visible_line_says_what_it_took_out_and_where_it_cut() {
        use super::one_visible_line;
        assert_eq!(one_visible_line("grant ~/a/*", 300), "grant ~/a/*");
        assert_eq!(
            one_visible_line("grant ~/a\u{200B}/*", 300),
            "⚠ grant ~/a/*"
        );
        assert_eq!(one_visible_line("abcdef", 3), "abc…");
        assert_eq!(one_visible_line("a\nb", 3), "a b");
    }

    #[test]
    fn markup_is_shown_as_text() {
        assert_eq!(
            escape_html(r#"<a href="x">&amp;</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;amp;&lt;/a&gt;"
        );
        assert_eq!(escape_html("plain café"), "plain café");
    }
}
