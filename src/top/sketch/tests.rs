use super::*;

/// A Zipf-like stream (key k seen about n/k times), shuffled deterministically.
fn zipf(keys: u64, n: u64) -> Vec<u64> {
    let mut stream = Vec::new();
    for k in 1..=keys {
        for _ in 0..(n / k).max(1) {
            stream.push(k);
        }
    }
    // A fixed-seed xorshift shuffle.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..stream.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        stream.swap(i, (x % (i as u64 + 1)) as usize);
    }
    stream
}

#[test]
fn the_heaviest_keys_are_found_with_bounded_counts() {
    let stream = zipf(20_000, 5_000);
    let mut exact = std::collections::HashMap::new();
    let mut s = Sketch::default();
    for &k in &stream {
        *exact.entry(k).or_insert(0u64) += 1;
        s.record(k, (true, 1), |t| t.push(&format!("key-{k}")));
    }
    let total = stream.len() as u64;
    let mut top: Vec<_> = s.entries().collect();
    top.sort_by_key(|(_, e)| std::cmp::Reverse(e.refused));
    let (hash, e) = top[0];
    assert_eq!(hash, 1, "the heaviest key comes first");
    assert_eq!(e.text(), "key-1");
    // Its true count lies within [refused, refused + error].
    let truth = exact[&1];
    assert!(u64::from(e.refused) <= truth && truth <= u64::from(e.refused) + u64::from(e.error));
    // Every key seen well above total / CAPACITY times is in it, with an honest bound.
    for (&k, &c) in &exact {
        if c > 2 * total / CAPACITY as u64 {
            let (_, e) = s
                .entries()
                .find(|(h, _)| *h == k)
                .unwrap_or_else(|| panic!("key {k} ({c} of {total}) is kept"));
            assert!(
                u64::from(e.refused) <= c && c <= u64::from(e.refused) + u64::from(e.error),
                "key {k}: {c} within its bound"
            );
        }
    }
    assert!(s.entries().count() <= CAPACITY);
}

#[test]
fn text_is_cut_at_a_character_boundary() {
    let mut t = TextBuf::default();
    t.push(&"é".repeat(40));
    let mut s = Sketch::default();
    s.record(7, (false, 1), |buf| *buf = t);
    let text = s.entries().next().expect("one").1.text().to_owned();
    assert_eq!(text, "é".repeat(TEXT_BYTES / 2));
}

/// The same rules with a linear scan in place of the index: what the sketch must
/// keep, counter for counter.
struct Model {
    /// (hash, admitted, refused, error, total)
    keys: Vec<(u64, u32, u32, u32, u32)>,
    misses: Misses,
}

impl Model {
    fn new(salt: u64) -> Self {
        Self {
            keys: Vec::new(),
            misses: Misses::new(salt),
        }
    }

    fn record(&mut self, hash: u64, refused: bool) {
        let slot = match self.keys.iter().position(|k| k.0 == hash) {
            Some(i) => i,
            None if self.keys.len() < CAPACITY => {
                self.keys.push((hash, 0, 0, 0, 0));
                self.keys.len() - 1
            }
            None => {
                let seen = self.misses.add(hash);
                let mut min = 0;
                for (i, k) in self.keys.iter().enumerate() {
                    if k.4 < self.keys[min].4 {
                        min = i;
                    }
                }
                if seen <= self.keys[min].4 {
                    return;
                }
                let total = self.keys[min].4;
                self.misses.left(self.keys[min].0, total);
                self.keys[min] = (hash, 0, 0, total, total);
                min
            }
        };
        let k = &mut self.keys[slot];
        k.4 += 1;
        if refused {
            k.2 += 1;
        } else {
            k.1 += 1;
        }
    }
}

proptest::proptest! {
    #[test]
    fn the_index_finds_what_a_scan_finds(
        salt in proptest::prelude::any::<u64>(),
        pool in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..300),
        picks in proptest::collection::vec((0usize..300, proptest::prelude::any::<bool>()), 1..4_000),
    ) {
        let mut sketch = Sketch::new(salt);
        let mut model = Model::new(salt);
        for (pick, refused) in picks {
            let hash = pool[pick % pool.len()];
            sketch.record(hash, (refused, 1), |t| t.push("k"));
            model.record(hash, refused);
        }
        let got: Vec<_> = sketch
            .entries()
            .map(|(h, e)| (h, e.admitted, e.refused, e.error))
            .collect();
        let want: Vec<_> = model.keys.iter().map(|k| (k.0, k.1, k.2, k.3)).collect();
        proptest::prop_assert_eq!(got, want);
        for &(hash, ..) in &model.keys {
            proptest::prop_assert!(sketch.find(hash).is_some());
        }
    }
}

