//! Stateless sample order: which dataset row sits at each position of the infinite train stream.
//!
//! Everything here is a pure function of `(seed, n_rows, block_size, shuffle_window)` and the
//! stream position, so resuming at any position costs O(1): no RNG state is carried and nothing
//! is replayed.
//!
//! The stream is the concatenation of epochs; stream position `g` is position `p = g % n` of
//! epoch `e = g / n`. Within an epoch, two stateless permutations are composed:
//!
//! 1. Block order: the rows are cut into blocks of `block_size` consecutive rows (the last may be
//!    short). A Feistel bijection keyed by `(seed, epoch)` permutes the blocks; rows inside a
//!    block keep their order, so reads stay mostly sequential within a shard.
//! 2. Window shuffle: the block-ordered sequence is cut into windows of `shuffle_window`
//!    positions, and a Feistel bijection keyed by `(seed, epoch, window)` permutes the positions
//!    inside each window. This is a deterministic stand-in for a shuffle buffer: a batch drawn
//!    from one window mixes about `shuffle_window / block_size` blocks from all over the dataset.
//!
//! Random crops come from [`unit_f64`] of a counter hash of `(seed, epoch, index, view)`.

/// The splitmix64 finaliser: a fast, well-mixed 64-bit bijection.
#[inline]
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hash a tuple of words (order matters). Used for every key in the loader.
#[inline]
pub fn hash_words(words: &[u64]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64; // pi
    for &w in words {
        h = splitmix64(h ^ w);
    }
    h
}

/// Map 64 random bits to a float in [0, 1) with 53 bits of precision.
#[inline]
pub fn unit_f64(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Domain tags, so that the same numbers in different roles give unrelated hashes.
const TAG_BLOCKS: u64 = 0xB10C;
const TAG_WINDOW: u64 = 0x3D0;
const TAG_CROP: u64 = 0xC20F;

/// A keyed pseudo-random bijection on `[0, n)`: a Feistel network on the next power of two
/// (at least 4) with cycle-walking to stay inside the domain.
#[derive(Clone, Copy, Debug)]
pub struct Feistel {
    n: u64,
    key: u64,
    /// Bits of the left and right halves at the input of the first round.
    left_bits: u32,
    right_bits: u32,
}

const ROUNDS: u64 = 6;

impl Feistel {
    pub fn new(n: u64, key: u64) -> Self {
        let bits = if n <= 4 {
            2
        } else {
            64 - (n - 1).leading_zeros()
        };
        let left_bits = bits / 2;
        Feistel {
            n,
            key,
            left_bits,
            right_bits: bits - left_bits,
        }
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline]
    fn round_fn(&self, round: u64, x: u64) -> u64 {
        splitmix64(self.key ^ splitmix64(x ^ (round << 58)))
    }

    /// One pass over the whole power-of-two domain.
    #[inline]
    fn forward(&self, x: u64) -> u64 {
        let (mut lb, mut rb) = (self.left_bits, self.right_bits);
        let mut l = x >> rb;
        let mut r = x & ((1u64 << rb) - 1);
        for round in 0..ROUNDS {
            // (L, R) -> (R, L ^ F(R)); the halves swap widths.
            let f = self.round_fn(round, r) & ((1u64 << lb) - 1);
            let new_r = l ^ f;
            l = r;
            r = new_r;
            std::mem::swap(&mut lb, &mut rb);
        }
        (l << rb) | r
    }

    #[inline]
    fn backward(&self, y: u64) -> u64 {
        // Widths after ROUNDS swaps.
        let (mut lb, mut rb) = if ROUNDS.is_multiple_of(2) {
            (self.left_bits, self.right_bits)
        } else {
            (self.right_bits, self.left_bits)
        };
        let mut l = y >> rb;
        let mut r = y & ((1u64 << rb) - 1);
        for round in (0..ROUNDS).rev() {
            // Undo (L, R) -> (R, L ^ F(R)): previous R is current L, previous L = R ^ F(L).
            std::mem::swap(&mut lb, &mut rb);
            let prev_r = l;
            let prev_l = r ^ (self.round_fn(round, prev_r) & ((1u64 << lb) - 1));
            l = prev_l;
            r = prev_r;
        }
        (l << rb) | r
    }

    /// The image of `x` (which must be `< n`).
    #[inline]
    pub fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        if self.n <= 1 {
            return x;
        }
        let mut y = self.forward(x);
        while y >= self.n {
            y = self.forward(y);
        }
        y
    }

    /// The preimage of `y` (which must be `< n`): `invert(apply(x)) == x`.
    #[inline]
    pub fn invert(&self, y: u64) -> u64 {
        debug_assert!(y < self.n);
        if self.n <= 1 {
            return y;
        }
        let mut x = self.backward(y);
        while x >= self.n {
            x = self.backward(x);
        }
        x
    }
}

/// The epoch order of a dataset: see the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct Order {
    pub n: u64,
    pub seed: u64,
    pub block_size: u64,
    pub shuffle_window: u64,
}

impl Order {
    /// `block_size` and `shuffle_window` must be at least 1 (callers validate).
    pub fn new(n: u64, seed: u64, block_size: u64, shuffle_window: u64) -> Self {
        assert!(n > 0 && block_size > 0 && shuffle_window > 0);
        Order {
            n,
            seed,
            block_size,
            shuffle_window,
        }
    }

