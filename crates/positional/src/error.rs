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

/// The checks every module's forward makes of `x` before any tensor op: at least one batch row
/// (an empty batch is an error on every backend, where some of Burn's kernels would panic and
/// others return nothing), and the float type of the module's weights or tables (Burn's ops
/// panic on mixed float types).
pub(crate) fn check_rows_and_dtype(
    batch: usize,
    dtype: burn::tensor::DType,
    module_dtype: burn::tensor::DType,
) -> Result<(), PositionalError> {
    if batch == 0 {
        return Err(PositionalError::input(
            "x.dims()[0]",
            batch,
            "must be at least 1 (an empty batch is an error)",
        ));
    }
    if dtype != module_dtype {
        return Err(PositionalError::input(
            "x.dtype()",
            dtype,
            format!("must be the module's float type ({module_dtype:?})"),
        ));
    }
    Ok(())
}
