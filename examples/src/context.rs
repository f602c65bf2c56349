//! The context study: how far past its training length a pretrained RoPE model reads, as trained
//! and with each of the RoPE scalings Hugging Face configs name, measured on a real text.
//!
//! The claims it puts to a real model are the articles' (`../shared/articles`) and the papers':
//! RoPE as trained breaks down past the training length; position interpolation ("linear",
//! Chen et al., 2023) reads further but blurs nearby positions, which costs perplexity at every
//! length when the model was not fine-tuned for it; dynamic NTK (bloc97, emozilla) changes
//! nothing up to the training length and stretches the base beyond; YaRN (Peng et al., 2023)
//! interpolates the low frequencies only and keeps the high ones.
//!
//! One pass per scaling reads a haystack: a novel's first `max(lengths)` tokens with pass keys
//! hidden in it ("needle in a haystack", after Mohtashami and Jaggi, 2023, "Landmark
//! Attention"). The pass goes through the KV cache in chunks that end at every length `L`:
//! - **perplexity at `L`** is that of the haystack's first `L` tokens as one window (the cached
//!   pass equals a whole one for every scaling whose frequencies are fixed), the pass keys'
//!   tokens left out of the mean;
//! - **pass-key retrieval at `L`**: at each depth, the cache after `L` tokens is asked for the
//!   pass key hidden at that depth ("What is the pass key of Bravo? The pass key of Bravo is"),
//!   and the answer counts when greedy decoding would give it: each of its tokens is the argmax
//!   after the question and the answer's tokens before it (one call, no sampling). The cache is
//!   then cut back to `L`.
//!
//! Dynamic NTK's frequencies follow the running length, so a cached pass would leave the keys of
//! each earlier chunk turned with a shorter base than the queries after them. Past the training
//! length each of its windows is therefore read in one call (the crate's dynamic RoPE then turns
//! every position with that window's base, as a whole forward pass of transformers does); up to
//! it, it is RoPE as trained, and those lengths are taken from that pass.

use std::time::Instant;

use anyhow::{Context, ensure};
use attention::KvCache;
use burn::tensor::{Int, Tensor, TensorData};
use clap::ValueEnum;
use indicatif::ProgressBar;
use models::tokenizers::Tokenizer;
use models::{ModelInputs, Transformer, try_token_log_probs};
use positional::RopeScaling;
use serde::{Deserialize, Serialize};

/// How RoPE is read past the training length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scaling {
    /// The model's own RoPE, as its config gives it.
    AsTrained,
    /// Position interpolation: every frequency divided by the factor.
    Linear,
    /// Dynamic NTK: the base grows with the running length past the training length.
    Dynamic,
    /// YaRN: low frequencies interpolated, high ones kept, an attention factor.
    Yarn,
}

impl Scaling {
    /// All four, in the order reports list them.
    pub const ALL: [Scaling; 4] = [Self::AsTrained, Self::Linear, Self::Dynamic, Self::Yarn];

    /// The name tables and files use.
    pub fn name(self) -> &'static str {
        match self {
            Self::AsTrained => "as trained",
            Self::Linear => "linear",
            Self::Dynamic => "dynamic NTK",
            Self::Yarn => "YaRN",
        }
    }

    /// The scaling that replaces the model's, with `factor` over a training length of
    /// `trained_len`; `None` keeps the model's own.
    pub fn rope_scaling(self, factor: f64, trained_len: usize) -> Option<RopeScaling> {
        match self {
            Self::AsTrained => None,
            Self::Linear => Some(RopeScaling::Linear { factor }),
            Self::Dynamic => Some(RopeScaling::Dynamic {
                factor,
                original_max_position_embeddings: trained_len,
            }),
            Self::Yarn => Some(RopeScaling::yarn(factor, trained_len)),
        }
    }
}

/// What one run measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextSettings {
    /// Context lengths, ascending: 512, 1024, ... up to the longest.
    pub lengths: Vec<usize>,
    /// The length the model was trained for (its `max_position_embeddings`).
    pub trained_len: usize,
    /// The scalings' factor: the longest length over the trained one, at least 1.
    pub factor: f64,
    /// The scalings measured.
    pub scalings: Vec<Scaling>,
    /// Where pass keys hide, as fractions of each length: 0 is its start, 1 its end.
    pub depths: Vec<f64>,
    /// The most tokens one call gives the model (its logits are `[1, chunk, vocab]`).
    pub chunk: usize,
    /// Seed of the pass keys.
    pub seed: u64,
}

