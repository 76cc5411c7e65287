//! Counters and histograms with one shard per worker, merged when scraped. Every admitted
//! request bumps a few counters and a histogram; with one shared atomic (or the lock inside
//! prometheus-client's histogram) every worker would write the same cache lines. Here a
//! worker writes only its own shard, and the exposition is unchanged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Shards per metric: one per CPU the process may use, at most 64.
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 64)
    })
}

/// The shard the calling worker writes.
#[inline]
fn my_shard(len: usize) -> usize {
    crate::conn::worker::slot_of(crate::conn::worker::current(), len)
}

/// One cache line per shard, so two workers never write the same line.
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// A monotonic counter (Prometheus `counter`).
#[derive(Clone)]
pub struct ShardedCounter {
    shards: Arc<[Padded]>,
}

impl Default for ShardedCounter {
    fn default() -> Self {
        Self {
            shards: (0..shard_count()).map(|_| Padded::default()).collect(),
        }
    }
}

impl ShardedCounter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        self.shards[my_shard(self.shards.len())]
            .0
            .fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }
}

impl std::fmt::Debug for ShardedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ShardedCounter").field(&self.get()).finish()
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One worker's part of a histogram: counts per bucket (not cumulative), the observation
/// count and the sum (f64 bits).
#[repr(align(128))]
struct HistogramShard {
    /// Bucket counters in whole cache lines of their own, so no two shards' counts
    /// share a line (a plain boxed slice per shard could sit next to another's).
    buckets: Box<[BucketLine]>,
    count: AtomicU64,
    sum: AtomicU64,
}

const PER_LINE: usize = 16;

#[repr(align(128))]
#[derive(Default)]
struct BucketLine([AtomicU64; PER_LINE]);

impl HistogramShard {
    fn bucket(&self, i: usize) -> &AtomicU64 {
        &self.buckets[i / PER_LINE].0[i % PER_LINE]
    }
}

/// A Prometheus `histogram` with fixed upper bounds (and +Inf).
#[derive(Clone)]
pub struct ShardedHistogram {
    inner: Arc<HistogramInner>,
}

struct HistogramInner {
    /// Upper bounds, ascending; the last is +Inf.
    bounds: Box<[f64]>,
    shards: Box<[HistogramShard]>,
}

impl ShardedHistogram {
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = bounds
            .into_iter()
            .chain(std::iter::once(f64::MAX))
            .collect();
        let shards = (0..shard_count())
            .map(|_| HistogramShard {
                buckets: (0..bounds.len().div_ceil(PER_LINE))
                    .map(|_| BucketLine::default())
                    .collect(),
                count: AtomicU64::new(0),
                sum: AtomicU64::new(0f64.to_bits()),
            })
            .collect();
        Self {
            inner: Arc::new(HistogramInner { bounds, shards }),
        }
    }

    pub fn observe(&self, v: f64) {
        let inner = &*self.inner;
        let shard = &inner.shards[my_shard(inner.shards.len())];
        let bucket = inner
            .bounds
            .iter()
            .position(|&upper| v <= upper)
            .unwrap_or(inner.bounds.len() - 1);
        shard.bucket(bucket).fetch_add(1, Ordering::Relaxed);
        shard.count.fetch_add(1, Ordering::Relaxed);
        // Only this worker writes this shard, so the loop runs once; it stays correct if
        // another thread ever shares it.
        let _ = shard
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// The merged (sum, count, per-bucket counts) over all shards.
    pub fn get(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.inner;
        let mut buckets: Vec<(f64, u64)> = inner.bounds.iter().map(|&b| (b, 0)).collect();
        let (mut sum, mut count) = (0.0, 0);
        for shard in inner.shards.iter() {
            for (i, merged) in buckets.iter_mut().enumerate() {
                merged.1 += shard.bucket(i).load(Ordering::Relaxed);
            }
            count += shard.count.load(Ordering::Relaxed);
            sum += f64::from_bits(shard.sum.load(Ordering::Relaxed));
        }
        (sum, count, buckets)
    }
}

impl std::fmt::Debug for ShardedHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sum, count, _) = self.get();
        f.debug_struct("ShardedHistogram")
            .field("count", &count)
            .field("sum", &sum)
            .finish()
    }
}

impl TypedMetric for ShardedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.get();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    fn exposition(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    /// Observations spread over several workers' shards read back exactly like
    /// prometheus-client's own metrics fed the same values.
    #[test]
    fn shards_merge_into_the_same_exposition() {
        let bounds = [0.001, 0.01, 0.1, 1.0];
        // Binary fractions, so every order of summing gives the same sum; 1.0 sits on a bound.
        let values = [
            0.000_488_281_25,
            0.000_976_562_5,
            0.001_953_125,
            0.031_25,
            0.5,
            1.0,
            3.0,
            0.007_812_5,
        ];
        let (ours, theirs) = (ShardedHistogram::new(bounds), Histogram::new(bounds));
        let (our_count, their_count) = (ShardedCounter::default(), Counter::<u64>::default());
        std::thread::scope(|s| {
            for (worker, chunk) in values.chunks(3).enumerate() {
                let (ours, our_count) = (&ours, &our_count);
                s.spawn(move || {
                    crate::conn::worker::set(worker);
                    for &v in chunk {
                        ours.observe(v);
                        our_count.inc_by(2);
                    }
                });
            }
        });
        for v in values {
            theirs.observe(v);
            their_count.inc_by(2);
        }
        let a = exposition(|r| {
            r.register("h", "help", ours);
            r.register("c", "help", our_count);
        });
        let b = exposition(|r| {
            r.register("h", "help", theirs);
            r.register("c", "help", their_count);
        });
        assert_eq!(a, b);
        assert!(a.contains("h_count 8"), "{a}");
    }

    /// Workers up to the shard count each write their own shard; more workers than shards
    /// write one they share, and nothing is lost.
    #[test]
    fn workers_past_the_shard_count_wrap_onto_the_shards() {
        let count = ShardedCounter::default();
        let shards = count.shards.len();
        let workers: Vec<usize> = (0..shards).chain([shards, 2 * shards + 1, 1000]).collect();
        std::thread::scope(|s| {
            for &worker in &workers {
                let count = &count;
                s.spawn(move || {
                    crate::conn::worker::set(worker);
                    assert_eq!(my_shard(shards), worker % shards);
                    count.inc_by(3);
                });
            }
        });
        assert_eq!(count.get(), 3 * workers.len() as u64);
    }
}
