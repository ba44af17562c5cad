//! Typed, readable LLM errors. None of them carries an API key or a prompt.

use std::time::Duration;

/// What went wrong talking to an LLM.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("{provider} unreachable at {url}: {cause}")]
    Unreachable {
        provider: &'static str,
        url: String,
        cause: String,
    },
    #[error("{provider} did not answer within {} s", .after.as_secs())]
    Timeout {
        provider: &'static str,
        after: Duration,
    },
    #[error("{provider} answered HTTP {status}: {message}")]
    Http {
        provider: &'static str,
        status: u16,
        message: String,
    },
    #[error("{provider} has no model `{model}`: {message}")]
    ModelNotFound {
        provider: &'static str,
        model: String,
        message: String,
    },
    #[error("{provider}: the conversation is too long for the model: {message}")]
    ContextTooLong {
        provider: &'static str,
        message: String,
    },
    #[error("{provider} answered something malformed: {message}")]
    Malformed {
        provider: &'static str,
        message: String,
    },
    #[error("LLM configuration: {0}")]
    Config(String),
}

impl LlmError {
    /// Whether trying again may help (connection failures, 429, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Unreachable { .. } => true,
            LlmError::Http { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}
