//! A log-bucket latency histogram (the HdrHistogram layout with 2 significant digits): fixed
//! memory, O(1) recording, percentiles within 1/64 (1.6 %) of the recorded value, mergeable.
//!
//! Values below 128 have a bucket each; above, every power of two is cut into 64 equal buckets,
//! so a bucket is never wider than 1/64 of the values in it. A percentile is the highest value
//! its bucket can hold (as HdrHistogram's `value_at_percentile`), never above the largest value
//! recorded.

/// Values below this have a bucket of their own.
const LINEAR: u64 = 128;
/// Buckets per power of two above [`LINEAR`].
const HALF: u64 = LINEAR / 2;
/// Linear buckets, then 64 for each of the 57 powers of two from 2^7 to 2^63.
const BUCKETS: usize = (LINEAR + 57 * HALF) as usize;

/// Counts of values by log bucket, plus the exact count, sum, minimum and maximum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Record one value.
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// Record `value` `n` times.
    pub fn record_n(&mut self, value: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.counts[index(value)] += n;
        self.count += n;
        self.sum += u128::from(value) * u128::from(n);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Add every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The smallest value recorded (0 when empty).
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    /// The mean of the values recorded (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The value below or at which `percentile` % of the values lie (0 when empty): the highest
    /// value of the bucket holding the value of rank p/100 · count rounded to the nearest (as
    /// HdrHistogram's `getValueAtPercentile`: a ceiling would turn 99.9 % of 10 000 into rank
    /// 9 991, 0.999 · 10 000 being 9 990.000…2 in binary), at most the maximum.
    pub fn percentile(&self, percentile: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let p = percentile.clamp(0.0, 100.0);
        let rank = ((p / 100.0 * self.count as f64 + 0.5) as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return highest(i).min(self.max);
            }
        }
        self.max
    }

    /// The non-empty buckets as (bucket, count), to move a histogram between processes.
    pub fn buckets(&self) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 {
                out.push((i as u32, n));
            }
        }
        out
    }
}

/// The bucket of `value`.
fn index(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let shift = 63 - value.leading_zeros() - 6; // the top 7 bits of value pick the bucket
    (LINEAR + u64::from(shift - 1) * HALF + ((value >> shift) - HALF)) as usize
}

/// The highest value bucket `i` holds.
fn highest(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let shift = (i - LINEAR) / HALF + 1;
    let top = (i - LINEAR) % HALF + HALF;
    ((top + 1) << shift).wrapping_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_one_to_ten_thousand_percentiles() {
        let mut h = Histogram::new();
        for v in 1..=10_000 {
            h.record(v);
        }
        assert_eq!(h.count(), 10_000);
        assert_eq!((h.min(), h.max()), (1, 10_000));
        assert!((h.mean() - 5000.5).abs() < 1e-9);
        for (p, exact) in [(50.0, 5000u64), (90.0, 9000), (99.0, 9900), (99.9, 9990)] {
            let got = h.percentile(p);
            assert!(
                got >= exact && got <= exact + exact / 64,
                "p{p}: {got} vs {exact}"
            );
        }
        assert_eq!(h.percentile(100.0), 10_000);
        assert_eq!(h.percentile(0.0), 1);
    }

    #[test]
    fn rank_rounds_to_the_nearest_as_hdrhistogram() {
        let mut h = Histogram::new();
        h.record_n(2_000, 9_900);
        h.record_n(50_000, 90);
        h.record_n(1_000_000, 10);
        assert_eq!(h.percentile(99.9), highest(index(50_000)));
        assert_eq!(h.percentile(99.95), 1_000_000);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in [3, 3, 7, 100, 127] {
            h.record(v);
        }
        assert_eq!(h.percentile(40.0), 3);
        assert_eq!(h.percentile(60.0), 7);
        assert_eq!(h.percentile(80.0), 100);
        assert_eq!(h.percentile(99.9), 127);
    }

    #[test]
    fn buckets_cover_every_value_once_and_stay_narrow() {
        let mut previous_top = None;
        for i in 0..BUCKETS {
            let top = highest(i);
            let bottom = previous_top.map_or(0, |t: u64| t + 1);
            assert_eq!(index(bottom), i);
            assert_eq!(index(top), i);
            assert!(top - bottom <= bottom / 64, "bucket {i}: {bottom}..={top}");
            previous_top = Some(top);
        }
        assert_eq!(previous_top, Some(u64::MAX));
    }

    #[test]
    fn merge_adds_and_empty_is_zero() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        assert_eq!(
            (a.percentile(50.0), a.max(), a.min(), a.mean()),
            (0, 0, 0, 0.0)
        );
        a.record_n(1000, 3);
        b.record(5);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!((a.count(), a.min(), a.max()), (5, 5, 1_000_000));
        assert_eq!(a.percentile(20.0), 5);
        assert_eq!(a.percentile(100.0), 1_000_000);
        assert_eq!(a.buckets().iter().map(|&(_, n)| n).sum::<u64>(), 5);
    }
}
