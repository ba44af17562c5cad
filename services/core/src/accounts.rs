//! The person's mail accounts and calendars (`[mail.accounts.<name>]`,
//! `[calendar.sources.<name>]`): where the mail executors connect and as whom. Never a
//! secret: each names the file its password is in, which only the one call reads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How a connection is encrypted. There is no plain text: a password never crosses a
/// network in the clear.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Tls {
    /// TLS from the first byte (IMAP 993, SMTP 465).
    #[default]
    Implicit,
    /// A plain connection upgraded by STARTTLS before anything else is said (IMAP 143,
    /// SMTP submission 587); a server that does not offer it is refused.
    Starttls,
}

impl Tls {
    pub fn as_str(self) -> &'static str {
        match self {
            Tls::Implicit => "implicit",
            Tls::Starttls => "starttls",
        }
    }
}

/// One mail account: IMAP to read, SMTP submission to send.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct MailAccount {
    pub imap_host: String,
    /// 0: the TLS mode's port (993 implicit, 143 STARTTLS).
    pub imap_port: u16,
    pub imap_tls: Tls,
    /// The folder searched and read (`INBOX`).
    pub mailbox: String,
    pub smtp_host: String,
    /// 0: the TLS mode's port (465 implicit, 587 STARTTLS).
    pub smtp_port: u16,
    pub smtp_tls: Tls,
    /// The login, for IMAP and SMTP alike.
    pub user: String,
    /// The file holding the password (its first line): the person's own, readable by
    /// nobody else (`chmod 600`), else refused.
    pub password_file: PathBuf,
    /// The address mail is sent from. Empty: `user`.
    pub from: String,
    /// A PEM file of certificate authorities to trust besides the public ones (a home
    /// server's own CA). Empty: the public ones only.
    pub ca_file: PathBuf,
}

impl MailAccount {
    pub fn imap_port(&self) -> u16 {
        match (self.imap_port, self.imap_tls) {
            (0, Tls::Implicit) => 993,
            (0, Tls::Starttls) => 143,
            (port, _) => port,
        }
    }

    pub fn smtp_port(&self) -> u16 {
        match (self.smtp_port, self.smtp_tls) {
            (0, Tls::Implicit) => 465,
            (0, Tls::Starttls) => 587,
            (port, _) => port,
        }
    }

    pub fn mailbox(&self) -> &str {
        if self.mailbox.is_empty() {
            "INBOX"
        } else {
            &self.mailbox
        }
    }

    pub fn from(&self) -> &str {
        if self.from.is_empty() {
            &self.user
        } else {
            &self.from
        }
    }
}

/// One calendar: a CalDAV collection (read and written) or an ICS file (read only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CalendarSource {
    /// A CalDAV calendar collection's URL (`https://dav.example/user/calendar/`).
    pub caldav_url: String,
    /// An ICS file's URL (a published calendar), read only.
    pub ics_url: String,
    /// The login, when the server asks for one.
    pub user: String,
    /// The file holding the password (its first line), as for a mail account.
    pub password_file: PathBuf,
    /// Certificate authorities to trust besides the public ones, as for a mail account.
    pub ca_file: PathBuf,
}

impl CalendarSource {
    /// The URL read: the collection's or the file's.
    pub fn url(&self) -> &str {
        if self.caldav_url.is_empty() {
            &self.ics_url
        } else {
            &self.caldav_url
        }
    }

    pub fn is_caldav(&self) -> bool {
        !self.caldav_url.is_empty()
    }
}

/// Every account and calendar, by the name the person gave it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Accounts {
    pub mail: BTreeMap<String, MailAccount>,
    pub calendar: BTreeMap<String, CalendarSource>,
}

impl Accounts {
    pub fn is_empty(&self) -> bool {
        self.mail.is_empty() && self.calendar.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_tls_mode_unless_given() {
        let mut account = MailAccount::default();
        assert_eq!((account.imap_port(), account.smtp_port()), (993, 465));
        account.imap_tls = Tls::Starttls;
        account.smtp_tls = Tls::Starttls;
        assert_eq!((account.imap_port(), account.smtp_port()), (143, 587));
        account.imap_port = 1143;
        assert_eq!(account.imap_port(), 1143);
        assert_eq!(account.mailbox(), "INBOX");
        account.user = "me@example.org".into();
        assert_eq!(account.from(), "me@example.org");
    }
}
