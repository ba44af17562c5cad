//! A message's headers and text, through mail-parser: encoded words and charsets decoded,
//! the text body taken from its text parts (HTML turned into text by the same converter
//! as `parse_local`), attachments named and sized but never opened. Whatever the bytes
//! are — cut short, malformed, enormous — the answer is bounded and nothing panics.

use mail_parser::{Message, MessageParser, MimeHeaders};
use serde_json::{Map, Value, json};

/// The most characters of a header shown (a subject, a list of recipients).
const MAX_HEADER_CHARS: usize = 500;
/// The most attachments listed.
const MAX_ATTACHMENTS: usize = 50;
/// The most addresses of one header listed.
const MAX_ADDRESSES: usize = 50;

/// The headers a search shows: from (and its address alone), to, subject, date.
pub fn summary(header: &[u8]) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(message) = MessageParser::default().parse_headers(header) else {
        out.insert("from".into(), json!(""));
        out.insert("subject".into(), json!(""));
        return out;
    };
    headers(&message, &mut out);
    out
}

/// A read message: its headers, text (at most `max_text` bytes) and attachments.
pub fn read(raw: &[u8], max_text: usize) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(message) = MessageParser::default().parse(raw) else {
        out.insert("text".into(), json!(""));
        out.insert(
            "note".into(),
            json!("the message has no header block: nothing could be read"),
        );
        return out;
    };
    headers(&message, &mut out);
    if let Some(id) = message.message_id() {
        out.insert("message_id".into(), json!(format!("<{}>", shown(id))));
    }
    let mut text = String::new();
    for part in message.text_bodies() {
        let piece = part.text_contents().map(|t| {
            if part.is_text_html() {
                html2text::from_read(t.as_bytes(), 100).unwrap_or_else(|_| t.to_owned())
            } else {
                t.to_owned()
            }
        });
        if let Some(piece) = piece {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&piece);
        }
        if text.len() > max_text {
            break;
        }
    }
    let (kept, cut) = super::cut(&text, max_text);
    out.insert("text".into(), json!(kept));
    out.insert("text_cut".into(), json!(cut));
    let attachments: Vec<Value> = message
        .attachments()
        .take(MAX_ATTACHMENTS)
        .map(|part| {
            let kind = part
                .content_type()
                .map(|t| match t.subtype() {
                    Some(sub) => format!("{}/{sub}", t.ctype()),
                    None => t.ctype().to_owned(),
                })
                .unwrap_or_else(|| "application/octet-stream".into());
            json!({
                "name": part.attachment_name().map(shown).unwrap_or_default(),
                "type": shown(&kind),
                "bytes": part.len(),
            })
        })
        .collect();
    out.insert("attachments".into(), Value::Array(attachments));
    out
}

fn headers(root: &Message<'_>, out: &mut Map<String, Value>) {
    let first = root.from().and_then(|list| list.first());
    let address = first
        .and_then(|m| m.address())
        .map(|a| shown(a).to_ascii_lowercase())
        .unwrap_or_default();
    out.insert("from".into(), json!(first.map(mailbox).unwrap_or_default()));
    out.insert("from_address".into(), json!(address));
    for (key, list) in [("to", root.to()), ("cc", root.cc())] {
        if let Some(list) = list {
            let all: Vec<String> = list.iter().take(MAX_ADDRESSES).map(mailbox).collect();
            let joined: String = all.join(", ").chars().take(2 * MAX_HEADER_CHARS).collect();
            out.insert(key.into(), json!(joined));
        }
    }
    out.insert(
        "subject".into(),
        json!(root.subject().map(shown).unwrap_or_default()),
    );
    if let Some(date) = root.date() {
        out.insert("date".into(), json!(date.to_rfc3339()));
    }
}

/// `Name <address>`, or the address alone.
fn mailbox(m: &mail_parser::Addr<'_>) -> String {
    match (m.name(), m.address()) {
        (Some(name), Some(address)) if !name.is_empty() => {
            format!("{} <{}>", shown(name), shown(address))
        }
        (_, Some(address)) => shown(address),
        (Some(name), None) => shown(name),
        (None, None) => String::new(),
    }
}

/// A header's text, cut and without control characters (a header cannot break a line of
/// what the model reads).
fn shown(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_HEADER_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipart_message_gives_its_text_and_lists_its_attachments() {
        let raw = b"From: =?UTF-8?Q?Mario_Ros=C3=AC?= <Mario@Plumber.example>\r\n\
To: me@example.org\r\nSubject: Preventivo\r\nDate: Tue, 3 Mar 2026 10:00:00 +0100\r\n\
Message-ID: <p1@plumber.example>\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
<p>Tuesday <b>works</b></p>\r\n--b\r\nContent-Type: application/pdf\r\n\
Content-Disposition: attachment; filename=quote.pdf\r\nContent-Transfer-Encoding: base64\r\n\r\n\
JVBERi0xLjQK\r\n--b--\r\n";
        let read = read(raw, 1000);
        assert_eq!(read["from"], "Mario Rosì <Mario@Plumber.example>");
        assert_eq!(read["from_address"], "mario@plumber.example");
        assert_eq!(read["message_id"], "<p1@plumber.example>");
        assert!(
            read["text"].as_str().unwrap().contains("Tuesday **works**"),
            "{read:?}"
        );
        assert_eq!(read["attachments"][0]["name"], "quote.pdf");
        assert_eq!(read["attachments"][0]["type"], "application/pdf");
        assert_eq!(read["attachments"][0]["bytes"], 9);
    }

    #[test]
    fn garbage_and_cut_messages_give_bounded_answers() {
        for raw in [
            &b""[..],
            b"\xff\xfe\x00garbage",
            b"Subject: x\r\nContent-Type: multipart/mixed; boundary=\"\r\n\r\n--",
        ] {
            let out = read(raw, 100);
            assert!(out.contains_key("text"), "{out:?}");
        }
        let long = format!(
            "Subject: {}\r\n\r\n{}",
            "s".repeat(5000),
            "é".repeat(10_000)
        );
        let out = read(long.as_bytes(), 101);
        assert_eq!(out["subject"].as_str().unwrap().len(), MAX_HEADER_CHARS);
        assert!(out["text"].as_str().unwrap().len() <= 101);
        assert_eq!(out["text_cut"], true);
    }
}