impl ContextSettings {
    /// Lengths doubling from 512 up to `max_len` (and `max_len` itself), pass keys at five
    /// depths, and the factor `max_len / trained_len`.
    pub fn new(max_len: usize, trained_len: usize) -> anyhow::Result<Self> {
        ensure!(max_len >= 512, "--max-len {max_len} must be at least 512");
        ensure!(trained_len > 0, "the training length must be positive");
        let mut lengths: Vec<usize> = std::iter::successors(Some(512), |l| Some(l * 2))
            .take_while(|l| *l < max_len)
            .collect();
        lengths.push(max_len);
        Ok(Self {
            lengths,
            trained_len,
            factor: (max_len as f64 / trained_len as f64).max(1.0),
            scalings: Scaling::ALL.to_vec(),
            depths: vec![0.0, 0.25, 0.5, 0.75, 1.0],
            chunk: 1024,
            seed: 0,
        })
    }

    /// The longest length.
    pub fn max_len(&self) -> usize {
        self.lengths.last().copied().unwrap_or(0)
    }

    /// The tokens the model reads (or takes from RoPE as trained) for `scaling`: the longest
    /// length, and for dynamic NTK one window per length past the training length.
    pub fn tokens_read(&self, scaling: Scaling) -> usize {
        match scaling {
            Scaling::Dynamic => {
                let within = self.lengths.iter().filter(|&&l| l <= self.trained_len);
                let past = self.lengths.iter().filter(|&&l| l > self.trained_len);
                within.max().copied().unwrap_or(0) + past.sum::<usize>()
            }
            _ => self.max_len(),
        }
    }
}

/// A pass key hidden in the haystack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Needle {
    /// Whose key it is ("Bravo").
    pub label: String,
    /// The five-digit key.
    pub key: String,
    /// Its first token's index in the haystack.
    pub position: usize,
    /// Its tokens.
    #[serde(skip)]
    pub tokens: Vec<u32>,
    /// The question's tokens, ending where the key should follow.
    #[serde(skip)]
    pub question: Vec<u32>,
    /// The key's tokens as they follow the question.
    #[serde(skip)]
    pub answer: Vec<u32>,
}

/// The text the model reads, with its pass keys, and which question is asked at which length.
#[derive(Debug, Clone, PartialEq)]
pub struct Haystack {
    /// `max(lengths)` tokens: the text with the needles in it.
    pub ids: Vec<u32>,
    /// Per token, whether perplexity counts it: the needles' tokens are not the text's.
    pub scored: Vec<bool>,
    /// The needles, by position.
    pub needles: Vec<Needle>,
    /// Per length, per depth of the settings, the needle asked for.
    pub questions: Vec<Vec<usize>>,
}

/// The NATO alphabet, whose words name the pass keys.
const LABELS: [&str; 26] = [
    "Alfa", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India", "Juliett",
    "Kilo", "Lima", "Mike", "November", "Oscar", "Papa", "Quebec", "Romeo", "Sierra", "Tango",
    "Uniform", "Victor", "Whiskey", "Xray", "Yankee", "Zulu",
];

