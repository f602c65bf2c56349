//! Runs one case on one device and compares every expected field.

use std::collections::BTreeSet;

use attention::{
    AttentionError, AttentionInputs, KvCache, LinearWeights, MultiHeadAttentionConfig,
    PositionalScheme,
};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use positional::{
    AlibiConfig, LearnedPositionalEmbeddingConfig, MultiAxisMode, MultiAxisRopeConfig,
    PositionalError, RopeLayout, RotaryEncodingConfig, SinusoidalEncodingConfig, SinusoidalLayout,
    XposConfig,
};
use serde_json::{Map, Value};

use crate::case::{Case, CaseTensor};

/// How one case went on one backend.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every expected field is within tolerance (or the expected error came).
    Pass {
        /// The largest `|got - want|` over every compared value.
        max_error: f64,
    },
    /// A field is out of tolerance, the module failed, or the case could not be read.
    Fail(String),
}

impl From<Result<f64, String>> for Outcome {
    /// A check's largest error, or why it failed.
    fn from(result: Result<f64, String>) -> Self {
        match result {
            Ok(max_error) => Outcome::Pass { max_error },
            Err(message) => Outcome::Fail(message),
        }
    }
}

/// Why a run stopped before comparing.
enum Stop {
    /// A crate returned its error: right for `expect_error` cases, a failure otherwise.
    Crate(String),
    /// The case file is not what the schema says.
    Case(String),
}

impl From<PositionalError> for Stop {
    fn from(error: PositionalError) -> Self {
        Self::Crate(error.to_string())
    }
}

impl From<models::ModelError> for Stop {
    fn from(error: models::ModelError) -> Self {
        Self::Crate(error.to_string())
    }
}

impl From<AttentionError> for Stop {
    fn from(error: AttentionError) -> Self {
        Self::Crate(error.to_string())
    }
}

impl From<&str> for Stop {
    fn from(message: &str) -> Self {
        Self::Case(message.into())
    }
}

impl From<String> for Stop {
    fn from(message: String) -> Self {
        Self::Case(message)
    }
}

/// Runs `case` on `device` (autodiff is enabled on it where gradients are expected).
pub fn run_case(case: &Case, device: &Device) -> Outcome {
    if case.json.get("schema").and_then(Value::as_u64) != Some(1) {
        return Outcome::Fail(format!("unknown schema {:?}", case.json.get("schema")));
    }
    let mut checker = Checker::new(case);
    let result = match case.kind() {
        "sinusoidal" => run_sinusoidal(case, device, &mut checker),
        "learned" => run_learned(case, device, &mut checker),
        "rope" => run_rope(case, device, &mut checker),
        "alibi" => run_alibi(case, device, &mut checker),
        "attention" => run_attention(case, device, &mut checker),
        "xpos" => run_xpos(case, device, &mut checker),
        "rope_nd" => run_rope_nd(case, device, &mut checker),
        "relative_xl" => run_relative_xl(case, device, &mut checker),
        other => return Outcome::Fail(format!("unknown kind {other:?}")),
    };
    match (result, case.expect_error()) {
        (Ok(()), true) => Outcome::Fail("expected an error, got outputs".into()),
        (Ok(()), false) => checker.finish(),
        (Err(Stop::Crate(_)), true) => Outcome::Pass { max_error: 0.0 },
        (Err(Stop::Crate(error)), false) => Outcome::Fail(format!("error: {error}")),
        (Err(Stop::Case(message)), _) => Outcome::Fail(format!("case file: {message}")),
    }
}

/// Compares outputs with `expected`, remembering which fields it saw.
struct Checker<'a> {
    case: &'a Case,
    expected: Map<String, Value>,
    compared: BTreeSet<String>,
    max_error: f64,
    failures: Vec<String>,
}

impl<'a> Checker<'a> {
    fn new(case: &'a Case) -> Self {
        Self {
            case,
            expected: case.expected(),
            compared: BTreeSet::new(),
            max_error: 0.0,
            failures: Vec::new(),
        }
    }

