//! Where the data of a turn came from (issue 19): every observation carries provenance
//! labels, and an argument made from an observation carries them on. The planner writes
//! them; the vaglio, the approval card and the turn log read them. One spelling for all:
//!
//! | label                   | the data came from                                        |
//! |-------------------------|-----------------------------------------------------------|
//! | `person`                | the person's own message                                  |
//! | `clock`                 | the system clock (`time_now`)                             |
//! | `web:<host>`            | a page `web_fetch` read, from this host (after redirects) |
//! | `private:<host>`        | a page of a host on the home network, or read with credentials |
//! | `file:<path>`           | a file or folder read (`fs_read`, `fs_list`, `parse_local`), spelled from `~` |
//! | `shell`                 | a command's output (`shell_exec`)                         |
//! | `scratchpad:<id>`       | a page of a stored observation (with its origin's labels) |
//! | `tool:<executor>`       | any other executor's output                               |
//! | `mcp:<server>`          | what a tool of this MCP server returned                   |
//! | `mail:<account>:<sender>` | a message of this account from this sender's address (`mail_search`, `mail_read`) |
//! | `calendar:<source>`     | an event of this calendar (`calendar_list`)               |
//! | `forwarded`             | a message the person forwarded from someone else          |
//! | `memory`                | the person's long-term memory, an entry in their own words |
//!
//! `person`, `clock` and `memory` are trusted: nobody outside can write them (an entry
//! made from the world's data keeps that data's labels beside it). Every other label is
//! the world's, and data carrying one is *tainted*. `memory` is private all the same: what
//! the person asked to be remembered does not leave unasked.

use crate::language::Language;

/// The most labels one argument or observation carries on the wire.
pub const MAX_LABELS: usize = 16;
/// The most bytes of one label on the wire.
pub const MAX_LABEL: usize = 512;

/// One provenance label.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Label {
    Person,
    Clock,
    Web(String),
    /// A page not everyone can read: a local host's, or one fetched with credentials.
    Private(String),
    File(String),
    Shell,
    Scratchpad(String),
    Tool(String),
    /// What a tool of an MCP server returned (the server's name).
    Mcp(String),
    /// Mail read from an account: `<account>:<sender address>` (a message's text is its
    /// sender's words, whoever the sender claims to be).
    Mail(String),
    /// An event of one of the person's calendars (the source's name): anyone who may
    /// invite the person wrote its title.
    Calendar(String),
    /// A message the person forwarded: someone else's words.
    Forwarded,
    /// An entry of the person's long-term memory in their own words.
    Memory,
}

impl Label {
    /// Reads a label as [`Label::to_string`] writes it; `None` for anything else.
    pub fn parse(text: &str) -> Option<Label> {
        match text {
            "person" => return Some(Label::Person),
            "clock" => return Some(Label::Clock),
            "shell" => return Some(Label::Shell),
            "forwarded" => return Some(Label::Forwarded),
            "memory" => return Some(Label::Memory),
            _ => {}
        }
        let (kind, rest) = text.split_once(':')?;
        if rest.is_empty() {
            return None;
        }
        let rest = rest.to_owned();
        match kind {
            "web" => Some(Label::Web(rest)),
            "private" => Some(Label::Private(rest)),
            "file" => Some(Label::File(rest)),
            "scratchpad" => Some(Label::Scratchpad(rest)),
            "tool" => Some(Label::Tool(rest)),
            "mcp" => Some(Label::Mcp(rest)),
            "mail" => Some(Label::Mail(rest)),
            "calendar" => Some(Label::Calendar(rest)),
            _ => None,
        }
    }

    /// Whether data with this label comes from the world (anyone may have written it).
    pub fn is_untrusted(&self) -> bool {
        !matches!(self, Label::Person | Label::Clock | Label::Memory)
    }