impl Haystack {
    /// `text` (its tokens) with a needle at every (length, depth) of `settings`: at `depth * L`
    /// for depths below 1, ending at `L` for depth 1. Lengths and depths that name one place share
    /// its needle; a needle that would overlap the one before it moves past it (an error where
    /// that would take it past its length).
    pub fn new(
        tokenizer: &Tokenizer,
        text: &[u32],
        settings: &ContextSettings,
    ) -> anyhow::Result<Self> {
        let encode = |s: &str| -> anyhow::Result<Vec<u32>> {
            Ok(tokenizer
                .encode(s, false)
                .map_err(|e| anyhow::anyhow!("tokenising {s:?}: {e}"))?
                .get_ids()
                .to_vec())
        };
        let mut random = SplitMix64(settings.seed);
        let mut make_needle = |index: usize| -> anyhow::Result<Needle> {
            let label = match index < LABELS.len() {
                true => LABELS[index].to_owned(),
                false => format!("{} {}", LABELS[index % 26], LABELS[index / 26 % 26]),
            };
            let key = format!("{}", 10_000 + random.next() % 90_000);
            let tokens = encode(&format!(
                "\n\nThe pass key of {label} is {key}. Remember it. {key} is the pass key of \
                 {label}.\n\n"
            ))?;
            let question_text =
                format!("\n\nWhat is the pass key of {label}? The pass key of {label} is");
            let question = encode(&question_text)?;
            let asked = encode(&format!("{question_text} {key}"))?;
            ensure!(
                asked.starts_with(&question) && asked.len() > question.len(),
                "the tokenizer merges the question {question_text:?} with its answer {key}"
            );
            let answer = asked[question.len()..].to_vec();
            Ok(Needle {
                label,
                key,
                position: 0,
                tokens,
                question,
                answer,
            })
        };

        // Where each (length, depth) wants its needle: a start, or (depth 1) an end.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        enum Place {
            Start(usize),
            End(usize),
        }
        let mut places: Vec<Vec<Place>> = Vec::new();
        for &length in &settings.lengths {
            let mut row = Vec::new();
            for &depth in &settings.depths {
                ensure!(
                    (0.0..=1.0).contains(&depth),
                    "depth {depth} must lie in [0, 1]"
                );
                row.push(match depth < 1.0 {
                    true => Place::Start((depth * length as f64).round() as usize),
                    false => Place::End(length),
                });
            }
            places.push(row);
        }
        // One needle per distinct place, made in the order of the places (an end `L` sorts just
        // before a start at `L`: its needle ends there), each moved past the one before it if
        // they would overlap.
        let mut distinct: Vec<Place> = places.iter().flatten().copied().collect();
        distinct.sort_by_key(|place| match *place {
            Place::Start(start) => (start, 1),
            Place::End(end) => (end, 0),
        });
        distinct.dedup();
        let mut needles: Vec<Needle> = Vec::with_capacity(distinct.len());
        for place in &distinct {
            let needle = make_needle(needles.len())?;
            let after_last = needles.last().map_or(0, |n| n.position + n.tokens.len());
            let position = match *place {
                Place::Start(start) => start.max(after_last),
                Place::End(end) => {
                    let start = end.checked_sub(needle.tokens.len()).with_context(|| {
                        format!(
                            "a pass key of {} tokens does not fit in {end}",
                            needle.tokens.len()
                        )
                    })?;
                    ensure!(
                        start >= after_last,
                        "pass keys at {after_last} and {start} overlap: choose lengths further apart"
                    );
                    start
                }
            };
            needles.push(Needle { position, ..needle });
        }
        let mut questions = Vec::with_capacity(places.len());
        for (row, &length) in places.iter().zip(&settings.lengths) {
            let mut asked = Vec::with_capacity(row.len());
            for place in row {
                let index = distinct
                    .iter()
                    .position(|p| p == place)
                    .expect("every place has a needle");
                let needle = &needles[index];
                ensure!(
                    needle.position + needle.tokens.len() <= length,
                    "the pass key at {} does not fit in {length}: choose lengths further apart",
                    needle.position
                );
                asked.push(index);
            }
            questions.push(asked);
        }

        // The text with the needles at their starts.
        let max_len = settings.max_len();
        let mut ids = Vec::with_capacity(max_len);
        let mut scored = Vec::with_capacity(max_len);
        let mut text = text.iter().copied();
        for needle in &needles {
            while ids.len() < needle.position {
                ids.push(
                    text.next()
                        .context("the text is shorter than --max-len tokens")?,
                );
                scored.push(true);
            }
            ids.extend(&needle.tokens);
            scored.extend(std::iter::repeat_n(false, needle.tokens.len()));
        }
        while ids.len() < max_len {
            ids.push(
                text.next()
                    .context("the text is shorter than --max-len tokens")?,
            );
            scored.push(true);
        }
        Ok(Self {
            ids,
            scored,
            needles,
            questions,
        })
    }
}

/// What one scaling gave at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthResult {
    /// The context length.
    pub length: usize,
    /// Perplexity of the window's text tokens.
    pub perplexity: f64,
    /// One answer per depth.
    pub passkeys: Vec<PasskeyAnswer>,
}

