//! ggml's tensor storage types (`enum ggml_type`) and their dequantization to f32.
//!
//! A GGUF tensor is stored as a run of blocks, each holding [`GgmlType::block_len`] values in
//! [`GgmlType::block_bytes`] bytes, and each row (ggml's `ne[0]`) is a whole number of blocks. The
//! block layouts (ggml-common.h's `block_*` structs, little-endian) and the arithmetic follow
//! ggml/src/ggml-quants.c's `dequantize_row_*` step by step: the same f32 operations in the same
//! order, and no fused multiply-adds, so that the values are bit for bit those of ggml's reference
//! code and of gguf-py's `gguf/quants.py` (its numpy transcription). The tests at the bottom hold
//! them to gguf-py's on the blocks of `tests/gguf/blocks.json`
//! (made by `crates/conformance/generate/gguf_blocks.py`).
//!
//! The order matters less than it seems: an f16 scale times integers of at most 8 bits is exact
//! in f32, so each value is rounded at most once (by its final add, subtract or, in Q6_K, its
//! last multiply), and builds of ggml that fuse multiply-adds or regroup the products give the
//! same bits.

use std::fmt;

/// Values per block of the K-quants (ggml's `QK_K`).
const QK_K: usize = 256;

/// ggml's storage type of a tensor (`enum ggml_type`), those this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// IEEE binary32, one value per block.
    F32,
    /// IEEE binary16, one value per block.
    F16,
    /// bfloat16 (the upper 16 bits of an f32), one value per block.
    BF16,
    /// 32 values: an f16 scale `d` and 4-bit quants; `x = (q - 8) * d`.
    Q4_0,
    /// 32 values: f16 `d` and `m` and 4-bit quants; `x = q * d + m`.
    Q4_1,
    /// 32 values: an f16 scale `d` and 5-bit quants; `x = (q - 16) * d`.
    Q5_0,
    /// 32 values: f16 `d` and `m` and 5-bit quants; `x = q * d + m`.
    Q5_1,
    /// 32 values: an f16 scale `d` and 8-bit signed quants; `x = q * d`.
    Q8_0,
    /// 256 values: 2-bit quants in 16 groups of 16, each group with a 4-bit scale and a 4-bit min.
    Q2_K,
    /// 256 values: 3-bit quants in 16 groups of 16, each group with a 6-bit signed scale.
    Q3_K,
    /// 256 values: 4-bit quants in 8 groups of 32, each group with a 6-bit scale and a 6-bit min.
    Q4_K,
    /// 256 values: 5-bit quants in 8 groups of 32, each group with a 6-bit scale and a 6-bit min.
    Q5_K,
    /// 256 values: 6-bit quants in 16 groups of 16, each group with an 8-bit signed scale.
    Q6_K,
}

