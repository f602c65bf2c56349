//! The inner loops of the decode-shaped product for each type a weight is stored in: f32, and
//! f16 and bf16 (flex), widened to f32 in registers as they are read, so that the memory reads
//! two bytes a weight and the sums are f32's.
//!
//! bf16 is the top half of an f32: a shift, which the compiler vectorises. f16 has its own
//! exponent: where the CPU has F16C (every x86-64 CPU with AVX2 but a few), eight at a time with
//! `vcvtph2ps`; elsewhere one at a time through `half`. Every loop requests the weights ahead of
//! where it reads: `axpy4` the same columns of rows further on (its caller says which), `dot`
//! its own row [`PREFETCH_BYTES`] on.

use half::{bf16, f16};

use crate::kernels::prefetch::prefetch;

/// The element of a weight, and the product's loops over a row of such weights.
pub(crate) trait WeightElement: Copy + Sync {
    /// `out += a[0] * w[0] + .. + a[3] * w[3]` (each `w[i]` at least as long as `out`). With
    /// `ahead` (the starts of four rows further on), each cache line of `out` also requests the
    /// memory of theirs at the same columns.
    fn axpy4(out: &mut [f32], a: [f32; 4], w: [&[Self]; 4], ahead: Option<[*const Self; 4]>);

    /// `out += a * w` (`w` at least as long as `out`).
    fn axpy(out: &mut [f32], a: f32, w: &[Self]);

    /// `x . w` over `w`'s length (`x` at least as long).
    fn dot(x: &[f32], w: &[Self]) -> f32;
}

/// How far ahead of [`WeightElement::dot`]'s loop its row is requested, in bytes. The
/// prefetchers alone kept the f16 rows at two thirds of f32's bandwidth (too few loads in
/// flight per instruction).
const PREFETCH_BYTES: usize = 2048;

/// [`WeightElement::axpy4`] for weights that `widen` reads as f32, a cache line of each row at
/// a time, with the same line of each row of `ahead` requested.
#[inline(always)]
fn axpy4_with<T: Copy, const LINE: usize>(
    out: &mut [f32],
    a: [f32; 4],
    w: [&[T]; 4],
    ahead: Option<[*const T; 4]>,
    widen: impl Fn(T) -> f32 + Copy,
) {
    let n = out.len();
    let w = w.map(|w| &w[..n]);
    let mut lines = out.chunks_exact_mut(LINE);
    for (k, out) in (&mut lines).enumerate() {
        let first = k * LINE;
        if let Some(ahead) = ahead {
            for row in ahead {
                prefetch(row.wrapping_add(first));
            }
        }
        let [w0, w1, w2, w3] = w.map(|w| &w[first..first + LINE]);
        for c in 0..LINE {
            out[c] += a[0] * widen(w0[c])
                + a[1] * widen(w1[c])
                + a[2] * widen(w2[c])
                + a[3] * widen(w3[c]);
        }
    }
    let first = n - lines.into_remainder().len();
    for c in first..n {
        out[c] += a[0] * widen(w[0][c])
            + a[1] * widen(w[1][c])
            + a[2] * widen(w[2][c])
            + a[3] * widen(w[3][c]);
    }
}

/// [`WeightElement::axpy`] for weights that `widen` reads as f32.
#[inline(always)]
fn axpy_with<T: Copy>(out: &mut [f32], a: f32, w: &[T], widen: impl Fn(T) -> f32) {
    out.iter_mut().zip(w).for_each(|(o, &w)| *o += a * widen(w));
}