/// One pass-key question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PasskeyAnswer {
    /// Where the key was, as a fraction of the length.
    pub depth: f64,
    /// The key.
    pub key: String,
    /// Whether greedy decoding gives the key.
    pub correct: bool,
    /// The argmax token after the question and after each of the key's tokens, decoded.
    pub said: String,
}

/// One scaling's measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingResult {
    /// The scaling.
    pub scaling: Scaling,
    /// The RoPE scaling it put in every layer (`None`: the model's own).
    pub rope_scaling: Option<String>,
    /// One entry per length of the settings.
    pub lengths: Vec<LengthResult>,
    /// Wall time of its pass and questions.
    pub seconds: f64,
}

/// The most logits one head call makes, `[1, HEAD_ROWS, vocab]`: 200 MB for a 49,152-token
/// vocabulary, where a whole 16,384-token window would be 3.2 GB.
const HEAD_ROWS: usize = 1024;

/// What every scaling's reading shares: the text, its questions, the settings and the bar.
pub struct Study<'a> {
    /// Decodes the answers.
    pub tokenizer: &'a Tokenizer,
    /// The text with its pass keys.
    pub haystack: &'a Haystack,
    /// What to measure.
    pub settings: &'a ContextSettings,
    /// Counts the tokens read.
    pub bar: &'a ProgressBar,
}

