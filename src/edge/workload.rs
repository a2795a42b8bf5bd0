//! Synthetic hit names for `load`, `demo` and `bench`: hot sets, Zipf and
//! uniform distributions over `page:N` names.

use rand::Rng;

/// How names are drawn.
#[derive(Debug, Clone)]
pub enum Distribution {
    /// Every name equally likely.
    Uniform,
    /// Zipf with exponent `s`: name rank k has weight 1/k^s.
    Zipf(f64),
}

/// Draws names `page:0` .. `page:{n-1}`.
#[derive(Debug, Clone)]
pub struct Names {
    n: usize,
    /// Cumulative weights for Zipf; empty for uniform.
    cdf: Vec<f64>,
}

/// The name distributions `hitcount bench` measures (and the lab, which
/// reads its JSON: `"hot"`, `"zipf"`, `"uniform"`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// 1,000 names, each equally likely.
    Hot,
    /// Zipf(1.0) over 100,000 names.
    Zipf,
    /// 100,000 names, each equally likely.
    Uniform,
}

impl Workload {
    /// The name sampler.
    pub fn names(self) -> Names {
        match self {
            Workload::Hot => Names::new(1000, Distribution::Uniform),
            Workload::Zipf => Names::new(100_000, Distribution::Zipf(1.0)),
            Workload::Uniform => Names::new(100_000, Distribution::Uniform),
        }
    }

    /// Its label in a table.
    pub fn label(self) -> &'static str {
        match self {
            Workload::Hot => "1,000 hot names",
            Workload::Zipf => "Zipf(1.0), 100k names",
            Workload::Uniform => "uniform, 100k names",
        }
    }
}

/// A synthetic response time in ms of the name of rank `rank`, from 1 to
/// 1000: log-uniform from 1 to 100 ms, times a slowness of that name's own
/// from 1 to 10 (fixed per name, so some pages are slow every time and
/// `top --by mean` has something to find). The value `hitcount load
/// --values`, the demo and the bench's valued hits carry.
pub fn synthetic_value(rng: &mut impl Rng, rank: usize) -> f64 {
    let slowness = ((rank as u64).wrapping_mul(7919) % 1000) as f64 / 1000.0;
    10f64.powf(rng.random_range(0.0..2.0) + slowness)
}

impl Names {
    /// A sampler over `n` names (at least one).
    pub fn new(n: usize, dist: Distribution) -> Names {
        let n = n.max(1);
        let cdf = match dist {
            Distribution::Uniform => Vec::new(),
            Distribution::Zipf(s) => {
                let mut acc = 0.0;
                (1..=n)
                    .map(|k| {
                        acc += 1.0 / (k as f64).powf(s);
                        acc
                    })
                    .collect()
            }
        };
        Names { n, cdf }
    }

    /// How many names there are.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: there is at least one name.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The name of rank `i`.
    pub fn name(i: usize) -> String {
        format!("page:{i}")
    }

    /// Each rank's probability, in rank order.
    pub fn weights(&self) -> Vec<f64> {
        let Some(&total) = self.cdf.last() else {
            return vec![1.0 / self.n as f64; self.n];
        };
        // Each cumulative weight less the one before it.
        let before = std::iter::once(&0.0).chain(&self.cdf);
        self.cdf
            .iter()
            .zip(before)
            .map(|(c, b)| (c - b) / total)
            .collect()
    }

    /// A random rank.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> usize {
        let Some(&total) = self.cdf.last() else {
            return rng.random_range(0..self.n);
        };
        let x = rng.random_range(0.0..total);
        self.cdf.partition_point(|&c| c <= x).min(self.n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_the_probabilities() {
        let w = Names::new(4, Distribution::Zipf(1.0)).weights();
        let h = 1.0 + 1.0 / 2.0 + 1.0 / 3.0 + 1.0 / 4.0;
        for (i, p) in w.iter().enumerate() {
            assert!((p - 1.0 / ((i + 1) as f64 * h)).abs() < 1e-12, "{w:?}");
        }
        assert_eq!(Names::new(4, Distribution::Uniform).weights(), [0.25; 4]);
    }

    #[test]
    fn zipf_favours_low_ranks_and_stays_in_range() {
        let names = Names::new(1000, Distribution::Zipf(1.0));
        let mut rng = rand::rng();
        let mut first = 0;
        for _ in 0..10_000 {
            let r = names.sample(&mut rng);
            assert!(r < 1000);
            first += usize::from(r == 0);
        }
        // Rank 0 has weight 1/H(1000) ≈ 13 %.
        assert!(first > 900 && first < 1800, "{first}");
        let uniform = Names::new(10, Distribution::Uniform);
        assert!((0..1000).all(|_| uniform.sample(&mut rng) < 10));
    }
}