impl GgmlType {
    /// Every type this crate reads, in the order of ggml's ids.
    const ALL: [Self; 13] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::BF16,
    ];

    /// The type of ggml's id (`GGML_TYPE_F32` = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6,
    /// Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30), None
    /// for any other id (the ids ggml retired, Q4_2 = 4 and Q4_3 = 5, included).
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.id() == id)
    }

    /// ggml's id of the type (its `enum ggml_type` value, which GGUF stores).
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::BF16 => 30,
        }
    }

    /// Values per block (1 for F32/F16/BF16, 32 for Q4_0..Q8_0, 256 for the K-quants).
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q2_K | Self::Q3_K | Self::Q4_K | Self::Q5_K | Self::Q6_K => QK_K,
        }
    }

    /// Bytes per block (ggml's `type_size`).
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 2 + 16,                // d, qs[16]
            Self::Q4_1 => 2 + 2 + 16,            // d, m, qs[16]
            Self::Q5_0 => 2 + 4 + 16,            // d, qh[4], qs[16]
            Self::Q5_1 => 2 + 2 + 4 + 16,        // d, m, qh[4], qs[16]
            Self::Q8_0 => 2 + 32,                // d, qs[32]
            Self::Q2_K => 16 + 64 + 2 + 2,       // scales[16], qs[64], d, dmin: 84
            Self::Q3_K => 32 + 64 + 12 + 2,      // hmask[32], qs[64], scales[12], d: 110
            Self::Q4_K => 2 + 2 + 12 + 128,      // d, dmin, scales[12], qs[128]: 144
            Self::Q5_K => 2 + 2 + 12 + 32 + 128, // d, dmin, scales[12], qh[32], qs[128]: 176
            Self::Q6_K => 128 + 64 + 16 + 2,     // ql[128], qh[64], scales[16], d: 210
        }
    }

    /// Bytes of a tensor of `elements` values whose rows hold `row_len` values (ggml's `ne[0]`);
    /// an error (its reason) when `row_len` is not a multiple of [`block_len`](Self::block_len)
    /// (ggml stores no partial blocks), neither is `elements`, or the byte count overflows usize.
    pub fn byte_len(self, row_len: usize, elements: usize) -> Result<usize, String> {
        let len = self.block_len();
        if !row_len.is_multiple_of(len) {
            return Err(format!(
                "its rows of {row_len} values are not whole {self} blocks of {len} values"
            ));
        }
        // Whole rows make whole blocks; a count that is not is a caller's inconsistency, told
        // rather than rounded down to a size that would read the wrong bytes.
        if !elements.is_multiple_of(len) {
            return Err(format!(
                "its {elements} values are not whole {self} blocks of {len} values"
            ));
        }
        (elements / len)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| {
                format!(
                    "its {elements} values of {self} take more bytes than this machine addresses"
                )
            })
    }

    /// Dequantizes `bytes` (whole blocks) into `out` (`block_len` values per block), exactly as
    /// ggml's `dequantize_row_*`. An error when `out.len()` is not a multiple of `block_len` or
    /// `bytes.len()` is not `out.len() / block_len * block_bytes`. Any bytes are accepted: NaN or
    /// infinite scales give NaN or infinite values, as in ggml.
    pub fn dequantize(self, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
        let (len, size) = (self.block_len(), self.block_bytes());
        if !out.len().is_multiple_of(len) {
            return Err(format!(
                "{} values are not a whole number of {self} blocks of {len} values",
                out.len()
            ));
        }
        let blocks = out.len() / len;
        if blocks.checked_mul(size) != Some(bytes.len()) {
            return Err(format!(
                "{} bytes are not the {blocks} {self} blocks of {size} bytes that hold {} values",
                bytes.len(),
                out.len()
            ));
        }
        match self {
            Self::F32 => each_block(self, bytes, out, f32_block),
            Self::F16 => each_block(self, bytes, out, f16_block),
            Self::BF16 => each_block(self, bytes, out, bf16_block),
            Self::Q4_0 => each_block(self, bytes, out, q4_0),
            Self::Q4_1 => each_block(self, bytes, out, q4_1),
            Self::Q5_0 => each_block(self, bytes, out, q5_0),
            Self::Q5_1 => each_block(self, bytes, out, q5_1),
            Self::Q8_0 => each_block(self, bytes, out, q8_0),
            Self::Q2_K => each_block(self, bytes, out, q2_k),
            Self::Q3_K => each_block(self, bytes, out, q3_k),
            Self::Q4_K => each_block(self, bytes, out, q4_k),
            Self::Q5_K => each_block(self, bytes, out, q5_k),
            Self::Q6_K => each_block(self, bytes, out, q6_k),
        }
        Ok(())
    }
}

impl fmt::Display for GgmlType {
    /// ggml's name of the type (`ggml_type_name`: "F32", "BF16", "Q4_K", ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
        })
    }
}

/// Runs `block` on each block's bytes and values; the caller has checked that both slices are
/// whole blocks of `kind`, so every call sees exactly `block_bytes` bytes and `block_len` values.
/// Generic (not a fn pointer) so that each type's loop is compiled with its block inlined.
fn each_block(kind: GgmlType, bytes: &[u8], out: &mut [f32], block: impl Fn(&[u8], &mut [f32])) {
    let blocks = bytes.chunks_exact(kind.block_bytes());
    for (bytes, values) in blocks.zip(out.chunks_exact_mut(kind.block_len())) {
        block(bytes, values);
    }
}

/// The little-endian f16 at `bytes[at..at + 2]`, widened to f32 (exact, as `GGML_FP16_TO_FP32`).
fn f16_at(bytes: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// F32: the value's 4 little-endian bytes, unchanged (NaN payloads included).
fn f32_block(bytes: &[u8], y: &mut [f32]) {
    y[0] = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
}

/// F16: one f16.
fn f16_block(bytes: &[u8], y: &mut [f32]) {
    y[0] = f16_at(bytes, 0);
}

/// BF16: the upper 16 bits of an f32, whose lower 16 are zero (`GGML_BF16_TO_FP32`).
fn bf16_block(bytes: &[u8], y: &mut [f32]) {
    y[0] = f32::from_bits(u32::from(u16::from_le_bytes([bytes[0], bytes[1]])) << 16);
}

/// Q4_0 (`block_q4_0`: f16 d, qs[16]): byte j holds value j in its low nibble and value j + 16
/// in its high one; `x = (q - 8) * d`.
fn q4_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    let (first, second) = y.split_at_mut(16);
    for ((&q, x0), x1) in block[2..].iter().zip(first).zip(second) {
        *x0 = f32::from(i16::from(q & 0x0F) - 8) * d;
        *x1 = f32::from(i16::from(q >> 4) - 8) * d;
    }
}

