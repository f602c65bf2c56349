//! A character-level language model on any text: the crates used the way a user uses them in a
//! model of their own (a [`Decoder`] with a chosen scheme, trained through autodiff, sampled with
//! the KV cache).

use anyhow::Context;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use indicatif::ProgressBar;
use models::{ModelInputs, Transformer};

use crate::extrapolation::Scheme;
use crate::tasks::SplitMix64;
use crate::training::{Schedule, TrainingLog, next_token_scores, train};

/// The characters of a text, each mapped to its rank in sorted order, so that the same text always
/// gives the same ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharVocabulary {
    chars: Vec<char>,
}

impl CharVocabulary {
    /// Every distinct character of `text`, sorted.
    pub fn from_text(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Self { chars }
    }

    /// Number of distinct characters.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    /// Whether there are no characters at all.
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// Token ids of `text`; a character the vocabulary lacks is an error that names it.
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<i64>> {
        text.chars()
            .map(|c| {
                self.chars
                    .binary_search(&c)
                    .map(|id| id as i64)
                    .map_err(|_| {
                        anyhow::anyhow!("character {c:?} does not occur in the training text")
                    })
            })
            .collect()
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[usize]) -> String {
        ids.iter().map(|&id| self.chars[id]).collect()
    }
}

/// How to train and sample.
#[derive(Debug, Clone, PartialEq)]
pub struct CharLmSettings {
    /// Positional scheme of the model.
    pub scheme: Scheme,
    /// Characters the model sees at once (and the learned embeddings' table size).
    pub context: usize,
    /// Windows per batch.
    pub batch_size: usize,
    /// Steps and learning rate.
    pub schedule: Schedule,
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub n_heads: usize,
    /// Decoder blocks.
    pub n_layers: usize,
    /// Seeds the initial weights, the batches and sampling.
    pub seed: u64,
    /// Characters to sample after training.
    pub sample_len: usize,
    /// Softmax temperature for sampling; 0 picks the most likely character.
    pub temperature: f64,
    /// Text to start sampling from; the start of the held-out text when `None`.
    pub prompt: Option<String>,
}

impl Default for CharLmSettings {
    fn default() -> Self {
        Self {
            scheme: Scheme::Rope,
            context: 64,
            batch_size: 16,
            schedule: Schedule {
                steps: 300,
                learning_rate: 3e-3,
                warmup_steps: 30,
            },
            d_model: 64,
            n_heads: 4,
            n_layers: 2,
            seed: 0,
            sample_len: 200,
            temperature: 0.8,
            prompt: None,
        }
    }
}

/// What a run produced.
pub struct CharLmOutcome {
    /// The trained model, without autodiff.
    pub model: Transformer,
    /// The text's characters.
    pub vocabulary: CharVocabulary,
    /// Training time and throughput.
    pub log: TrainingLog,
    /// Mean loss (nats per character) on the held-out tail of the text before training.
    pub held_out_loss_before: f64,
    /// The same after training.
    pub held_out_loss_after: f64,
    /// Sampled text, prompt included.
    pub sample: String,
}

/// Trains on the first 90% of `text`, measures the last 10% (at least one context window) and
/// samples.
pub fn train_char_lm(
    text: &str,
    settings: &CharLmSettings,
    device: &Device,
    progress: &ProgressBar,
) -> anyhow::Result<CharLmOutcome> {
    let vocabulary = CharVocabulary::from_text(text);
    anyhow::ensure!(
        vocabulary.len() >= 2,
        "the text has {} distinct characters: a language model needs at least 2",
        vocabulary.len()
    );
    anyhow::ensure!(
        settings.context >= 2 && settings.batch_size >= 1,
        "context = {}, batch_size = {}: need context >= 2 and batch_size >= 1",
        settings.context,
        settings.batch_size
    );
    let ids = vocabulary.encode(text)?;
    let window = settings.context + 1;
    anyhow::ensure!(
        ids.len() >= 2 * window,
        "the text has {} characters: context = {} needs at least {} (a window to train on and one \
         to measure)",
        ids.len(),
        settings.context,
        2 * window
    );
    let held_out_len = (ids.len() / 10).max(window);
    let (training_ids, held_out_ids) = ids.split_at(ids.len() - held_out_len);

    let training_device = device.clone().autodiff();
    training_device.seed(settings.seed);
    let config = crate::decoder::decoder_config(
        settings.scheme,
        vocabulary.len(),
        settings.d_model,
        settings.n_heads,
        settings.n_layers,
        settings.context,
    );
    let model = config.try_init(&training_device)?;
    let held_out_loss_before = held_out_loss(&model.valid(), held_out_ids, window, device)?;

    let mut rng = SplitMix64::new(settings.seed);
    let (model, log) = train(
        model,
        &settings.schedule,
        1,
        |_| {
            let starts: Vec<usize> = (0..settings.batch_size)
                .map(|_| rng.below(training_ids.len() - window + 1))
                .collect();
            windows(training_ids, &starts, window, &training_device)
        },
        progress,
    )?;
    let model = model.valid();
    let held_out_loss_after = held_out_loss(&model, held_out_ids, window, device)?;
    let prompt = match &settings.prompt {
        Some(prompt) => prompt.clone(),
        None => {
            let start: Vec<usize> = held_out_ids
                .iter()
                .take(settings.context.min(16))
                .map(|&id| id as usize)
                .collect();
            vocabulary.decode(&start)
        }
    };
    let sample = sample(&model, &vocabulary, &prompt, settings, &mut rng, device)?;
    Ok(CharLmOutcome {
        model,
        vocabulary,
        log,
        held_out_loss_before,
        held_out_loss_after,
        sample,
    })
}

