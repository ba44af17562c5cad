//! The gateway's errors, and the one place they become gRPC statuses: what a client did
//! wrong is said to it, what went wrong inside is logged and said only in general terms.

use metnos_core::level::UnspecifiedLevel;
use metnos_kit::store::failure_status;
use tonic::Status;

/// Why a gateway call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Principal(#[from] metnos_core::principal::BadPrincipal),
    #[error("text is empty")]
    EmptyText,
    #[error("the card has no lines")]
    EmptyCard,
    #[error("message is missing")]
    MissingMessage,
    #[error(transparent)]
    TooBig(#[from] metnos_core::limits::TooBig),
    #[error(transparent)]
    Level(#[from] UnspecifiedLevel),
    /// The channel's name as the caller gave it, cut to 32 characters.
    #[error("unknown channel `{0}`")]
    UnknownChannel(String),
    #[error("the principal is not paired")]
    NotPaired,
    #[error("no such pairing code (unknown, already used, or older than 10 minutes)")]
    NoSuchCode,
    #[error("no such message")]
    NoSuchMessage,
    /// Telegram does not know the chat or message to edit (its words, token redacted).
    #[error("{0}")]
    TelegramNotFound(String),
    #[error("the Telegram channel is off (no bot token)")]
    ChannelOff,
    #[error("the web page is off: set web.enabled = true and restart the gateway")]
    WebOff,
    /// Telegram refused or could not be reached; names what did not go.
    #[error("Telegram did not take the {0}")]
    NotTaken(&'static str),
    /// Part of the message went, or it may have: it is not sent again.
    #[error("Telegram may have taken the {0} (or part of it); it is not sent again")]
    MaybeTaken(&'static str),
    /// Telegram failed an edit (its words, token redacted).
    #[error("{0}")]
    Telegram(String),
    /// A pairing in the store whose chat id is not a number.
    #[error("the pairing's chat id is not a number")]
    BadChatId,
    #[error("gateway store: {0}")]
    Store(#[from] sqlx::Error),
    /// The pairing changed, but what the person had under way could not be stopped (the
    /// planner or approval did not answer); the change stands.
    #[error("the pairing changed, but their turns and approvals could not all be stopped: {0}")]
    Withdraw(String),
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::Principal(_)
            | Error::EmptyText
            | Error::EmptyCard
            | Error::MissingMessage
            | Error::TooBig(_)
            | Error::Level(_)
            | Error::UnknownChannel(_) => Status::invalid_argument(error.to_string()),
            Error::NotPaired
            | Error::NoSuchCode
            | Error::NoSuchMessage
            | Error::TelegramNotFound(_) => Status::not_found(error.to_string()),
            Error::ChannelOff | Error::NotTaken(_) | Error::Telegram(_) | Error::Withdraw(_) => {
                Status::unavailable(error.to_string())
            }
            Error::MaybeTaken(_) => Status::aborted(error.to_string()),
            Error::BadChatId => Status::internal(error.to_string()),
            Error::WebOff => Status::failed_precondition(error.to_string()),
            Error::Store(e) => failure_status(crate::service::SERVICE, "the gateway store", &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_reach_the_client_without_the_database_s_words() {
        let unreachable = Status::from(Error::Store(sqlx::Error::Protocol(
            "server at db.internal:5432 sent garbage".to_owned(),
        )));
        assert_eq!(unreachable.code(), tonic::Code::Unavailable);
        assert!(
            !unreachable.message().contains("db.internal"),
            "{unreachable:?}"
        );
        let failed = Status::from(Error::Store(sqlx::Error::ColumnNotFound(
            "secret_column".to_owned(),
        )));
        assert_eq!(failed.code(), tonic::Code::Internal);
        assert!(!failed.message().contains("secret_column"), "{failed:?}");
    }

    #[test]
    fn a_caller_s_mistake_is_named_and_a_missing_thing_is_not_found() {
        let wrong = Status::from(Error::UnknownChannel("smoke-signals".to_owned()));
        assert_eq!(wrong.code(), tonic::Code::InvalidArgument);
        assert_eq!(wrong.message(), "unknown channel `smoke-signals`");
        let level = Status::from(Error::Level(UnspecifiedLevel));
        assert_eq!(level.code(), tonic::Code::InvalidArgument);
        assert_eq!(level.message(), "level is unspecified");
        assert_eq!(Status::from(Error::NotPaired).code(), tonic::Code::NotFound);
        let off = Status::from(Error::ChannelOff);
        assert_eq!(off.code(), tonic::Code::Unavailable);
        assert_eq!(
            Status::from(Error::NotTaken("card")).message(),
            "Telegram did not take the card"
        );
    }
}
