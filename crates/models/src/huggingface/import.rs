//! One attention layer's weights from a PyTorch / Hugging Face checkpoint in safetensors format,
//! under Llama's names; the rest of [`crate::huggingface`] reads every family's names and layouts.

use std::path::Path;

use super::{AttentionNames, Checkpoint, load_layer_with};
use crate::error::ModelError;
use attention::MultiHeadAttention;

/// Loads `q_proj`, `k_proj`, `v_proj` and `o_proj` (weights `[out, in]`, and biases when the
/// config has them) found under `prefix` in a safetensors file into `attention`, under the names
/// Hugging Face Llama, Mistral and Qwen checkpoints use (`model.layers.0.self_attn.` is a prefix).
/// Tensors stored in bf16, f16 or f64 are converted to f32.
///
/// Every projection must be present with its exact shape, and every other tensor under `prefix`
/// is an error (a bias the config does not expect is not dropped in silence); tensors elsewhere
/// in the file are ignored.
pub fn load_attention_safetensors(
    attention: MultiHeadAttention,
    path: impl AsRef<Path>,
    prefix: &str,
) -> Result<MultiHeadAttention, ModelError> {
    let names = AttentionNames::separate("", ["q_proj", "k_proj", "v_proj", "o_proj"]);
    let mut checkpoint = Checkpoint::open(path)?;
    let device = attention.query.weight.device();
    load_layer_with(
        &names,
        prefix,
        &["rotary_emb.inv_freq"],
        attention.config().clone(),
        &mut checkpoint,
        &device,
    )
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, Tensor};
    use positional::testing::once;
    use positional::testing::{assert_close, floats};

    use super::load_attention_safetensors;
    use attention::{LinearWeights, MultiHeadAttentionConfig};

    /// Writes f32 tensors as a safetensors file by hand: an 8-byte header length, a JSON header,
    /// then the raw little-endian data, as PyTorch's `safetensors.torch.save_file` does.
    fn write_safetensors(path: &std::path::Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) {
        let mut header = Vec::new();
        let mut offset = 0;
        for (name, shape, data) in tensors {
            let end = offset + 4 * data.len();
            header.push(format!(
                r#""{name}":{{"dtype":"F32","shape":{shape:?},"data_offsets":[{offset},{end}]}}"#
            ));
            offset = end;
        }
        let header = format!("{{{}}}", header.join(","));
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        for (_, _, data) in tensors {
            bytes.extend(data.iter().flat_map(|v| v.to_le_bytes()));
        }
        std::fs::write(path, bytes).unwrap();
    }

    fn loads_hugging_face_names_in_pytorch_layout(device: &Device) {
        let config = MultiHeadAttentionConfig::new(8, 2)
            .with_n_kv_heads(Some(1))
            .with_biases(true);
        let random = |shape: Vec<usize>| -> Vec<f32> {
            floats(
                &Tensor::<1>::random(
                    [shape.iter().product::<usize>()],
                    Distribution::Normal(0.0, 1.0),
                    device,
                )
                .into_data(),
            )
        };
        let prefix = "model.layers.0.self_attn.";
        let shapes = [("q", 8), ("k", 4), ("v", 4), ("o", 8)];
        let mut tensors = Vec::new();
        for (name, out) in shapes {
            let input = 8; // d_model: every projection reads it or (o_proj) writes it
            tensors.push((
                format!("{prefix}{name}_proj.weight"),
                vec![out, input],
                random(vec![out, input]),
            ));
            tensors.push((
                format!("{prefix}{name}_proj.bias"),
                vec![out],
                random(vec![out]),
            ));
        }
        // An unrelated tensor of the same checkpoint is ignored.
        tensors.push((
            "model.embed_tokens.weight".into(),
            vec![3, 8],
            random(vec![3, 8]),
        ));
        let path = std::env::temp_dir().join(format!(
            "attention-{}-{:?}.safetensors",
            std::process::id(),
            std::thread::current().id()
        ));
        write_safetensors(&path, &tensors);

        let loaded = load_attention_safetensors(config.init(device), &path, prefix).unwrap();
        let weights = |i: usize| LinearWeights {
            weight: Tensor::from_data(
                burn::tensor::TensorData::new(tensors[2 * i].2.clone(), tensors[2 * i].1.clone()),
                device,
            ),
            bias: Some(Tensor::from_data(
                burn::tensor::TensorData::new(
                    tensors[2 * i + 1].2.clone(),
                    tensors[2 * i + 1].1.clone(),
                ),
                device,
            )),
        };
        let expected = config
            .init(device)
            .try_with_pytorch_weights(weights(0), weights(1), weights(2), weights(3))
            .unwrap();
        let x = Tensor::<3>::random([2, 3, 8], Distribution::Normal(0.0, 1.0), device);
        let want = floats(&expected.forward(x.clone(), None).into_data());
        // Same weights, but stored through a different path: the matmul may sum in another order
        // (outputs reach ~20, so f32 rounding is ~1e-6 there).
        assert_close(&loaded.forward(x, None).into_data(), &want, 1e-4);

        let err =
            load_attention_safetensors(config.init(device), &path, "model.layers.1.self_attn.")
                .unwrap_err();
        assert!(err.to_string().contains("has no tensor"), "{err}");

        // A bias the config does not expect is an error naming it, not dropped.
        let unbiased = MultiHeadAttentionConfig::new(8, 2).with_n_kv_heads(Some(1));
        let err = load_attention_safetensors(unbiased.init(device), &path, prefix).unwrap_err();
        assert!(err.to_string().contains("q_proj.bias"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }
    once!(loads_hugging_face_names_in_pytorch_layout);
}
