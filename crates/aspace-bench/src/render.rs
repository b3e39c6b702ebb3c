//! A results directory rendered for people: from its measurements (`results.json`), its run
//! description (`run.json`, optional) and its conflict audit (`conflicts.json`, optional), the
//! plots (one per workload and `headline.svg`), `headline.md` and `index.html`.
//!
//! The suite calls [`render`] at the end of a run; `aspace report DIR` calls [`report_dir`] to
//! render a directory again later (after adding a conflict audit, or with a newer `aspace`).
//! Every file is written through a temporary file and a rename ([`write_file`]), so a reader
//! never sees half a page.
//!
//! Not for: measuring (see `suite.rs`) or the contents of each file (`report`, `plot`).

use crate::error::BenchError;
use crate::measurement::Measurement;
use crate::plot::{headline as headline_plot, write_plots};
use crate::report::conflicts::{self, ConflictRecord};
use crate::report::headline::{markdown, ratio_groups};
use crate::report::html::{index_html, Page};
use crate::report::machine::RunInfo;
use std::path::Path;

/// The measurements file of a results directory.
pub const RESULTS_JSON: &str = "results.json";

/// The Markdown headline of a results directory.
pub const HEADLINE_MD: &str = "headline.md";

/// Writes `text` to `dir/name` through a temporary file and a rename, so a reader (or an
/// interrupted run) never sees a half-written file.
pub fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), BenchError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).map_err(|e| BenchError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| BenchError::io(path, e))
}

/// Writes the plots, `headline.svg`, `headline.md`, `conflicts.md` (when there is an audit) and
/// `index.html` of `ms` into `dir` (which
/// must exist). `dir` is also shown on the page in the commands it suggests.
pub fn render(
    dir: &Path,
    ms: &[Measurement],
    run: Option<&RunInfo>,
    conflicts: Option<&[ConflictRecord]>,
) -> Result<(), BenchError> {
    let plots = write_plots(dir, ms)?;
    let head_path = dir.join(headline_plot::FILE);
    let head =
        headline_plot::headline_svg(&ratio_groups(ms)).map_err(|message| BenchError::Plot {
            path: head_path.clone(),
            message,
        })?;
    let headline_svg = match head {
        Some(svg) => {
            write_file(dir, headline_plot::FILE, &svg)?;
            Some(headline_plot::FILE)
        }
        None => None,
    };
    write_file(dir, HEADLINE_MD, &markdown(ms, run))?;
    if let Some(records) = conflicts {
        write_file(dir, conflicts::CONFLICTS_MD, &conflicts::markdown(records))?;
    }
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let title = format!("aspace results {name}");
    let shown = dir.display().to_string();
    let page = Page {
        title: &title,
        ms,
        run,
        conflicts,
        dir: &shown,
        headline_svg,
        plots: &plots,
    };
    write_file(dir, "index.html", &index_html(&page))
}

/// Reads `dir/results.json`.
///
/// # Errors
/// [`BenchError::InvalidResults`] when `dir` is not a directory, or its `results.json` is
/// missing, unreadable, not an array of measurements, or empty.
pub fn read_measurements(dir: &Path) -> Result<Vec<Measurement>, BenchError> {
    if !dir.is_dir() {
        return Err(BenchError::invalid_results(dir, "no such directory"));
    }
    let path = dir.join(RESULTS_JSON);
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::invalid_results(&path, e))?;
    let ms: Vec<Measurement> =
        serde_json::from_str(&text).map_err(|e| BenchError::invalid_results(&path, e))?;
    if ms.is_empty() {
        return Err(BenchError::invalid_results(&path, "no measurements"));
    }
    Ok(ms)
}

/// `aspace report DIR`: renders `dir` again from the files in it.
///
/// # Errors
/// [`BenchError::InvalidResults`] for a missing or unusable directory or input file;
/// [`BenchError::Io`] or [`BenchError::Plot`] when writing fails.
pub fn report_dir(dir: &Path) -> Result<(), BenchError> {
    let ms = read_measurements(dir)?;
    let run = RunInfo::read(dir)?;
    let conflicts = conflicts::load(dir)?;
    render(dir, &ms, run.as_ref(), conflicts.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(workload: &str, design: &str, threads: usize, ops: f64) -> Measurement {
        Measurement {
            repeat: 1,
            duration_ms: 100,
            ..Measurement::example(workload, design, threads, ops, (ops, ops))
        }
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("aspace-render-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn report_dir_renders_every_file_and_picks_up_a_conflict_audit() {
        let dir = scratch("ok");
        let ms = vec![m("local", "linux", 2, 1e5), m("local", "coarse", 2, 3e6)];
        std::fs::write(dir.join(RESULTS_JSON), serde_json::to_string(&ms).unwrap()).unwrap();
        report_dir(&dir).unwrap();
        for f in ["index.html", "local.svg", "headline.svg", "headline.md"] {
            assert!(dir.join(f).is_file(), "{f} missing");
        }
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        assert!(html.contains("no conflict audit"));
        std::fs::write(
            dir.join("conflicts.json"),
            r#"[{"workload":"local","design":"coarse","cores":2,"rounds":1,"ops":2,
                "conflicts_per_op":1.5,"max_conflicts_per_op":2,"rcu_conflicts_per_op":0,
                "lines":[{"site":"space.rs:7","per_op":1.5}]}]"#,
        )
        .unwrap();
        report_dir(&dir).unwrap();
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        assert!(html.contains("space.rs:7") && !html.contains("no conflict audit"));
        let md = std::fs::read_to_string(dir.join(HEADLINE_MD)).unwrap();
        assert!(
            md.contains("| local | 2 | `coarse` 3M ops/s | 30x `linux` |"),
            "{md}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn report_dir_refuses_missing_and_invalid_directories() {
        let missing = std::env::temp_dir().join("aspace-render-no-such-dir");
        assert!(matches!(
            report_dir(&missing),
            Err(BenchError::InvalidResults { .. })
        ));
        let dir = scratch("bad");
        assert!(matches!(
            report_dir(&dir),
            Err(BenchError::InvalidResults { .. })
        ));
        for bad in ["[]", "{\"workload\":1}", "["] {
            std::fs::write(dir.join(RESULTS_JSON), bad).unwrap();
            let e = report_dir(&dir).unwrap_err();
            assert!(matches!(e, BenchError::InvalidResults { .. }), "{bad}: {e}");
        }
        std::fs::write(
            dir.join(RESULTS_JSON),
            serde_json::to_string(&[m("local", "linux", 1, 1.0)]).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join("conflicts.json"), "{}").unwrap();
        let e = report_dir(&dir).unwrap_err();
        assert!(e.to_string().contains("conflicts.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