/// A key seen once, the `i`-th (hashes far from the heavy keys').
fn one_off(i: usize) -> u64 {
    (i as u64 + 1_000_000).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The `i`-th heavy key.
fn heavy_key(i: usize) -> u64 {
    (i as u64 + 1).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
}

/// Records `stream` (the odd decisions refused) into a sketch salted `salt`, then checks
/// the docs' promises: every key decided more than 1/64 of the times is held, and every
/// held key's true count lies within [counted, counted + error].
fn keeps_its_promises(
    salt: u64,
    stream: &[u64],
) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut sketch = Sketch::new(salt);
    let mut truth = std::collections::HashMap::new();
    for (i, &k) in stream.iter().enumerate() {
        *truth.entry(k).or_insert(0u64) += 1;
        sketch.record(k, (i % 2 == 1, 1), |t| t.push("k"));
    }
    let n = stream.len() as u64;
    for (hash, e) in sketch.entries() {
        let counted = u64::from(e.admitted + e.refused);
        let c = truth[&hash];
        proptest::prop_assert!(
            counted <= c && c <= counted + u64::from(e.error),
            "{hash}: {c} within [{counted}, {counted} + {}]",
            e.error
        );
    }
    for (&k, &c) in &truth {
        if 64 * c > n {
            proptest::prop_assert!(
                sketch.find(k).is_some(),
                "a key seen {c} times of {n} is shown"
            );
        } else if sketch.find(k).is_none() {
            proptest::prop_assert!(u64::from(sketch.uncounted_at_most(k)) >= c);
        }
    }
    Ok(())
}

/// `before` one-offs, then the heavy key at every `k`-th decision from `phase` (the
/// others one-offs) until it has been seen `heavy` times, then `after` one-offs.
fn cadence(k: usize, phase: usize, heavy: usize, before: usize, after: usize) -> Vec<u64> {
    let mut fresh = 0..;
    let mut stream: Vec<u64> = (&mut fresh).take(before).map(one_off).collect();
    let mut seen = 0;
    for i in 0.. {
        if seen == heavy {
            break;
        }
        if i % k == phase {
            stream.push(heavy_key(0));
            seen += 1;
        } else {
            stream.push(one_off(fresh.next().unwrap_or_default()));
        }
    }
    stream.extend(fresh.take(after).map(one_off));
    stream
}

/// The attack of issue #44: 149 refusals at every 8th decision among one-offs, after a
/// burst that filled the sketch, at every phase of the cadence.
#[test]
fn a_key_at_every_eighth_decision_is_shown_at_every_phase() {
    for salt in [0, 1, 0xdead_beef, u64::MAX] {
        for phase in 0..8 {
            for before in [0, 4_000, 8_000] {
                let stream = cadence(8, phase, 149, before, 0);
                if let Err(e) = keeps_its_promises(salt, &stream) {
                    panic!("salt {salt}, phase {phase}, {before} before: {e}");
                }
            }
        }
    }
}

/// Each filler key `repeat` times, spread as far apart as they go (round robin).
fn spread(first: usize, keys: usize, repeat: usize) -> Vec<u64> {
    (0..repeat)
        .flat_map(|_| (first..first + keys).map(one_off))
        .collect()
}

proptest::proptest! {
    /// One heavy key at every k-th decision among one-offs, at any phase, with bursts of
    /// one-offs before and after as long as it stays above 1/64 of the decisions.
    #[test]
    fn a_key_at_every_kth_decision_is_shown(
        salt in proptest::prelude::any::<u64>(),
        k in 2usize..=63,
        phase in 0usize..63,
        heavy in 16usize..400,
        before in 0usize..=100,
        after in 0usize..=100,
    ) {
        let phase = phase % k;
        // What the bursts may add with the heavy key still above 1/64.
        let slack = 64 * heavy - 1 - (phase + (heavy - 1) * k + 1);
        let before = slack * before / 100;
        let after = (slack - before) * after / 100;
        keeps_its_promises(salt, &cadence(k, phase, heavy, before, after))?;
    }

    /// Any stream at all: keys drawn skewed (`a % (b + 1)`: many small, a few large),
    /// in whatever order proptest finds.
    #[test]
    fn keys_above_a_64th_are_shown_in_any_stream(
        salt in proptest::prelude::any::<u64>(),
        picks in proptest::collection::vec((0usize..2_000, 0usize..100), 1..6_000),
    ) {
        let stream: Vec<u64> = picks.iter().map(|&(a, b)| heavy_key(a % (b + 1))).collect();
        keeps_its_promises(salt, &stream)?;
    }

    /// Heavy keys among keys seen a few times each, in an order chosen against the
    /// sketch: shuffled, the heavy keys first, last, or at a fixed cadence among filler
    /// keys spread as far apart as they go.
    #[test]
    fn keys_above_a_64th_are_shown_in_any_order(
        salt in proptest::prelude::any::<u64>(),
        heavy in proptest::collection::vec(20usize..300, 1..6),
        repeat in 1usize..5,
        order in 0u8..4,
        seed in 1u64..,
    ) {
        let least = heavy.iter().copied().min().unwrap_or(20);
        let filler = (64 * least - 1).saturating_sub(heavy.iter().sum()) / repeat;
        let heavies: Vec<u64> = heavy
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| std::iter::repeat_n(heavy_key(i), c))
            .collect();
        let fill = spread(0, filler, repeat);
        let stream: Vec<u64> = match order {
            0 => {
                let (mut s, mut seed) = ([heavies, fill].concat(), seed);
                for i in (1..s.len()).rev() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    s.swap(i, (seed % (i as u64 + 1)) as usize);
                }
                s
            }
            1 => [heavies, fill].concat(),
            2 => [fill, heavies].concat(),
            _ => {
                let every = (fill.len() / heavies.len()).max(1);
                let mut s = Vec::new();
                for (i, chunk) in fill.chunks(every).enumerate() {
                    s.extend_from_slice(chunk);
                    s.extend(heavies.get(i));
                }
                s.extend(heavies.iter().skip(fill.len().div_ceil(every)));
                s
            }
        };
        keeps_its_promises(salt, &stream)?;
    }
}