    fn tensor(&mut self, field: &str, got: TensorData) {
        self.tensor_rows(field, field, got, None);
    }

    /// Compares `got` with expected `field`, naming the comparison `label` in messages.
    fn labelled(&mut self, label: &str, field: &str, got: TensorData) {
        self.tensor_rows(label, field, got, None);
    }

    /// Compares `got` with expected `field`, only at the rows (leading dimensions) where
    /// `rows[i]` is true; `label` names the comparison in messages.
    fn tensor_rows(&mut self, label: &str, field: &str, got: TensorData, rows: Option<&[bool]>) {
        let Some(want) = self.expected.get(field) else {
            return;
        };
        self.compared.insert(field.into());
        let want = match crate::case::tensor(want) {
            Ok(want) => want,
            Err(e) => return self.failures.push(format!("expected `{field}`: {e}")),
        };
        let shape = got.shape().to_vec();
        if shape != want.shape {
            return self.failures.push(format!(
                "`{field}` has shape {shape:?}, expected {:?}",
                want.shape
            ));
        }
        let got: Vec<f64> = got
            .convert::<f64>()
            .try_to_vec::<f64>()
            .expect("float data");
        match rows {
            None => self.values(label, &got, &want.data),
            Some(rows) => {
                let width = got.len() / rows.len().max(1);
                let keep = |data: &[f64]| -> Vec<f64> {
                    data.chunks(width)
                        .zip(rows)
                        .filter(|(_, keep)| **keep)
                        .flat_map(|(row, _)| row.to_vec())
                        .collect()
                };
                self.values(label, &keep(&got), &keep(&want.data));
            }
        }
    }

    fn scalar(&mut self, field: &str, got: f64) {
        let Some(want) = self.expected.get(field) else {
            return;
        };
        self.compared.insert(field.into());
        match want.as_f64() {
            Some(want) => self.values(field, &[got], &[want]),
            None => self
                .failures
                .push(format!("expected `{field}` is not a number")),
        }
    }

    fn values(&mut self, field: &str, got: &[f64], want: &[f64]) {
        let tolerance = self.case.tolerance(field);
        let mut worst: Option<(usize, f64, f64)> = None;
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let error = (g - w).abs();
            let allowed = tolerance.atol + tolerance.rtol * w.abs();
            if !error.is_nan() {
                self.max_error = self.max_error.max(error);
            }
            let excess = if error.is_nan() {
                f64::INFINITY
            } else {
                error / allowed.max(f64::MIN_POSITIVE)
            };
            if (error.is_nan() || error > allowed) && worst.is_none_or(|(_, e, _)| excess > e) {
                worst = Some((i, excess, error));
            }
        }
        if let Some((i, _, error)) = worst {
            self.failures.push(format!(
                "`{field}` (compared element {i}) = {} vs {} (|err| {error:.3e}, allowed {:.1e} + {:.1e}*|want|)",
                got[i], want[i], tolerance.atol, tolerance.rtol
            ));
        }
    }

    fn finish(self) -> Outcome {
        let mut failures = self.failures;
        for field in self.expected.keys() {
            if !self.compared.contains(field) {
                failures.push(format!(
                    "expected field `{field}` is not produced by this kind"
                ));
            }
        }
        if failures.is_empty() {
            Outcome::Pass {
                max_error: self.max_error,
            }
        } else {
            Outcome::Fail(failures.join("; "))
        }
    }
}

fn float<const D: usize>(tensor: &CaseTensor, device: &Device) -> Result<Tensor<D>, String> {
    if tensor.shape.len() != D {
        return Err(format!(
            "rank {} where {D} was expected",
            tensor.shape.len()
        ));
    }
    let data: Vec<f32> = tensor.data.iter().map(|v| *v as f32).collect();
    Ok(Tensor::from_data(
        TensorData::new(data, tensor.shape.clone()),
        device,
    ))
}

