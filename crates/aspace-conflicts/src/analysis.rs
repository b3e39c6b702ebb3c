//! Conflict analysis of a recorded run (RadixVM §3 / Commuter's definition, per cache line).
//!
//! Input: the operations of a run, each tagged with the core (thread) that ran it and its round,
//! and the background log ([`BgAccess`], the RCU reclaimer and other threads outside any
//! operation). Output ([`Analysis`]): per operation, the number of *conflicting* lines: lines
//! it accessed that an operation of a different core in the same or the next round also
//! accessed, with at least one of the two accesses a write. Those are the lines that must move
//! between cores' caches for the two operations to run; a design that scales on disjoint work
//! has none.
//!
//! Algorithm: per round, one summary per line of which agents (cores, or background threads)
//! accessed it and which wrote it, kept as "first agent + whether there was another", which is
//! all the question "did some agent other than me access / write it" needs. Two summaries per
//! round: one of the operations' own accesses, one of everything (RCU buckets and background
//! included). An operation's own lines are checked against the others' own accesses
//! ([`Analysis::conflicts_per_op`]); its RCU-bucket lines and the background threads' lines are
//! checked against everything ([`Analysis::rcu_conflicts_per_op`], amortized over the
//! operations). Operations of the first `warmup` rounds are not counted (steady state), but
//! their accesses still count as the others' accesses of their rounds.
//!
//! Lines are labelled by access site ([`LineAccess::label`], `file:line:col` of the atomic
//! operation or lock call), which stands in for the symbol or allocation site; the top sites
//! are reported with how many conflicting lines per operation they account for.
//!
//! Not for: timing; plain memory that the shim does not see (see the crate doc).

use crate::record::{BgAccess, LineAccess, OpAccesses, Site};
use std::collections::HashMap;

/// One recorded operation.
#[derive(Clone, Debug)]
pub struct OpRecord {
    /// The core (thread index) that ran it.
    pub core: usize,
    /// Its round.
    pub round: u64,
    /// What it accessed.
    pub accesses: OpAccesses,
}

/// A site and how many conflicting lines per counted operation it accounts for.
#[derive(Clone, Debug, PartialEq)]
pub struct LineReport {
    /// `file:line:col` of the access that names the line.
    pub site: String,
    /// Conflicting lines labelled with this site, per counted operation.
    pub per_op: f64,
}

/// The conflict figures of one run.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// Operations counted (those of rounds `>= warmup`).
    pub ops: u64,
    /// Mean conflicting lines per counted operation (its own accesses).
    pub conflicts_per_op: f64,
    /// The most conflicting lines of one counted operation.
    pub max_conflicts_per_op: u64,
    /// Conflicting lines of RCU machinery (operations' RCU scopes and background threads) per
    /// counted operation.
    pub rcu_conflicts_per_op: f64,
    /// The sites of the operations' conflicting lines, most frequent first.
    pub lines: Vec<LineReport>,
    /// The sites of the RCU machinery's conflicting lines, most frequent first.
    pub rcu_lines: Vec<LineReport>,
}

/// Which agents accessed a line in a round: the first one and whether there was another.
#[derive(Clone, Copy, Debug, Default)]
struct Who {
    first: Option<u64>,
    more: bool,
}

impl Who {
    fn add(&mut self, agent: u64) {
        match self.first {
            None => self.first = Some(agent),
            Some(a) if a != agent => self.more = true,
            Some(_) => {}
        }
    }

    fn other_than(&self, agent: u64) -> bool {
        self.more || matches!(self.first, Some(a) if a != agent)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Summary {
    any: Who,
    writers: Who,
}

impl Summary {
    fn add(&mut self, agent: u64, write: bool) {
        self.any.add(agent);
        if write {
            self.writers.add(agent);
        }
    }

    /// Whether an access by `agent` (a write if `write`) conflicts with this round's others.
    fn conflicts(&self, agent: u64, write: bool) -> bool {
        if write {
            self.any.other_than(agent)
        } else {
            self.writers.other_than(agent)
        }
    }
}

type Round = HashMap<usize, Summary>;

/// Background threads are agents numbered above every core.
const BG_AGENT: u64 = 1 << 32;

fn conflicts(rounds: &HashMap<u64, Round>, round: u64, line: usize, agent: u64, w: bool) -> bool {
    [round, round + 1].iter().any(|r| {
        rounds
            .get(r)
            .and_then(|m| m.get(&line))
            .is_some_and(|s| s.conflicts(agent, w))
    })
}

fn top(counts: HashMap<Site, u64>, ops: u64) -> Vec<LineReport> {
    let mut v: Vec<(Site, u64)> = counts.into_iter().collect();
    v.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| a.0.to_string().cmp(&b.0.to_string()))
    });
    v.into_iter()
        .map(|(site, n)| LineReport {
            site: site.to_string(),
            per_op: n as f64 / ops.max(1) as f64,
        })
        .collect()
}

