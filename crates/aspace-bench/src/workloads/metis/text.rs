//! The input of the `metis` workloads, a synthetic text, and the answer its job must produce:
//! the inverted index computed sequentially in plain Rust.
//!
//! # The text
//! `words` word ids (`u32`) drawn from a vocabulary of [`VOCAB`] words with Zipf's law
//! (exponent 1, like natural text: the word of rank `k` has probability proportional to `1/k`),
//! from a fixed seed, so every run of a size sees the same text. Ranks are mapped to ids by a
//! fixed random permutation, so a word's id (its place in the sorted index, like its spelling)
//! says nothing about its frequency. The sampler is the inverse of the cumulative distribution
//! (a binary search in a table of [`VOCAB`] probabilities). A text is generated once per size and
//! cached for the life of the process ([`text`]), the read-only input of every job, like a
//! mapped input file.
//!
//! # The index
//! The inverted index is a flat `u32` sequence: for each word that occurs, in increasing id
//! order, `word, count, position_1, ..., position_count` with the positions (indexes into the
//! text) increasing. The workload's final index, read back from the address space, must equal
//! [`Text::reference`] exactly ([`check_index`]).
//!
//! Not for: realistic tokenisation (there is none: words are ids) or texts of 2^32 words or more
//! (positions are `u32`; the workload's limit is far below).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Distinct words of the vocabulary.
pub const VOCAB: usize = 1 << 16;

/// The seed of every text.
pub const SEED: u64 = 0x006d_6574_6973; // "metis"

/// A generated text, what it contains and its inverted index.
#[derive(Debug)]
pub struct Text {
    /// Word id at each position.
    pub words: Vec<u32>,
    /// Occurrences of each word id (`VOCAB` entries).
    pub counts: Vec<u32>,
    /// The inverted index, computed sequentially (see the module doc for the layout).
    pub reference: Vec<u32>,
}

impl Text {
    /// Generates a text of `n` words (`n < 2^32`).
    pub fn generate(n: usize) -> Text {
        assert!(u32::try_from(n).is_ok(), "positions are u32");
        let mut rng = StdRng::seed_from_u64(SEED);
        // Cumulative Zipf(1) probabilities by rank.
        let mut cdf = Vec::with_capacity(VOCAB);
        let mut sum = 0.0f64;
        for k in 1..=VOCAB {
            sum += 1.0 / k as f64;
            cdf.push(sum);
        }
        let mut id_of_rank: Vec<u32> = (0..VOCAB as u32).collect();
        id_of_rank.shuffle(&mut rng);
        let words: Vec<u32> = (0..n)
            .map(|_| {
                let u = rng.gen::<f64>() * sum;
                let rank = cdf.partition_point(|&c| c <= u).min(VOCAB - 1);
                id_of_rank[rank]
            })
            .collect();
        let reference = sequential_index(&words);
        let mut counts = vec![0u32; VOCAB];
        for &w in &words {
            counts[w as usize] += 1;
        }
        Text {
            words,
            counts,
            reference,
        }
    }

    /// Distinct words in the text.
    pub fn distinct(&self) -> usize {
        self.counts.iter().filter(|&&c| c > 0).count()
    }

    /// The work a word gives a merger: its entries in the index (`count` positions and a
    /// two-entry header) plus a few entries' worth per group (choosing the next run, copying).
    fn merge_weight(count: u32) -> u64 {
        if count == 0 {
            0
        } else {
            u64::from(count) + 8
        }
    }