fn int<const D: usize>(tensor: &CaseTensor, device: &Device) -> Result<Tensor<D, Int>, String> {
    if tensor.shape.len() != D {
        return Err(format!(
            "rank {} where {D} was expected",
            tensor.shape.len()
        ));
    }
    let data: Vec<i64> = tensor.data.iter().map(|v| *v as i64).collect();
    Ok(Tensor::from_data(
        TensorData::new(data, tensor.shape.clone()),
        device,
    ))
}

fn config_usize(config: &Map<String, Value>, field: &str) -> Result<usize, String> {
    config
        .get(field)
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| format!("config `{field}` must be a non-negative integer"))
}

fn config_f64(config: &Map<String, Value>, field: &str, default: f64) -> Result<f64, String> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_f64()
            .ok_or_else(|| format!("config `{field}` must be a number")),
    }
}

fn config_str<'c>(config: &'c Map<String, Value>, field: &str) -> Result<&'c str, String> {
    config
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("config `{field}` must be a string"))
}

fn run_sinusoidal(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = case.config();
    let layout = match config_str(config, "layout")? {
        "interleaved" => SinusoidalLayout::Interleaved,
        "tensor2tensor" => SinusoidalLayout::Tensor2Tensor,
        other => return Err(Stop::Case(format!("unknown sinusoidal layout {other:?}"))),
    };
    let encoding = SinusoidalEncodingConfig::new(config_usize(config, "d_model")?)
        .with_max_timescale(config_f64(config, "base", 10_000.0)?)
        .with_layout(layout)
        .try_init(device)?;
    let x = float::<3>(&case.tensor("x")?, device)?;
    let offset = case.usize("offset")?;
    let seq = x.dims()[1];
    let y = encoding.try_forward(x, offset)?;
    check.tensor("table", encoding.table(offset..offset + seq).into_data());
    check.tensor("y", y.into_data());
    Ok(())
}

fn run_learned(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = case.config();
    let embedding = LearnedPositionalEmbeddingConfig::new(
        config_usize(config, "max_len")?,
        config_usize(config, "d_model")?,
    )
    .try_init_with_weight(float::<2>(&case.tensor("weight")?, device)?)?;
    let y = embedding.try_forward(
        float::<3>(&case.tensor("x")?, device)?,
        case.usize("offset")?,
    )?;
    check.tensor("y", y.into_data());
    Ok(())
}

fn rope_layout(config: &Map<String, Value>) -> Result<RopeLayout, Stop> {
    match config_str(config, "layout")? {
        "half" => Ok(RopeLayout::Half),
        "interleaved" => Ok(RopeLayout::Interleaved),
        other => Err(Stop::Case(format!("unknown rope layout {other:?}"))),
    }
}

fn rope_config(config: &Map<String, Value>) -> Result<RotaryEncodingConfig, Stop> {
    let head_dim = config_usize(config, "head_dim")?;
    let layout = rope_layout(config)?;
    // generate.py's default when a case gives none.
    let max_position_embeddings = match config.get("max_position_embeddings") {
        None | Some(Value::Null) => 2048,
        Some(_) => config_usize(config, "max_position_embeddings")?,
    };
    let scaling = models::huggingface::rope_scaling(
        config.get("scaling").unwrap_or(&Value::Null),
        max_position_embeddings,
    )?;
    let rotary_dim = match config.get("rotary_dim") {
        None | Some(Value::Null) => None,
        Some(_) => Some(config_usize(config, "rotary_dim")?),
    };
    let config = RotaryEncodingConfig::new(head_dim)
        .with_rotary_dim(rotary_dim)
        .with_theta(config_f64(config, "base", 10_000.0)?)
        .with_layout(layout)
        .with_max_position_embeddings(max_position_embeddings)
        .with_scaling(scaling);
    config.validate()?;
    Ok(config)
}

