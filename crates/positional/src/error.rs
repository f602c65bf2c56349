//! The crate's one error type.

/// Everything that can go wrong when building or running a positional encoding.
///
/// Every variant names the offending field (or input) and its value, so that a message read in a
/// log is enough to fix the configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PositionalError {
    /// A configuration field holds a value the encoding cannot use.
    #[error("invalid configuration: `{field}` = {value}: {expected}")]
    InvalidConfig {
        /// The field, as spelled in the config struct (or the Hugging Face `config.json`).
        field: &'static str,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the field must be instead.
        expected: String,
    },
    /// An input (a tensor shape, an offset, a length) does not fit the configured module.
    #[error("invalid input: `{input}` = {value}: {expected}")]
    InvalidInput {
        /// The argument or tensor dimension at fault.
        input: &'static str,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the input must be instead.
        expected: String,
    },
    /// A Hugging Face `config.json` could not be read as JSON of the expected shape.
    #[error("invalid Hugging Face config: {0}")]
    HuggingFaceConfig(String),
}

impl PositionalError {
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

/// Unwraps `result`, panicking with the error's own text.
///
/// Backs every panicking convenience method (`init`, `forward`, ...), so that their panic message
/// is exactly what the `try_` variant would have returned.
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T, PositionalError>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}