impl Study<'_> {
    /// Measures `scaling`: reads the haystack with `base` (the model as loaded) carrying it.
    ///
    /// RoPE as trained, linear and YaRN have fixed frequencies: one pass through the cache, in
    /// chunks of `settings.chunk` that end at every length. Dynamic NTK's frequencies depend on the
    /// running length: up to the training length they are RoPE's own, so those lengths are copied
    /// from `as_trained` when the model's RoPE has no scaling of its own (and read otherwise); past
    /// it, each length is read as one window in one call, so that every position turns with that
    /// window's base, as a whole forward pass of transformers does.
    pub fn measure(
        &self,
        base: &Transformer,
        scaling: Scaling,
        as_trained: Option<&ScalingResult>,
    ) -> anyhow::Result<ScalingResult> {
        let Self { settings, bar, .. } = *self;
        let started = Instant::now();
        let rope_scaling = scaling.rope_scaling(settings.factor, settings.trained_len);
        let model = match &rope_scaling {
            None => base.clone(),
            Some(rope_scaling) => base
                .clone()
                .try_with_rope_scaling(Some(rope_scaling.clone()))?,
        };
        let lengths = match scaling {
            Scaling::Dynamic => {
                let (within, past): (Vec<usize>, Vec<usize>) = settings
                    .lengths
                    .iter()
                    .partition(|&&length| length <= settings.trained_len);
                let unscaled = base
                    .blocks
                    .iter()
                    .filter_map(|block| block.attention.rope())
                    .all(|rope| rope.config().scaling.is_none());
                let mut lengths = match (as_trained, unscaled) {
                    (Some(as_trained), true) => {
                        bar.inc(within.last().copied().unwrap_or(0) as u64);
                        as_trained.lengths[..within.len()].to_vec()
                    }
                    _ => self.read(&model, scaling, &within, settings.chunk)?,
                };
                for length in past {
                    lengths.extend(self.read(&model, scaling, &[length], length)?);
                }
                lengths
            }
            _ => self.read(&model, scaling, &settings.lengths, settings.chunk)?,
        };
        Ok(ScalingResult {
            scaling,
            rope_scaling: rope_scaling.map(|s| format!("{s:?}")),
            lengths,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Reads the haystack's first `max(lengths)` tokens through a fresh cache in calls of at most
    /// `chunk` tokens that end at every length, and at each length takes the perplexity of the
    /// tokens so far and asks its pass keys.
    fn read(
        &self,
        model: &Transformer,
        scaling: Scaling,
        lengths: &[usize],
        chunk: usize,
    ) -> anyhow::Result<Vec<LengthResult>> {
        let Self {
            tokenizer,
            haystack,
            settings,
            bar,
        } = *self;
        let Some(&longest) = lengths.last() else {
            return Ok(Vec::new());
        };
        let device = model.embedding.weight.device();
        let ids = &haystack.ids[..longest];
        let mut caches = model.new_caches();
        // A Gated DeltaNet state cannot go back, nor can a sliding window's dropped keys.
        let cannot_truncate = model.blocks.iter().any(|block| {
            let window = (block.attention.multi_head())
                .is_some_and(|attention| attention.config().sliding_window.is_some());
            window || block.attention.gated_delta_net().is_some()
        });
        let longest_question = haystack
            .needles
            .iter()
            .map(|n| n.question.len() + n.answer.len())
            .max()
            .unwrap_or(0);
        for cache in &mut caches {
            cache.reserve(longest + longest_question);
        }
        let tensor = |ids: &[u32]| {
            let ids: Vec<i64> = ids.iter().map(|&id| id as i64).collect();
            let len = ids.len();
            Tensor::<2, Int>::from_data(TensorData::new(ids, [1, len]), &device)
        };
        // log_probs[t] = log p(ids[t + 1] | ids[..=t]).
        let mut log_probs: Vec<f64> = Vec::with_capacity(longest);
        let mut results = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &length in lengths {
            bar.set_message(match chunk >= length {
                true => format!("{}: {length} tokens in one call", scaling.name()),
                false => format!("{} to {length}", scaling.name()),
            });
            while start < length {
                let end = (start + chunk).min(length);
                let hidden = model.try_hidden_cached(
                    tensor(&ids[start..end]),
                    ModelInputs::new(),
                    &mut caches,
                )?;
                // The head a slice of rows at a time; the haystack's last token has nothing after it
                // to score.
                let scored = end.min(haystack.ids.len() - 1) - start;
                for rows in (0..scored).step_by(HEAD_ROWS) {
                    let count = HEAD_ROWS.min(scored - rows);
                    let logits = model.try_head(hidden.clone().narrow(1, rows, count))?;
                    let first_target = start + rows + 1;
                    let chunk_log_probs = try_token_log_probs(
                        logits,
                        tensor(&haystack.ids[first_target..first_target + count]),
                    )?;
                    log_probs.extend(host_floats(chunk_log_probs.reshape([count]))?);
                }
                bar.inc((end - start) as u64);
                start = end;
            }
            let perplexity = models::perplexity(
                (0..length - 1)
                    .filter(|&t| haystack.scored[t + 1])
                    .map(|t| log_probs[t]),
            )
            .context("no text token to score")?;
            let index = settings
                .lengths
                .iter()
                .position(|&l| l == length)
                .context("a length the settings do not hold")?;
            let mut passkeys = Vec::with_capacity(settings.depths.len());
            for (&depth, &needle) in settings.depths.iter().zip(&haystack.questions[index]) {
                let needle = &haystack.needles[needle];
                // A question is forgotten by truncating the caches back to the haystack; a Gated
                // DeltaNet layer's state cannot go back, nor a sliding window's dropped keys, so
                // those models ask a copy (the copy of a tensor is shared until written).
                if cannot_truncate {
                    let mut asked = caches.clone();
                    passkeys.push(ask(model, tokenizer, needle, depth, &mut asked, &tensor)?);
                    continue;
                }
                passkeys.push(ask(model, tokenizer, needle, depth, &mut caches, &tensor)?);
                for cache in &mut caches {
                    cache.try_truncate(length)?;
                }
            }
            results.push(LengthResult {
                length,
                perplexity,
                passkeys,
            });
        }
        Ok(results)
    }
}

/// Asks for `needle`'s key after what `caches` hold: whether greedy decoding gives it, in one
/// call of the question and the key's tokens but its last.
fn ask(
    model: &Transformer,
    tokenizer: &Tokenizer,
    needle: &Needle,
    depth: f64,
    caches: &mut [KvCache],
    tensor: &impl Fn(&[u32]) -> Tensor<2, Int>,
) -> anyhow::Result<PasskeyAnswer> {
    let mut asked = needle.question.clone();
    asked.extend(&needle.answer[..needle.answer.len() - 1]);
    let answer_len = needle.answer.len();
    let hidden = model.try_hidden_cached(tensor(&asked), ModelInputs::new(), caches)?;
    let logits = model.try_head(hidden.narrow(1, needle.question.len() - 1, answer_len))?;
    let chosen: Vec<u32> = logits
        .argmax(2)
        .reshape([answer_len])
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| anyhow::anyhow!("reading the answer: {e:?}"))?
        .into_iter()
        .map(|id| id as u32)
        .collect();
    let said = tokenizer
        .decode(&chosen, false)
        .map_err(|e| anyhow::anyhow!("decoding the answer: {e}"))?;
    Ok(PasskeyAnswer {
        depth,
        key: needle.key.clone(),
        correct: chosen == needle.answer,
        said,
    })
}

fn host_floats(tensor: Tensor<1>) -> anyhow::Result<Vec<f64>> {
    Ok(tensor
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("reading log-probabilities: {e:?}"))?
        .into_iter()
        .map(f64::from)
        .collect())
}

