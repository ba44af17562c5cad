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
