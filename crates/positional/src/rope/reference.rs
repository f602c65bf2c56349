//! The slow, obviously-correct rotation every fast path is tested against.
//!
//! One 2x2 rotation per feature pair, in f64, element by element, straight from RoFormer eq. 34:
//! `(a, b) -> (a cos - b sin, a sin + b cos)`, both terms times the attention scaling.

use super::{RopeLayout, RotaryEncodingConfig};

/// The indices of the two features of pair `j` within a head.
pub fn pair(layout: RopeLayout, rotary_dim: usize, j: usize) -> (usize, usize) {
    match layout {
        RopeLayout::Half => (j, j + rotary_dim / 2),
        RopeLayout::Interleaved => (2 * j, 2 * j + 1),
    }
}

/// Rotates row-major `x` of shape `[batch, heads, seq, head_dim]` by `sign * position` (use
/// `sign = -1.0` for the inverse rotation, which is also the backward pass).
///
/// `positions` holds `seq` values shared by every batch row, or `batch * seq` values.
pub fn rotate(
    config: &RotaryEncodingConfig,
    x: &[f32],
    shape: [usize; 4],
    positions: &[i64],
    sign: f64,
) -> Vec<f32> {
    let [batch, heads, seq, head_dim] = shape;
    assert_eq!(
        x.len(),
        batch * heads * seq * head_dim,
        "x does not have shape {shape:?}"
    );
    assert!(
        positions.len() == seq || positions.len() == batch * seq,
        "positions do not fit seq {seq}"
    );
    let rotary_dim = config.rotary_dim();
    let running_length = positions.iter().max().map_or(0, |p| *p as usize + 1);
    let frequencies = config.frequencies(running_length);
    let mut out = x.to_vec();
    for b in 0..batch {
        for h in 0..heads {
            for s in 0..seq {
                let position = if positions.len() == seq {
                    positions[s]
                } else {
                    positions[b * seq + s]
                };
                let row = ((b * heads + h) * seq + s) * head_dim;
                for (j, w) in frequencies.inv_freq.iter().enumerate() {
                    let angle = sign * position as f64 * w;
                    let (i1, i2) = pair(config.layout, rotary_dim, j);
                    let (a, c) = (x[row + i1] as f64, x[row + i2] as f64);
                    let scale = frequencies.attention_scaling;
                    out[row + i1] = ((a * angle.cos() - c * angle.sin()) * scale) as f32;
                    out[row + i2] = ((a * angle.sin() + c * angle.cos()) * scale) as f32;
                }
            }
        }
    }
    out
}
