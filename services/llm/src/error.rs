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
    /// A tool call whose arguments are not a JSON object (a small model's slip): the
    /// planner may ask the model again (issue 42).
    #[error(
        "{provider}: the model's call of `{tool}` has arguments that are not a JSON object: {message}"
    )]
    BadArguments {
        provider: &'static str,
        tool: String,
        message: String,
    },
    #[error("LLM configuration: {0}")]
    Config(String),
}

impl LlmError {
    /// What went wrong without the provider's own words (which may quote the prompt, and so
    /// a call's values): for logs and verdict notes.
    pub fn summary(&self) -> String {
        match self {
            LlmError::Unreachable { provider, .. } => format!("{provider} unreachable"),
            LlmError::Timeout { provider, after } => {
                format!("{provider} did not answer within {} s", after.as_secs())
            }
            LlmError::Http {
                provider, status, ..
            } => format!("{provider} answered HTTP {status}"),
            LlmError::ModelNotFound {
                provider, model, ..
            } => format!("{provider} has no model `{model}`"),
            LlmError::ContextTooLong { provider, .. } => {
                format!("{provider}: the conversation is too long for the model")
            }
            LlmError::Malformed { provider, .. } => {
                format!("{provider} answered something malformed")
            }
            LlmError::BadArguments { provider, .. } => {
                format!("{provider}: a tool call's arguments were not a JSON object")
            }
            LlmError::Config(_) => "LLM configuration error".to_owned(),
        }
    }

    /// Whether trying again may help (connection failures, 429, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Unreachable { .. } => true,
            LlmError::Http { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}
