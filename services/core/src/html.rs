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
/// (format characters such as bidi overrides and zero-width joiners, line and paragraph
/// separators, variation selectors).
pub fn is_invisible(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    matches!(
        get_general_category(c),
        GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || matches!(c, '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}' | '\u{180B}'..='\u{180D}' | '\u{180F}')
}

/// `text` on one line as a person sees it: control characters become spaces, invisible
/// ones are taken out, at most `max` characters.
pub fn one_visible_line(text: &str, max: usize) -> String {
    text.chars()
        .filter(|c| !is_invisible(*c))
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::escape_html;

    #[test]
    fn markup_is_shown_as_text() {
        assert_eq!(
            escape_html(r#"<a href="x">&amp;</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;amp;&lt;/a&gt;"
        );
        assert_eq!(escape_html("plain café"), "plain café");
    }
}