/// Analyses a run: `ops` of every core and round, the `background` log, and the number of
/// warm-up rounds whose operations are not counted (see the module doc).
pub fn analyze(ops: &[OpRecord], background: &[BgAccess], warmup: u64) -> Analysis {
    let mut own: HashMap<u64, Round> = HashMap::new();
    let mut all: HashMap<u64, Round> = HashMap::new();
    for op in ops {
        let agent = op.core as u64;
        let (o, a) = (
            own.entry(op.round).or_default(),
            all.entry(op.round).or_default(),
        );
        for (&line, acc) in &op.accesses.lines {
            o.entry(line).or_default().add(agent, acc.write);
            a.entry(line).or_default().add(agent, acc.write);
        }
        for (&line, acc) in &op.accesses.rcu {
            a.entry(line).or_default().add(agent, acc.write);
        }
    }
    // Background accesses, merged per (round, thread, line).
    let mut bg: HashMap<(u64, u64, usize), LineAccess> = HashMap::new();
    for b in background {
        let e = bg.entry((b.round, b.thread, b.line)).or_insert(LineAccess {
            write: false,
            site: b.site,
            write_site: None,
        });
        if b.write {
            e.write = true;
            e.write_site.get_or_insert(b.site);
        }
    }
    for (&(round, thread, line), acc) in &bg {
        all.entry(round)
            .or_default()
            .entry(line)
            .or_default()
            .add(BG_AGENT + thread, acc.write);
    }

    let mut result = Analysis::default();
    let (mut total, mut rcu_total) = (0u64, 0u64);
    let mut sites: HashMap<Site, u64> = HashMap::new();
    let mut rcu_sites: HashMap<Site, u64> = HashMap::new();
    for op in ops.iter().filter(|op| op.round >= warmup) {
        result.ops += 1;
        let agent = op.core as u64;
        let mut n = 0;
        for (&line, acc) in &op.accesses.lines {
            if conflicts(&own, op.round, line, agent, acc.write) {
                n += 1;
                *sites.entry(acc.label()).or_default() += 1;
            }
        }
        total += n;
        result.max_conflicts_per_op = result.max_conflicts_per_op.max(n);
        for (&line, acc) in &op.accesses.rcu {
            if conflicts(&all, op.round, line, agent, acc.write) {
                rcu_total += 1;
                *rcu_sites.entry(acc.label()).or_default() += 1;
            }
        }
    }
    for (&(round, thread, line), acc) in bg.iter().filter(|(k, _)| k.0 >= warmup) {
        if conflicts(&all, round, line, BG_AGENT + thread, acc.write) {
            rcu_total += 1;
            *rcu_sites.entry(acc.label()).or_default() += 1;
        }
    }
    let n = result.ops.max(1) as f64;
    result.conflicts_per_op = total as f64 / n;
    result.rcu_conflicts_per_op = rcu_total as f64 / n;
    result.lines = top(sites, result.ops);
    result.rcu_lines = top(rcu_sites, result.ops);
    result
}

/// Two sites that met on conflicting lines: an operation's access to a line and another
/// core's access to the same line in the same or the next round, one of the two a write. What
/// the per-site table cannot say: *whose* access a site conflicts with (issue 21 found both of
/// its fixes this way: a lock CAS on the neighbouring core's node, a window over another core's
/// arena).
#[derive(Clone, Debug, PartialEq)]
pub struct PairReport {
    /// The counted operation's site for the line ([`LineAccess::label`]) and whether it wrote.
    pub mine: String,
    /// Whether the operation wrote the line.
    pub mine_write: bool,
    /// The other core's site for the line and whether it wrote.
    pub other: String,
    /// Whether the other core wrote the line.
    pub other_write: bool,
    /// Conflicting (operation, line) accesses with this pair, per counted operation (an
    /// access meeting several sites counts once per distinct other site).
    pub per_op: f64,
}

/// The site pairs behind the operations' own conflicting lines ([`Analysis::conflicts_per_op`];
/// RCU scopes and background threads are not paired), most frequent first. Same inputs and
/// definition as [`analyze`].
pub fn analyze_pairs(ops: &[OpRecord], warmup: u64) -> Vec<PairReport> {
    type Accesses = Vec<(u64, Site, bool)>;
    let mut index: HashMap<(u64, usize), Accesses> = HashMap::new();
    for op in ops {
        for (&line, acc) in &op.accesses.lines {
            index.entry((op.round, line)).or_default().push((
                op.core as u64,
                acc.label(),
                acc.write,
            ));
        }
    }
    let mut pairs: HashMap<(Site, bool, Site, bool), u64> = HashMap::new();
    let mut counted = 0u64;
    let mut seen: Vec<(Site, bool)> = Vec::new();
    for op in ops.iter().filter(|op| op.round >= warmup) {
        counted += 1;
        let agent = op.core as u64;
        for (&line, acc) in &op.accesses.lines {
            seen.clear();
            for r in [op.round, op.round + 1] {
                let Some(others) = index.get(&(r, line)) else {
                    continue;
                };
                for &(a, site, w) in others {
                    if a != agent && (w || acc.write) && !seen.contains(&(site, w)) {
                        seen.push((site, w));
                    }
                }
            }
            for &(site, w) in &seen {
                *pairs.entry((acc.label(), acc.write, site, w)).or_default() += 1;
            }
        }
    }
    let mut v: Vec<_> = pairs.into_iter().collect();
    v.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| a.0 .0.to_string().cmp(&b.0 .0.to_string()))
            .then_with(|| a.0 .2.to_string().cmp(&b.0 .2.to_string()))
    });
    v.into_iter()
        .map(|((mine, mine_write, other, other_write), n)| PairReport {
            mine: mine.to_string(),
            mine_write,
            other: other.to_string(),
            other_write,
            per_op: n as f64 / counted.max(1) as f64,
        })
        .collect()
}
