//! The length-extrapolation study: train one small decoder per positional scheme at one length,
//! then measure it at 1, 2, 4 and 8 times that length.
//!
//! The claims it settles, each from its paper: sinusoids degrade past the trained length
//! (Vaswani et al., 2017, hoped otherwise); rotary embeddings do better (Su et al., 2021); linear
//! biases extrapolate best (Press et al., 2022, "Train Short, Test Long"); a causal model with no
//! encoding still learns positions (Kazemnejad et al., 2023); learned embeddings cannot go past
//! their table at all (GPT-2).

use std::path::Path;

use anyhow::Context;
use models::{Transformer, TransformerConfig};

use crate::decoder::decoder_config;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::Device;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use crate::tasks::{LocalRuleTask, SplitMix64};
use crate::training::{
    Schedule, TrainingLog, next_token_scores, next_token_scores_in_segments, train,
};

/// A positional scheme of the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Fixed sinusoids added to the token embeddings.
    Sinusoidal,
    /// A learned embedding per position, with a table as long as the training sequences.
    Learned,
    /// Rotary embeddings on queries and keys.
    Rope,
    /// Linear biases on attention scores.
    Alibi,
    /// No positional information besides the causal mask.
    Nope,
    /// RoPE whose pairs also decay with distance (Sun et al., 2022).
    Xpos,
    /// T5's learned bias per bucket of relative distance (Raffel et al., 2020).
    T5,
    /// Transformer-XL's relative attention (Dai et al., 2019); also evaluated segment by segment
    /// with its memory.
    #[serde(rename = "transformer-xl")]
    TransformerXl,
}

impl Scheme {
    /// Every scheme, in the order tables and plots show them.
    pub const ALL: [Scheme; 8] = [
        Scheme::Sinusoidal,
        Scheme::Learned,
        Scheme::Rope,
        Scheme::Xpos,
        Scheme::Alibi,
        Scheme::T5,
        Scheme::TransformerXl,
        Scheme::Nope,
    ];

    /// The lowercase name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Sinusoidal => "sinusoidal",
            Scheme::Learned => "learned",
            Scheme::Rope => "rope",
            Scheme::Alibi => "alibi",
            Scheme::Nope => "nope",
            Scheme::Xpos => "xpos",
            Scheme::T5 => "t5",
            Scheme::TransformerXl => "transformer-xl",
        }
    }
}

/// Everything that decides the study's numbers (with the backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudySettings {
    /// The schemes to train.
    pub schemes: Vec<Scheme>,
    /// Training context length `L`; learned embeddings have exactly this many positions.
    pub train_len: usize,
    /// Evaluation lengths as multiples of `train_len`.
    pub eval_multiples: Vec<usize>,
    /// Optimizer steps and learning rate.
    pub schedule: Schedule,
    /// Sequences per training batch.
    pub batch_size: usize,
    /// Sequences per evaluation length.
    pub eval_sequences: usize,
    /// One run per seed; a seed fixes the task's rule, the data and the model's initial weights.
    /// The report gives each measurement's mean and spread over them.
    pub seeds: Vec<u64>,
    /// Tokens in the task's alphabet.
    pub vocab_size: usize,
    /// Probability that a token is random instead of the rule's.
    pub noise: f64,
    /// Model width.
    pub d_model: usize,
    /// Attention heads.
    pub n_heads: usize,
    /// Decoder blocks.
    pub n_layers: usize,
}

impl Default for StudySettings {
    /// Small enough to train every scheme at three seeds in about ten minutes on two CPU cores.
    fn default() -> Self {
        Self {
            schemes: Scheme::ALL.to_vec(),
            train_len: 32,
            eval_multiples: vec![1, 2, 4, 8],
            schedule: Schedule {
                steps: 500,
                learning_rate: 3e-3,
                warmup_steps: 50,
            },
            batch_size: 32,
            eval_sequences: 64,
            seeds: vec![0, 1, 2],
            vocab_size: 16,
            noise: 0.1,
            d_model: 64,
            n_heads: 4,
            n_layers: 2,
        }
    }
}

impl StudySettings {
    /// The task every scheme trains and is measured on at `seed`.
    pub fn task(&self, seed: u64) -> anyhow::Result<LocalRuleTask> {
        LocalRuleTask::new(self.vocab_size, self.noise, seed)
    }

