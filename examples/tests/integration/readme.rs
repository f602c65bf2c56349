//! The README's code examples, compiled: each `rust` block of README.md stands here verbatim in a
//! function of its own (after the lines that make the values it uses), and
//! `the_readme_blocks_are_the_ones_compiled_here` holds the README to this file. They are built,
//! not run: they read checkpoints the test machine does not have.
#![allow(unused, clippy::all)]

use burn::tensor::{Bool, Device, Int, Tensor};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

#[rustfmt::skip]
fn positional_encodings() -> Result {
    let setup = Device::default();
    let embeddings = Tensor::<3>::zeros([1, 4, 768], &setup);
    let offset = 0;
    let wpe = Tensor::<2>::zeros([1024, 768], &setup);
    let q = Tensor::<4>::zeros([1, 4, 4, 128], &setup);
    let k = Tensor::<4>::zeros([1, 2, 4, 128], &setup);
    let (past_len, q_len, n_heads) = (0, 4, 4);
    let position_ids = Tensor::<2, Int>::zeros([1, 4], &setup);
    let scores = Tensor::<4>::zeros([1, 4, 4, 4], &setup);
    // README:
    use burn::tensor::Device;
    use models::huggingface::HuggingFaceConfig;
    use positional::{AlibiConfig, LearnedPositionalEmbeddingConfig, RopeScaling,
                     RotaryEncodingConfig, SinusoidalEncodingConfig, SinusoidalLayout};

    let device = Device::default();

    // Absolute positions: added to token embeddings [batch, seq, d_model] before the first block.
    let sinusoids = SinusoidalEncodingConfig::new(768)
        .with_layout(SinusoidalLayout::Tensor2Tensor)               // default: Interleaved
        .init(&device);
    let x = sinusoids.forward(embeddings.clone(), offset);          // any start: no upper bound
    let gpt2 = LearnedPositionalEmbeddingConfig::new(1024, 768).try_init_with_weight(wpe)?;
    let x = gpt2.try_forward(embeddings, 0)?;                       // Err past position 1023

    // RoPE on q [batch, heads, seq, head_dim] and k [batch, kv_heads, seq, head_dim].
    let rope = models::huggingface::rope_config(&HuggingFaceConfig::from_dir("path/to/model")?)?
        .init(&device);                                             // theta, partial rotary, layout, scaling
    let rope = RotaryEncodingConfig::new(128)
        .with_scaling(Some(RopeScaling::yarn(4.0, 32_768)))
        .init(&device);
    let (q, k) = rope.forward(q, k, past_len);                      // positions past_len..
    let (q, k) = rope.forward(q, k, position_ids);                  // or per token: Int [batch, seq]

    // ALiBi: a bias [1, heads, q_len, k_len] for attention scores, queries at past_len..
    let alibi = AlibiConfig::new(n_heads).init(&device);
    let scores = scores + alibi.bias(past_len, q_len, 0, past_len + q_len);
    Ok(())
}

#[rustfmt::skip]
fn attention_layer() -> Result {
    let device = Device::default();
    let rope_config = positional::RotaryEncodingConfig::new(128);
    let weights = |out: usize, input: usize| attention::LinearWeights {
        weight: Tensor::zeros([out, input], &device),
        bias: None,
    };
    let (q, k, v, o) = (weights(4096, 4096), weights(1024, 4096), weights(1024, 4096), weights(4096, 4096));
    let x = Tensor::<3>::zeros([1, 4, 4096], &device);
    let padding_mask = Tensor::<2, Bool>::empty([1, 4], &device);
    let (prompt, last_token) = (x.clone(), x.clone().narrow(1, 3, 1));
    // README:
    use attention::{KvCache, MultiHeadAttentionConfig, PositionalScheme};

    let attention = MultiHeadAttentionConfig::new(4096, 32)
        .with_n_kv_heads(Some(8))                                   // GQA; Some(1) is MQA, None MHA
        .with_causal(true)
        .with_positional(PositionalScheme::Rope(rope_config))      // or Alibi { max_bias: 8.0 }, or None
        .init(&device)
        .try_with_pytorch_weights(q, k, v, o)?;                     // LinearWeights { weight: [out, in], bias }
    let y = attention.forward(x, Some(padding_mask));               // mask [batch, seq], true = padding

    let mut cache = KvCache::new();                                 // positions go on from cache.len()
    let prefill = attention.forward_cached(prompt, None, &mut cache);
    let next = attention.forward_cached(last_token, None, &mut cache);
    Ok(())
}