    /// The row at position `p` of the block-ordered (not yet window-shuffled) epoch sequence.
    fn block_stage(&self, epoch: u64, p: u64) -> u64 {
        let bs = self.block_size;
        let n_blocks = self.n.div_ceil(bs);
        let perm = Feistel::new(n_blocks, hash_words(&[self.seed, epoch, TAG_BLOCKS]));
        let last = n_blocks - 1;
        let last_len = self.n - last * bs;
        if last_len == bs {
            let slot = p / bs;
            return perm.invert(slot) * bs + p % bs;
        }
        // The short last block sits at slot q; slots after it are shifted by its shortfall.
        let q = perm.apply(last);
        let start_q = q * bs;
        let (block, within) = if p < start_q {
            (perm.invert(p / bs), p % bs)
        } else if p < start_q + last_len {
            (last, p - start_q)
        } else {
            let rest = p - start_q - last_len;
            (perm.invert(q + 1 + rest / bs), rest % bs)
        };
        block * bs + within
    }

    /// The dataset row at stream position `g`.
    pub fn index_at(&self, g: u64) -> u64 {
        let epoch = g / self.n;
        let p = g % self.n;
        let w = self.shuffle_window;
        let win = p / w;
        let win_start = win * w;
        let win_len = w.min(self.n - win_start);
        let perm = Feistel::new(win_len, hash_words(&[self.seed, epoch, win, TAG_WINDOW]));
        self.block_stage(epoch, win_start + perm.apply(p - win_start))
    }
}

/// The crop fraction in [0, 1) of view `view` of row `index` in epoch `epoch`.
pub fn crop_fraction(seed: u64, epoch: u64, index: u64, view: u64) -> f64 {
    unit_f64(hash_words(&[seed, epoch, index, view, TAG_CROP]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_bijection(n: u64, key: u64) {
        let f = Feistel::new(n, key);
        let mut seen = vec![false; n as usize];
        for x in 0..n {
            let y = f.apply(x);
            assert!(y < n, "n={n}: {x} -> {y} out of range");
            assert!(!seen[y as usize], "n={n}: {y} hit twice");
            seen[y as usize] = true;
            assert_eq!(f.invert(y), x, "n={n}: invert");
        }
    }

    #[test]
    fn feistel_is_a_bijection_around_powers_of_two() {
        for k in 0..=20u32 {
            let p = 1u64 << k;
            for n in [p.saturating_sub(1), p, p + 1] {
                if n > 0 {
                    assert_bijection(n, 0xDEAD_BEEF ^ n);
                }
            }
        }
    }

    #[test]
    fn feistel_is_a_bijection_for_odd_sizes() {
        for n in (1..2000u64)
            .step_by(2)
            .chain([3 * 5 * 7 * 11 * 13, 99_999, 123_457])
        {
            assert_bijection(n, splitmix64(n));
        }
    }

    #[test]
    fn feistel_keys_differ() {
        let a: Vec<u64> = (0..100).map(|x| Feistel::new(100, 1).apply(x)).collect();
        let b: Vec<u64> = (0..100).map(|x| Feistel::new(100, 2).apply(x)).collect();
        assert_ne!(a, b);
        // Not the identity either.
        assert!(
            a.iter()
                .enumerate()
                .filter(|(i, &v)| *i as u64 == v)
                .count()
                < 10
        );
    }

    fn assert_epoch_is_permutation(o: &Order, epoch: u64) {
        let mut seen = vec![false; o.n as usize];
        for p in 0..o.n {
            let i = o.index_at(epoch * o.n + p);
            assert!(i < o.n);
            assert!(!seen[i as usize], "{o:?} epoch {epoch}: row {i} twice");
            seen[i as usize] = true;
        }
    }

    #[test]
    fn every_epoch_is_a_permutation() {
        for &(n, bs, w) in &[
            (1u64, 64u64, 4096u64),
            (7, 1, 1),
            (100, 64, 4096),
            (1000, 64, 256),
            (1000, 7, 100),
            (4097, 64, 1000),
            (10_000, 64, 8192),
            (12_345, 3, 17),
        ] {
            let o = Order::new(n, 42, bs, w);
            for e in 0..3 {
                assert_epoch_is_permutation(&o, e);
            }
        }
    }

    #[test]
    fn epochs_differ_and_blocks_stay_together_without_window() {
        let o = Order::new(1000, 3, 10, 1);
        let e0: Vec<u64> = (0..1000).map(|g| o.index_at(g)).collect();
        let e1: Vec<u64> = (1000..2000).map(|g| o.index_at(g)).collect();
        assert_ne!(e0, e1);
        // With a window of 1 the block stage is visible: runs of 10 consecutive rows.
        for chunk in e0.chunks(10) {
            assert_eq!(chunk[0] % 10, 0);
            for (k, &v) in chunk.iter().enumerate() {
                assert_eq!(v, chunk[0] + k as u64);
            }
        }
    }

    #[test]
    fn crop_fraction_is_deterministic_and_uniformish() {
        assert_eq!(crop_fraction(1, 2, 3, 0), crop_fraction(1, 2, 3, 0));
        assert_ne!(crop_fraction(1, 2, 3, 0), crop_fraction(1, 2, 3, 1));
        let mean: f64 = (0..10_000).map(|i| crop_fraction(0, 0, i, 0)).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