    /// `parts + 1` word-id boundaries cutting the vocabulary into `parts` ranges giving about
    /// the same merge work each (from the text's own counts, like TeraSort's sampled
    /// splitters): range `k` is `bounds[k]..bounds[k + 1]`, `bounds[0] == 0`,
    /// `bounds[parts] == VOCAB`. A word more frequent than `1/parts` of the text still lands in
    /// one range, so ranges past it may be empty.
    pub fn splitters(&self, parts: usize) -> Vec<u32> {
        let total: u64 = self.counts.iter().map(|&c| Self::merge_weight(c)).sum();
        let mut bounds = Vec::with_capacity(parts + 1);
        bounds.push(0u32);
        let mut seen = 0u64;
        for (w, &c) in self.counts.iter().enumerate() {
            // Start range k (k = bounds.len()) at the first word past k/parts of the work.
            while bounds.len() < parts && seen * parts as u64 >= total * bounds.len() as u64 {
                bounds.push(w as u32);
            }
            seen += Self::merge_weight(c);
        }
        while bounds.len() <= parts {
            bounds.push(VOCAB as u32);
        }
        bounds[parts] = VOCAB as u32;
        bounds
    }
}

/// Which reducer handles each word, and each reducer's words in increasing order.
#[derive(Debug)]
pub struct Assignment {
    /// `reducer_of[word]` (words absent from the text go to reducer 0).
    pub reducer_of: Vec<u16>,
    /// `words_of[r]`: reducer `r`'s words that occur in the text, increasing.
    pub words_of: Vec<Vec<u32>>,
}

impl Text {
    /// Assigns the words to `parts` reducers (`1..=65536`) so each gets about the same number
    /// of occurrences: greedily, most frequent word first, to the least loaded reducer (LPT
    /// scheduling; Metis balances its reduce tasks from sampled keys too). Hashing words to
    /// reducers would leave the 2-reducer split up to ~5 % of the text off balance under Zipf's
    /// law. A word more frequent than `1/parts` of the text still goes to one reducer.
    pub fn assignment(&self, parts: usize) -> Assignment {
        assert!((1..=1 << 16).contains(&parts), "{parts} reducers");
        let mut by_count: Vec<u32> = (0..VOCAB as u32)
            .filter(|&w| self.counts[w as usize] > 0)
            .collect();
        by_count.sort_unstable_by_key(|&w| (std::cmp::Reverse(self.counts[w as usize]), w));
        let mut load = std::collections::BinaryHeap::new();
        for r in 0..parts {
            load.push(std::cmp::Reverse((0u64, r)));
        }
        let mut reducer_of = vec![0u16; VOCAB];
        let mut words_of = vec![Vec::new(); parts];
        for w in by_count {
            let std::cmp::Reverse((l, r)) = load.pop().expect("parts >= 1");
            reducer_of[w as usize] = r as u16;
            words_of[r].push(w);
            load.push(std::cmp::Reverse((
                l + u64::from(self.counts[w as usize]),
                r,
            )));
        }
        for ws in &mut words_of {
            ws.sort_unstable();
        }
        Assignment {
            reducer_of,
            words_of,
        }
    }
}

/// The inverted index of `words`, computed sequentially (the layout of the module doc).
pub fn sequential_index(words: &[u32]) -> Vec<u32> {
    let mut positions: Vec<Vec<u32>> = vec![Vec::new(); VOCAB];
    for (i, &w) in words.iter().enumerate() {
        positions[w as usize].push(i as u32);
    }
    let mut out = Vec::with_capacity(words.len() + 2 * VOCAB);
    for (w, ps) in positions.iter().enumerate() {
        if !ps.is_empty() {
            out.push(w as u32);
            out.push(ps.len() as u32);
            out.extend_from_slice(ps);
        }
    }
    out
}

/// The text of `n` words, generated on first use and cached.
pub fn text(n: usize) -> Arc<Text> {
    static TEXTS: OnceLock<Mutex<HashMap<usize, Arc<Text>>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| Mutex::new(HashMap::new()));
    // Generated under the lock: two threads asking for the same size wait for one generation.
    let mut texts = texts.lock().unwrap_or_else(|p| p.into_inner());
    texts
        .entry(n)
        .or_insert_with(|| Arc::new(Text::generate(n)))
        .clone()
}

