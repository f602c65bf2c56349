//! `e^x` in f32 as a branch-free polynomial, which the compiler vectorises over a slice: the CPU
//! kernels' softmax and activations. libm's scalar `expf` was an eighth of a prefill's time on
//! flex in the attention's softmax, and a fifth in the MLP's SiLU.

/// Below this, `exp` gives 0 (a masked score's `-inf` included): `exp(-87.3)` is the smallest
/// normal float.
const EXP_LOWEST: f32 = -87.336_55;

/// `e^x` for `x <= 88.37`, within 2 ulp, 0 below `EXP_LOWEST` (and for `-inf`), NaN for NaN:
/// Cephes' `expf`, `2^n * e^r` with `x = n ln 2 + r`, `|r| <= ln 2 / 2`, and a degree-6
/// polynomial for `e^r`. Branch-free, so that a loop over a slice of it is vectorised.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // `max` and `min` (unlike `clamp`) turn NaN into a bound, so `n` below is always in range.
    #[allow(clippy::manual_clamp)]
    let clamped = x.max(EXP_LOWEST).min(88.37);
    let n = (clamped * std::f32::consts::LOG2_E + 0.5).floor();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, clamped));
    // Fused multiply-adds in the kernels, which run with FMA (libm's `fmaf` elsewhere).
    let mut p = 1.987_569_1e-4f32;
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = p.mul_add(r, c);
    }
    let e_r = (p * r).mul_add(r, r + 1.0);
    // SAFETY: `n` is a whole number in -126 ..= 128 (the clamp above), which an i32 holds.
    #[allow(unsafe_code)]
    let n = unsafe { n.to_int_unchecked::<i32>() };
    // 2^n through the exponent bits (2^128 only for 88.37, whose `e_r` is below 1).
    let two_n = f32::from_bits(((n + 127).clamp(1, 254) as u32) << 23);
    let y = e_r * two_n;
    match x < EXP_LOWEST {
        true => 0.0,
        false if x.is_nan() => x,
        false => y,
    }
}

#[cfg(test)]
mod tests {
    use super::exp;

    /// Within 2 ulp of `f32::exp` (libm's, correctly rounded or nearly) over the range softmax
    /// uses, and exactly 0 for `-inf` and far below.
    #[test]
    fn exp_is_within_two_ulp_of_libm() {
        let mut worst = 0u32;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let (ours, libm) = (exp(x), x.exp());
            let ulp = ours.to_bits().abs_diff(libm.to_bits());
            worst = worst.max(ulp);
            x += 0.000_37;
        }
        assert!(worst <= 2, "worst {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }
}
