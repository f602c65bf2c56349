//! Synthetic sequences generated in code from a seed: nothing to download, identical on every
//! machine.

use burn::tensor::{Device, Int, Tensor, TensorData};

/// SplitMix64 (Steele et al., 2014): a tiny, well-mixed generator, so that data and sampling are
/// the same on every platform and need no dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`); the modulo bias is below 2^-40 for the sizes used here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// An order-2 local rule: each token is `rule[previous_but_one][previous]` with probability
/// `1 - noise`, and uniformly random otherwise.
///
/// Predicting the next token needs the last two tokens *in order*, so a model must know which
/// token came immediately before and which one before that: relative position over a short range,
/// the thing language models use most. The noise keeps sequences from cycling, so copying an
/// earlier occurrence (an induction head) cannot replace the rule. Nothing about the rule depends
/// on absolute position, so a model that learned it properly is right at any length.
#[derive(Debug, Clone)]
pub struct LocalRuleTask {
    vocab_size: usize,
    noise: f64,
    rule: Vec<usize>,
}

impl LocalRuleTask {
    /// The first token the rule predicts; the two before it are random.
    pub const FIRST_PREDICTABLE: usize = 2;

    /// A random rule over `vocab_size` tokens, drawn from `seed`.
    pub fn new(vocab_size: usize, noise: f64, seed: u64) -> anyhow::Result<Self> {
        anyhow::ensure!(
            vocab_size >= 2,
            "vocab_size = {vocab_size}: the task needs at least 2 tokens"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&noise),
            "noise = {noise}: must be a probability in [0, 1]"
        );
        let mut rng = SplitMix64::new(seed ^ 0x5EED_7A5C);
        let rule = (0..vocab_size * vocab_size)
            .map(|_| rng.below(vocab_size))
            .collect();
        Ok(Self {
            vocab_size,
            noise,
            rule,
        })
    }

    /// Number of distinct tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The token the rule gives after `previous_but_one, previous`.
    pub fn rule(&self, previous_but_one: usize, previous: usize) -> usize {
        self.rule[previous_but_one * self.vocab_size + previous]
    }

    /// One sequence of `len` tokens.
    pub fn sequence(&self, len: usize, rng: &mut SplitMix64) -> Vec<i64> {
        let mut tokens: Vec<usize> = Vec::with_capacity(len);
        for i in 0..len {
            let token = if i < Self::FIRST_PREDICTABLE || rng.next_f64() < self.noise {
                rng.below(self.vocab_size)
            } else {
                self.rule(tokens[i - 2], tokens[i - 1])
            };
            tokens.push(token);
        }
        tokens.into_iter().map(|t| t as i64).collect()
    }

    /// `batch` sequences of `len` tokens.
    ///
    /// # Shapes
    /// - output: `[batch, len]`
    pub fn batch(
        &self,
        batch: usize,
        len: usize,
        rng: &mut SplitMix64,
        device: &Device,
    ) -> Tensor<2, Int> {
        let tokens: Vec<i64> = (0..batch).flat_map(|_| self.sequence(len, rng)).collect();
        Tensor::from_data(TensorData::new(tokens, [batch, len]), device)
    }

    /// Probability that the rule's token comes next: the accuracy of a perfect predictor.
    pub fn oracle_accuracy(&self) -> f64 {
        1.0 - self.noise + self.noise / self.vocab_size as f64
    }

    /// Cross-entropy (nats) of a perfect predictor: the entropy of the next token given the rule.
    pub fn oracle_loss(&self) -> f64 {
        let hit = self.oracle_accuracy();
        let miss = self.noise / self.vocab_size as f64;
        let term = |p: f64| if p > 0.0 { -p * p.ln() } else { 0.0 };
        term(hit) + (self.vocab_size - 1) as f64 * term(miss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_follow_the_rule_at_the_oracle_rate() {
        let task = LocalRuleTask::new(8, 0.2, 7).unwrap();
        let mut rng = SplitMix64::new(1);
        let (mut hits, mut total) = (0usize, 0usize);
        for _ in 0..400 {
            let s = task.sequence(50, &mut rng);
            assert!(s.iter().all(|&t| (0..8).contains(&t)));
            for i in LocalRuleTask::FIRST_PREDICTABLE..s.len() {
                hits +=
                    usize::from(task.rule(s[i - 2] as usize, s[i - 1] as usize) == s[i] as usize);
                total += 1;
            }
        }
        let rate = hits as f64 / total as f64;
        // 19_200 draws: the standard error of the rate is about 0.003.
        assert!(
            (rate - task.oracle_accuracy()).abs() < 0.015,
            "rule followed at {rate}, oracle {}",
            task.oracle_accuracy()
        );
    }

    #[test]
    fn order_matters_and_the_seed_fixes_everything() {
        let a = LocalRuleTask::new(16, 0.1, 3).unwrap();
        let b = LocalRuleTask::new(16, 0.1, 3).unwrap();
        assert_eq!(a.rule, b.rule);
        let asymmetric = (0..16)
            .flat_map(|x| (0..16).map(move |y| (x, y)))
            .filter(|&(x, y)| a.rule(x, y) != a.rule(y, x))
            .count();
        assert!(asymmetric > 100, "only {asymmetric} ordered pairs differ");
        let (mut r1, mut r2) = (SplitMix64::new(9), SplitMix64::new(9));
        assert_eq!(a.sequence(40, &mut r1), b.sequence(40, &mut r2));
    }

    #[test]
    fn oracle_loss_is_the_entropy_of_the_next_token() {
        let exact = LocalRuleTask::new(4, 0.0, 1).unwrap();
        assert_eq!(exact.oracle_accuracy(), 1.0);
        assert_eq!(exact.oracle_loss(), 0.0);
        let uniform = LocalRuleTask::new(4, 1.0, 1).unwrap();
        assert!((uniform.oracle_accuracy() - 0.25).abs() < 1e-12);
        assert!((uniform.oracle_loss() - 4f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn bad_settings_name_the_field() {
        let error = LocalRuleTask::new(1, 0.1, 0).unwrap_err().to_string();
        assert!(error.contains("vocab_size = 1"), "{error}");
        let error = LocalRuleTask::new(8, 1.5, 0).unwrap_err().to_string();
        assert!(error.contains("noise = 1.5"), "{error}");
    }
}