fn run_rope(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = rope_config(case.config())?;
    let device = device.clone().autodiff();
    let rope = config.try_init(&device)?;
    let q = float::<4>(&case.tensor("q")?, &device)?.require_grad();
    let k = float::<4>(&case.tensor("k")?, &device)?.require_grad();
    let positions = case.tensor("positions")?;
    let (q_out, k_out) = rope.try_forward(q.clone(), k.clone(), int::<1>(&positions, &device)?)?;
    let running_length = positions.data.iter().fold(0.0f64, |a, b| a.max(*b)) as usize + 1;
    let frequencies = rope.frequencies(running_length);
    check.tensor("q", q_out.to_data());
    check.tensor("k", k_out.to_data());
    // The same rotation by Burn's tensor ops, the reference of the fused kernels, held to the
    // same expected values.
    let angles = rope.try_angles(int::<1>(&positions, &device)?, q.dims()[2])?;
    let q_reference = angles.try_apply_reference(q.clone())?;
    let k_reference = angles.try_apply_reference(k.clone())?;
    check.labelled("q (tensor ops)", "q", q_reference.to_data());
    check.labelled("k (tensor ops)", "k", k_reference.to_data());
    let inv_freq = frequencies.inv_freq.len();
    check.tensor(
        "inv_freq",
        TensorData::new(frequencies.inv_freq, [inv_freq]),
    );
    check.scalar("attention_scaling", frequencies.attention_scaling);
    if let (Some(grad_q_out), Some(grad_k_out)) = (
        case.optional_tensor("grad_q_out")?,
        case.optional_tensor("grad_k_out")?,
    ) {
        let loss = (q_out * float::<4>(&grad_q_out, &device)?).sum()
            + (k_out * float::<4>(&grad_k_out, &device)?).sum();
        let grads = loss.backward();
        let missing = || Stop::Case("no gradient reached the input".into());
        check.tensor("grad_q", q.grad(&grads).ok_or_else(missing)?.into_data());
        check.tensor("grad_k", k.grad(&grads).ok_or_else(missing)?.into_data());
        let loss = (q_reference * float::<4>(&grad_q_out, &device)?).sum()
            + (k_reference * float::<4>(&grad_k_out, &device)?).sum();
        let grads = loss.backward();
        let grad_q = q.grad(&grads).ok_or_else(missing)?.into_data();
        let grad_k = k.grad(&grads).ok_or_else(missing)?.into_data();
        check.labelled("grad_q (tensor ops)", "grad_q", grad_q);
        check.labelled("grad_k (tensor ops)", "grad_k", grad_k);
    }
    Ok(())
}

fn run_alibi(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = case.config();
    let alibi = AlibiConfig::new(config_usize(config, "num_heads")?)
        .with_max_bias(config_f64(config, "max_bias", 8.0)?)
        .try_init(device)?;
    // SCHEMA: the queries are the last `q_len` of the `k_len` key positions.
    let (q_len, k_len) = (case.usize("q_len")?, case.usize("k_len")?);
    let first_query = k_len.checked_sub(q_len).ok_or_else(|| {
        Stop::from(positional::PositionalError::input(
            "q_len",
            q_len,
            format!("must be at most k_len ({k_len}): queries sit at the last q_len key positions"),
        ))
    })?;
    // `[1, heads, q_len, k_len]`; the cases hold `[heads, q_len, k_len]`.
    let bias = alibi
        .try_bias(first_query, q_len, 0, k_len)?
        .squeeze_dim::<3>(0);
    check.tensor("slopes", alibi.slopes().into_data());
    check.tensor("bias", bias.into_data());
    Ok(())
}

