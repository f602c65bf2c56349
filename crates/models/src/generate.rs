//! Text generation with the KV cache: greedy, or sampled with temperature, top-k and top-p
//! (Holtzman et al., 2020) from a seeded generator, for a batch of prompts of different lengths
//! (left-padded, positions counted from each row's first token, as Hugging Face's `generate`
//! does), stopping at stop tokens.

use burn::config::Config;
use burn::tensor::{Bool, Tensor, TensorData};

use crate::error::ModelError;
use crate::transformer::{ModelInputs, PositionIds, Transformer};

/// How to pick each new token.
#[derive(Config, Debug, PartialEq)]
pub struct GenerationConfig {
    /// At most this many new tokens per prompt.
    #[config(default = 32)]
    pub max_new_tokens: usize,
    /// Stop tokens cannot be chosen before this many new tokens (transformers'
    /// `min_new_tokens`).
    #[config(default = 0)]
    pub min_new_tokens: usize,
    /// 0 picks the most likely token (greedy); above 0, logits are divided by it and sampled.
    #[config(default = 0.0)]
    pub temperature: f64,
    /// When sampling, only the `k` most likely tokens.
    #[config(default = "None")]
    pub top_k: Option<usize>,
    /// When sampling, only the most likely tokens whose probabilities sum to `p`.
    #[config(default = "None")]
    pub top_p: Option<f64>,
    /// Seed of the sampler: the same seed gives the same tokens.
    #[config(default = 0)]
    pub seed: u64,
    /// A row ends after generating one of these (it is kept in the output).
    #[config(default = "Vec::new()")]
    pub stop_tokens: Vec<u32>,
    /// Fills left padding; never attended to.
    #[config(default = 0)]
    pub pad_token: u32,
}

impl GenerationConfig {
    /// Checks the sampling parameters.
    pub fn validate(&self) -> Result<(), ModelError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(ModelError::config(
                "temperature",
                self.temperature,
                "must be finite and not negative (0 is greedy)",
            ));
        }
        if self.top_k == Some(0) {
            return Err(ModelError::config("top_k", 0, "must be at least 1"));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(ModelError::config("top_p", p, "must be in (0, 1]"));
        }
        Ok(())
    }
}

/// One step of generation, as [`Transformer::try_generate_with`] reports it.
#[derive(Debug, Clone)]
pub struct Step<'a> {
    /// 0 for the first new token.
    pub index: usize,
    /// The token chosen for each prompt; `None` for rows that had already stopped.
    pub tokens: &'a [Option<u32>],
    /// `[batch][vocab_size]` logits the tokens were chosen from, before any processing.
    pub logits: &'a [Vec<f32>],
}

impl Transformer {
    /// The new tokens for each prompt (the stop token included when one ended the row).
    pub fn try_generate(
        &self,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
    ) -> Result<Vec<Vec<u32>>, ModelError> {
        self.try_generate_with(prompts, config, |_| {})
    }