#[rustfmt::skip]
fn hugging_face_layer() -> Result {
    let device = Device::default();
    let padding_mask = Tensor::<2, Bool>::empty([1, 4], &device);
    let position_ids = Tensor::<2, Int>::zeros([1, 4], &device);
    let hidden_states = Tensor::<3>::zeros([1, 4, 1024], &device);
    let mut cache = attention::KvCache::new();
    // README:
    use attention::AttentionInputs;
    use models::huggingface;

    let layer = huggingface::load_layer("path/to/Qwen3-0.6B", 0, &device)?; // config.json + safetensors
    // or huggingface::load_attention_safetensors(attention, "model.safetensors", "model.layers.0.self_attn.")?
    let inputs = AttentionInputs::new()
        .with_padding_mask(padding_mask)                            // [batch, seq], true = padding
        .with_positions(position_ids);                              // [batch, seq], cumsum(mask) - 1
    let y = layer.try_forward_cached(hidden_states, inputs, &mut cache)?; // or try_forward(x, inputs)
    Ok(())
}

#[rustfmt::skip]
fn whole_models() -> Result {
    let device = Device::default();
    let ids = Tensor::<2, Int>::zeros([1, 4], &device);
    let padding_mask = Tensor::<2, Bool>::empty([1, 4], &device);
    let (eos, prompt_a, prompt_b) = (2u32, vec![1u32, 15, 27], vec![1u32, 8]);
    // README:
    use models::{GenerationConfig, ModelInputs};

    let model = models::from_pretrained("path/to/Qwen3-0.6B", &device)?;
    let logits = model.try_forward(ids, ModelInputs::new()             // ids: Int [batch, seq]
        .with_padding_mask(padding_mask))?;                            // [batch, seq, vocab]
    let config = GenerationConfig::new()
        .with_max_new_tokens(64)
        .with_temperature(0.7).with_top_k(Some(50)).with_top_p(Some(0.9)).with_seed(1)
        .with_stop_tokens(vec![eos]);
    let new_tokens = model.try_generate(&[prompt_a, prompt_b], &config)?; // left-padded batch
    Ok(())
}

#[rustfmt::skip]
fn context_scaling() -> Result {
    let device = Device::default();
    let ids = Tensor::<2, Int>::zeros([1, 4], &device);
    // README:
    use models::{ModelInputs, perplexity, try_token_log_probs};
    use positional::RopeScaling;

    // Trained for 32,768 tokens, read at four times that with YaRN; the weights are kept.
    let model = models::from_pretrained("path/to/Qwen3-0.6B", &device)?
        .try_with_rope_scaling(Some(RopeScaling::yarn(4.0, 32_768)))?;
    let [_, seq] = ids.dims();                                          // ids: Int [batch, seq]
    let logits = model.try_forward(ids.clone().narrow(1, 0, seq - 1), ModelInputs::new())?;
    let log_probs = try_token_log_probs(logits, ids.narrow(1, 1, seq - 1))?; // [batch, seq - 1]
    let ppl = perplexity(log_probs.into_data().iter::<f64>());           // Option<f64>
    Ok(())
}

/// The `rust` blocks of README.md, in order.
fn readme_blocks() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    readme
        .split("```rust\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn the_readme_blocks_are_the_ones_compiled_here() {
    let this = include_str!("readme.rs");
    let blocks = readme_blocks();
    assert_eq!(
        blocks.len(),
        5,
        "a README block was added or removed: compile it here"
    );
    for block in blocks {
        let indented: String = block
            .lines()
            .map(|line| match line.is_empty() {
                true => "\n".to_owned(),
                false => format!("    {line}\n"),
            })
            .collect();
        assert!(this.contains(&indented), "not compiled here:\n{block}");
    }
    // The functions are referred to, so that they are compiled (and type-checked) as they are.
    let _: [fn() -> Result; 5] = [
        positional_encodings,
        attention_layer,
        hugging_face_layer,
        context_scaling,
        whole_models,
    ];
}