fn attention_config(case: &Case) -> Result<MultiHeadAttentionConfig, Stop> {
    let config = case.config();
    let d_model = config_usize(config, "d_model")?;
    let n_heads = config_usize(config, "n_heads")?;
    let positional = config
        .get("positional")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let scheme = match positional
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("none")
    {
        "none" => PositionalScheme::None,
        "alibi" => PositionalScheme::Alibi {
            max_bias: config_f64(&positional, "max_bias", 8.0)?,
        },
        "rope" => {
            let mut rope = positional.clone();
            rope.entry("head_dim")
                .or_insert_with(|| Value::from(d_model / n_heads.max(1)));
            PositionalScheme::Rope(rope_config(&rope)?)
        }
        other => return Err(Stop::Case(format!("unknown positional kind {other:?}"))),
    };
    Ok(MultiHeadAttentionConfig::new(d_model, n_heads)
        .with_n_kv_heads(Some(config_usize(config, "n_kv_heads")?))
        .with_causal(
            config
                .get("causal")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        )
        .with_biases(config.get("bias").and_then(Value::as_bool).unwrap_or(false))
        .with_positional(scheme))
}

fn run_attention(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = attention_config(case)?;
    let device = device.clone().autodiff();
    let linear = |name: &str| -> Result<LinearWeights, Stop> {
        let bias = case.optional_tensor(&format!("b_{name}"))?;
        Ok(LinearWeights {
            weight: float::<2>(&case.tensor(&format!("w_{name}"))?, &device)?,
            bias: bias.map(|b| float::<1>(&b, &device)).transpose()?,
        })
    };
    let module = config.try_init(&device)?.try_with_pytorch_weights(
        linear("q")?,
        linear("k")?,
        linear("v")?,
        linear("o")?,
    )?;
    let x = case.tensor("x")?;
    let [batch, seq] = [x.shape[0], x.shape[1]];
    let tokens = case.optional_tensor("padding_mask")?;
    let real_rows: Option<Vec<bool>> = tokens
        .as_ref()
        .map(|t| t.data.iter().map(|v| *v != 0.0).collect());
    let padding = |range: std::ops::Range<usize>| -> Result<Option<Tensor<2, Bool>>, String> {
        tokens
            .as_ref()
            .map(|t| {
                Ok(int::<2>(t, &device)?
                    .narrow(1, range.start, range.len())
                    .equal_elem(0))
            })
            .transpose()
    };
    // Per-token positions (`[batch, seq]`, e.g. `cumsum(mask) - 1` of a left-padded batch) for
    // RoPE and ALiBi; token indices without them.
    let positions = case.optional_tensor("positions")?;
    let inputs = |range: std::ops::Range<usize>| -> Result<AttentionInputs, String> {
        let mut inputs = AttentionInputs::new();
        if let Some(padding) = padding(range.clone())? {
            inputs = inputs.with_padding_mask(padding);
        }
        if let Some(positions) = &positions {
            let positions = int::<2>(positions, &device)?.narrow(1, range.start, range.len());
            inputs = inputs.with_positions(positions);
        }
        Ok(inputs)
    };
    let input = float::<3>(&x, &device)?.require_grad();
    let y = module.try_forward(input.clone(), inputs(0..seq)?)?;
    check.tensor_rows("y", "y", y.to_data(), real_rows.as_deref());
    if let Some(grad_y) = case.optional_tensor("grad_y")? {
        let row_weights = match &tokens {
            Some(t) => float::<2>(t, &device)?.reshape([batch, seq, 1]),
            None => Tensor::ones([batch, seq, 1], &device),
        };
        let loss = (y * float::<3>(&grad_y, &device)? * row_weights).sum();
        let grads = loss.backward();
        let grad = input
            .grad(&grads)
            .ok_or_else(|| Stop::Case("no gradient reached x".into()))?;
        check.tensor("grad_x", grad.into_data());
    }
    if let Some(prefill) = case.json.get("decode_prefill").and_then(Value::as_u64) {
        let prefill = prefill as usize;
        let x = float::<3>(&x, &device)?;
        let mut cache = KvCache::new();
        let mut pieces = vec![module.try_forward_cached(
            x.clone().narrow(1, 0, prefill),
            inputs(0..prefill)?,
            &mut cache,
        )?];
        for t in prefill..seq {
            pieces.push(module.try_forward_cached(
                x.clone().narrow(1, t, 1),
                inputs(t..t + 1)?,
                &mut cache,
            )?);
        }
        let decoded = Tensor::cat(pieces, 1);
        check.tensor_rows(
            "y (decoded through the KV cache)",
            "y",
            decoded.into_data(),
            real_rows.as_deref(),
        );
    }
    Ok(())
}