/// [`WeightElement::dot`] for weights that `widen` reads as f32: eight partial sums, a cache
/// line at a time with the line [`PREFETCH_BYTES`] ahead requested.
#[inline(always)]
fn dot_with<T: Copy, const LINE: usize>(x: &[f32], w: &[T], widen: impl Fn(T) -> f32) -> f32 {
    let x = &x[..w.len()];
    let ahead = PREFETCH_BYTES / size_of::<T>();
    let mut lanes = [0.0f32; 8];
    let (x_lines, w_lines) = (x.chunks_exact(LINE), w.chunks_exact(LINE));
    let (x_tail, w_tail) = (x_lines.remainder(), w_lines.remainder());
    for (k, (x, w_line)) in x_lines.zip(w_lines).enumerate() {
        prefetch(w.as_ptr().wrapping_add(k * LINE + ahead));
        for (x, w) in x.chunks_exact(8).zip(w_line.chunks_exact(8)) {
            for i in 0..8 {
                lanes[i] += x[i] * widen(w[i]);
            }
        }
    }
    let mut sum = lanes.iter().sum::<f32>();
    for (x, &w) in x_tail.iter().zip(w_tail) {
        sum += x * widen(w);
    }
    sum
}

impl WeightElement for f32 {
    #[inline(always)]
    fn axpy4(out: &mut [f32], a: [f32; 4], w: [&[f32]; 4], ahead: Option<[*const f32; 4]>) {
        axpy4_with::<f32, 16>(out, a, w, ahead, |w| w);
    }

    #[inline(always)]
    fn axpy(out: &mut [f32], a: f32, w: &[f32]) {
        axpy_with(out, a, w, |w| w);
    }

    #[inline(always)]
    fn dot(x: &[f32], w: &[f32]) -> f32 {
        dot_with::<f32, 16>(x, w, |w| w)
    }
}

/// A bf16's value: its bits are the top half of the f32's.
#[inline(always)]
fn widen_bf16(w: bf16) -> f32 {
    f32::from_bits((w.to_bits() as u32) << 16)
}

impl WeightElement for bf16 {
    #[inline(always)]
    fn axpy4(out: &mut [f32], a: [f32; 4], w: [&[bf16]; 4], ahead: Option<[*const bf16; 4]>) {
        axpy4_with::<bf16, 32>(out, a, w, ahead, widen_bf16);
    }

    #[inline(always)]
    fn axpy(out: &mut [f32], a: f32, w: &[bf16]) {
        axpy_with(out, a, w, widen_bf16);
    }

    #[inline(always)]
    fn dot(x: &[f32], w: &[bf16]) -> f32 {
        dot_with::<bf16, 32>(x, w, widen_bf16)
    }
}

impl WeightElement for f16 {
    #[inline(always)]
    fn axpy4(out: &mut [f32], a: [f32; 4], w: [&[f16]; 4], ahead: Option<[*const f16; 4]>) {
        let n = out.len();
        let w = w.map(|w| &w[..n]);
        #[cfg(target_arch = "x86_64")]
        if f16c::available() {
            // SAFETY: the CPU has AVX2 and F16C, checked just above.
            #[allow(unsafe_code)]
            return unsafe { f16c::axpy4(out, a, w, ahead) };
        }
        axpy4_with::<f16, 32>(out, a, w, ahead, f16::to_f32);
    }

    #[inline(always)]
    fn axpy(out: &mut [f32], a: f32, w: &[f16]) {
        axpy_with(out, a, w, f16::to_f32);
    }

    #[inline(always)]
    fn dot(x: &[f32], w: &[f16]) -> f32 {
        let x = &x[..w.len()];
        #[cfg(target_arch = "x86_64")]
        if f16c::available() {
            // SAFETY: the CPU has AVX2 and F16C, checked just above.
            #[allow(unsafe_code)]
            return unsafe { f16c::dot(x, w) };
        }
        dot_with::<f16, 32>(x, w, f16::to_f32)
    }
}

