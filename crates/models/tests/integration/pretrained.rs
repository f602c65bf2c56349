//! Loading the repository's reference checkpoints (`crates/conformance/models`) through the public
//! API: what a broken directory, config or checkpoint gives, that records save and load, that
//! the cache gives what the whole sequence gives, and generation's inputs. The numbers against
//! transformers are the conformance runner's (`cargo xtask test-backends`).

use std::path::{Path, PathBuf};

use burn::config::Config;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};
use models::{GenerationConfig, ModelInputs, Pretrained, Transformer, WeightType, from_pretrained};
use positional::testing::{assert_close, floats, for_each_backend, once};
use serde_json::Value;

use crate::common::{checkpoint, read_safetensors, write_safetensors};

/// A copy of `family`'s checkpoint in a scratch directory of the calling test's own (the backends'
/// tests run at once), to break.
fn scratch_copy(family: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "models-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(checkpoint(family).join(file), dir.join(file)).unwrap();
    }
    dir
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(path, serde_json::to_string(&config).unwrap()).unwrap();
}

fn error_of(dir: &Path, device: &Device) -> String {
    from_pretrained(dir, device).unwrap_err().to_string()
}

/// Every way a checkpoint directory can be wrong is an error naming what is wrong.
fn broken_checkpoints_are_named_errors(device: &Device) {
    let empty = std::env::temp_dir().join(format!("models-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    assert!(error_of(&empty, device).contains("holds no config.json"));

    let dir = scratch_copy("llama3", "broken");
    let original = read_safetensors(&dir.join("model.safetensors"));
    edit_config(&dir, |c| {
        c.insert("model_type".into(), "falcon".into());
    });
    let err = error_of(&dir, device);
    assert!(err.contains("`model_type` = \"falcon\""), "{err}");
    std::fs::copy(
        checkpoint("llama3").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    edit_config(&dir, |c| {
        c.insert("hidden_act".into(), "mish".into());
    });
    let err = error_of(&dir, device);
    assert!(err.contains("`hidden_act` = \"mish\""), "{err}");
    std::fs::copy(
        checkpoint("llama3").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();

    let name = "model.layers.1.mlp.up_proj.weight";
    let mut missing = original.clone();
    missing.retain(|t| t.0 != name);
    write_safetensors(&dir.join("model.safetensors"), &missing);
    let err = error_of(&dir, device);
    assert!(err.contains(&format!("has no tensor {name:?}")), "{err}");

    let mut extra = original.clone();
    extra.push(("score.weight".into(), "F32".into(), vec![1], vec![0; 4]));
    write_safetensors(&dir.join("model.safetensors"), &extra);
    let err = error_of(&dir, device);
    assert!(
        err.contains("score.weight") && err.contains("does not use"),
        "{err}"
    );

    let mut misshapen = original.clone();
    let up = misshapen.iter_mut().find(|t| t.0 == name).unwrap();
    up.2 = vec![up.2[1], up.2[0]];
    write_safetensors(&dir.join("model.safetensors"), &misshapen);
    let err = error_of(&dir, device);
    assert!(
        err.contains(name.trim_end_matches(".weight")) && err.contains("must be [128, 64]"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // MPT without ALiBi has no positions in transformers; an `alibi` that is not a bool is
    // attention's reader's error.
    let dir = scratch_copy("mpt", "mpt-alibi");
    for (alibi, named) in [
        (
            Value::Bool(false),
            "`attn_config.alibi` = false: must be true",
        ),
        (Value::from("yes"), "`attn_config.alibi`"),
    ] {
        edit_config(&dir, |c| {
            c["attn_config"]["alibi"] = alibi;
        });
        let err = error_of(&dir, device);
        assert!(err.contains(named), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
once!(broken_checkpoints_are_named_errors);

/// Token ids past the vocabulary, prompts past the learned positions, mismatched caches.
fn bad_inputs_are_named_errors(device: &Device) {
    let model = from_pretrained(checkpoint("gpt2"), device).unwrap();
    let ids =
        |v: Vec<i64>| Tensor::<2, Int>::from_data(TensorData::new(v.clone(), [1, v.len()]), device);
    let err = model
        .try_forward(ids(vec![1, 96]), ModelInputs::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`ids` = 96: token ids must lie in 0..vocab_size (0..96)"),
        "{err}"
    );
    let err = model
        .try_forward(ids(vec![-1, 3]), ModelInputs::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`ids` = -1"), "{err}");
    // GPT-2 learned 64 positions.
    let err = model
        .try_generate(
            &[vec![1; 60]],
            &GenerationConfig::new().with_max_new_tokens(8),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`prompt length + max_new_tokens` = 68"),
        "{err}"
    );
    let err = model
        .try_forward(ids(vec![1; 65]), ModelInputs::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`offset + seq` = 65"), "{err}");
    let err = model
        .try_generate(&[vec![1, 2], vec![]], &GenerationConfig::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`prompts[1]`"), "{err}");
    // 2^20 one-token prompts and one of 2^20 tokens: 4 MB each way, 8 TB once padded.
    let mut prompts = vec![vec![1u32]; 1 << 20];
    prompts.push(vec![1; 1 << 20]);
    let long_positions = from_pretrained(checkpoint("llama3"), device).unwrap();
    let err = long_positions
        .try_generate(&prompts, &GenerationConfig::new().with_max_new_tokens(1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`prompts` = [1048577, 1048576]: a [1048577, 1048576] tensor")
            && (err.contains("cannot be allocated") || err.contains("exceeds the largest buffer")),
        "{err}"
    );
    let mut caches = model.new_caches();
    model
        .try_forward_cached(ids(vec![1, 2]), ModelInputs::new(), &mut caches[..1])
        .unwrap_err();
    model
        .try_forward_cached(ids(vec![1, 2]), ModelInputs::new(), &mut caches)
        .unwrap();
    caches[1].reset();
    let err = model
        .try_forward_cached(ids(vec![3]), ModelInputs::new(), &mut caches)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("every layer's cache must hold the same number of tokens"),
        "{err}"
    );
}
once!(bad_inputs_are_named_errors);

/// The logits of a prompt then one token at a time through the cache are those of the whole
/// sequence at once, for a family of each positional kind (RoPE with a window and sinks, learned
/// positions, ALiBi).
fn cached_decoding_matches_the_whole_sequence(device: &Device) {
    for family in ["gpt_oss", "gpt2", "bloom", "mpt"] {
        let model = from_pretrained(checkpoint(family), device).unwrap();
        let tokens: Vec<i64> = (0..12).map(|i| (i * 7 + 3) % 96).collect();
        let ids = |v: &[i64]| {
            Tensor::<2, Int>::from_data(TensorData::new(v.to_vec(), [1, v.len()]), device)
        };
        let whole = floats(&model.forward(ids(&tokens), ModelInputs::new()).into_data());
        let mut caches = model.new_caches();
        let mut stepped = floats(
            &model
                .try_forward_cached(ids(&tokens[..5]), ModelInputs::new(), &mut caches)
                .unwrap()
                .into_data(),
        );
        for t in 5..tokens.len() {
            let step = model
                .try_forward_cached(ids(&tokens[t..t + 1]), ModelInputs::new(), &mut caches)
                .unwrap();
            stepped.extend(floats(&step.into_data()));
        }
        assert_close(&TensorData::new(stepped, [whole.len()]), &whole, 1e-4);
    }
}
once!(cached_decoding_matches_the_whole_sequence);

/// Every float parameter's dtype, in the module's order.
fn dtypes(model: &Transformer) -> Vec<DType> {
    struct Dtypes(Vec<DType>);
    impl ModuleVisitor for Dtypes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.val().dtype());
        }
    }
    let mut visitor = Dtypes(Vec::new());
    model.visit(&mut visitor);
    visitor.0
}

/// Loading with a weight type stores each layer's matrices as they are read, and gives the model
/// `try_with_weights` gives after a plain load: the same dtype for every parameter and the same
/// logits, for each type and for separate projections with a tied head (llama3), fused ones
/// (phi3), GPT-2's Conv1D, experts (gpt_oss, whose routers are `Linear`s), DeepSeek's latent
/// attention and BERT's pooler. A type the device refuses is the same error either way.
fn loading_with_a_weight_type_is_narrowing_after_loading(device: &Device) {
    let ids = Tensor::<2, Int>::from_data([[3, 14, 15, 9, 2, 6]], device);
    for family in ["llama3", "phi3", "gpt2", "gpt_oss", "deepseek_v3", "bert"] {
        let dir = checkpoint(family);
        let loaded = Pretrained::load(&dir, device).unwrap().model;
        for weights in WeightType::ALL {
            let after = loaded.clone().try_with_weights(weights);
            let during = Pretrained::load_with_weights(&dir, device, weights);
            match (after, during) {
                (Err(after), Err(during)) => {
                    assert_eq!(after.to_string(), during.to_string(), "{family} {weights}");
                }
                (Ok(after), Ok(during)) => {
                    let during = during.model;
                    assert_eq!(dtypes(&during), dtypes(&after), "{family} {weights}");
                    let want = floats(&after.forward(ids.clone(), ModelInputs::new()).into_data());
                    let got = during.forward(ids.clone(), ModelInputs::new()).into_data();
                    assert_close(&got, &want, 1e-6);
                }
                (after, during) => panic!(
                    "{family} {weights}: after loading {:?}, while loading {:?}",
                    after.err(),
                    during.err()
                ),
            }
        }
    }
}
// Not WGPU: loading is the same code on every backend; WGPU's f16 and bf16 products are
// `weight_type::tests::narrow_matrices_compute_as_their_rounded_values`.
for_each_backend!(loading_with_a_weight_type_is_narrowing_after_loading: ndarray, flex, tch);

/// A left-padded row gives, at its tokens, the logits of its prompt alone: in every decoder whose
/// positions count tokens (`PositionIds::FromMask`, derived from the padding mask), Llama 4's
/// chunks (8) and the temperature of its NoPE layers (floor_scale 4) included, whose prompt of
/// 10 tokens crosses a chunk and three temperatures.
fn a_padded_row_gives_the_logits_of_its_prompt_alone(device: &Device) {
    let prompt = [5i64, 17, 33, 2, 40, 41, 7, 8, 9, 10];
    let (pad, len) = (3, prompt.len());
    let mut families = Vec::new();
    for entry in std::fs::read_dir(checkpoint("")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("config.json").is_file() {
            continue;
        }
        let model = Pretrained::load(&dir, device).unwrap().model;
        if model.config().positions != models::PositionIds::FromMask
            || !model.config().head.is_logits()
        {
            continue;
        }
        let alone = model.forward(
            Tensor::<2, Int>::from_data(TensorData::new(prompt.to_vec(), [1, len]), device),
            ModelInputs::new(),
        );
        let longer: Vec<i64> = (11..11 + (pad + len) as i64).collect();
        let padded: Vec<i64> = [0; 3].into_iter().chain(prompt).collect();
        let ids = Tensor::<2, Int>::from_data(
            TensorData::new([longer, padded].concat(), [2, pad + len]),
            device,
        );
        let mask: Vec<bool> = (0..2 * (pad + len))
            .map(|i| i >= pad + len && i < pad + len + pad)
            .collect();
        let mask = Tensor::<2, Bool>::from_data(TensorData::new(mask, [2, pad + len]), device);
        let batch = model.forward(ids, ModelInputs::new().with_padding_mask(mask));
        let row = batch.narrow(0, 1, 1).narrow(1, pad, len);
        let family = dir.file_name().unwrap().to_string_lossy().into_owned();
        let (got, want) = (floats(&row.into_data()), floats(&alone.into_data()));
        let largest = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            largest < 1e-4,
            "{family}: the padded row differs by {largest}"
        );
        families.push(family);
    }
    assert!(families.contains(&"llama4_text".to_owned()), "{families:?}");
    assert!(families.len() >= 15, "{families:?}");
}
once!(a_padded_row_gives_the_logits_of_its_prompt_alone);

/// A left-padded batch generates for each row what that row generates alone.
fn batched_generation_matches_each_prompt_alone(device: &Device) {
    // Qwen3.5-MoE: Gated DeltaNet states of a left-padded batch; Gemma 4: layers over other
    // layers' keys.
    for family in ["llama3", "gemma2", "bloom", "qwen3_5_moe", "gemma4"] {
        let model = from_pretrained(checkpoint(family), device).unwrap();
        let prompts = vec![vec![5u32, 17, 33, 2, 40, 41], vec![7, 8]];
        let config = GenerationConfig::new().with_max_new_tokens(5);
        let together = model.try_generate(&prompts, &config).unwrap();
        for (prompt, got) in prompts.iter().zip(&together) {
            let alone = model
                .try_generate(std::slice::from_ref(prompt), &config)
                .unwrap();
            assert_eq!(&alone[0], got, "{family}");
        }
        // Sampling: the seed decides.
        let sampled = GenerationConfig::new()
            .with_max_new_tokens(6)
            .with_temperature(1.0)
            .with_top_k(Some(20))
            .with_top_p(Some(0.9));
        let draw = |seed| {
            model
                .try_generate(&prompts, &sampled.clone().with_seed(seed))
                .unwrap()
        };
        assert_eq!(draw(1), draw(1));
        // Stop tokens end a row and are kept.
        let first = together[0][0];
        let stopped = model
            .try_generate(&prompts[..1], &config.clone().with_stop_tokens(vec![first]))
            .unwrap();
        assert_eq!(stopped[0], vec![first]);
    }
}
once!(batched_generation_matches_each_prompt_alone);

/// A loaded model saved as a Burn record and loaded into a fresh model of the same architecture
/// gives the same outputs; an encoder's padding rows do not change the other rows.
fn records_round_trip(device: &Device) {
    for family in ["gemma3", "bert", "t5", "phi3"] {
        let dir = checkpoint(family);
        let model = from_pretrained(&dir, device).unwrap();
        let config = models::huggingface::HuggingFaceConfig::from_dir(&dir).unwrap();
        let mut architecture = models::architecture(&config).unwrap();
        architecture.pooler = model.pooler.is_some();
        let file = std::env::temp_dir().join(format!(
            "models-record-{family}-{}-{:?}.bpk",
            std::process::id(),
            std::thread::current().id()
        ));
        let config_file = file.with_extension("json");
        // The architecture as a Burn config file, the weights as a Burn record.
        architecture.save(&config_file).unwrap();
        model.clone().save_file(&file).unwrap();
        let loaded = models::TransformerConfig::load(&config_file)
            .unwrap()
            .try_init(device)
            .unwrap()
            .try_load_file(&file)
            .unwrap();
        let ids = Tensor::<2, Int>::from_data(
            TensorData::new(vec![3i64, 9, 27, 81, 50, 11], [2, 3]),
            device,
        );
        let padding = Tensor::<2, Bool>::from_data(
            TensorData::new(vec![false, false, false, false, false, true], [2, 3]),
            device,
        );
        let inputs = ModelInputs::new().with_padding_mask(padding);
        let want = floats(&model.forward(ids.clone(), inputs.clone()).into_data());
        // The weights come back bit for bit.
        let bits = |t: Tensor<2>| -> Vec<u32> {
            floats(&t.into_data()).iter().map(|v| v.to_bits()).collect()
        };
        assert_eq!(
            bits(loaded.embedding.weight.val()),
            bits(model.embedding.weight.val())
        );
        for (a, b) in loaded.blocks.iter().zip(&model.blocks) {
            assert_eq!(
                bits(a.attention.multi_head().unwrap().query.weight.val()),
                bits(b.attention.multi_head().unwrap().query.weight.val())
            );
        }
        // Loaded weights are PyTorch's transposed views, reloaded ones contiguous: the products
        // accumulate in another order, some ulps apart (most on WGPU).
        assert_close(&loaded.forward(ids, inputs).into_data(), &want, 1e-4);
        drop(loaded);
        std::fs::remove_file(&file).ok();
        std::fs::remove_file(&config_file).ok();
    }
}
once!(records_round_trip);

/// Config fields of the wrong length or type that used to be read as something else: Gemma 2's
/// `layer_types` with an entry per layer too many (ignored), Gemma 3's per-type
/// `rope_parameters` with a number for a layer type (read as a shared dict of defaults, wrong
/// logits), and a `num_hidden_layers` far past the layers the file holds (built them all before
/// the first missing tensor, or aborted).
fn config_fields_of_the_wrong_length_or_type_are_named(device: &Device) {
    let dir = scratch_copy("gemma2", "layer-types");
    for types in [
        vec!["sliding_attention", "full_attention", "sliding_attention"],
        vec!["sliding_attention"],
    ] {
        edit_config(&dir, |c| {
            c.insert("layer_types".into(), types.clone().into());
        });
        let err = error_of(&dir, device);
        assert!(
            err.contains(&format!("`layer_types` = {}", types.len()))
                && err.contains("one type per layer (num_hidden_layers = 2)"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch_copy("gemma3", "rope-types");
    for (layer_type, value) in [
        ("full_attention", Value::from(5)),
        ("sliding_attention", Value::from("x")),
    ] {
        std::fs::copy(
            checkpoint("gemma3").join("config.json"),
            dir.join("config.json"),
        )
        .unwrap();
        edit_config(&dir, |c| {
            c["rope_parameters"][layer_type] = value.clone();
        });
        let err = error_of(&dir, device);
        assert!(
            err.contains("`rope_parameters`")
                && err.contains("must hold an object for each layer type"),
            "{err}"
        );
    }
    // The same with the other entry gone (Gemma 3's config class gives the sliding layers
    // their default dict, and `full_attention` is still not one).
    edit_config(&dir, |c| {
        c["rope_parameters"] = serde_json::json!({"full_attention": 5, "rope_theta": 10000.0});
    });
    let err = error_of(&dir, device);
    assert!(
        err.contains("`rope_parameters` = Number(5): must hold an object for each layer type"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch_copy("llama3", "layers");
    for layers in [3u64, 10_000_000, 1 << 40] {
        edit_config(&dir, |c| {
            c.insert("num_hidden_layers".into(), layers.into());
        });
        let err = error_of(&dir, device);
        assert!(
            err.contains(&format!("`num_hidden_layers` = {layers}"))
                && err.contains("holds the attention of 2 layers"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
once!(config_fields_of_the_wrong_length_or_type_are_named);

/// A left-padded batch decoded step by step, each step with its own padding mask and no
/// positions, gives the logits of the whole padded pass: the positions the model derives from
/// the masks continue from what each row of the cache has seen (they restarted at 0 per step,
/// 1.4 off in llama3's logits). The same when later steps pass no mask at all, and after a
/// truncation (which Qwen3.5's recurrent state refuses by name).
fn padded_batches_decode_step_by_step_as_a_whole(device: &Device) {
    // Gemma 4: layers over other layers' keys (through caches that only count).
    let every = ["llama3", "gpt2", "bloom", "mistral", "qwen3_5", "gemma4"];
    // On WGPU, where lavapipe compiles each family's kernels anew, those with paths of their own
    // there (ALiBi's kernel, the recurrent state, the shared keys); the positions the others
    // derive are the same computation on every backend.
    let families: &[&str] = match device.as_dispatch() {
        #[cfg(feature = "wgpu")]
        burn::backend::DispatchDevice::Cube(_) => &["bloom", "qwen3_5", "gemma4"],
        _ => &every,
    };
    for &family in families {
        let model = from_pretrained(checkpoint(family), device).unwrap();
        let tokens: [i64; 12] = [5, 9, 3, 7, 11, 2, 4, 6, 8, 1, 10, 12];
        let (batch, seq, padded) = (2, 6, 3);
        let ids =
            Tensor::<2, Int>::from_data(TensorData::new(tokens.to_vec(), [batch, seq]), device);
        let mask: Vec<bool> = (0..batch * seq).map(|i| i < padded).collect();
        let mask = Tensor::<2, Bool>::from_data(TensorData::new(mask, [batch, seq]), device);
        let whole = model.forward(
            ids.clone(),
            ModelInputs::new().with_padding_mask(mask.clone()),
        );
        // Row 0's real tokens and all of row 1's.
        let real = |logits: Tensor<3>| {
            let row = |r: usize, from: usize| {
                floats(
                    &logits
                        .clone()
                        .narrow(0, r, 1)
                        .narrow(1, from, seq - from)
                        .into_data(),
                )
            };
            [row(0, padded), row(1, 0)].concat()
        };
        for masked_steps in [true, false] {
            let mut caches = model.new_caches();
            let mut steps = Vec::new();
            for (start, len) in [(0, 4), (4, 1), (5, 1)] {
                let mut inputs = ModelInputs::new();
                if start == 0 || masked_steps {
                    inputs = inputs.with_padding_mask(mask.clone().narrow(1, start, len));
                }
                let step = model
                    .try_forward_cached(ids.clone().narrow(1, start, len), inputs, &mut caches)
                    .unwrap();
                steps.push(step);
            }
            let stepped = Tensor::cat(steps, 1);
            let got = real(stepped);
            assert_close(
                &TensorData::new(got.clone(), [got.len()]),
                &real(whole.clone()),
                1e-4,
            );
            // A Gated DeltaNet state cannot go back (Qwen3.5's first layer).
            if model.blocks[0].attention.gated_delta_net().is_some() {
                let error = caches[0].try_truncate(4).unwrap_err();
                assert!(error.to_string().contains("`len`"), "{error}");
                continue;
            }
            // Truncated back to the prompt, the next steps continue from it again.
            for cache in &mut caches {
                cache.truncate(4);
            }
            let step = model
                .try_forward_cached(ids.clone().narrow(1, 4, 2), ModelInputs::new(), &mut caches)
                .unwrap();
            let want = floats(&whole.clone().narrow(1, 4, 2).into_data());
            assert_close(&step.into_data(), &want, 1e-4);
        }
    }
}
for_each_backend!(padded_batches_decode_step_by_step_as_a_whole);

/// A directory without `modules.json` is a plain checkpoint: sentence-transformers embeds it with
/// mean pooling and no normalisation, and so does `SentenceEmbedder` (it normalised). With a
/// `Normalize` module the embeddings have unit length.
fn sentence_embeddings_follow_the_modules_or_their_default(device: &Device) {
    let dir = scratch_copy("bert", "sentence");
    // A word-level tokenizer over the checkpoint's 96 ids: `[CLS]` 1, `[SEP]` 2, `w3` .. `w95`.
    let mut vocab = serde_json::Map::new();
    vocab.insert("[PAD]".into(), 0.into());
    vocab.insert("[CLS]".into(), 1.into());
    vocab.insert("[SEP]".into(), 2.into());
    vocab.insert("[UNK]".into(), 3.into());
    for id in 4..96 {
        vocab.insert(format!("w{id}"), id.into());
    }
    let tokenizer = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}
            }
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let texts = ["w5 w9 w17", "w40 w41", "w90"];
    let norms = |embeddings: Tensor<2>| -> Vec<f32> {
        floats(&embeddings.powi_scalar(2).sum_dim(1).sqrt().into_data())
    };

    let plain = models::SentenceEmbedder::from_pretrained(&dir, device).unwrap();
    assert!(!plain.normalizes());
    assert_eq!(plain.pooling(), "mean pooling, not normalised");
    let embeddings = plain.try_embed(&texts).unwrap();
    // Mean pooling of the encoder's states, by hand.
    let ids = plain.tokenize(texts[0]).unwrap();
    assert_eq!(ids, vec![1, 5, 9, 17, 2]);
    let hidden = plain.model().forward(
        Tensor::<2, Int>::from_data(
            TensorData::new(ids.iter().map(|&i| i as i64).collect::<Vec<_>>(), [1, 5]),
            device,
        ),
        ModelInputs::new(),
    );
    let mean = hidden.mean_dim(1).reshape([1, 64]);
    assert_close(
        &embeddings.clone().narrow(0, 0, 1).into_data(),
        &floats(&mean.into_data()),
        1e-5,
    );
    assert!(norms(embeddings).iter().any(|n| (n - 1.0).abs() > 1e-3));

    std::fs::write(
        dir.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#,
    )
    .unwrap();
    let normalised = models::SentenceEmbedder::from_pretrained(&dir, device).unwrap();
    assert_eq!(normalised.pooling(), "mean pooling, L2-normalised");
    for norm in norms(normalised.try_embed(&texts).unwrap()) {
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    // Ids past the vocabulary (u32::MAX is past i32, flex's integer type) are a named error.
    for id in [96u32, i32::MAX as u32 + 1, u32::MAX] {
        let err = normalised
            .try_embed_ids(&[vec![1, id, 2]])
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("`ids` = \"{id} (text 0)\"")), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
once!(sentence_embeddings_follow_the_modules_or_their_default);

/// A released Qwen3.5 or Gemma 4 checkpoint is its multimodal model
/// (`Qwen3_5ForConditionalGeneration`, `Gemma4ForConditionalGeneration`: `model_type` `qwen3_5`
/// or `gemma4` with a `text_config`): the text model under `model.language_model.`, beside a
/// vision tower (and Qwen3.5's multi-token-prediction head, Gemma 4's audio tower and
/// embedders). Each family's reference checkpoint rewritten that way loads as its text model (the
/// other models' tensors not read) and gives the same logits; a tensor outside all of them is
/// still refused.
fn vision_language_checkpoints_load_as_their_text_model(device: &Device) {
    let qwen = ["model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight"];
    let gemma = [
        "model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight",
        "model.embed_audio.embedding_projection.weight",
    ];
    for (family, model_type, others) in [
        ("qwen3_5", "qwen3_5", qwen),
        ("qwen3_5_moe", "qwen3_5_moe", qwen),
        ("gemma4", "gemma4", gemma),
    ] {
        let dir = scratch_copy(family, &format!("vl-{family}"));
        let text = from_pretrained(&dir, device).unwrap();
        let mut tensors: Vec<_> = read_safetensors(&dir.join("model.safetensors"))
            .into_iter()
            .map(|(name, dtype, shape, bytes)| {
                let name = match name.strip_prefix("model.") {
                    Some(rest) => format!("model.language_model.{rest}"),
                    None => name,
                };
                (name, dtype, shape, bytes)
            })
            .collect();
        let extra = |name: &str| (name.to_owned(), "F32".to_owned(), vec![2], vec![0u8; 8]);
        tensors.extend(others.map(extra));
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        write_safetensors(&dir.join("model.safetensors"), &tensors);
        edit_config(&dir, |config| {
            let mut text_config = std::mem::take(config);
            let tied = text_config.remove("tie_word_embeddings").unwrap();
            config.insert("model_type".into(), serde_json::json!(model_type));
            config.insert("tie_word_embeddings".into(), tied);
            config.insert("vision_config".into(), serde_json::json!({"depth": 1}));
            config.insert("text_config".into(), Value::Object(text_config));
        });
        let vision_language = from_pretrained(&dir, device).unwrap_or_else(|e| panic!("{e}"));
        let ids = Tensor::<2, Int>::from_data(
            TensorData::new(
                (0..9).map(|i| (i * 11 + 3) % 96).collect::<Vec<i64>>(),
                [1, 9],
            ),
            device,
        );
        let want = floats(&text.forward(ids.clone(), ModelInputs::new()).into_data());
        let got = vision_language.forward(ids, ModelInputs::new());
        assert_close(&got.into_data(), &want, 1e-6);
        // A tensor no model of the checkpoint has is refused by name.
        tensors.push(extra("model.language_model.unexpected.weight"));
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        write_safetensors(&dir.join("model.safetensors"), &tensors);
        let error = error_of(&dir, device);
        assert!(error.contains("unexpected"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
once!(vision_language_checkpoints_load_as_their_text_model);
