//! Scoring text with a language model: the log-probability of each next token, and perplexity.
//!
//! Perplexity is `exp(-mean(log p(x_t | x_<t)))` over the predicted tokens, as transformers'
//! perplexity guide computes it (`exp` of the mean cross-entropy of the shifted labels).

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor};

use crate::error::ModelError;
use crate::transformer::check_token_ids;

/// The log-probability each position's logits give the token that follows it.
///
/// Position `t` of `logits` scores `targets[.., t]`: pass the ids shifted by one (the logits of
/// tokens `0..n-1` and the ids `1..n`). The log-softmax runs over the whole vocabulary, so a
/// caller that scores a long text in chunks holds one chunk's `[batch, chunk, vocab]` at a time.
///
/// # Shapes
/// - `logits`: `[batch, seq, vocab]`
/// - `targets`: `[batch, seq]`, ids in `0..vocab`
/// - output: `[batch, seq]`
pub fn try_token_log_probs(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
) -> Result<Tensor<2>, ModelError> {
    let [batch, seq, vocab] = logits.dims();
    if targets.dims() != [batch, seq] {
        return Err(ModelError::input(
            "targets.dims()",
            targets.dims(),
            format!("must be the logits' [batch, seq] = [{batch}, {seq}]"),
        ));
    }
    check_token_ids(&targets, vocab, "targets", "targets.dims()")?;
    let log_probs = log_softmax(logits, 2);
    Ok(log_probs
        .gather(2, targets.unsqueeze_dim::<3>(2))
        .reshape([batch, seq]))
}

/// `exp(-mean(log_probs))`, summed in f64: the perplexity of the tokens these log-probabilities
/// score. `None` for no tokens.
pub fn perplexity(log_probs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, count) = log_probs
        .into_iter()
        .fold((0.0, 0usize), |(sum, count), lp| (sum + lp, count + 1));
    (count > 0).then(|| (-sum / count as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};
    use positional::testing::{names_a_field, once};

    /// The log-softmax gathered at each target equals its definition computed on the host in f64,
    /// `logit[target] - ln(sum(exp(logit)))`.
    fn log_probs_equal_the_definition(device: &Device) {
        let (batch, seq, vocab) = (2, 3, 7);
        let logits: Vec<f32> = (0..batch * seq * vocab)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.9)
            .collect();
        let targets: Vec<i64> = (0..batch * seq).map(|i| (i * 5 % vocab) as i64).collect();
        let got = try_token_log_probs(
            Tensor::from_data(TensorData::new(logits.clone(), [batch, seq, vocab]), device),
            Tensor::from_data(TensorData::new(targets.clone(), [batch, seq]), device),
        )
        .unwrap();
        assert_eq!(got.dims(), [batch, seq]);
        let got = got
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap();
        for (row, (&target, &got)) in targets.iter().zip(&got).enumerate() {
            let row = &logits[row * vocab..(row + 1) * vocab];
            let log_sum: f64 = row.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln();
            let expected = row[target as usize] as f64 - log_sum;
            assert!((got as f64 - expected).abs() < 1e-5, "{got} vs {expected}");
        }
    }
    once!(log_probs_equal_the_definition);

    fn bad_targets_are_errors(device: &Device) {
        let logits = Tensor::<3>::zeros([1, 2, 4], device);
        let wrong_shape = Tensor::<2, Int>::zeros([1, 3], device);
        let error = try_token_log_probs(logits.clone(), wrong_shape).unwrap_err();
        assert!(error.to_string().contains("targets.dims()"), "{error}");
        let out_of_vocabulary =
            Tensor::<2, Int>::from_data(TensorData::new(vec![1i64, 4], [1, 2]), device);
        let error = try_token_log_probs(logits, out_of_vocabulary).unwrap_err();
        assert!(
            names_a_field(&error) && error.to_string().contains('4'),
            "{error}"
        );
    }
    once!(bad_targets_are_errors);

    #[test]
    fn perplexity_is_the_exponential_of_the_mean_negative_log_probability() {
        let uniform_over_four = [-(4.0f64.ln()); 3];
        assert!((perplexity(uniform_over_four).unwrap() - 4.0).abs() < 1e-12);
        assert_eq!(perplexity([]), None);
    }
}