/// Checks `q` and `k` from the fused rotation and from the tensor-op reference, each against
/// the expected values.
fn check_rotated(
    check: &mut Checker,
    [q_out, k_out]: [Tensor<4>; 2],
    [q_reference, k_reference]: [Tensor<4>; 2],
) {
    check.tensor("q", q_out.into_data());
    check.tensor("k", k_out.into_data());
    check.labelled("q (tensor ops)", "q", q_reference.into_data());
    check.labelled("k (tensor ops)", "k", k_reference.into_data());
}

fn run_xpos(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = case.config();
    let rotary_dim = match config.get("rotary_dim") {
        None | Some(Value::Null) => None,
        Some(_) => Some(config_usize(config, "rotary_dim")?),
    };
    let scale_center = case
        .input("scale_center")?
        .as_f64()
        .ok_or("input `scale_center` must be a number")?;
    let config = XposConfig::new(config_usize(config, "head_dim")?)
        .with_rotary_dim(rotary_dim)
        .with_theta(config_f64(config, "base", 10_000.0)?)
        .with_scale_base(config_f64(config, "scale_base", 512.0)?)
        .with_gamma(config_f64(config, "gamma", 0.4)?)
        .with_scale_center(scale_center);
    let xpos = config.try_init(device)?;
    let q = float::<4>(&case.tensor("q")?, device)?;
    let k = float::<4>(&case.tensor("k")?, device)?;
    let positions = case.tensor("positions")?;
    let ids = int::<1>(&positions, device)?;
    let (q_out, k_out) = xpos.try_forward(q.clone(), k.clone(), ids.clone())?;
    let angles = xpos.try_angles(ids, q.dims()[2])?;
    let reference = [
        angles.query.try_apply_reference(q)?,
        angles.key.try_apply_reference(k)?,
    ];
    check_rotated(check, [q_out, k_out], reference);
    let pairs = config.rotary_dim() / 2;
    check.tensor("inv_freq", TensorData::new(config.inv_freq(), [pairs]));
    check.tensor("zeta", TensorData::new(config.zeta(), [pairs]));
    let scale: Vec<f64> = positions
        .data
        .iter()
        .flat_map(|p| config.scale(*p as i64))
        .collect();
    check.tensor(
        "scale",
        TensorData::new(scale, [positions.data.len(), pairs]),
    );
    Ok(())
}