    /// Where the data came from, as a card says it after "contains text": "from web page
    /// news.example.com", "dal tuo file ~/Documents/report.txt". `None` for a label a card
    /// has nothing to say about (trusted ones, a scratchpad id: its origin is said).
    pub fn said(&self, language: Language) -> Option<String> {
        let it = language == Language::Italian;
        Some(match (self, it) {
            (Label::Web(host), false) => format!("from web page {host}"),
            (Label::Web(host), true) => format!("dalla pagina web {host}"),
            (Label::Private(host), false) => format!("from the private page {host}"),
            (Label::Private(host), true) => format!("dalla pagina privata {host}"),
            (Label::File(path), false) => format!("from your file {path}"),
            (Label::File(path), true) => format!("dal tuo file {path}"),
            (Label::Shell, false) => "from a command's output".to_owned(),
            (Label::Shell, true) => "dall'output di un comando".to_owned(),
            (Label::Tool(name), false) => format!("from what {name} returned"),
            (Label::Tool(name), true) => format!("da quanto ha restituito {name}"),
            (Label::Mcp(server), false) => format!("from what MCP server {server} returned"),
            (Label::Mcp(server), true) => format!("da quanto ha restituito il server MCP {server}"),
            (Label::Mail(from), false) => match from.split_once(':') {
                Some((account, sender)) => format!("from a mail of {sender} ({account})"),
                None => format!("from mail ({from})"),
            },
            (Label::Mail(from), true) => match from.split_once(':') {
                Some((account, sender)) => format!("da una mail di {sender} ({account})"),
                None => format!("dalla posta ({from})"),
            },
            (Label::Calendar(source), false) => format!("from an event of calendar {source}"),
            (Label::Calendar(source), true) => format!("da un evento del calendario {source}"),
            (Label::Forwarded, false) => "from a forwarded message".to_owned(),
            (Label::Forwarded, true) => "da un messaggio inoltrato".to_owned(),
            (Label::Memory, false) => "from what you asked me to remember".to_owned(),
            (Label::Memory, true) => "da ciò che mi hai chiesto di ricordare".to_owned(),
            (Label::Person | Label::Clock | Label::Scratchpad(_), _) => return None,
        })
    }
}

impl Label {
    /// The order a card names sources in: what is the person's own (files, commands,
    /// other tools) before web pages, so a long list or a long host never hides a file.
    pub fn rank(&self) -> u8 {
        match self {
            Label::File(_) => 0,
            Label::Private(_) => 1,
            Label::Shell => 2,
            Label::Memory => 1,
            Label::Tool(_) | Label::Mcp(_) => 3,
            Label::Web(_) | Label::Forwarded | Label::Mail(_) | Label::Calendar(_) => 4,
            Label::Scratchpad(_) => 5,
            Label::Person | Label::Clock => 6,
        }
    }
}

/// `labels` in the order a card names them ([`Label::rank`]), unparsable ones first (they
/// are never trusted).
pub fn sort(labels: &mut [String]) {
    labels.sort_by_key(|l| Label::parse(l).map_or(0, |l| l.rank()));
}

/// `text` in at most `max` characters: its head and tail around an ellipsis.
fn shortened(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(count - (max - max / 2 - 1)).collect();
    format!("{head}…{tail}")
}

/// The most sources a card names for one argument; the others are counted.
const SAID: usize = 2;
/// The most characters of one source's host or path on a card.
const SAID_CHARS: usize = 48;

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Label::Person => f.write_str("person"),
            Label::Clock => f.write_str("clock"),
            Label::Shell => f.write_str("shell"),
            Label::Web(host) => write!(f, "web:{host}"),
            Label::Private(host) => write!(f, "private:{host}"),
            Label::File(path) => write!(f, "file:{path}"),
            Label::Scratchpad(id) => write!(f, "scratchpad:{id}"),
            Label::Tool(name) => write!(f, "tool:{name}"),
            Label::Mcp(server) => write!(f, "mcp:{server}"),
            Label::Mail(from) => write!(f, "mail:{from}"),
            Label::Calendar(source) => write!(f, "calendar:{source}"),
            Label::Forwarded => f.write_str("forwarded"),
            Label::Memory => f.write_str("memory"),
        }
    }
}