/// Steele, Lea and Flood's SplitMix64: the pass keys' digits, reproducible from the seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// A word-level tokenizer: every word and punctuation mark one token (unknown ones all
    /// `[UNK]`), so needle lengths are easy to count.
    fn word_tokenizer() -> Tokenizer {
        Tokenizer::from_str(
            r#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
                "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
                "post_processor": null, "decoder": null,
                "model": {"type": "WordLevel", "unk_token": "[UNK]",
                          "vocab": {"[UNK]": 0, "The": 1, "pass": 2, "key": 3, "of": 4, "is": 5}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn needles_sit_at_their_depths_and_the_text_runs_around_them() {
        let tokenizer = word_tokenizer();
        let mut settings = ContextSettings::new(1024, 512).unwrap();
        settings.depths = vec![0.0, 0.5, 1.0];
        assert_eq!(settings.lengths, [512, 1024]);
        assert_eq!(settings.factor, 2.0);
        let text: Vec<u32> = (100..3000).collect();
        let haystack = Haystack::new(&tokenizer, &text, &settings).unwrap();
        assert_eq!(haystack.ids.len(), 1024);

        // 512 asks at 0, 256 and its end; 1024 at 0, 512 and its end: five needles.
        let n = haystack.needles[0].tokens.len();
        let positions: Vec<usize> = haystack.needles.iter().map(|n| n.position).collect();
        assert_eq!(positions, [0, 256, 512 - n, 512, 1024 - n]);
        assert_eq!(haystack.questions, [[0, 1, 2], [0, 3, 4]]);
        for needle in &haystack.needles {
            let at = &haystack.ids[needle.position..needle.position + n];
            assert_eq!(at, needle.tokens.as_slice());
            assert!(
                haystack.scored[needle.position..needle.position + n]
                    .iter()
                    .all(|s| !s)
            );
            assert_eq!(needle.answer.len(), 1, "{needle:?}");
        }
        let labels: std::collections::HashSet<&str> =
            haystack.needles.iter().map(|n| n.label.as_str()).collect();
        assert_eq!(labels.len(), 5);

        // Around the needles, the text's tokens in order, each scored.
        let text_tokens: Vec<u32> = haystack
            .ids
            .iter()
            .zip(&haystack.scored)
            .filter(|(_, scored)| **scored)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(text_tokens.len(), 1024 - 5 * n);
        assert_eq!(text_tokens, text[..text_tokens.len()]);

        let short = Haystack::new(&tokenizer, &text[..900], &settings).unwrap_err();
        assert!(
            short.to_string().contains("shorter than --max-len"),
            "{short}"
        );
    }

    #[test]
    fn scalings_take_the_factor_and_the_training_length() {
        assert_eq!(Scaling::AsTrained.rope_scaling(2.0, 8192), None);
        assert_eq!(
            Scaling::Dynamic.rope_scaling(2.0, 8192),
            Some(RopeScaling::Dynamic {
                factor: 2.0,
                original_max_position_embeddings: 8192
            })
        );
        assert_eq!(
            Scaling::Yarn.rope_scaling(4.0, 4096),
            Some(RopeScaling::yarn(4.0, 4096))
        );
        let settings = ContextSettings::new(3000, 8192).unwrap();
        assert_eq!(
            (settings.lengths, settings.factor),
            (vec![512, 1024, 2048, 3000], 1.0)
        );
        assert!(ContextSettings::new(256, 8192).is_err());
    }
}
