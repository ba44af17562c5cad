//! The mail and calendar built-ins (`mail_search`, `mail_read`, `mail_send`,
//! `calendar_list`, `calendar_add`): the only program told the person's accounts, reading
//! a password for the one call that logs in; IMAP, SMTP, MIME and iCalendar load only here.

use std::process::ExitCode;

fn main() -> ExitCode {
    metnos_executors::program::main(metnos_executors::builtin::mail::run)
}
