//! RoPE on `[batch, heads, seq, head_dim]`: ours (both layouts, forward and forward + backward,
//! data stored `[batch, seq, heads, head_dim]` and read through `swap_dims`), our tensor-op
//! reference (forward, and forward + backward through Burn's autodiff of it), Burn's
//! `burn::nn::RotaryEncoding` (interleaved, the layout it has), a copy of the same tensor
//! (`x.clone().mul_scalar(1.0)`, the memory floor) and the ones Burn's `backward()` seeds the
//! backward pass with (part of every forward + backward), side by side per backend and shape; and
//! the schemes that turn through the same kernel with tables of their own: xPos (queries, its
//! decay in the tables) and M-RoPE (Qwen2-VL's sections, positions `[batch, seq, 3]` read back).
//!
//! Every variant ends with `device.sync()` inside the timed region, so WGPU's queued work is
//! counted; the output is dropped outside it. `cargo xtask bench` prints the ratios.

use burn::tensor::{Device, Distribution, Tensor};
use burn::tensor::{Int, TensorData};
use divan::Bencher;
use positional::{
    MultiAxisMode, MultiAxisRopeConfig, RopeLayout, RotaryEncodingConfig, XposConfig,
};

/// `name`, `[batch, heads, seq, head_dim]`, offset of the first position.
const SHAPES: [(&str, [usize; 4], usize); 4] = [
    ("decode_b1_h32_s1_d128_at4096", [1, 32, 1, 128], 4096),
    ("b1_h8_s128_d64", [1, 8, 128, 64], 0),
    ("b1_h32_s1024_d128", [1, 32, 1024, 128], 0),
    ("b4_h32_s1024_d128", [4, 32, 1024, 128], 0),
];
const NAMES: [&str; 4] = [SHAPES[0].0, SHAPES[1].0, SHAPES[2].0, SHAPES[3].0];

fn main() {
    divan::main();
}

#[derive(Debug, Clone, Copy)]
enum Variant {
    Copy,
    OursHalf,
    OursInterleaved,
    OursHalfForwardBackward,
    OursHalfSeqMajor,
    TensorOpsHalf,
    TensorOpsHalfForwardBackward,
    /// What `backward()` does before any op's backward runs: fill a tensor of the output's shape
    /// with ones, on the inner backend.
    BackwardSeed,
    Burn,
    /// xPos on queries: the rotation times the decay, tables computed per call.
    Xpos,
    /// M-RoPE (sections of a third each) at image-like positions `[batch, seq, 3]`.
    Mrope,
}

fn shape(name: &str) -> ([usize; 4], usize) {
    let (_, dims, offset) = SHAPES
        .iter()
        .find(|(n, _, _)| *n == name)
        .expect("a known shape");
    (*dims, *offset)
}

fn run(bencher: Bencher, backend: &str, name: &str, variant: Variant) {
    let device: Device = match variant {
        Variant::OursHalfForwardBackward | Variant::TensorOpsHalfForwardBackward => {
            positional::testing::device(backend).autodiff()
        }
        _ => positional::testing::device(backend),
    };
    let ([batch, heads, seq, head_dim], offset) = shape(name);
    let x = match variant {
        Variant::OursHalfSeqMajor => Tensor::<4>::random(
            [batch, seq, heads, head_dim],
            Distribution::Default,
            &device,
        )
        .swap_dims(1, 2),
        _ => Tensor::<4>::random(
            [batch, heads, seq, head_dim],
            Distribution::Default,
            &device,
        ),
    };
    let layout = match variant {
        Variant::OursInterleaved => RopeLayout::Interleaved,
        _ => RopeLayout::Half,
    };
    let ours = RotaryEncodingConfig::new(head_dim)
        .with_layout(layout)
        .with_max_position_embeddings(offset + seq)
        .init(&device);
    let theirs = matches!(variant, Variant::Burn)
        .then(|| burn::nn::RotaryEncodingConfig::new(offset + seq, head_dim).init(&device));
    let xpos = matches!(variant, Variant::Xpos).then(|| {
        XposConfig::new(head_dim)
            .with_scale_center(offset as f64)
            .with_max_position_embeddings(offset + seq)
            .init(&device)
    });
    let mrope = matches!(variant, Variant::Mrope).then(|| {
        let pairs = head_dim / 2;
        let section = vec![pairs - 2 * (pairs / 3), pairs / 3, pairs / 3];
        let rope = MultiAxisRopeConfig::new(
            head_dim,
            MultiAxisMode::Mrope {
                mrope_section: section,
            },
        )
        .init(&device);
        // A square image of patches after `offset` text tokens: (t, t + row, t + column).
        let side = (seq as f64).sqrt().ceil() as i64;
        let t = offset as i64;
        let positions: Vec<i64> = (0..batch * seq)
            .flat_map(|i| {
                let i = (i % seq) as i64;
                [t, t + i / side, t + i % side]
            })
            .collect();
        let positions =
            Tensor::<3, Int>::from_data(TensorData::new(positions, [batch, seq, 3]), &device);
        (rope, positions)
    });
    let call = || -> Tensor<4> {
        match variant {
            Variant::Xpos => xpos
                .as_ref()
                .expect("built for this variant")
                .try_angles(offset, seq)
                .unwrap()
                .query
                .apply(x.clone()),
            Variant::Mrope => {
                let (rope, positions) = mrope.as_ref().expect("built for this variant");
                rope.try_angles(positions.clone(), seq)
                    .unwrap()
                    .apply(x.clone())
            }
            Variant::Copy => x.clone().mul_scalar(1.0),
            Variant::OursHalf | Variant::OursInterleaved | Variant::OursHalfSeqMajor => {
                ours.try_angles(offset, seq).unwrap().apply(x.clone())
            }
            Variant::TensorOpsHalf => ours
                .try_angles(offset, seq)
                .unwrap()
                .try_apply_reference(x.clone())
                .unwrap(),
            Variant::OursHalfForwardBackward | Variant::TensorOpsHalfForwardBackward => {
                let input = x.clone().require_grad();
                let angles = ours.try_angles(offset, seq).unwrap();
                let rotated = match variant {
                    Variant::OursHalfForwardBackward => angles.apply(input.clone()),
                    _ => angles.try_apply_reference(input.clone()).unwrap(),
                };
                // Seeded with ones of the output's shape: the rotation's own backward, not a loss's.
                let gradients = rotated.backward();
                input.grad(&gradients).unwrap()
            }
            Variant::BackwardSeed => Tensor::ones([batch, heads, seq, head_dim], &device),
            Variant::Burn => theirs
                .as_ref()
                .expect("built for this variant")
                .apply(x.clone(), offset),
        }
    };
    benches::bench_synced(bencher, &device, call);
}

macro_rules! rope {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        mod $name {
            use super::*;

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn copy(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::Copy);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn ours_half(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::OursHalf);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn ours_interleaved(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::OursInterleaved);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn ours_half_forward_backward(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::OursHalfForwardBackward);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn ours_half_seq_major(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::OursHalfSeqMajor);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn tensor_ops_half(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::TensorOpsHalf);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn tensor_ops_half_forward_backward(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::TensorOpsHalfForwardBackward);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn backward_seed(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::BackwardSeed);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn burn_interleaved(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::Burn);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn xpos_queries(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::Xpos);
            }

            #[divan::bench(args = NAMES, sample_count = 15)]
            fn mrope(bencher: Bencher, shape: &str) {
                run(bencher, $feature, shape, Variant::Mrope);
            }
        }
    )*};
}

rope!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