/// Q4_1 (`block_q4_1`: f16 d, f16 m, qs[16]): nibbles as Q4_0's; `x = q * d + m`.
fn q4_1(block: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let (first, second) = y.split_at_mut(16);
    for ((&q, x0), x1) in block[4..].iter().zip(first).zip(second) {
        *x0 = f32::from(q & 0x0F) * d + m;
        *x1 = f32::from(q >> 4) * d + m;
    }
}

/// The fifth bits of values j and j + 16 of a Q5_0/Q5_1 block, in place (0x10): bits j and j + 16
/// of `qh`, written as ggml writes them.
fn fifth_bits(qh: u32, j: usize) -> (u8, u8) {
    let xh_0 = ((qh >> j) << 4) & 0x10;
    let xh_1 = (qh >> (j + 12)) & 0x10;
    (xh_0 as u8, xh_1 as u8)
}

/// Q5_0 (`block_q5_0`: f16 d, qh[4], qs[16]): the low 4 bits as Q4_0's nibbles, the fifth from
/// the little-endian u32 `qh`; `x = (q - 16) * d`.
fn q5_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let (first, second) = y.split_at_mut(16);
    for (j, ((&q, x0), x1)) in block[6..].iter().zip(first).zip(second).enumerate() {
        let (xh_0, xh_1) = fifth_bits(qh, j);
        *x0 = f32::from(i16::from((q & 0x0F) | xh_0) - 16) * d;
        *x1 = f32::from(i16::from((q >> 4) | xh_1) - 16) * d;
    }
}

/// Q5_1 (`block_q5_1`: f16 d, f16 m, qh[4], qs[16]): quants as Q5_0's; `x = q * d + m`.
fn q5_1(block: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let (first, second) = y.split_at_mut(16);
    for (j, ((&q, x0), x1)) in block[8..].iter().zip(first).zip(second).enumerate() {
        let (xh_0, xh_1) = fifth_bits(qh, j);
        *x0 = f32::from((q & 0x0F) | xh_0) * d + m;
        *x1 = f32::from((q >> 4) | xh_1) * d + m;
    }
}

/// Q8_0 (`block_q8_0`: f16 d, qs[32] as i8): `x = q * d`.
fn q8_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (&q, x) in block[2..].iter().zip(y) {
        *x = f32::from(q as i8) * d;
    }
}

/// Q2_K (`block_q2_K`: scales[16], qs[64], f16 d, f16 dmin). The 256 values are 16 groups of 16;
/// group g has the scale `scales[g] & 0xF` and the min `scales[g] >> 4`, and its quants are the
/// 2-bit plane `g % 8 / 2` of the 16 bytes at `32 * (g / 8) + 16 * (g % 2)` (ggml's loop: two
/// halves of 32 bytes, four shifts each, the two 16-byte runs per shift);
/// `x = (d * scale) * q - dmin * min`.
fn q2_k(block: &[u8], y: &mut [f32]) {
    let (scales, rest) = block.split_at(QK_K / 16);
    let (qs, rest) = rest.split_at(QK_K / 4);
    let (d, min) = (f16_at(rest, 0), f16_at(rest, 2));
    for (g, (y, &sc)) in y.chunks_exact_mut(16).zip(scales).enumerate() {
        let q = &qs[32 * (g / 8) + 16 * (g % 2)..][..16];
        let shift = 2 * (g % 8 / 2);
        let dl = d * f32::from(sc & 0xF);
        let ml = min * f32::from(sc >> 4);
        for (x, &q) in y.iter_mut().zip(q) {
            *x = dl * f32::from((q >> shift) & 3) - ml;
        }
    }
}