/// `[starts.len(), window]` token ids, one window per start.
fn windows(ids: &[i64], starts: &[usize], window: usize, device: &Device) -> Tensor<2, Int> {
    let values: Vec<i64> = starts
        .iter()
        .flat_map(|&s| ids[s..s + window].iter().copied())
        .collect();
    Tensor::from_data(TensorData::new(values, [starts.len(), window]), device)
}

/// Mean next-token loss over up to 32 non-overlapping windows of `ids`.
fn held_out_loss(
    model: &Transformer,
    ids: &[i64],
    window: usize,
    device: &Device,
) -> anyhow::Result<f64> {
    let starts: Vec<usize> = (0..ids.len() / window)
        .take(32)
        .map(|i| i * window)
        .collect();
    let scores = next_token_scores(model, windows(ids, &starts, window, device), 1)?;
    Ok(f64::from(scores.loss.into_scalar::<f32>()))
}

/// Continues `prompt` by `settings.sample_len` characters, one at a time through the KV cache.
/// When the cache reaches the context length, it restarts from the last half context, so that
/// every scheme (learned embeddings included) stays within what it was trained on.
pub fn sample(
    model: &Transformer,
    vocabulary: &CharVocabulary,
    prompt: &str,
    settings: &CharLmSettings,
    rng: &mut SplitMix64,
    device: &Device,
) -> anyhow::Result<String> {
    let mut ids: Vec<usize> = vocabulary
        .encode(prompt)
        .context("--prompt")?
        .into_iter()
        .map(|id| id as usize)
        .collect();
    anyhow::ensure!(
        !ids.is_empty(),
        "--prompt is empty: sampling needs a first character"
    );
    let mut caches = model.new_caches();
    let mut pending: Vec<usize> = ids[ids.len().saturating_sub(settings.context - 1)..].to_vec();
    for _ in 0..settings.sample_len {
        let fed = caches[0].len() + pending.len();
        if fed > settings.context {
            caches.iter_mut().for_each(|cache| cache.reset());
            pending = ids[ids.len() - settings.context / 2..].to_vec();
        }
        let tokens: Vec<i64> = pending.iter().map(|&id| id as i64).collect();
        let count = tokens.len();
        let logits = model.try_forward_cached(
            Tensor::from_data(TensorData::new(tokens, [1, count]), device),
            ModelInputs::new(),
            &mut caches,
        )?;
        let last: Vec<f32> = logits
            .narrow(1, count - 1, 1)
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .map_err(|error| anyhow::anyhow!("reading logits back: {error:?}"))?;
        let next = pick(&last, settings.temperature, rng);
        ids.push(next);
        pending = vec![next];
    }
    Ok(vocabulary.decode(&ids))
}

/// Draws an index from `softmax(logits / temperature)`; the largest logit at temperature 0.
fn pick(logits: &[f32], temperature: f64, rng: &mut SplitMix64) -> usize {
    let best = (0..logits.len())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
        .unwrap_or(0);
    if temperature <= 0.0 {
        return best;
    }
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((f64::from(l) - f64::from(logits[best])) / temperature).exp())
        .collect();
    let mut target = rng.next_f64() * weights.iter().sum::<f64>();
    for (index, weight) in weights.iter().enumerate() {
        target -= weight;
        if target < 0.0 {
            return index;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_round_trips_and_names_unknown_characters() {
        let vocabulary = CharVocabulary::from_text("hello, world");
        assert_eq!(vocabulary.len(), 9);
        let error = vocabulary.encode("hex").unwrap_err().to_string();
        assert!(error.contains("'x'"), "{error}");
        let ids = vocabulary.encode("world").unwrap();
        let ids: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        assert_eq!(vocabulary.decode(&ids), "world");
    }

    #[test]
    fn picking_follows_the_softmax() {
        let mut rng = SplitMix64::new(4);
        assert_eq!(pick(&[0.0, 3.0, 1.0], 0.0, &mut rng), 1);
        // Weights e^0 : e^ln3 = 1 : 3, so index 1 about three quarters of the time.
        let logits = [0.0, 3f32.ln()];
        let ones = (0..4000)
            .filter(|_| pick(&logits, 1.0, &mut rng) == 1)
            .count();
        assert!((ones as f64 / 4000.0 - 0.75).abs() < 0.03, "{ones}");
    }
}