/// What a card says of an argument carrying data from the world: "body contains text from
/// your file ~/Documents/report.txt", "url contiene testo dal tuo file ~/x e dalla pagina web
/// a.example". Files, commands and tools come before web pages; each host or path is cut to
/// 48 characters; after two sources the rest are counted. Labels a card cannot say are
/// left out; `None` when none is left.
pub fn carried(arg: &str, labels: &[String], language: Language) -> Option<String> {
    let mut parsed: Vec<Label> = labels.iter().filter_map(|l| Label::parse(l)).collect();
    parsed.sort_by_key(Label::rank);
    let mut said: Vec<String> = Vec::new();
    for label in parsed {
        let label = match label {
            Label::Web(host) => Label::Web(shortened(&host, SAID_CHARS)),
            Label::Private(host) => Label::Private(shortened(&host, SAID_CHARS)),
            Label::File(path) => Label::File(shortened(&path, SAID_CHARS)),
            Label::Tool(name) => Label::Tool(shortened(&name, SAID_CHARS)),
            Label::Mcp(server) => Label::Mcp(shortened(&server, SAID_CHARS)),
            Label::Mail(from) => Label::Mail(shortened(&from, SAID_CHARS * 2)),
            Label::Calendar(source) => Label::Calendar(shortened(&source, SAID_CHARS)),
            other => other,
        };
        if let Some(text) = label.said(language)
            && !said.contains(&text)
        {
            said.push(text);
        }
    }
    if said.is_empty() {
        return None;
    }
    let (contains, and) = match language {
        Language::Italian => ("contiene testo", " e "),
        Language::English => ("contains text", " and "),
    };
    let more = said.len().saturating_sub(SAID);
    said.truncate(SAID);
    let mut out = format!("{arg} {contains} {}", said.join(and));
    if more > 0 {
        out.push_str(&match language {
            Language::Italian => format!(" (+{more} altre fonti)"),
            Language::English => format!(" (+{more} more sources)"),
        });
    }
    Some(out)
}

/// The most telling of several arguments' sources for a card's one line: the best-ranked
/// source of any argument ("body contains text from your file ~/.ssh/id_ed25519"), with the
/// count of the other sources of every argument ("(+3 more sources)").
pub fn most_telling(tainted: &[(String, Vec<String>)], language: Language) -> Option<String> {
    let mut best: Option<(u8, &str, Label)> = None;
    let mut total = 0usize;
    for (arg, labels) in tainted {
        for label in labels.iter().filter_map(|l| Label::parse(l)) {
            if label.said(language).is_none() {
                continue;
            }
            total += 1;
            if best
                .as_ref()
                .is_none_or(|(rank, _, _)| label.rank() < *rank)
            {
                best = Some((label.rank(), arg.as_str(), label));
            }
        }
    }
    let (_, arg, label) = best?;
    let arg = shortened(arg, 16);
    let mut out = carried(&arg, &[label.to_string()], language)?;
    if total > 1 {
        out.push_str(&match language {
            Language::Italian => format!(" (+{} altre fonti)", total - 1),
            Language::English => format!(" (+{} more sources)", total - 1),
        });
    }
    Some(out)
}

/// The key of an approval request's `extra_json` that lists the arguments carrying data
/// from the world into a sink (`[{"arg": "body", "sources": ["file:~/r.txt"]}]`): the
/// planner sets it; the approval service says it on the card and offers no territory (a
/// grant does not lift a tainted call's question).
pub const TAINTED_SINK: &str = "tainted_sink";

/// The key of an approval request's `extra_json` that marks a write which runs code later
/// (`{"rule": "write.home_hidden"}`, [`crate::forbidden::runs_code_later`]): the person's
/// message named the path; the card says why it asks, and offers no territory (such a
/// write is asked about every time, never granted).
pub const RUNS_CODE_LATER: &str = "runs_code_later";

/// The key of an approval request's `extra_json` that lists what private data the turn
/// read before this call sends something to another party (`["file:~/Documents/r.txt"]`):
/// whatever the call's text, it could carry it re-encoded (base64, in pieces), so the card
/// says so and offers no territory.
pub const READ_PRIVATE: &str = "read_private";
/// The `extra_json` key naming the recipients of a mail the person's own message never
/// named (the planner compares; the card marks them).
pub const UNNAMED_RECIPIENTS: &str = "unnamed_recipients";

impl Label {
    /// Whether data with this label is the person's own, not everyone's: a file, a
    /// command's output, a private page, another tool's answer, mail, a calendar's
    /// events. (Not a public page, the
    /// person's words, the clock, or a scratchpad id, whose origin is named beside it.)
    pub fn is_private(&self) -> bool {
        matches!(
            self,
            Label::File(_)
                | Label::Shell
                | Label::Private(_)
                | Label::Tool(_)
                | Label::Mcp(_)
                | Label::Mail(_)
                | Label::Calendar(_)
                | Label::Memory
        )
    }
}