/// f16 rows eight at a time, widened by F16C's `vcvtph2ps`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod f16c {
    use std::arch::x86_64::{
        __m128i, __m256, _mm_add_ps, _mm_cvtss_f32, _mm_hadd_ps, _mm_loadu_si128, _mm256_add_ps,
        _mm256_castps256_ps128, _mm256_cvtph_ps, _mm256_extractf128_ps, _mm256_loadu_ps,
        _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };

    use half::f16;

    /// [`PREFETCH_BYTES`](super::PREFETCH_BYTES) in f16.
    const PREFETCH: usize = super::PREFETCH_BYTES / 2;

    /// Whether the CPU runs [`axpy4`] and [`dot`] (std caches the answer).
    #[inline(always)]
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c")
    }

    /// Eight f16 from `w[at..at + 8]`, widened.
    ///
    /// # Safety
    /// `at + 8 <= w.len()`, and the CPU has AVX2 and F16C.
    #[inline(always)]
    unsafe fn load8(w: &[f16], at: usize) -> __m256 {
        debug_assert!(at + 8 <= w.len());
        // SAFETY: eight f16 (16 bytes) lie at `at` (the caller's bound); unaligned load.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(at).cast::<__m128i>())) }
    }

    /// [`WeightElement::axpy4`](super::WeightElement::axpy4) for f16, every `w[i]` as long as
    /// `out`.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn axpy4(
        out: &mut [f32],
        a: [f32; 4],
        w: [&[f16]; 4],
        ahead: Option<[*const f16; 4]>,
    ) {
        let n = out.len();
        assert!(w.iter().all(|w| w.len() == n));
        let a8 = a.map(|a| _mm256_set1_ps(a));
        // `out[c..c + 8] += a . w[..][c..c + 8]`, for `c + 8 <= n`.
        let step = |out: &mut [f32], c: usize| {
            // SAFETY: `c + 8 <= n`, the length of `out` and of every `w[i]`.
            unsafe {
                let sum = _mm256_add_ps(
                    _mm256_add_ps(
                        _mm256_mul_ps(a8[0], load8(w[0], c)),
                        _mm256_mul_ps(a8[1], load8(w[1], c)),
                    ),
                    _mm256_add_ps(
                        _mm256_mul_ps(a8[2], load8(w[2], c)),
                        _mm256_mul_ps(a8[3], load8(w[3], c)),
                    ),
                );
                let at = out.as_mut_ptr().add(c);
                _mm256_storeu_ps(at, _mm256_add_ps(_mm256_loadu_ps(at), sum));
            }
        };
        // Four steps an iteration: more loads in flight for the memory (a step alone waits on
        // them, at two thirds of f32's bandwidth).
        let mut c = 0;
        while c + 32 <= n {
            if let Some(ahead) = ahead {
                for row in ahead {
                    super::prefetch(row.wrapping_add(c));
                }
            }
            step(out, c);
            step(out, c + 8);
            step(out, c + 16);
            step(out, c + 24);
            c += 32;
        }
        while c + 8 <= n {
            step(out, c);
            c += 8;
        }
        // The last few, one at a time.
        super::axpy4_with::<f16, 32>(&mut out[c..], a, w.map(|w| &w[c..]), None, f16::to_f32);
    }

    /// [`WeightElement::dot`](super::WeightElement::dot) for f16, `x` as long as `w`.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn dot(x: &[f32], w: &[f16]) -> f32 {
        let n = w.len();
        assert_eq!(x.len(), n);
        // `x[c..c + 8] * w[c..c + 8]`, for `c + 8 <= n`.
        let product = |c: usize| {
            // SAFETY: `c + 8 <= n`, the length of `x` and `w`.
            unsafe { _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(c)), load8(w, c)) }
        };
        // Four sums at a time, so that the additions do not wait on each other.
        let mut four = [_mm256_setzero_ps(); 4];
        let mut c = 0;
        while c + 32 <= n {
            super::prefetch(w.as_ptr().wrapping_add(c + PREFETCH));
            for (k, sum) in four.iter_mut().enumerate() {
                *sum = _mm256_add_ps(*sum, product(c + 8 * k));
            }
            c += 32;
        }
        let mut lanes = _mm256_add_ps(
            _mm256_add_ps(four[0], four[1]),
            _mm256_add_ps(four[2], four[3]),
        );
        while c + 8 <= n {
            lanes = _mm256_add_ps(lanes, product(c));
            c += 8;
        }
        let halves = _mm_add_ps(
            _mm256_castps256_ps128(lanes),
            _mm256_extractf128_ps::<1>(lanes),
        );
        let pairs = _mm_hadd_ps(halves, halves);
        _mm_cvtss_f32(_mm_hadd_ps(pairs, pairs))
            + super::dot_with::<f16, 32>(&x[c..], &w[c..], f16::to_f32)
    }
}