/// Q3_K's 16 group scales, 6 bits each, unpacked from its 12 bytes as ggml does (`kmask1`,
/// `kmask2` on three little-endian u32s): the low 4 bits of scale i are the low (i < 8) or high
/// (i >= 8) nibble of byte i % 8, its high 2 bits are bits `2 * (i / 4)..` of byte 8 + i % 4.
fn q3_k_scales(packed: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let word =
        |i: usize| u32::from_le_bytes([packed[i], packed[i + 1], packed[i + 2], packed[i + 3]]);
    let (a0, a1, tmp) = (word(0), word(4), word(8));
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    // ggml reads the four words back as 16 bytes (int8, but all are 0..=63).
    let mut scales = [0u8; 16];
    for (bytes, word) in scales.chunks_exact_mut(4).zip(aux) {
        bytes.copy_from_slice(&word.to_le_bytes());
    }
    scales
}

/// Q3_K (`block_q3_K`: hmask[32], qs[64], scales[12], f16 d). Groups of 16 as Q2_K's, with the
/// low 2 bits of the quants laid out as Q2_K's; group g's third bit is bit `g / 2` of the 16
/// `hmask` bytes at `16 * (g % 2)`, and a set bit means no offset: `q = low - (bit ? 0 : 4)`, in
/// -4..=3. `x = (d * (scale - 32)) * q`.
fn q3_k(block: &[u8], y: &mut [f32]) {
    let (hmask, rest) = block.split_at(QK_K / 8);
    let (qs, rest) = rest.split_at(QK_K / 4);
    let (scales, rest) = rest.split_at(12);
    let d_all = f16_at(rest, 0);
    let scales = q3_k_scales(scales);
    for (g, (y, &sc)) in y.chunks_exact_mut(16).zip(&scales).enumerate() {
        let at = 16 * (g % 2);
        let q = &qs[32 * (g / 8) + at..][..16];
        let hm = &hmask[at..][..16];
        let shift = 2 * (g % 8 / 2);
        // ggml shifts its mask once per pair of groups, through both halves of the block.
        let m = 1u8 << (g / 2);
        let dl = d_all * f32::from(i16::from(sc) - 32);
        for ((x, &q), &h) in y.iter_mut().zip(q).zip(hm) {
            let offset = if h & m != 0 { 0 } else { 4 };
            *x = dl * f32::from(i16::from((q >> shift) & 3) - offset);
        }
    }
}

/// Scale and min of group j (0..8) of a Q4_K/Q5_K block, 6 bits each in 12 bytes (ggml's
/// `get_scale_min_k4`): groups 0..4 in the low 6 bits of bytes j and j + 4, groups 4..8 in the
/// nibbles of byte j + 4 with their top 2 bits in the top bits of bytes j - 4 and j.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The (scale, min) pairs of groups 2k and 2k + 1 of a Q4_K/Q5_K block, as f32 factors
/// `d * scale` and `dmin * min`.
fn k4_factors(k: usize, scales: &[u8], d: f32, min: f32) -> [(f32, f32); 2] {
    [2 * k, 2 * k + 1].map(|j| {
        let (sc, m) = scale_min_k4(j, scales);
        (d * f32::from(sc), min * f32::from(m))
    })
}

