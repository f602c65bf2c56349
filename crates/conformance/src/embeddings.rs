//! Runs the sentence-embedding reference (`embeddings/minilm.json`: sentence-transformers'
//! float64 embeddings of a few sentences by all-MiniLM-L6-v2) on one device: each sentence
//! tokenised from the model's `tokenizer.json` (the ids must be the reference's, exactly), then
//! embedded (the short ones in one padded batch), every value within the reference's tolerance.

use std::path::Path;

use burn::tensor::Device;
use models::SentenceEmbedder;
use serde_json::{Map, Value};

use crate::checkpoint::compare;
use crate::run::Outcome;

/// Fields of the reference file.
const FIELDS: &[&str] = &[
    "package",
    "sentence_transformers_version",
    "transformers_version",
    "torch_version",
    "max_seq_length",
    "sentences",
    "token_ids",
    "embeddings",
    "tolerance",
];

/// Runs `reference` (a JSON file) against the model directory `model` on `device`.
pub fn run_embeddings(reference: &Path, model: &Path, device: &Device) -> Outcome {
    check(reference, model, device).into()
}

fn check(reference: &Path, model: &Path, device: &Device) -> Result<f64, String> {
    let text =
        std::fs::read_to_string(reference).map_err(|e| format!("{}: {e}", reference.display()))?;
    let json: Map<String, Value> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", reference.display()))?;
    if let Some(unknown) = json.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field {unknown:?}"));
    }
    let sentences: Vec<&str> = json
        .get("sentences")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().map(Value::as_str).collect())
        .ok_or("`sentences` must be a list of strings")?;
    let token_ids: Vec<Vec<u32>> = json
        .get("token_ids")
        .and_then(Value::as_array)
        .and_then(|rows| {
            rows.iter()
                .map(|row| {
                    row.as_array()?
                        .iter()
                        .map(|id| id.as_u64().map(|id| id as u32))
                        .collect()
                })
                .collect()
        })
        .ok_or("`token_ids` must be lists of token ids")?;
    let want: Vec<Vec<f64>> = json
        .get("embeddings")
        .and_then(Value::as_array)
        .and_then(|rows| {
            rows.iter()
                .map(|row| row.as_array()?.iter().map(Value::as_f64).collect())
                .collect()
        })
        .ok_or("`embeddings` must be lists of numbers")?;
    let tolerance = json
        .get("tolerance")
        .and_then(Value::as_f64)
        .ok_or("`tolerance` must be a number")?;
    if token_ids.len() != sentences.len() || want.len() != sentences.len() {
        return Err("`sentences`, `token_ids` and `embeddings` differ in length".into());
    }

    let embedder = SentenceEmbedder::from_pretrained(model, device).map_err(|e| e.to_string())?;
    for (i, (sentence, want_ids)) in sentences.iter().zip(&token_ids).enumerate() {
        let ids = embedder.tokenize(sentence).map_err(|e| e.to_string())?;
        if &ids != want_ids {
            return Err(format!(
                "sentence {i}: {} token ids, expected {} (first difference at {:?})",
                ids.len(),
                want_ids.len(),
                ids.iter().zip(want_ids).position(|(a, b)| a != b)
            ));
        }
    }
    // The short sentences in one padded batch (padding must not change a row), each long one
    // alone: padding every row to the longest would multiply the work several times over.
    let short: Vec<usize> = (0..sentences.len())
        .filter(|&i| token_ids[i].len() <= 64)
        .collect();
    let mut batches: Vec<Vec<usize>> = vec![short.clone()];
    batches.extend(
        (0..sentences.len())
            .filter(|i| !short.contains(i))
            .map(|i| vec![i]),
    );
    let mut rows: Vec<Option<Vec<f64>>> = vec![None; sentences.len()];
    for batch in batches.iter().filter(|b| !b.is_empty()) {
        let texts: Vec<&str> = batch.iter().map(|&i| sentences[i]).collect();
        let values = embedder
            .try_embed(&texts)
            .map_err(|e| e.to_string())?
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .map_err(|e| format!("embeddings are not float data: {e:?}"))?;
        let width = values.len() / batch.len();
        for (j, &i) in batch.iter().enumerate() {
            rows[i] = Some(values[j * width..(j + 1) * width].to_vec());
        }
    }
    let got: Vec<f64> = rows.into_iter().flatten().flatten().collect();
    let want: Vec<f64> = want.into_iter().flatten().collect();
    compare(
        "embeddings",
        &got,
        &want,
        &vec![true; sentences.len()],
        tolerance,
    )
}