    /// Checks the settings before any training starts, naming the field at fault.
    pub fn validate(&self, device: &Device) -> anyhow::Result<()> {
        anyhow::ensure!(!self.schemes.is_empty(), "schemes: at least one is needed");
        let mut seeds = self.seeds.clone();
        seeds.sort_unstable();
        seeds.dedup();
        anyhow::ensure!(
            !self.seeds.is_empty() && seeds.len() == self.seeds.len(),
            "seeds = {:?}: at least one is needed, each once",
            self.seeds
        );
        anyhow::ensure!(
            self.train_len > LocalRuleTask::FIRST_PREDICTABLE,
            "train_len = {}: must be above {}, the tokens before the first predictable one",
            self.train_len,
            LocalRuleTask::FIRST_PREDICTABLE
        );
        anyhow::ensure!(
            !self.eval_multiples.is_empty() && !self.eval_multiples.contains(&0),
            "eval_multiples = {:?}: must be positive multiples of train_len",
            self.eval_multiples
        );
        anyhow::ensure!(
            self.batch_size > 0 && self.eval_sequences > 0,
            "batch_size = {}, eval_sequences = {}: must be at least 1",
            self.batch_size,
            self.eval_sequences
        );
        anyhow::ensure!(
            self.schedule.learning_rate > 0.0 && self.schedule.learning_rate.is_finite(),
            "learning_rate = {}: must be positive",
            self.schedule.learning_rate
        );
        for &seed in &self.seeds {
            self.task(seed)?;
        }
        for scheme in &self.schemes {
            // Catches head counts that do not divide the width, and the like, before training.
            self.decoder_config(*scheme)
                .try_init(device)
                .with_context(|| format!("the {} model", scheme.name()))?;
        }
        Ok(())
    }

    /// The decoder trained for `scheme`.
    pub fn decoder_config(&self, scheme: Scheme) -> TransformerConfig {
        decoder_config(
            scheme,
            self.vocab_size,
            self.d_model,
            self.n_heads,
            self.n_layers,
            self.train_len,
        )
    }

    /// Evaluation context lengths.
    pub fn eval_lengths(&self) -> Vec<usize> {
        self.eval_multiples
            .iter()
            .map(|m| m * self.train_len)
            .collect()
    }
}

/// One scheme measured at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Context length.
    pub length: usize,
    /// Share of next tokens predicted exactly, over every predictable position.
    pub accuracy: Option<f64>,
    /// Mean cross-entropy (nats) over the same positions.
    pub loss: Option<f64>,
    /// Accuracy over positions at or past `train_len` only (`None` at the training length).
    pub accuracy_past_train_len: Option<f64>,
    /// Why the model could not run at this length (learned embeddings past their table).
    pub unavailable: Option<String>,
}

/// Trains the model for `scheme` at `seed` on `device` (gradients through Burn's autodiff on that
/// device) and returns it, without autodiff, with its training log.
pub fn train_scheme(
    settings: &StudySettings,
    scheme: Scheme,
    seed: u64,
    device: &Device,
    progress: &ProgressBar,
) -> anyhow::Result<(Transformer, TrainingLog)> {
    let task = settings.task(seed)?;
    let training_device = device.clone().autodiff();
    // The same seed for every scheme: the same batches in the same order, and the same initial
    // weights wherever the architectures agree.
    training_device.seed(seed);
    let model = settings.decoder_config(scheme).try_init(&training_device)?;
    let mut rng = SplitMix64::new(seed);
    let (model, log) = train(
        model,
        &settings.schedule,
        LocalRuleTask::FIRST_PREDICTABLE,
        |_| {
            task.batch(
                settings.batch_size,
                settings.train_len + 1,
                &mut rng,
                &training_device,
            )
        },
        progress,
    )?;
    Ok((model.valid(), log))
}

/// How a model reads an evaluation sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// In one pass, every token attending to every earlier one.
    Whole,
    /// `train_len` tokens at a time, each segment attending to itself and the `train_len`
    /// tokens before it through the caches: Transformer-XL's segment memory.
    WithMemory,
}