/// The key of an approval request's `extra_json` that holds a path target as the call
/// wrote it, when a symbolic link leads it elsewhere: the request's target is the resolved
/// path, and the card says both ("…/report.txt → ~/Documents/report.txt, through a link").
pub const THROUGH_LINK: &str = "through_link";

#[cfg(test)]
mod tests {

    #[test]
    fn an_mcp_server_s_answer_is_the_world_s_and_private_and_cards_name_the_server() {
        let label = Label::parse("mcp:notes").unwrap();
        assert_eq!(label, Label::Mcp("notes".into()));
        assert_eq!(label.to_string(), "mcp:notes");
        assert!(label.is_untrusted());
        assert!(label.is_private());
        assert_eq!(
            label.said(Language::English).as_deref(),
            Some("from what MCP server notes returned")
        );
        assert_eq!(
            carried(
                "body",
                &["web:a.example".into(), "mcp:notes".into()],
                Language::Italian
            )
            .unwrap(),
            "body contiene testo da quanto ha restituito il server MCP notes e dalla pagina web a.example"
        );
        assert_eq!(Label::parse("mcp:"), None);
    }

    use super::*;

    #[test]
    fn labels_read_back_as_they_are_written() {
        for text in [
            "person",
            "clock",
            "shell",
            "web:news.example.com",
            "private:nas.local",
            "file:~/Documents/report.txt",
            "scratchpad:ab12",
            "tool:mail_read",
            "forwarded",
            "memory",
        ] {
            assert_eq!(Label::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "web:", "disk:/x", "Person", "web"] {
            assert_eq!(Label::parse(bad), None, "{bad}");
        }
        assert!(!Label::Person.is_untrusted());
        // The person's memory is theirs, and private; a forwarded message is neither.
        assert!(!Label::Memory.is_untrusted() && Label::Memory.is_private());
        assert!(Label::Forwarded.is_untrusted() && !Label::Forwarded.is_private());
        assert!(!Label::Clock.is_untrusted());
        assert!(Label::Web("a".into()).is_untrusted());
        assert!(Label::Shell.is_untrusted());
    }

    #[test]
    fn a_card_names_where_the_data_came_from_in_the_persons_language() {
        let labels = vec![
            "scratchpad:x1".to_owned(),
            "file:~/Documents/report.txt".to_owned(),
            "web:news.example.com".to_owned(),
        ];
        assert_eq!(
            carried("body", &labels, Language::English).unwrap(),
            "body contains text from your file ~/Documents/report.txt and from web page news.example.com"
        );
        // A long host and many pages never push the file off the card.
        let mut many: Vec<String> = (0..20)
            .map(|i| format!("web:{}{i}.example", "x".repeat(200)))
            .collect();
        many.push("file:~/Documents/report.txt".to_owned());
        let said = carried("body", &many, Language::English).unwrap();
        assert!(
            said.starts_with(
                "body contains text from your file ~/Documents/report.txt and from web page xxx"
            ),
            "{said}"
        );
        assert!(said.ends_with("(+19 more sources)"), "{said}");
        assert!(said.chars().count() < 200, "{said}");
        sort(&mut many);
        assert_eq!(many[0], "file:~/Documents/report.txt");
        // Across arguments, the file wins whatever order the model wrote them in.
        let tainted = vec![
            (
                "headers".to_owned(),
                vec!["web:a.example".to_owned(), "web:b.example".to_owned()],
            ),
            ("body".to_owned(), vec!["file:~/.ssh/id_ed25519".to_owned()]),
        ];
        assert_eq!(
            most_telling(&tainted, Language::English).unwrap(),
            "body contains text from your file ~/.ssh/id_ed25519 (+2 more sources)"
        );
        assert_eq!(most_telling(&[], Language::English), None);
        assert_eq!(
            carried("content", &labels[..2], Language::Italian).unwrap(),
            "content contiene testo dal tuo file ~/Documents/report.txt"
        );
        assert_eq!(
            carried("x", &["person".to_owned()], Language::English),
            None
        );
    }
}
