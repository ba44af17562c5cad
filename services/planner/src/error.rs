//! What can go wrong at the planner's edge, and the one conversion to a gRPC status:
//! a caller's mistake is named; an internal cause (the store's or the file system's text)
//! is logged here and never sent.

use metnos_core::principal::PrincipalError;
use metnos_kit::store::failure_status;
use tonic::Status;

/// An RPC of the planner that cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("query is empty")]
    EmptyQuery,
    #[error("principal is missing (channel and sender_id are required)")]
    MissingPrincipal,
    #[error("{0}")]
    BadPrincipal(PrincipalError),
    #[error(transparent)]
    Principal(#[from] metnos_core::principal::BadPrincipal),
    #[error(transparent)]
    TooBig(#[from] metnos_core::limits::TooBig),
    #[error("level is unspecified")]
    UnspecifiedLevel,
    #[error("thread {0} is not one of unspecified (one-shot), continue, new")]
    UnknownThread(i32),
    #[error("give a turn_id or an approval_token")]
    NoResumeTarget,
    #[error("give a turn_id or a principal")]
    NoCancelTarget,
    #[error("date `{0}` is not in YYYY-MM-DD form")]
    BadDate(String),
    #[error("no such turn")]
    NoSuchTurn,
    /// No turn with this id (shown cut to 64 characters).
    #[error("no turn `{0}`")]
    NoTurn(String),
    #[error("turn {turn_id} is {state}, not suspended")]
    NotSuspended {
        turn_id: String,
        state: &'static str,
    },
    #[error("turn {0} is already being resumed")]
    AlreadyResuming(String),
    /// Another replica holds the turn; its lease ends within `seconds` unless renewed.
    #[error("turn {turn_id} is being resumed by another planner; try again in {seconds} s")]
    HeldElsewhere { turn_id: String, seconds: u64 },
    #[error("the turn's checkpoint is unreadable")]
    UnreadableCheckpoint(#[source] serde_json::Error),
    /// Written by a newer planner (a rolling upgrade): a replica of that version takes it.
    #[error(
        "the turn was stored by a newer planner (checkpoint version {0}; this one reads up to {max}); a planner of that version takes it",
        max = crate::turn::CHECKPOINT_VERSION
    )]
    NewerCheckpoint(u32),
    #[error("the planner store failed")]
    Store(#[from] sqlx::Error),
    #[error("the turn log cannot be read")]
    TurnLog(#[source] std::io::Error),
    #[error("a client certificate of this installation is required")]
    Unauthenticated,
    /// The caller's identity does not speak for people of this channel.
    #[error("{caller} may not act for {principal} (it speaks for: {channels})")]
    NotItsPeople {
        caller: String,
        principal: String,
        channels: String,
    },
    #[error("the owner's turns run at most at turns.cli_level ({allowed}), not {asked}")]
    AboveCliLevel { asked: String, allowed: String },
    /// The gateway asked for a person its pairing record does not hold.
    #[error("{0} is not paired with this installation: no turn runs for them")]
    NotPaired(String),
    /// The gateway asked for a level above the person's pairing.
    #[error("{principal} is paired at {paired}; a turn at {asked} is refused")]
    AbovePairing {
        principal: String,
        asked: String,
        paired: String,
    },
    /// The person's pairing record could not be read: nothing runs unchecked.
    #[error("the gateway's pairing record cannot be read now ({0}); try again shortly")]
    PairingUnknown(String),
    #[error("turn {turn_id} is not {principal}'s")]
    NotTheirTurn { turn_id: String, principal: String },
    #[error(
        "standing orders of people on `{0}` are set up in their chat (they approve its card); the owner's are on `cli`"
    )]
    NotCliSchedule(String),
    #[error("the scheduler is not running in this planner")]
    NoScheduler,
    #[error("terminal sessions are for people on `cli`, not `{0}` (theirs get cards pushed)")]
    NotCliSession(String),
    #[error("session_id must be 8 to 128 ASCII letters, digits or `_ . : -`")]
    BadSessionId,
    #[error(transparent)]
    Schedule(#[from] crate::proactive::scheduler::ScheduleError),
    #[error(transparent)]
    Thread(#[from] crate::store::threads::ThreadError),
    #[error(transparent)]
    Memory(#[from] crate::store::memories::MemoryError),
}

impl From<PrincipalError> for Error {
    fn from(e: PrincipalError) -> Error {
        match e {
            PrincipalError::Empty(_) => Error::MissingPrincipal,
            other => Error::BadPrincipal(other),
        }
    }
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        match error {
            Error::EmptyQuery
            | Error::MissingPrincipal
            | Error::BadPrincipal(_)
            | Error::Principal(_)
            | Error::UnspecifiedLevel
            | Error::UnknownThread(_)
            | Error::NoResumeTarget
            | Error::NoCancelTarget
            | Error::TooBig(_)
            | Error::BadDate(_) => Status::invalid_argument(error.to_string()),
            Error::NoSuchTurn | Error::NoTurn(_) => Status::not_found(error.to_string()),
            Error::Unauthenticated => Status::unauthenticated(error.to_string()),
            Error::NotItsPeople { .. }
            | Error::AboveCliLevel { .. }
            | Error::NotPaired(_)
            | Error::AbovePairing { .. }
            | Error::NotTheirTurn { .. } => Status::permission_denied(error.to_string()),
            Error::PairingUnknown(_) => Status::unavailable(error.to_string()),
            Error::NotSuspended { .. } | Error::AlreadyResuming(_) => {
                Status::failed_precondition(error.to_string())
            }
            // A conflict that ends by itself (the holder finishes or its lease expires).
            Error::HeldElsewhere { .. } | Error::NewerCheckpoint(_) => {
                Status::aborted(error.to_string())
            }
            Error::UnreadableCheckpoint(e) => {
                tracing::error!(error = %e, "a stored checkpoint cannot be read");
                Status::internal("the turn's checkpoint is unreadable; see the planner's log")
            }
            Error::Store(e) => failure_status(crate::SERVICE, "the planner store", &e),
            Error::TurnLog(e) => {
                tracing::error!(error = %e, "the turn log cannot be read");
                Status::internal("the turn log cannot be read; see the planner's log")
            }
            Error::NotCliSchedule(_) | Error::NotCliSession(_) | Error::BadSessionId => {
                Status::invalid_argument(error.to_string())
            }
            Error::NoScheduler => Status::unavailable(error.to_string()),
            Error::Memory(e) => {
                use crate::store::memories::MemoryError as M;
                match e {
                    M::Store(e) => failure_status(crate::SERVICE, "the planner store", &e),
                    M::NotFound(_) => Status::not_found(e.to_string()),
                    _ => Status::invalid_argument(e.to_string()),
                }
            }
            Error::Thread(e) => {
                use crate::store::threads::ThreadError as T;
                match e {
                    T::Store(e) => failure_status(crate::SERVICE, "the planner store", &e),
                    T::NoSuchThread => Status::not_found(e.to_string()),
                    T::TooLong { .. } | T::TooMany { .. } | T::Nul(_) => {
                        Status::invalid_argument(e.to_string())
                    }
                }
            }
            Error::Schedule(e) => {
                use crate::proactive::scheduler::ScheduleError as S;
                match e {
                    S::Unreadable(_)
                    | S::TooOften { .. }
                    | S::Never(_)
                    | S::EmptyQuery
                    | S::TooLong { .. }
                    | S::BadNotify(_)
                    | S::Invisible(_) => Status::invalid_argument(e.to_string()),
                    S::TooMany { .. } => Status::resource_exhausted(e.to_string()),
                    S::Taken(_) => Status::aborted(e.to_string()),
                    S::NotFound(_) => Status::not_found(e.to_string()),
                    S::Builtin(_) | S::Paused(_) => Status::failed_precondition(e.to_string()),
                    S::Store(e) => failure_status(crate::SERVICE, "the planner store", &e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_causes_are_not_sent_to_the_caller() {
        let secret = "no such table: turns_secret_detail";
        let status = Status::from(Error::Store(sqlx::Error::ColumnNotFound(secret.into())));
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(
            !status.message().contains("turns_secret_detail"),
            "{status:?}"
        );
        let status = Status::from(Error::Store(sqlx::Error::Protocol(secret.into())));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(
            !status.message().contains("turns_secret_detail"),
            "{status:?}"
        );
        let io = std::io::Error::other("/var/lib/metnos/turns/2026-11-23.jsonl: EIO");
        let status = Status::from(Error::TurnLog(io));
        assert!(!status.message().contains("/var/lib"), "{status:?}");
        let unreadable = serde_json::from_str::<u32>("{").unwrap_err();
        let status = Status::from(Error::UnreadableCheckpoint(unreadable));
        assert!(!status.message().contains("EOF"), "{status:?}");
    }

    #[test]
    fn a_callers_mistake_is_named_with_its_code() {
        let status = Status::from(Error::from(PrincipalError::Empty("channel")));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "principal is missing (channel and sender_id are required)"
        );
        let status = Status::from(Error::NotSuspended {
            turn_id: "t1".into(),
            state: "finished",
        });
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.message(), "turn t1 is finished, not suspended");
        // Held by another replica: a conflict that ends by itself, so worth retrying.
        let status = Status::from(Error::HeldElsewhere {
            turn_id: "t1".into(),
            seconds: 12,
        });
        assert_eq!(status.code(), tonic::Code::Aborted);
        assert_eq!(
            status.message(),
            "turn t1 is being resumed by another planner; try again in 12 s"
        );
    }
}
