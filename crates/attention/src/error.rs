//! The crate's one error type.

use positional::PositionalError;

/// Everything that can go wrong when building or running attention.
///
/// Every variant names the offending field (or input) and its value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttentionError {
    /// A configuration field holds a value attention cannot use.
    #[error("invalid configuration: `{field}` = {value}: {expected}")]
    InvalidConfig {
        /// The field, as spelled in [`MultiHeadAttentionConfig`](crate::MultiHeadAttentionConfig).
        field: &'static str,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the field must be instead.
        expected: String,
    },
    /// An input (a tensor's shape, a mask, weights) does not fit the configured module.
    #[error("invalid input: `{input}` = {value}: {expected}")]
    InvalidInput {
        /// The argument or tensor dimension at fault.
        input: &'static str,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the input must be instead.
        expected: String,
    },
    /// The positional encoding inside attention refused its configuration or input.
    #[error(transparent)]
    Positional(#[from] PositionalError),
}

impl AttentionError {
    /// A configuration error for `field`, which holds `value` but must satisfy `expected`.
    pub fn config(
        field: &'static str,
        value: impl std::fmt::Debug,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidConfig {
            field,
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }

    /// An input error for `input`, which holds `value` but must satisfy `expected`.
    pub fn input(
        input: &'static str,
        value: impl std::fmt::Debug,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidInput {
            input,
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }
}

/// Unwraps `result`, panicking with the error's own text: the body of every panicking
/// convenience method.
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T, AttentionError>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}