    /// As [`try_generate`](Self::try_generate), calling `on_step` after every step (to stream
    /// tokens, or to read the logits).
    pub fn try_generate_with(
        &self,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
        mut on_step: impl FnMut(Step<'_>),
    ) -> Result<Vec<Vec<u32>>, ModelError> {
        config.validate()?;
        if !self.config.head.is_logits() {
            return Err(ModelError::input(
                "model",
                "encoder",
                "generation needs a decoder with an LM head",
            ));
        }
        if prompts.is_empty() {
            return Err(ModelError::input(
                "prompts",
                0,
                "must hold at least one prompt",
            ));
        }
        if let Some(i) = prompts.iter().position(Vec::is_empty) {
            return Err(ModelError::input(
                format!("prompts[{i}]"),
                "[]",
                "must hold at least one token",
            ));
        }
        let vocab = self.config.vocab_size;
        for (name, id) in prompts
            .iter()
            .flatten()
            .map(|&id| ("prompts", id))
            .chain([("pad_token", config.pad_token)])
            .chain(config.stop_tokens.iter().map(|&id| ("stop_tokens", id)))
        {
            if id as usize >= vocab {
                return Err(ModelError::input(
                    name,
                    id,
                    format!("token ids must lie in 0..vocab_size (0..{vocab})"),
                ));
            }
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let total = longest.checked_add(config.max_new_tokens).ok_or_else(|| {
            ModelError::config("max_new_tokens", config.max_new_tokens, "overflows usize")
        })?;
        if let Some(max_len) = self.positions.as_ref().and_then(|p| p.max_len())
            && total > max_len
        {
            return Err(ModelError::input(
                "prompt length + max_new_tokens",
                total,
                format!("must be at most the learned positions ({max_len})"),
            ));
        }
        if config.max_new_tokens == 0 {
            return Ok(vec![Vec::new(); prompts.len()]);
        }

        let device = self.embedding.weight.device();
        let batch = prompts.len();
        // Every prompt left-padded to the longest: a size the prompts themselves need not reach.
        if let Some(why) = positional::unallocatable(&[batch, longest], 8, &device) {
            return Err(ModelError::input("prompts", [batch, longest], why));
        }
        let pads: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
        let mut ids = Vec::with_capacity(batch * longest);
        let mut padding = Vec::with_capacity(batch * longest);
        let mut positions = Vec::with_capacity(batch * longest);
        for (prompt, &pad) in prompts.iter().zip(&pads) {
            ids.extend(std::iter::repeat_n(config.pad_token as i64, pad));
            ids.extend(prompt.iter().map(|&id| id as i64));
            padding.extend((0..longest).map(|j| j < pad));
            positions.extend((0..longest).map(|j| j.saturating_sub(pad) as i64));
        }
        // Without padding the positions are the token indices, and neither a mask nor positions
        // is passed: attention takes its index paths (the fused decoding pass among them), which
        // read nothing back. With padding, the mask is given once, with the prompts; the caches
        // keep it for every later step.
        let padded = pads.iter().any(|&pad| pad > 0);
        let explicit_positions = padded && self.config.positions == PositionIds::FromMask;
        let mut caches = self.new_caches();
        // Every layer's storage made once, at the length generation can reach: the prompt and
        // the new tokens, up to as many again as the prompt (past that the cache doubles as
        // it fills, rather than holding room for tokens a stop token may never let come).
        let reach = longest + config.max_new_tokens.min(longest);
        caches.iter_mut().for_each(|cache| cache.reserve(reach));
        let mut inputs = ModelInputs::new();
        if padded {
            inputs = inputs.with_padding_mask(Tensor::<2, Bool>::from_data(
                TensorData::new(padding, [batch, longest]),
                &device,
            ));
        }
        if explicit_positions {
            inputs = inputs.with_positions(positional::try_ints(
                "positions",
                positions,
                [batch, longest],
                &device,
            )?);
        }
        let ids = positional::try_ints("prompts", ids, [batch, longest], &device)?;
        // The prompt in chunks through the caches: what a layer holds besides its cache is one
        // chunk's activations, whatever the prompt's length. Only the last chunk's logits are
        // used.
        let mut logits = None;
        for start in (0..longest).step_by(PREFILL_CHUNK) {
            let len = PREFILL_CHUNK.min(longest - start);
            let (ids, inputs) = match len == longest {
                true => (ids.clone(), inputs.clone()),
                false => (
                    ids.clone().narrow(1, start, len),
                    inputs.clone().narrow(start, len),
                ),
            };
            logits = Some(self.try_generation_step(ids, inputs, &mut caches)?);
        }
        let mut logits = logits.expect("a prompt holds at least one token");

        let mut sampler = Sampler::new(config.seed);
        let mut output: Vec<Vec<u32>> = vec![Vec::new(); batch];
        let mut done = vec![false; batch];
        for step in 0..config.max_new_tokens {
            let last = last_rows(logits)?;
            let chosen: Vec<Option<u32>> = last
                .iter()
                .zip(&done)
                .map(|(row, &done)| {
                    (!done).then(|| {
                        let suppress = match step < config.min_new_tokens {
                            true => config.stop_tokens.as_slice(),
                            false => &[],
                        };
                        sampler.choose(row, config, suppress)
                    })
                })
                .collect();
            for (row, token) in chosen.iter().enumerate() {
                if let Some(token) = token {
                    output[row].push(*token);
                    if config.stop_tokens.contains(token) {
                        done[row] = true;
                    }
                }
            }
            on_step(Step {
                index: step,
                tokens: &chosen,
                logits: &last,
            });
            if step + 1 == config.max_new_tokens || done.iter().all(|&d| d) {
                break;
            }
            let next: Vec<i64> = chosen
                .iter()
                .map(|t| t.unwrap_or(config.pad_token) as i64)
                .collect();
            let mut inputs = ModelInputs::new();
            if explicit_positions {
                let next_positions: Vec<i64> =
                    prompts.iter().map(|p| (p.len() + step) as i64).collect();
                inputs = inputs.with_positions(positional::try_ints(
                    "positions",
                    next_positions,
                    [batch, 1],
                    &device,
                )?);
            }
            let ids = positional::try_ints("tokens", next, [batch, 1], &device)?;
            // On the CPU kernels' threads where they are the backend's: a decoding step runs
            // many small kernels, whose hand-overs between threads are cheaper there.
            logits = attention::on_kernel_threads(&device, || {
                self.try_generation_step(ids, inputs, &mut caches)
            })?;
        }
        Ok(output)
    }
}

/// Prompt tokens per forward pass of generation's prefill: at SmolLM2's width a chunk's
/// activations are about 100 MB in all, where a whole 16,384-token prompt's were 1.5 GB.
const PREFILL_CHUNK: usize = 2048;

/// The last position's logits of each row (`[batch, 1, vocab]` from `try_generation_step`), on
/// the host.
fn last_rows(logits: Tensor<3>) -> Result<Vec<Vec<f32>>, ModelError> {
    let [batch, seq, vocab] = logits.dims();
    let values = logits
        .narrow(1, seq - 1, 1)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| ModelError::input("logits", format!("{e:?}"), "must be float data"))?;
    Ok((0..batch)
        .map(|row| values[row * vocab..(row + 1) * vocab].to_vec())
        .collect())
}

/// Picks tokens from logits: greedy, or sampled after temperature, top-k and top-p, in that
/// order (transformers' order of logits warpers).
struct Sampler {
    state: u64,
}

impl Sampler {
    fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A uniform number in `[0, 1)` (SplitMix64).
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn choose(&mut self, logits: &[f32], config: &GenerationConfig, suppress: &[u32]) -> u32 {
        let mut scores: Vec<f64> = logits.iter().map(|&l| l as f64).collect();
        for &token in suppress {
            scores[token as usize] = f64::NEG_INFINITY;
        }
        if config.temperature == 0.0 {
            return argmax(&scores);
        }
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let mut keep = order.len();
        if let Some(k) = config.top_k {
            keep = keep.min(k);
        }
        // The temperature divides differences from the largest score, never a score itself: a
        // temperature as small as f64 allows then gives 0 weight, not NaN, to every other token.
        let max = scores[order[0]];
        let weights: Vec<f64> = order[..keep]
            .iter()
            .map(|&i| ((scores[i] - max) / config.temperature).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        if let Some(p) = config.top_p {
            // The smallest prefix whose probability reaches p (at least one token).
            let mut sum = 0.0;
            for (n, w) in weights.iter().enumerate() {
                sum += w / total;
                if sum >= p {
                    keep = keep.min(n + 1);
                    break;
                }
            }
        }
        let total: f64 = weights[..keep].iter().sum();
        let mut target = self.uniform() * total;
        for (n, w) in weights[..keep].iter().enumerate() {
            if target < *w {
                return order[n] as u32;
            }
            target -= w;
        }
        order[keep - 1] as u32
    }
}

/// The index of the largest score, the first on ties (as `torch.argmax`).
fn argmax(scores: &[f64]) -> u32 {
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s > scores[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use attention::{PositionalScheme, take_path_counts};
    use burn::tensor::Device;
    use positional::testing::{for_each_backend, once};

    use crate::transformer::tests::{tiny_attention, tiny_decoder};

    /// Which attention path generation takes: without padding, every decoding step of every
    /// layer is one fused pass over the cache (no mask is passed); with a padded row the steps
    /// mask the padding, and the prompt's tokens go through the masked path too. The tokens of
    /// the unpadded row are the same either way.
    fn generation_decodes_through_the_fused_pass_without_padding(device: &Device) {
        let layers = 2;
        let rope = PositionalScheme::Rope(positional::RotaryEncodingConfig::new(4));
        let model = tiny_decoder(vec![tiny_attention(rope); layers], device);
        let config = GenerationConfig::new().with_max_new_tokens(5);
        let prompt = vec![3, 1, 4, 1];
        take_path_counts();
        let alone = model
            .try_generate(std::slice::from_ref(&prompt), &config)
            .unwrap();
        let counts = take_path_counts();
        // The prompt: one call per layer; each of the 4 later tokens: one decoding pass per layer.
        assert_eq!(
            (counts.decode, counts.fused + counts.tiled + counts.explicit),
            (4 * layers, layers),
            "{counts:?}"
        );
        let padded = model.try_generate(&[prompt, vec![5, 9]], &config).unwrap();
        let counts = take_path_counts();
        assert_eq!(counts.decode, 0, "{counts:?}");
        assert_eq!(padded[0], alone[0]);
    }
    // Not WGPU: WGPU's decoding kernel is held to its reference by `decode_attention::tests` and,
    // in whole models through the cache, by the conformance matrix.
    for_each_backend!(generation_decodes_through_the_fused_pass_without_padding: ndarray, flex, tch);

    /// A prompt longer than a prefill chunk, and a shorter one left-padded beside it, give at
    /// every step the logits of a whole forward pass over the prompt and the tokens so far: the
    /// chunks through the caches see what one pass would.
    fn a_prompt_in_chunks_generates_as_whole_passes(device: &Device) {
        let rope = PositionalScheme::Rope(positional::RotaryEncodingConfig::new(4));
        let model = tiny_decoder(vec![tiny_attention(rope); 2], device);
        let vocab = model.config.vocab_size;
        let long: Vec<u32> = (0..PREFILL_CHUNK + 300)
            .map(|i| ((i * 7 + i / 5) % vocab) as u32)
            .collect();
        let short = long[..PREFILL_CHUNK - 100].to_vec();
        let config = GenerationConfig::new().with_max_new_tokens(3);
        let mut steps: Vec<Vec<Vec<f32>>> = Vec::new();
        let generated = model
            .try_generate_with(&[long.clone(), short.clone()], &config, |step| {
                steps.push(step.logits.to_vec())
            })
            .unwrap();
        for (row, (prompt, tokens)) in [long, short].iter().zip(&generated).enumerate() {
            let mut sequence = prompt.clone();
            for (step, &token) in tokens.iter().enumerate() {
                let ids = burn::tensor::Tensor::<2, burn::tensor::Int>::from_data(
                    TensorData::new(
                        sequence.iter().map(|&t| i64::from(t)).collect(),
                        [1, sequence.len()],
                    ),
                    device,
                );
                let logits = model
                    .try_forward(ids, crate::transformer::ModelInputs::new())
                    .unwrap();
                let whole = &last_rows(logits.narrow(1, sequence.len() - 1, 1)).unwrap()[0];
                let chunked = &steps[step][row];
                for (a, b) in whole.iter().zip(chunked) {
                    assert!(
                        (a - b).abs() < 1e-4,
                        "row {row}, step {step}: {whole:?} {chunked:?}"
                    );
                }
                sequence.push(token);
            }
        }
    }
    // Not WGPU: the same.
    for_each_backend!(a_prompt_in_chunks_generates_as_whole_passes: ndarray, flex, tch);

    /// A prompt whose logits at every position would pass the device's largest buffer still
    /// generates, since the prefill makes the last position's only, and a whole forward of it is
    /// the error naming its size (WGPU's limit on lavapipe is 128 MiB: a vocabulary of 40,000 at
    /// 1,024 positions is 156 MiB of logits; the CPU backends allow it either way).
    fn a_long_prompt_generates_past_the_size_of_its_full_logits(device: &Device) {
        let d = 8;
        let vocab = 40_000;
        let block = crate::block::BlockConfig::new(
            tiny_attention(PositionalScheme::None).into(),
            crate::block::BlockLayout::PreNorm,
            crate::norm::NormConfig::new(d, crate::norm::NormKind::Rms, 1e-6),
            crate::block::FeedForwardConfig::Dense(crate::mlp::MlpConfig::new(
                d,
                16,
                crate::mlp::Activation::Silu,
            )),
        );
        let model = crate::transformer::TransformerConfig::new(vocab, d, vec![block]).init(device);
        let prompt: Vec<u32> = (0..1024).map(|i| (i * 37 % vocab) as u32).collect();
        let config = GenerationConfig::new().with_max_new_tokens(2);
        let tokens = model
            .try_generate(std::slice::from_ref(&prompt), &config)
            .unwrap();
        assert_eq!(tokens[0].len(), 2);
        assert!(tokens[0].iter().all(|&t| (t as usize) < vocab));
        let limit = positional::unallocatable(&[1, 1024, vocab], 4, device);
        let ids = burn::tensor::Tensor::<2, burn::tensor::Int>::from_data(
            burn::tensor::TensorData::new(
                prompt.iter().map(|&t| i64::from(t)).collect(),
                [1, 1024],
            ),
            device,
        );
        let whole = model.try_forward(ids, crate::transformer::ModelInputs::new());
        match limit {
            Some(_) => {
                let error = whole.unwrap_err().to_string();
                assert!(error.contains("exceeds the largest buffer"), "{error}");
            }
            None => assert_eq!(whole.unwrap().dims(), [1, 1024, vocab]),
        }
    }
    once!(a_long_prompt_generates_past_the_size_of_its_full_logits);

    #[test]
    fn sampling_keeps_to_top_k_and_top_p() {
        let logits = [0.0f32, 3.0, 2.9, -1.0, 2.0];
        let greedy = GenerationConfig::new();
        let mut sampler = Sampler::new(7);
        assert_eq!(sampler.choose(&logits, &greedy, &[]), 1);
        assert_eq!(sampler.choose(&logits, &greedy, &[1]), 2);
        let top2 = GenerationConfig::new()
            .with_temperature(1.0)
            .with_top_k(Some(2));
        let mut seen = [0usize; 5];
        for _ in 0..2000 {
            seen[sampler.choose(&logits, &top2, &[]) as usize] += 1;
        }
        assert_eq!(seen[0] + seen[3] + seen[4], 0, "{seen:?}");
        // p(1) / p(2) = e^0.1 = 1.105: both are drawn, 1 a little more often.
        assert!(seen[1] > seen[2] && seen[2] > 800, "{seen:?}");
        // The first token alone holds more than 0.3 of the mass.
        let top_p = GenerationConfig::new()
            .with_temperature(1.0)
            .with_top_p(Some(0.3));
        assert!((0..200).all(|_| sampler.choose(&logits, &top_p, &[]) == 1));
        // The same seed, the same draws.
        let draws = |seed| {
            let mut sampler = Sampler::new(seed);
            let warm = GenerationConfig::new().with_temperature(2.0);
            (0..50)
                .map(|_| sampler.choose(&logits, &warm, &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
        // The smallest temperature f64 holds: the largest logit alone, not NaN weights.
        let coldest = GenerationConfig::new().with_temperature(f64::from_bits(1));
        assert!((0..50).all(|_| sampler.choose(&logits, &coldest, &[]) == 1));
        for (config, field) in [
            (
                GenerationConfig::new().with_temperature(-1.0),
                "`temperature` = -1.0",
            ),
            (
                GenerationConfig::new().with_top_p(Some(0.0)),
                "`top_p` = 0.0",
            ),
            (GenerationConfig::new().with_top_k(Some(0)), "`top_k` = 0"),
        ] {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
    }
}