/// Compares an index `got` with the expected `want`; `Err` says where they first differ (the
/// entry and the word group it lies in) or how their lengths differ.
pub fn check_index(got: &[u32], want: &[u32]) -> Result<(), String> {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        // Walk the expected groups to name the word.
        let mut at = 0usize;
        let mut word = None;
        while at + 1 < want.len() && at <= i {
            word = Some(want[at]);
            at += 2 + want[at + 1] as usize;
        }
        return Err(format!(
            "index entry {i} is {} instead of {} (in the group of word {})",
            got[i],
            want[i],
            word.map_or("?".to_string(), |w| w.to_string())
        ));
    }
    if got.len() != want.len() {
        return Err(format!(
            "index has {} entries instead of {}",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_deterministic_and_zipf_shaped() {
        let a = Text::generate(100_000);
        let b = Text::generate(100_000);
        assert_eq!(a.words, b.words);
        let mut counts = a.counts.clone();
        counts.sort_unstable_by(|x, y| y.cmp(x));
        // Zipf(1) over 65,536 words: the top word is ~8.6 % of the text, the second about half.
        let top = f64::from(counts[0]) / 100_000.0;
        assert!((0.07..0.10).contains(&top), "{top}");
        let ratio = f64::from(counts[0]) / f64::from(counts[1]);
        assert!((1.6..2.5).contains(&ratio), "{ratio}");
        assert_eq!(a.counts.iter().map(|&c| c as usize).sum::<usize>(), 100_000);
    }

    #[test]
    fn sequential_index_groups_positions_by_word_in_order() {
        let idx = sequential_index(&[5, 3, 5, 5, 0]);
        assert_eq!(idx, vec![0, 1, 4, 3, 1, 1, 5, 3, 0, 2, 3]);
    }

    #[test]
    fn splitters_cover_the_vocabulary_in_balanced_increasing_ranges() {
        let t = Text::generate(200_000);
        for parts in [1, 2, 3, 8, 64] {
            let b = t.splitters(parts);
            assert_eq!(b.len(), parts + 1);
            assert_eq!((b[0], b[parts]), (0, VOCAB as u32));
            assert!(b.windows(2).all(|w| w[0] <= w[1]), "{parts}: {b:?}");
        }
        let b = t.splitters(2);
        let first: u64 = t.counts[..b[1] as usize]
            .iter()
            .map(|&c| u64::from(c))
            .sum();
        // Balanced up to the heaviest word (~9 % of the text).
        assert!((80_000..120_000).contains(&first), "{first}");
    }

    #[test]
    fn assignment_gives_every_word_once_and_balances_occurrences() {
        let t = Text::generate(200_000);
        for parts in [1, 2, 3, 64] {
            let a = t.assignment(parts);
            let mut load = vec![0u64; parts];
            let mut seen = 0;
            for (r, ws) in a.words_of.iter().enumerate() {
                assert!(ws.windows(2).all(|p| p[0] < p[1]), "{parts}: increasing");
                for &w in ws {
                    assert_eq!(a.reducer_of[w as usize] as usize, r);
                    load[r] += u64::from(t.counts[w as usize]);
                }
                seen += ws.len();
            }
            assert_eq!(seen, t.distinct(), "{parts}: every word once");
            if parts <= 3 {
                // LPT: within the heaviest word of balance when no word exceeds a share.
                let (lo, hi) = (load.iter().min().unwrap(), load.iter().max().unwrap());
                assert!(hi - lo <= 200, "{parts}: {load:?}");
            }
        }
    }

    #[test]
    fn check_index_accepts_equal_and_names_the_first_difference() {
        let t = Text::generate(10_000);
        assert_eq!(check_index(&t.reference, &t.reference), Ok(()));
        let mut bad = t.reference.clone();
        let i = bad.len() / 2;
        bad[i] ^= 1;
        let e = check_index(&bad, &t.reference).unwrap_err();
        assert!(e.contains(&format!("entry {i}")), "{e}");
        let short = &t.reference[..t.reference.len() - 1];
        assert!(check_index(short, &t.reference).is_err());
        let mut long = t.reference.clone();
        long.push(0);
        assert!(check_index(&long, &t.reference).is_err());
    }
}
