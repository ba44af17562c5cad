//! `[mail.accounts.<name>]` and `[calendar.sources.<name>]`: the person's mail accounts
//! and calendars, reached by the mail executors (`metnos-mail`). Passwords stay in their
//! files; the config names the file.

use std::collections::BTreeMap;
use std::path::Path;

use metnos_core::accounts::{Accounts, CalendarSource, MailAccount};
use serde::{Deserialize, Serialize};

use super::{Config, ConfigError};

/// `[mail]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct MailConfig {
    pub accounts: BTreeMap<String, MailAccount>,
}

/// `[calendar]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CalendarConfig {
    pub sources: BTreeMap<String, CalendarSource>,
}

/// The most characters of an account's or a calendar's name.
const MAX_NAME: usize = 32;

impl Config {
    /// Every account and calendar, as the mail executors are given them.
    pub fn accounts(&self) -> Accounts {
        Accounts {
            mail: self.mail.accounts.clone(),
            calendar: self.calendar.sources.clone(),
        }
    }

    pub(super) fn validate_accounts(&self) -> Result<(), ConfigError> {
        for (name, account) in &self.mail.accounts {
            let key = |k: &str| format!("mail.accounts.{name}.{k}");
            check_name(name).map_err(|m| ConfigError::key(format!("mail.accounts.{name}"), m))?;
            for (field, value) in [
                ("imap_host", &account.imap_host),
                ("smtp_host", &account.smtp_host),
                ("user", &account.user),
            ] {
                check_host_or_user(field, value).map_err(|m| ConfigError::key(key(field), m))?;
            }
            check_secret_file(&account.password_file, true)
                .map_err(|m| ConfigError::key(key("password_file"), m))?;
            check_secret_file(&account.ca_file, false)
                .map_err(|m| ConfigError::key(key("ca_file"), m))?;
            if account
                .mailbox
                .contains(|c: char| c.is_control() || c == '"')
            {
                return Err(ConfigError::key(
                    key("mailbox"),
                    "a folder name has no quotes or control characters",
                ));
            }
        }
        for (name, source) in &self.calendar.sources {
            let key = |k: &str| format!("calendar.sources.{name}.{k}");
            check_name(name)
                .map_err(|m| ConfigError::key(format!("calendar.sources.{name}"), m))?;
            let (field, url) = match (source.caldav_url.is_empty(), source.ics_url.is_empty()) {
                (false, true) => ("caldav_url", &source.caldav_url),
                (true, false) => ("ics_url", &source.ics_url),
                _ => {
                    return Err(ConfigError::key(
                        format!("calendar.sources.{name}"),
                        "name exactly one of `caldav_url` (a CalDAV collection) and `ics_url` (an ICS file)",
                    ));
                }
            };
            check_calendar_url(url).map_err(|m| ConfigError::key(key(field), m))?;
            check_secret_file(&source.password_file, !source.user.is_empty())
                .map_err(|m| ConfigError::key(key("password_file"), m))?;
            check_secret_file(&source.ca_file, false)
                .map_err(|m| ConfigError::key(key("ca_file"), m))?;
        }
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if fine {
        Ok(())
    } else {
        Err(format!(
            "a name is 1 to {MAX_NAME} of a-z, 0-9, `-` and `_` (it is how the person and the model name it)"
        ))
    }
}

fn check_host_or_user(field: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err("is required".to_owned());
    }
    if value.contains(|c: char| c.is_control() || c.is_whitespace()) {
        return Err(format!("a {field} has no spaces or control characters"));
    }
    if field.ends_with("host") && value.contains(['/', ':', '@']) {
        return Err(format!(
            "`{value}` is not a host name or address (the port is a key of its own)"
        ));
    }
    Ok(())
}

/// A password or CA file: absolute (the services do not share a working folder).
fn check_secret_file(path: &Path, required: bool) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return if required {
            Err("is required: a file holding the password on its first line, `chmod 600`".into())
        } else {
            Ok(())
        };
    }
    if !path.is_absolute() {
        return Err(format!("`{}` must be an absolute path", path.display()));
    }
    Ok(())
}

/// A calendar's URL: https, or plain http to this machine only (a password never crosses
/// a network in the clear).
fn check_calendar_url(text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "holds a user or a password: name the user in `user` and the password in `password_file`"
                .to_owned(),
        );
    }
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err(format!("`{text}` has no host")),
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(format!(
            "`{text}` must be https:// (plain http:// only to this machine)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::{load, load_err, with_env, write_file};

    #[test]
    fn accounts_and_calendars_load_with_their_defaults() {
        with_env(&[], |jail| {
            write_file(
                jail,
                r#"
[mail.accounts.home]
imap_host = "imap.example.org"
smtp_host = "smtp.example.org"
smtp_tls = "starttls"
user = "me@example.org"
password_file = "/home/u/.config/metnos/mail-home"

[calendar.sources.family]
caldav_url = "https://dav.example.org/me/family/"
user = "me"
password_file = "/home/u/.config/metnos/dav"

[calendar.sources.holidays]
ics_url = "https://example.org/holidays.ics"
"#,
            )?;
            let config = load()?;
            let home = &config.mail.accounts["home"];
            assert_eq!((home.imap_port(), home.smtp_port()), (993, 587));
            let accounts = config.accounts();
            assert!(accounts.calendar["family"].is_caldav());
            assert_eq!(
                accounts.calendar["holidays"].url(),
                "https://example.org/holidays.ics"
            );
            Ok(())
        });
    }

    #[test]
    fn a_bad_account_or_calendar_is_refused_naming_its_key() {
        let cases = [
            (
                "[mail.accounts.home]\nimap_host = \"imap.example.org\"\nsmtp_host = \"s.example.org\"\nuser = \"me\"\n",
                "mail.accounts.home.password_file",
            ),
            (
                "[mail.accounts.home]\nimap_host = \"imap.example.org:993\"\nsmtp_host = \"s\"\nuser = \"me\"\npassword_file = \"/p\"\n",
                "mail.accounts.home.imap_host",
            ),
            (
                "[mail.accounts.home]\nimap_host = \"i\"\nsmtp_host = \"s\"\nuser = \"me\"\npassword_file = \"pw\"\n",
                "must be an absolute path",
            ),
            (
                "[mail.accounts.Home]\nimap_host = \"i\"\nsmtp_host = \"s\"\nuser = \"me\"\npassword_file = \"/p\"\n",
                "mail.accounts.Home",
            ),
            (
                "[mail.accounts.home]\nimap_host = \"i\"\nimap_tls = \"none\"\n",
                "imap_tls",
            ),
            (
                "[calendar.sources.c]\ncaldav_url = \"http://dav.example.org/c/\"\n",
                "plain http:// only to this machine",
            ),
            (
                "[calendar.sources.c]\ncaldav_url = \"https://a.example/\"\nics_url = \"https://b.example/x.ics\"\n",
                "exactly one of",
            ),
            (
                "[calendar.sources.c]\ncaldav_url = \"https://a.example/\"\nuser = \"me\"\n",
                "calendar.sources.c.password_file",
            ),
            (
                "[calendar.sources.c]\nics_url = \"https://me:hunter2@a.example/c.ics\"\n",
                "holds a user or a password",
            ),
        ];
        for (text, expected) in cases {
            with_env(&[], |jail| {
                write_file(jail, text)?;
                let error = load_err();
                assert!(error.contains(expected), "{text}: {error}");
                Ok(())
            });
        }
    }
}
