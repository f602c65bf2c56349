//! The crate's one error type.

use attention::AttentionError;
use positional::PositionalError;

/// Everything that can go wrong loading or running a model.
///
/// Every variant names the offending field (of `config.json`, a checkpoint or an argument) and its
/// value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A configuration field holds a value the model cannot use.
    #[error("invalid configuration: `{field}` = {value}: {expected}")]
    InvalidConfig {
        /// The field, as spelled in `config.json` (or the Rust config).
        field: String,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the field must be instead.
        expected: String,
    },
    /// An input (token ids, a mask, a file, a tensor of the checkpoint) that does not fit.
    #[error("invalid input: `{input}` = {value}: {expected}")]
    InvalidInput {
        /// The argument or tensor at fault.
        input: String,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the input must be instead.
        expected: String,
    },
    /// Attention (or its checkpoint reader) refused its configuration or input.
    #[error(transparent)]
    Attention(#[from] AttentionError),
    /// A positional encoding refused its configuration or input.
    #[error(transparent)]
    Positional(#[from] PositionalError),
}

impl ModelError {
    /// A configuration error for `field`, which holds `value` but must satisfy `expected`.
    pub fn config(
        field: impl Into<String>,
        value: impl std::fmt::Debug,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidConfig {
            field: field.into(),
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }

    /// An input error for `input`, which holds `value` but must satisfy `expected`.
    pub fn input(
        input: impl Into<String>,
        value: impl std::fmt::Debug,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidInput {
            input: input.into(),
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }
}

/// Unwraps `result`, panicking with the error's own text: the body of every panicking
/// convenience method.
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T, ModelError>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}
