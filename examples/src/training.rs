//! The training loop both examples share: next-token cross-entropy, Adam with warmup and cosine
//! decay, gradient clipping, and a progress bar.

use std::time::{Duration, Instant};

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Int, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use models::{ModelError, ModelInputs, Transformer};

/// How long and how fast to train.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    /// Optimizer steps.
    pub steps: usize,
    /// Peak learning rate, reached after `warmup_steps` and decayed to a tenth by a cosine.
    pub learning_rate: f64,
    /// Steps of linear warmup.
    pub warmup_steps: usize,
}

impl Schedule {
    /// The same schedule over `steps` steps; warmup takes at most a tenth of them, so that a
    /// short run still decays.
    pub fn with_steps(self, steps: usize) -> Self {
        Self {
            steps,
            warmup_steps: self.warmup_steps.min(steps / 10),
            ..self
        }
    }

    /// The learning rate at `step` (0-based).
    pub fn learning_rate_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.learning_rate * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.steps.saturating_sub(self.warmup_steps).max(1);
        let progress = (step - self.warmup_steps) as f64 / decay_steps as f64;
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress.min(1.0)).cos());
        self.learning_rate * (0.1 + 0.9 * cosine)
    }
}

/// Mean cross-entropy and accuracy of next-token prediction.
pub struct NextTokenScores {
    /// Mean cross-entropy over the scored targets, `[1]`.
    pub loss: Tensor<1>,
    /// 1 where the most likely token was the target, `[targets]`.
    pub correct: Tensor<1, Int>,
}

/// Scores predicting `tokens[:, first_target..]` from the tokens before each one.
///
/// # Shapes
/// - `tokens`: `[batch, context + 1]`; the model sees the first `context` tokens
pub fn next_token_scores(
    model: &Transformer,
    tokens: Tensor<2, Int>,
    first_target: usize,
) -> Result<NextTokenScores, ModelError> {
    let context = tokens.dims()[1] - 1;
    let logits = model.try_forward(tokens.clone().narrow(1, 0, context), ModelInputs::new())?;
    Ok(scores_of(logits, tokens, first_target))
}

/// [`next_token_scores`] with the context read `segment` tokens at a time through the KV
/// caches, each segment attending to itself and the last `memory` tokens before it: how
/// Transformer-XL reads a long text with its segment memory (Dai et al., 2019, section 3.2).
///
/// # Shapes
/// As [`next_token_scores`].
pub fn next_token_scores_in_segments(
    model: &Transformer,
    tokens: Tensor<2, Int>,
    first_target: usize,
    segment: usize,
    memory: usize,
) -> Result<NextTokenScores, ModelError> {
    let context = tokens.dims()[1] - 1;
    let mut caches = model.new_caches();
    let mut pieces = Vec::new();
    for start in (0..context).step_by(segment.max(1)) {
        let len = segment.min(context - start);
        let ids = tokens.clone().narrow(1, start, len);
        pieces.push(model.try_forward_cached(ids, ModelInputs::new(), &mut caches)?);
        for cache in &mut caches {
            cache.keep_last(memory);
        }
    }
    Ok(scores_of(Tensor::cat(pieces, 1), tokens, first_target))
}

/// Loss and hits of `logits` `[batch, context, vocab]` predicting `tokens[:, first_target..]`.
fn scores_of(logits: Tensor<3>, tokens: Tensor<2, Int>, first_target: usize) -> NextTokenScores {
    let [batch, len] = tokens.dims();
    let [_, _, vocab_size] = logits.dims();
    let scored = len - first_target;
    let logits = logits
        .narrow(1, first_target - 1, scored)
        .reshape([batch * scored, vocab_size]);
    let targets = tokens
        .narrow(1, first_target, scored)
        .reshape([batch * scored]);
    let loss = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits.clone(), targets.clone());
    let correct = logits
        .argmax(1)
        .reshape([batch * scored])
        .equal(targets)
        .int();
    NextTokenScores { loss, correct }
}

/// A progress bar showing step, loss, tokens per second and time left (hidden when stderr is not
/// a terminal, as in CI).
pub fn progress_bar(steps: usize, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos:>5}/{len} {msg} eta {eta}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_owned());
    bar
}

/// What training produced besides the model.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingLog {
    /// Mean loss over the last tenth of the steps.
    pub final_loss: f64,
    /// Wall time of the whole loop.
    pub elapsed: Duration,
    /// Tokens seen per second.
    pub tokens_per_second: f64,
}

/// Trains `model` (which must live on an autodiff device) for `schedule.steps` steps on the
/// batches `next_batch(step)` gives, and returns it with a short log.
///
/// Loss is read back every step: the progress bar needs it, and it keeps WGPU's queue short.
pub fn train(
    mut model: Transformer,
    schedule: &Schedule,
    first_target: usize,
    mut next_batch: impl FnMut(usize) -> Tensor<2, Int>,
    progress: &ProgressBar,
) -> Result<(Transformer, TrainingLog), ModelError> {
    let mut optimizer = AdamConfig::new()
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init();
    let started = Instant::now();
    let mut tokens_seen = 0usize;
    let mut recent = Vec::new();
    let tail = (schedule.steps / 10).max(1);
    for step in 0..schedule.steps {
        let tokens = next_batch(step);
        let [batch, len] = tokens.dims();
        tokens_seen += batch * (len - 1);
        let scores = next_token_scores(&model, tokens, first_target)?;
        let loss_value = f64::from(scores.loss.clone().into_scalar::<f32>());
        let gradients = GradientsParams::from_grads(scores.loss.backward(), &model);
        model = optimizer.step(schedule.learning_rate_at(step), model, gradients);
        if step + tail >= schedule.steps {
            recent.push(loss_value);
        }
        let rate = tokens_seen as f64 / started.elapsed().as_secs_f64().max(1e-9);
        progress.set_message(format!("loss {loss_value:.4} {:.1}k tok/s", rate / 1e3));
        progress.inc(1);
    }
    let elapsed = started.elapsed();
    progress.finish();
    let log = TrainingLog {
        final_loss: recent.iter().sum::<f64>() / recent.len().max(1) as f64,
        elapsed,
        tokens_per_second: tokens_seen as f64 / elapsed.as_secs_f64().max(1e-9),
    };
    Ok((model, log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learning_rate_warms_up_then_decays_to_a_tenth() {
        let schedule = Schedule {
            steps: 110,
            learning_rate: 1.0,
            warmup_steps: 10,
        };
        assert!((schedule.learning_rate_at(0) - 0.1).abs() < 1e-12);
        assert!((schedule.learning_rate_at(9) - 1.0).abs() < 1e-12);
        assert!((schedule.learning_rate_at(10) - 1.0).abs() < 1e-12);
        assert!((schedule.learning_rate_at(60) - 0.55).abs() < 1e-12);
        assert!((schedule.learning_rate_at(110) - 0.1).abs() < 1e-12);
        let rates: Vec<f64> = (10..110).map(|s| schedule.learning_rate_at(s)).collect();
        assert!(rates.windows(2).all(|w| w[1] <= w[0]));
        assert_eq!(schedule.with_steps(30).warmup_steps, 3);
        assert_eq!(schedule.with_steps(1000).warmup_steps, 10);
    }
}