/// Q4_K (`block_q4_K`: f16 d, f16 dmin, scales[12], qs[128]). Each 32 bytes of quants hold 64
/// values: the low nibbles are group 2k, the high ones group 2k + 1;
/// `x = (d * scale) * q - dmin * min`.
fn q4_k(block: &[u8], y: &mut [f32]) {
    let (d, min) = (f16_at(block, 0), f16_at(block, 2));
    let (scales, qs) = block[4..].split_at(12);
    for (k, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let [(d1, m1), (d2, m2)] = k4_factors(k, scales, d, min);
        let (first, second) = y.split_at_mut(32);
        for ((&q, x1), x2) in q.iter().zip(first).zip(second) {
            *x1 = d1 * f32::from(q & 0xF) - m1;
            *x2 = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// Q5_K (`block_q5_K`: f16 d, f16 dmin, scales[12], qh[32], qs[128]). The low 4 bits as Q4_K's;
/// the fifth bit of value l of groups 2k and 2k + 1 is bit 2k and 2k + 1 of `qh[l]`.
fn q5_k(block: &[u8], y: &mut [f32]) {
    let (d, min) = (f16_at(block, 0), f16_at(block, 2));
    let (scales, rest) = block[4..].split_at(12);
    let (qh, qs) = rest.split_at(QK_K / 8);
    for (k, (ql, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let [(d1, m1), (d2, m2)] = k4_factors(k, scales, d, min);
        let (u1, u2) = (1u8 << (2 * k), 2u8 << (2 * k));
        let (first, second) = y.split_at_mut(32);
        for (((&ql, &qh), x1), x2) in ql.iter().zip(qh).zip(first).zip(second) {
            let h1 = if qh & u1 != 0 { 16 } else { 0 };
            let h2 = if qh & u2 != 0 { 16 } else { 0 };
            *x1 = d1 * f32::from((ql & 0xF) + h1) - m1;
            *x2 = d2 * f32::from((ql >> 4) + h2) - m2;
        }
    }
}

/// Q6_K (`block_q6_K`: ql[128], qh[64], scales[16] as i8, f16 d). Each half of the block (64
/// bytes of `ql`, 32 of `qh`, 8 scales, 128 values) holds, for l in 0..32, values l, l + 32,
/// l + 64 and l + 96: the low and high nibbles of `ql[l]` and `ql[l + 32]` with the 2-bit pairs
/// of `qh[l]` on top, minus 32; value i's scale is `scales[i / 16]`. `x = (d * scale) * q`.
fn q6_k(block: &[u8], y: &mut [f32]) {
    let (ql, rest) = block.split_at(QK_K / 2);
    let (qh, rest) = rest.split_at(QK_K / 4);
    let (scales, rest) = rest.split_at(QK_K / 16);
    let d = f16_at(rest, 0);
    let halves = ql
        .chunks_exact(64)
        .zip(qh.chunks_exact(32))
        .zip(scales.chunks_exact(8));
    for (((ql, qh), sc), y) in halves.zip(y.chunks_exact_mut(128)) {
        // The scales are signed bytes.
        let scale = |i: usize| d * f32::from(sc[i] as i8);
        for l in 0..32 {
            let is = l / 16;
            let q1 = i16::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i16::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i16::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i16::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = scale(is) * f32::from(q1);
            y[l + 32] = scale(is + 2) * f32::from(q2);
            y[l + 64] = scale(is + 4) * f32::from(q3);
            y[l + 96] = scale(is + 6) * f32::from(q4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GgmlType;
    use serde_json::Value;

    /// Blocks of every type and gguf-py's dequantization of them, as f32 bit patterns
    /// (made by crates/conformance/generate/gguf_blocks.py).
    const BLOCKS: &str = include_str!("../../tests/gguf/blocks.json");

    fn hex(text: &str) -> Vec<u8> {
        assert!(text.len().is_multiple_of(2), "odd hex string");
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digits"))
            .collect()
    }

    fn field<'a>(value: &'a Value, key: &str) -> &'a Value {
        value
            .get(key)
            .unwrap_or_else(|| panic!("blocks.json: no {key:?} in {value}"))
    }

    fn count(value: &Value, key: &str) -> usize {
        let n = field(value, key)
            .as_u64()
            .unwrap_or_else(|| panic!("{key} is not a count"));
        usize::try_from(n).expect("count fits usize")
    }

    #[test]
    fn dequantize_matches_gguf_py_bit_for_bit_on_every_type() {
        let fixture: Value = serde_json::from_str(BLOCKS).expect("blocks.json is JSON");
        let mut seen = Vec::new();
        for entry in field(&fixture, "types")
            .as_array()
            .expect("types is a list")
        {
            let name = field(entry, "type").as_str().expect("type is a name");
            let id = u32::try_from(count(entry, "id")).expect("id fits u32");
            let kind = GgmlType::from_id(id).unwrap_or_else(|| panic!("{name}: id {id} unknown"));
            assert_eq!(kind.to_string(), name, "name of id {id}");
            assert_eq!(
                kind.block_len(),
                count(entry, "block_len"),
                "{name} block_len"
            );
            assert_eq!(
                kind.block_bytes(),
                count(entry, "block_bytes"),
                "{name} block_bytes"
            );

            // All of a type's blocks in one call, so that runs of several blocks are covered.
            let (mut bytes, mut expected, mut made) = (Vec::new(), Vec::new(), Vec::new());
            for block in field(entry, "blocks").as_array().expect("blocks is a list") {
                bytes.extend(hex(field(block, "hex").as_str().expect("hex is a string")));
                let how = field(block, "made").as_str().expect("made is a string");
                for bits in field(block, "f32_bits")
                    .as_array()
                    .expect("f32_bits is a list")
                {
                    let bits = bits.as_u64().expect("a bit pattern");
                    expected.push(u32::try_from(bits).expect("bits fit u32"));
                    made.push(how);
                }
            }
            let mut values = vec![0f32; expected.len()];
            kind.dequantize(&bytes, &mut values)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for (i, (value, &bits)) in values.iter().zip(&expected).enumerate() {
                let want = f32::from_bits(bits);
                // NaN payloads are left to the f16 conversion (hardware or not), as ggml does.
                let same = value.to_bits() == bits || (value.is_nan() && want.is_nan());
                assert!(
                    same,
                    "{name} value {i} (block {}, {}): {value:e} ({:#010x}), gguf-py {want:e} \
                     ({bits:#010x})",
                    i / kind.block_len(),
                    made[i],
                    value.to_bits()
                );
            }
            seen.push(kind);
        }
        assert_eq!(
            seen,
            GgmlType::ALL,
            "blocks.json covers every type, in ggml's id order"
        );
    }

    #[test]
    fn ids_and_names_round_trip_and_other_ids_are_none() {
        for kind in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(kind.id()), Some(kind));
            assert_eq!(kind.to_string(), format!("{kind:?}"));
        }
        for id in [4, 5, 9, 15, 16, 29, 31, 39, u32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "id {id}");
        }
    }

    #[test]
    fn dequantize_rejects_lengths_that_are_not_whole_blocks() {
        for kind in GgmlType::ALL {
            let (len, size) = (kind.block_len(), kind.block_bytes());
            let bytes = vec![0u8; 3 * size];
            let mut out = vec![0f32; 3 * len];
            assert!(
                kind.dequantize(&bytes, &mut out).is_ok(),
                "{kind}: 3 whole blocks"
            );
            assert!(
                kind.dequantize(&bytes[1..], &mut out).is_err(),
                "{kind}: a byte short"
            );
            assert!(
                kind.dequantize(&[bytes.as_slice(), &[0]].concat(), &mut out)
                    .is_err()
            );
            assert!(
                kind.dequantize(&bytes[size..], &mut out).is_err(),
                "{kind}: a block short"
            );
            assert!(
                kind.dequantize(&bytes, &mut out[len..]).is_err(),
                "{kind}: too few values"
            );
            if len > 1 {
                let mut ragged = vec![0f32; 3 * len - 1];
                assert!(
                    kind.dequantize(&bytes, &mut ragged).is_err(),
                    "{kind}: partial block"
                );
            }
            assert!(kind.dequantize(&[], &mut []).is_ok(), "{kind}: no blocks");
        }
    }

    #[test]
    fn dequantize_accepts_any_bytes() {
        // A fixed pseudo-random stream (64-bit LCG), with all-ones and all-zeros blocks too.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let random: Vec<u8> = (0..8 * 210)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                (state >> 56) as u8
            })
            .collect();
        for kind in GgmlType::ALL {
            for fill in [None, Some(0x00), Some(0xFF)] {
                let mut bytes = random[..8 * kind.block_bytes()].to_vec();
                if let Some(fill) = fill {
                    bytes.fill(fill);
                }
                let mut out = vec![0f32; 8 * kind.block_len()];
                assert!(kind.dequantize(&bytes, &mut out).is_ok(), "{kind} {fill:?}");
            }
        }
    }

    #[test]
    fn byte_len_rejects_rows_that_are_not_whole_blocks() {
        assert!(GgmlType::Q4_K.byte_len(100, 100 * 4).is_err());
        assert!(GgmlType::Q4_K.byte_len(384, 384 * 2).is_err());
        assert!(GgmlType::Q8_0.byte_len(48, 48).is_err());
        assert!(
            GgmlType::Q4_0.byte_len(32, 48).is_err(),
            "values not whole blocks"
        );
        assert_eq!(
            GgmlType::F32.byte_len(7, 21),
            Ok(84),
            "one-value blocks take any row"
        );
    }

    #[test]
    fn byte_len_counts_whole_blocks_and_rejects_overflow() {
        assert_eq!(GgmlType::Q4_K.byte_len(512, 512 * 3), Ok(6 * 144));
        assert_eq!(GgmlType::Q6_K.byte_len(256, 256), Ok(210));
        assert_eq!(GgmlType::Q5_1.byte_len(64, 64 * 2), Ok(4 * 24));
        assert_eq!(GgmlType::BF16.byte_len(3, 6), Ok(12));
        assert_eq!(GgmlType::Q3_K.byte_len(0, 0), Ok(0));
        let most = usize::MAX / 32 * 32;
        assert!(
            GgmlType::Q8_0.byte_len(32, most).is_err(),
            "34 bytes per 32 values overflows"
        );
        assert!(GgmlType::F32.byte_len(1, usize::MAX / 2).is_err());
    }
}
