//! The pre-norm decoders of Llama's lineage: Llama 3 (Grattafiori et al., 2024), Mistral (Jiang
//! et al., 2023), Qwen2 and Qwen3 (Qwen team, 2024 and 2025), Phi-3 (Abdin et al., 2024), Gemma 2
//! and Gemma 3 (Gemma team, 2024 and 2025) and gpt-oss (OpenAI, 2025).
//!
//! One shape: RMSNorm before attention and before the feed-forward block, residuals around both,
//! a gated MLP (SwiGLU; GeGLU in Gemma), a final RMSNorm and an LM head. What sets them apart is
//! attention (read by `crate::huggingface`) and a few details here:
//! - Gemma normalises each branch's output too (`Sandwich`), stores its norm weights as offsets
//!   from 1, multiplies embeddings by `sqrt(hidden_size)` and ties the LM head; Gemma 2 soft-caps
//!   the final logits.
//! - Phi-3 fuses the gate and up projections into one `gate_up_proj`.
//! - gpt-oss replaces the MLP with routed experts.

use crate::huggingface::HuggingFaceConfig;
use serde_json::json;

use super::{MlpNames, Names, activation, attention_configs, only, required, tied};
use crate::block::{BlockConfig, BlockLayout, FeedForwardConfig};
use crate::error::ModelError;
use crate::experts::MixtureOfExpertsConfig;
use crate::mlp::MlpConfig;
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

pub(super) fn architecture(
    config: &HuggingFaceConfig,
) -> Result<(TransformerConfig, Names), ModelError> {
    let model_type = config.model_type();
    let gemma = model_type.starts_with("gemma");
    let d_model = required(config, &["hidden_size"])?;
    let vocab_size = required(config, &["vocab_size"])?;
    let eps = config.number("rms_norm_eps")?.unwrap_or(1e-6);
    only(
        config,
        "use_bidirectional_attention",
        &[json!(false)],
        "bidirectional attention is not supported (a decoder attends causally)",
    )?;
    only(
        config,
        "pretraining_tp",
        &[json!(1)],
        "must be 1 (tensor-parallel slicing changes the rounding of the products)",
    )?;
    let norm = NormConfig::new(
        d_model,
        if gemma {
            NormKind::RmsUnitOffset
        } else {
            NormKind::Rms
        },
        eps,
    );
    let d_ff = required(config, &["intermediate_size"])?;
    let feed_forward = match model_type {
        "gpt_oss" => {
            let mut experts = MixtureOfExpertsConfig::new(
                d_model,
                d_ff,
                required(config, &["num_local_experts"])?,
                required(config, &["num_experts_per_tok"])?,
            );
            if let Some(alpha) = config.number("swiglu_alpha")? {
                experts = experts.with_alpha(alpha);
            }
            if let Some(limit) = config.number("swiglu_limit")? {
                experts = experts.with_limit(limit);
            }
            FeedForwardConfig::Experts(experts)
        }
        _ => {
            let act = match gemma {
                true => activation(config, "hidden_activation", "gelu_pytorch_tanh")?,
                false => activation(config, "hidden_act", "silu")?,
            };
            let bias = config.boolean("mlp_bias")?.unwrap_or(false);
            let mlp = MlpConfig::new(d_model, d_ff, act)
                .with_gated(true)
                .with_bias(bias);
            FeedForwardConfig::Dense(mlp)
        }
    };
    let blocks = attention_configs(config)?
        .into_iter()
        .map(|attention| {
            BlockConfig::new(
                attention,
                if gemma {
                    BlockLayout::Sandwich
                } else {
                    BlockLayout::PreNorm
                },
                norm.clone(),
                feed_forward.clone(),
            )
        })
        .collect();
    let architecture = TransformerConfig::new(vocab_size, d_model, blocks)
        .with_head(OutputHead::logits(tied(config, gemma)?))
        .with_embedding_scale(gemma.then(|| (d_model as f64).sqrt()))
        .with_final_norm(Some(norm))
        .with_final_softcap(match model_type {
            "gemma2" | "gemma3_text" | "gemma3" => config.number("final_logit_softcapping")?,
            _ => None,
        })
        .with_positions(PositionIds::FromMask);
    let mlp = match model_type {
        "gpt_oss" => MlpNames::Experts { prefix: "mlp." },
        "phi3" => MlpNames::FusedGateUp {
            gate_up: "mlp.gate_up_proj",
            down: "mlp.down_proj",
        },
        _ => MlpNames::Separate {
            gate: Some("mlp.gate_proj"),
            up: "mlp.up_proj",
            down: "mlp.down_proj",
        },
    };
    let names = Names {
        root: "model.",
        embedding: "embed_tokens.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "layers.{}.",
        attention_norm: "input_layernorm",
        feed_forward_norm: if gemma {
            "pre_feedforward_layernorm"
        } else {
            "post_attention_layernorm"
        },
        post_attention_norm: gemma.then_some("post_attention_layernorm"),
        post_feed_forward_norm: gemma.then_some("post_feedforward_layernorm"),
        mlp,
        final_norm: Some("norm"),
        lm_head: Some("lm_head.weight"),
        pooler: None,
    };
    Ok((architecture, names))
}
