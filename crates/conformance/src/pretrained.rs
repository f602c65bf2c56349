//! Runs a real pretrained decoder's reference (`pretrained/smollm2.json`: transformers' float64
//! outputs of SmolLM2-135M-Instruct, made by `generate/pretrained.py`) on one device, for the
//! model as the user holds it: a GGUF file or a Hugging Face directory ([`models::Pretrained`]).
//!
//! - every text tokenised to the reference's ids exactly, then its logits: at each position the
//!   reference's `top_k` ids within the tolerance, and the log-sum-exp of the whole vocabulary;
//! - the perplexity of a slice of a novel, from its ids, within the reference's relative
//!   tolerance of transformers' (the context study's measure, [`models::try_token_log_probs`]);
//! - the greedy continuations of a plain prompt and of a chat, the chat's prompt rendered by the
//!   model's own template: the same tokens, up to the first step the reference calls a near tie
//!   (its best two logits within twice the tolerance, where f32 may pick either).

use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};
use models::{
    GenerationConfig, Message, ModelInputs, Pretrained, Transformer, try_token_log_probs,
};
use serde::Deserialize;

use crate::run::Outcome;

/// `pretrained/<model>.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // provenance fields, read to refuse unknown ones
struct Reference {
    package: String,
    gguf: String,
    transformers_version: String,
    torch_version: String,
    eos_token_id: u32,
    top_k: usize,
    texts: Vec<Text>,
    perplexity: Perplexity,
    greedy: Vec<Greedy>,
    tolerance: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // provenance fields, read to refuse unknown ones
struct Perplexity {
    source: String,
    text: String,
    token_ids: Vec<u32>,
    perplexity: f64,
    relative_tolerance: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Text {
    text: String,
    token_ids: Vec<u32>,
    /// `[position][top_k]`.
    top_ids: Vec<Vec<u32>>,
    top_logits: Vec<Vec<f64>>,
    logsumexp: Vec<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Greedy {
    name: String,
    /// A plain prompt (tokenised with the special tokens), or
    prompt: Option<String>,
    /// a conversation through the chat template.
    messages: Option<Vec<ReferenceMessage>>,
    prompt_ids: Vec<u32>,
    tokens: Vec<u32>,
    text: String,
    margins: Vec<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReferenceMessage {
    role: String,
    content: String,
}

/// Runs `reference` against the model at `model` (a GGUF file or a Hugging Face directory).
pub fn run_pretrained(reference: &Path, model: &Path, device: &Device) -> Outcome {
    check(reference, model, device).into()
}

fn check(reference: &Path, model: &Path, device: &Device) -> Result<f64, String> {
    let text =
        std::fs::read_to_string(reference).map_err(|e| format!("{}: {e}", reference.display()))?;
    let reference: Reference =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", reference.display()))?;
    let pretrained = Pretrained::load(model, device).map_err(|e| e.to_string())?;
    let tokenizer = pretrained
        .tokenizer
        .as_ref()
        .ok_or("the model has no tokenizer")?;
    if !pretrained.stop_tokens.contains(&reference.eos_token_id) {
        return Err(format!(
            "stop tokens {:?} lack the reference's eos_token_id {}",
            pretrained.stop_tokens, reference.eos_token_id
        ));
    }
    let tolerance = reference.tolerance;
    let mut max_error = 0f64;
    for (i, text) in reference.texts.iter().enumerate() {
        let ids = tokenizer
            .encode(text.text.as_str(), true)
            .map_err(|e| format!("texts[{i}]: {e}"))?
            .get_ids()
            .to_vec();
        if ids != text.token_ids {
            return Err(format!(
                "texts[{i}] tokenised to {ids:?}, expected {:?}",
                text.token_ids
            ));
        }
        let seq = ids.len();
        let input = Tensor::<2, Int>::from_data(
            TensorData::new(ids.iter().map(|&id| i64::from(id)).collect(), [1, seq]),
            device,
        );
        let logits = pretrained
            .model
            .try_forward(input, ModelInputs::new())
            .map_err(|e| format!("texts[{i}]: {e}"))?;
        let vocab = logits.dims()[2];
        let logits = logits
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .map_err(|e| format!("logits: {e:?}"))?;
        if text.top_ids.len() != seq || text.top_logits.len() != seq || text.logsumexp.len() != seq
        {
            return Err(format!(
                "texts[{i}]: the reference's rows differ from its tokens"
            ));
        }
        for position in 0..seq {
            let row = &logits[position * vocab..(position + 1) * vocab];
            for (rank, (&id, &want)) in text.top_ids[position]
                .iter()
                .zip(&text.top_logits[position])
                .enumerate()
            {
                let got = *row
                    .get(id as usize)
                    .ok_or(format!("texts[{i}]: id {id} is past the vocabulary"))?;
                let error = (got - want).abs();
                if error.is_nan() || error > tolerance {
                    return Err(format!(
                        "texts[{i}] position {position}: logit of id {id} (rank {rank}) is {got}, \
                         expected {want} (error {error:.3e} > {tolerance:e})"
                    ));
                }
                max_error = max_error.max(error);
            }
            let error = (logsumexp(row) - text.logsumexp[position]).abs();
            if error.is_nan() || error > tolerance {
                return Err(format!(
                    "texts[{i}] position {position}: log-sum-exp off by {error:.3e}"
                ));
            }
            max_error = max_error.max(error);
        }
    }
    check_perplexity(&pretrained.model, &reference.perplexity, device)?;
    for greedy in &reference.greedy {
        let name = &greedy.name;
        let prompt = match (&greedy.prompt, &greedy.messages) {
            (Some(prompt), None) => tokenizer
                .encode(prompt.as_str(), true)
                .map_err(|e| format!("{name}: {e}"))?
                .get_ids()
                .to_vec(),
            (None, Some(messages)) => {
                let template = pretrained
                    .chat_template
                    .as_ref()
                    .ok_or(format!("{name}: the model has no chat template"))?;
                let messages: Vec<Message> = messages
                    .iter()
                    .map(|m| Message::new(&m.role, &m.content))
                    .collect();
                let rendered = template
                    .render(&messages, true)
                    .map_err(|e| format!("{name}: {e}"))?;
                tokenizer
                    .encode(rendered.as_str(), false)
                    .map_err(|e| format!("{name}: {e}"))?
                    .get_ids()
                    .to_vec()
            }
            _ => return Err(format!("{name}: give `prompt` or `messages`, not both")),
        };
        if prompt != greedy.prompt_ids {
            return Err(format!(
                "{name}: the prompt is {prompt:?}, expected {:?}",
                greedy.prompt_ids
            ));
        }
        let config = GenerationConfig::new()
            .with_max_new_tokens(greedy.tokens.len())
            .with_stop_tokens(pretrained.stop_tokens.clone());
        let tokens = pretrained
            .model
            .try_generate(&[prompt], &config)
            .map_err(|e| format!("{name}: {e}"))?
            .remove(0);
        // Compare up to the first near tie: past it the reference itself could have gone
        // either way in f32.
        let sure = greedy
            .margins
            .iter()
            .position(|&margin| margin < 2.0 * tolerance)
            .unwrap_or(greedy.tokens.len());
        let sure = sure.min(greedy.tokens.len());
        if tokens.get(..sure) != Some(&greedy.tokens[..sure]) {
            let text = tokenizer.decode(&tokens, true).unwrap_or_default();
            return Err(format!(
                "{name}: greedy tokens {tokens:?} ({text:?}), expected {:?} ({:?}) for the first \
                 {sure}",
                greedy.tokens, greedy.text
            ));
        }
    }
    Ok(max_error)
}

/// The slice's perplexity in one pass within the reference's relative tolerance. Reading it in
/// chunks through the cache, as the study does, gives the same: `examples`' binary test of the
/// study holds one to the other on this model, and the models crate's tests hold cached chunks to
/// one pass on every backend.
fn check_perplexity(
    model: &Transformer,
    reference: &Perplexity,
    device: &Device,
) -> Result<(), String> {
    let ids = &reference.token_ids;
    let tensor = |ids: &[u32]| {
        Tensor::<2, Int>::from_data(
            TensorData::new(
                ids.iter().map(|&id| i64::from(id)).collect(),
                [1, ids.len()],
            ),
            device,
        )
    };
    let log_probs = |logits: Tensor<3>, targets: &[u32]| -> Result<Vec<f64>, String> {
        let rows = targets.len();
        let log_probs = try_token_log_probs(logits.narrow(1, 0, rows), tensor(targets))
            .map_err(|e| format!("perplexity: {e}"))?;
        log_probs
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .map_err(|e| format!("perplexity: {e:?}"))
    };
    let logits = model
        .try_forward(tensor(ids), ModelInputs::new())
        .map_err(|e| format!("perplexity: {e}"))?;
    let got = models::perplexity(log_probs(logits, &ids[1..])?).ok_or("perplexity: no tokens")?;
    let error = (got / reference.perplexity - 1.0).abs();
    if error.is_nan() || error > reference.relative_tolerance {
        return Err(format!(
            "perplexity: {got}, expected {} (relative error {error:.3e} > {})",
            reference.perplexity, reference.relative_tolerance
        ));
    }
    Ok(())
}

fn logsumexp(row: &[f64]) -> f64 {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln()
}