/// Measures `model`, trained at `seed`, at every evaluation length, on sequences that depend only
/// on the seed and the length (the same for every scheme), read as `reading` says.
pub fn evaluate(
    model: &Transformer,
    settings: &StudySettings,
    seed: u64,
    device: &Device,
    reading: Reading,
) -> anyhow::Result<Vec<Evaluation>> {
    let task = settings.task(seed)?;
    let first = LocalRuleTask::FIRST_PREDICTABLE;
    let mut evaluations = Vec::new();
    for length in settings.eval_lengths() {
        let mut rng = SplitMix64::new(seed ^ 0xE7A1_0000 ^ length as u64);
        // Bounds the `[chunk, heads, length, length]` scores to about 16M floats.
        let chunk =
            (16_777_216 / (length * length * settings.n_heads)).clamp(1, settings.eval_sequences);
        let (mut loss_sum, mut scored, mut correct, mut past, mut past_correct) =
            (0.0, 0usize, 0usize, 0usize, 0usize);
        let mut unavailable = None;
        let mut remaining = settings.eval_sequences;
        while remaining > 0 {
            let batch = chunk.min(remaining);
            remaining -= batch;
            let tokens = task.batch(batch, length + 1, &mut rng, device);
            let scores = match reading {
                Reading::Whole => next_token_scores(model, tokens, first),
                Reading::WithMemory => {
                    let segment = settings.train_len;
                    next_token_scores_in_segments(model, tokens, first, segment, segment)
                }
            };
            let scores = match scores {
                Ok(scores) => scores,
                Err(error) => {
                    unavailable = Some(error.to_string());
                    break;
                }
            };
            let targets = length + 1 - first;
            loss_sum += f64::from(scores.loss.into_scalar::<f32>()) * (batch * targets) as f64;
            let hits: Vec<i64> = scores
                .correct
                .into_data()
                .convert::<i64>()
                .try_to_vec::<i64>()
                .map_err(|error| anyhow::anyhow!("reading predictions back: {error:?}"))?;
            for (index, hit) in hits.iter().enumerate() {
                // Target `first + j` is predicted from context position `first + j - 1`.
                let position = first + index % targets - 1;
                let hit = usize::from(*hit != 0);
                correct += hit;
                if position >= settings.train_len {
                    past += 1;
                    past_correct += hit;
                }
            }
            scored += batch * targets;
        }
        evaluations.push(match unavailable {
            Some(reason) => Evaluation {
                length,
                accuracy: None,
                loss: None,
                accuracy_past_train_len: None,
                unavailable: Some(reason),
            },
            None => Evaluation {
                length,
                accuracy: Some(correct as f64 / scored as f64),
                loss: Some(loss_sum / scored as f64),
                accuracy_past_train_len: (past > 0).then(|| past_correct as f64 / past as f64),
                unavailable: None,
            },
        });
    }
    Ok(evaluations)
}

/// Where a scheme's model trained at `seed` and its config are saved under an output folder:
/// `models/seed{seed}/{scheme}.bpk` and `.json`.
pub fn model_paths(
    folder: &Path,
    scheme: Scheme,
    seed: u64,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let models = folder.join("models").join(format!("seed{seed}"));
    (
        models.join(format!("{}.bpk", scheme.name())),
        models.join(format!("{}.json", scheme.name())),
    )
}

/// Saves a model trained at `seed` as a Burn record, with the config that rebuilds it.
pub fn save_model(
    model: &Transformer,
    settings: &StudySettings,
    scheme: Scheme,
    seed: u64,
    folder: &Path,
) -> anyhow::Result<()> {
    let (record, config) = model_paths(folder, scheme, seed);
    if let Some(models) = record.parent() {
        std::fs::create_dir_all(models)
            .with_context(|| format!("creating {}", models.display()))?;
    }
    settings
        .decoder_config(scheme)
        .save(&config)
        .with_context(|| format!("writing {}", config.display()))?;
    model
        .clone()
        .save_file(&record)
        .with_context(|| format!("writing {}", record.display()))?;
    Ok(())
}

/// Rebuilds a saved model on `device`.
///
/// Burn maps the record file and may read it lazily: keep it in place while the model is used.
pub fn load_model(
    folder: &Path,
    scheme: Scheme,
    seed: u64,
    device: &Device,
) -> anyhow::Result<Transformer> {
    let (record, config) = model_paths(folder, scheme, seed);
    let config = TransformerConfig::load(&config)
        .with_context(|| format!("reading {}", config.display()))?;
    let model = config.try_init(device)?;
    model
        .try_load_file(&record)
        .with_context(|| format!("reading {}", record.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_what_is_wrong() {
        let device = positional::testing::reference_device().1;
        StudySettings::default().validate(&device).unwrap();
        for (seeds, want) in [
            (vec![], "seeds = []: at least one"),
            (
                vec![1, 2, 1],
                "seeds = [1, 2, 1]: at least one is needed, each once",
            ),
        ] {
            let settings = StudySettings {
                seeds,
                ..StudySettings::default()
            };
            let error = settings.validate(&device).unwrap_err().to_string();
            assert!(error.contains(want), "{error}");
        }
    }
}
