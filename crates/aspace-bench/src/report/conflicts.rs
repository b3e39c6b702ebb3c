//! The conflict table's input: `conflicts.json` in a results directory, written by
//! `aspace conflicts <workload> --cores ... --out DIR` (a build with `--features conflicts`), read
//! here to show per workload, design and core count how many cache-line conflicts one operation
//! caused and where.
//!
//! The file is a JSON array of [`ConflictRecord`]s; fields this reader does not know are ignored,
//! so a newer writer's additions do not break an older report. The file is optional: absent
//! means "no conflict audit in this run" (the page then says how to make one); present but not
//! such an array is an error, never a silently empty table.
//!
//! Not for: running the audit (the `conflicts` module does that).

use crate::error::BenchError;
use serde::Deserialize;
use std::path::Path;

/// The file name of the conflict audit in a results directory.
pub const CONFLICTS_JSON: &str = "conflicts.json";

/// The file name of the conflict table in Markdown (for the README), written beside it.
pub const CONFLICTS_MD: &str = "conflicts.md";

/// One source line's share of the conflicts.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ConflictLine {
    /// Where the conflicting access happens (`file.rs:123` or a symbol).
    pub site: String,
    /// Conflicts per operation at this site.
    pub per_op: f64,
}

/// The audit of one (workload, design, cores) point.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ConflictRecord {
    /// Workload name.
    pub workload: String,
    /// Design name.
    pub design: String,
    /// Simulated cores.
    pub cores: usize,
    /// Rounds audited.
    pub rounds: u64,
    /// Operations audited.
    pub ops: u64,
    /// Mean conflicts per operation.
    pub conflicts_per_op: f64,
    /// Largest conflicts of one operation.
    pub max_conflicts_per_op: f64,
    /// Conflicts per operation on RCU bookkeeping.
    pub rcu_conflicts_per_op: f64,
    /// The sites, most conflicts first.
    #[serde(default)]
    pub lines: Vec<ConflictLine>,
}

/// Parses the text of a `conflicts.json`.
///
/// # Errors
/// [`BenchError::InvalidResults`] naming `path` when `text` is not an array of records.
pub fn parse(path: &Path, text: &str) -> Result<Vec<ConflictRecord>, BenchError> {
    serde_json::from_str(text).map_err(|e| BenchError::invalid_results(path, e))
}

/// Reads `dir/conflicts.json`: `None` when the run has none.
///
/// # Errors
/// [`BenchError::InvalidResults`] when the file exists but cannot be read or parsed.
pub fn load(dir: &Path) -> Result<Option<Vec<ConflictRecord>>, BenchError> {
    let path = dir.join(CONFLICTS_JSON);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&path, &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(BenchError::invalid_results(&path, e)),
    }
}

/// The `n` sites with the most conflicts per operation, most first.
pub fn top_lines(r: &ConflictRecord, n: usize) -> Vec<&ConflictLine> {
    let mut lines: Vec<&ConflictLine> = r.lines.iter().collect();
    lines.sort_by(|a, b| b.per_op.total_cmp(&a.per_op));
    lines.truncate(n);
    lines
}

/// The conflict table in Markdown: one row per workload and design (in file order), one column
/// per core count audited (`mean (max)` conflicting lines per operation), the RCU machinery's
/// share at the largest count, and the site with the most conflicts there.
pub fn markdown(records: &[ConflictRecord]) -> String {
    let mut cores: Vec<usize> = records.iter().map(|r| r.cores).collect();
    cores.sort_unstable();
    cores.dedup();
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for r in records {
        if !rows.contains(&(r.workload.as_str(), r.design.as_str())) {
            rows.push((&r.workload, &r.design));
        }
    }
    let mut out = String::from("| workload | design |");
    for c in &cores {
        out.push_str(&format!(" {c} cores |"));
    }
    out.push_str(" RCU/op (most cores) | top line (most cores) |\n|---|---|");
    out.push_str(&"---|".repeat(cores.len() + 2));
    out.push('\n');
    for (w, d) in rows {
        let of = |c: usize| {
            records
                .iter()
                .find(|r| r.workload == w && r.design == d && r.cores == c)
        };
        out.push_str(&format!("| {w} | {d} |"));
        for &c in &cores {
            match of(c) {
                Some(r) => out.push_str(&format!(
                    " {} ({}) |",
                    per_op(r.conflicts_per_op),
                    r.max_conflicts_per_op
                )),
                None => out.push_str(" - |"),
            }
        }
        let last = cores.iter().rev().find_map(|&c| of(c));
        let (rcu, top) = match last {
            Some(r) => (
                per_op(r.rcu_conflicts_per_op),
                top_lines(r, 1).first().map_or("-".to_string(), |l| {
                    format!("`{}` {}", l.site, per_op(l.per_op))
                }),
            ),
            None => ("-".to_string(), "-".to_string()),
        };
        out.push_str(&format!(" {rcu} | {top} |\n"));
    }
    out
}

/// Lines per operation: three significant digits below 10, integers above.
fn per_op(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if v < 0.01 {
        format!("{v:.4}")
    } else if v < 10.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"[{"workload":"local","design":"interval","cores":2,"rounds":10,
        "ops":20,"conflicts_per_op":0.5,"max_conflicts_per_op":3,"rcu_conflicts_per_op":0.1,
        "lines":[{"site":"a.rs:1","per_op":0.1},{"site":"b.rs:2","per_op":0.4}],
        "warmup":2,"rcu_lines":[{"site":"rcu.rs:9","per_op":0.1}],
        "written_by":"a newer aspace"}]"#;

    #[test]
    fn parses_records_and_ignores_unknown_fields() {
        let rs = parse(Path::new("conflicts.json"), ONE).unwrap();
        assert_eq!(rs.len(), 1);
        assert_eq!((rs[0].workload.as_str(), rs[0].cores), ("local", 2));
        assert_eq!(rs[0].max_conflicts_per_op, 3.0);
        let top = top_lines(&rs[0], 1);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].site, "b.rs:2");
    }

    #[test]
    fn markdown_has_a_column_per_core_count_and_names_the_top_line() {
        let mut rs = parse(Path::new("conflicts.json"), ONE).unwrap();
        let mut wide = rs[0].clone();
        wide.cores = 64;
        wide.conflicts_per_op = 12.5;
        rs.push(wide);
        let md = markdown(&rs);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 3, "{md}");
        assert!(lines[0].contains("| 2 cores | 64 cores |"), "{md}");
        assert_eq!(
            lines[2],
            "| local | interval | 0.500 (3) | 12.5 (3) | 0.100 | `b.rs:2` 0.400 |"
        );
    }

    #[test]
    fn absent_is_none_and_invalid_is_an_error() {
        let dir = std::env::temp_dir().join(format!("aspace-conflicts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load(&dir).unwrap(), None);
        std::fs::write(dir.join(CONFLICTS_JSON), ONE).unwrap();
        assert_eq!(load(&dir).unwrap().unwrap().len(), 1);
        for bad in ["{}", "[{\"workload\":\"local\"}]", "not json"] {
            std::fs::write(dir.join(CONFLICTS_JSON), bad).unwrap();
            let e = load(&dir).unwrap_err();
            assert!(matches!(e, BenchError::InvalidResults { .. }), "{bad}: {e}");
            assert!(e.to_string().contains(CONFLICTS_JSON), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