fn run_rope_nd(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = case.config();
    let section = || -> Result<Vec<usize>, Stop> {
        let values = config
            .get("mrope_section")
            .and_then(Value::as_array)
            .ok_or("config `mrope_section` must be a list")?;
        values
            .iter()
            .map(|v| v.as_u64().map(|v| v as usize))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Stop::Case("config `mrope_section` must hold non-negative integers".into())
            })
    };
    let mode = match config_str(config, "mode")? {
        "axial" => MultiAxisMode::Axial,
        "mrope" => MultiAxisMode::Mrope {
            mrope_section: section()?,
        },
        "mrope_interleaved" => MultiAxisMode::MropeInterleaved {
            mrope_section: section()?,
        },
        other => return Err(Stop::Case(format!("unknown rope_nd mode {other:?}"))),
    };
    let config = MultiAxisRopeConfig::new(config_usize(config, "head_dim")?, mode)
        .with_theta(config_f64(config, "base", 10_000.0)?)
        .with_layout(rope_layout(config)?);
    let rope = config.try_init(device)?;
    let q = float::<4>(&case.tensor("q")?, device)?;
    let k = float::<4>(&case.tensor("k")?, device)?;
    let positions = case.tensor("positions")?;
    let ids = int::<3>(&positions, device)?;
    let (q_out, k_out) = rope.try_forward(q.clone(), k.clone(), ids.clone())?;
    let angles = rope.try_angles(ids, q.dims()[2])?;
    let reference = [
        angles.try_apply_reference(q)?,
        angles.try_apply_reference(k)?,
    ];
    check_rotated(check, [q_out, k_out], reference);
    let pairs = config.head_dim / 2;
    check.tensor("inv_freq", TensorData::new(config.inv_freq(), [pairs]));
    let pair_axis: Vec<i64> = config.pair_axis().iter().map(|a| *a as i64).collect();
    check.tensor("pair_axis", TensorData::new(pair_axis, [pairs]));
    let axes = positions.shape[2];
    let angles: Vec<f64> = positions
        .data
        .chunks(axes)
        .flat_map(|position| {
            let position: Vec<i64> = position.iter().map(|p| *p as i64).collect();
            rope.pair_angles(&position)
        })
        .collect();
    let shape = [positions.shape[0], positions.shape[1], pairs];
    let table = |f: fn(f64) -> f64| TensorData::new(angles.iter().map(|a| f(*a)).collect(), shape);
    check.tensor("cos", table(f64::cos));
    check.tensor("sin", table(f64::sin));
    Ok(())
}

fn run_relative_xl(case: &Case, device: &Device, check: &mut Checker) -> Result<(), Stop> {
    let config = case.config();
    let d_model = config_usize(config, "d_model")?;
    let n_heads = config_usize(config, "n_heads")?;
    let attention = MultiHeadAttentionConfig::new(d_model, n_heads)
        .with_head_dim(Some(config_usize(config, "d_head")?))
        .with_causal(true)
        .with_positional(PositionalScheme::RelativeXl {
            mem_len: config_usize(config, "mem_len")?,
        });
    let weight = |name: &str| float::<2>(&case.tensor(name)?, device);
    let linear = |name: &str| -> Result<LinearWeights, String> {
        Ok(LinearWeights {
            weight: weight(name)?,
            bias: None,
        })
    };
    let mut module = attention.try_init(device)?.try_with_pytorch_weights(
        linear("w_q")?,
        linear("w_k")?,
        linear("w_v")?,
        linear("w_o")?,
    )?;
    let relative_xl = module.relative_xl.take().ok_or("no relative_xl terms")?;
    module.relative_xl =
        Some(relative_xl.try_with_weights(weight("w_r")?, weight("u")?, weight("v")?)?);
    let x = float::<3>(&case.tensor("x")?, device)?;
    let mems = case
        .optional_tensor("mems")?
        .map(|mems| float::<3>(&mems, device))
        .transpose()?;
    let (mem, seq) = (mems.as_ref().map_or(0, |m| m.dims()[1]), x.dims()[1]);
    let (y, new_mems) = module.try_forward_segment(x.clone(), mems.clone(), None)?;
    let scores = module.try_segment_scores(x, mems)?;
    check.tensor("y", y.into_data());
    check.tensor("new_mems", new_mems.into_data());
    // Keys after their query are not compared: the case stores 0 there.
    let k_len = mem + seq;
    let visible: Vec<f32> = (0..seq)
        .flat_map(|i| (0..k_len).map(move |j| f32::from(u8::from(j <= mem + i))))
        .collect();
    let visible = Tensor::<2>::from_data(TensorData::new(visible, [seq, k_len]), device);
    check.tensor("scores", (scores * visible.unsqueeze::<4>()).into_data());
    let relative = module.relative_xl.as_ref().ok_or("no relative_xl terms")?;
    check.tensor("r", relative.try_relative_table(k_len)?.into_data());
    Ok(())
}
