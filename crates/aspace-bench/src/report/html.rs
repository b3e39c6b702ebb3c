//! The results page, `index.html`: what a user opens first after a run.
//!
//! Order: one short takeaway paragraph (generated from the verdicts of the address-space
//! workloads, or of every workload when the run has none), the headline table once (the
//! address-space workloads first), then the address-space (VM) workloads, then the building
//! blocks (RCU, interval maps, counters); per workload its verdict sentence, what it does
//! (`aspace list`'s text), which paper figure it mirrors, its plot, its ratio table and,
//! folded, every measurement with its extra metrics; then the conflict audit (or how to make
//! one), the machine, commit and settings, and links to the data files (the headline plot is
//! linked there, not repeated on the page). The page is static: inline CSS, relative links, no script and no network, so
//! it reads the same opened from disk.
//!
//! Not for: drawing (the SVGs are drawn by `plot`; this page only links them by file name).

use crate::measurement::Measurement;
use crate::report::conflicts::{top_lines, ConflictRecord, CONFLICTS_JSON};
use crate::report::headline::{
    headlines, row_cells, sentence, takeaway, workload_headline, WorkloadHeadline, HEAD,
};
use crate::report::machine::{RunInfo, RUN_JSON};
use crate::report::ratios::{ratio_table, Cell, RatioTable};
use crate::report::verdict::Verdict;
use crate::report::{compact, units, workload_order};
use crate::workloads;
use std::fmt::Write as _;

/// What the page shows, and the files it links.
#[derive(Clone, Copy, Debug)]
pub struct Page<'a> {
    /// The page title (`aspace results 20261124-090514`).
    pub title: &'a str,
    /// Every measurement of the run.
    pub ms: &'a [Measurement],
    /// The machine and settings, if recorded.
    pub run: Option<&'a RunInfo>,
    /// The conflict audit, if the directory has one.
    pub conflicts: Option<&'a [ConflictRecord]>,
    /// The directory as the user would type it (for the commands the page suggests).
    pub dir: &'a str,
    /// The headline plot's file name, if drawn.
    pub headline_svg: Option<&'a str>,
    /// (workload, plot file name) for each workload that has a plot.
    pub plots: &'a [(String, String)],
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn code(s: &str) -> String {
    format!("<code>{}</code>", esc(s))
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:72em;line-height:1.4}\
table{border-collapse:collapse;margin:0.5em 0 1.5em}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;vertical-align:top}\
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\
td.l{text-align:left}small{color:#666}img{max-width:100%;height:auto}\
code{background:#f3f3f3;padding:0 3px}.mirrors{color:#555}section{margin-bottom:2.5em}";

/// The whole page.
pub fn index_html(p: &Page<'_>) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{t}</title>\n<style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(p.title)
    );
    if let Some(run) = p.run {
        let _ = writeln!(h, "<p>{}</p>", esc(&run.summary_line()));
    }
    let (vm, blocks): (Vec<&str>, Vec<&str>) = workload_order(p.ms)
        .into_iter()
        .partition(|w| workloads::is_address_space(w));
    headline_section(&mut h, p, &vm);
    for (id, title, ws) in [
        ("vm", "Address-space workloads", &vm),
        ("blocks", "Building blocks", &blocks),
    ] {
        if ws.is_empty() {
            continue;
        }
        let _ = writeln!(h, "<h2 id=\"{id}\">{title}</h2>");
        for w in ws {
            workload_section(&mut h, p, w);
        }
    }
    conflict_section(&mut h, p);
    machine_section(&mut h, p);
    files_section(&mut h, p);
    h.push_str("</body></html>\n");
    h
}

fn headline_section(h: &mut String, p: &Page<'_>, vm: &[&str]) {
    let hs = headlines(p.ms);
    if hs.is_empty() {
        h.push_str(
            "<section id=\"headline\"><p>No measurement with a positive throughput.</p>\
             </section>\n",
        );
        return;
    }
    // The address-space workloads first, in report order, then the building blocks.
    let (mut first, rest): (Vec<WorkloadHeadline>, Vec<WorkloadHeadline>) = hs
        .into_iter()
        .partition(|x| vm.contains(&x.workload.as_str()));
    let summary = if first.is_empty() { &rest } else { &first };
    let _ = writeln!(
        h,
        "<section id=\"takeaway\"><p class=\"takeaway\">{}{}</p></section>",
        if first.is_empty() {
            ""
        } else {
            "Address spaces: "
        },
        takeaway(summary, code)
    );
    h.push_str("<section id=\"headline\"><table><tr>");
    for c in HEAD {
        let _ = write!(h, "<th>{c}</th>");
    }
    h.push_str("</tr>\n");
    first.extend(rest);
    for x in &first {
        h.push_str("<tr>");
        for (i, c) in row_cells(x, code).into_iter().enumerate() {
            // Cells hold code() markup around escaped names; the rest is our own text.
            if i == 0 {
                let _ = write!(
                    h,
                    "<td class=\"l\"><a href=\"#w-{w}\">{w}</a></td>",
                    w = esc(&c)
                );
            } else {
                let _ = write!(h, "<td class=\"l\">{c}</td>");
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str(
        "</table>\n<p><small>Medians at the largest thread count each workload ran at. A design \
         is named the winner only when its [min, max] range over the repeats lies clear of the \
         other design's and neither point is unstable (repeats that disagree: max/min above \
         1.5, or two clusters; or other work took over 10% of the machine's CPUs during a \
         repeat); otherwise the verdict is a tie or unstable. \"vs\": how many \
         times better the best median is (throughput ratio; for latency workloads, latency \
         ratio). Best scaling: throughput at the largest thread count over the smallest, named \
         only above 1x.</small></p></section>\n",
    );
}

fn value(latency: bool, v: f64) -> String {
    if latency {
        units::latency(v)
    } else {
        units::si(v)
    }
}

fn cell_text(latency: bool, c: &Cell) -> String {
    let (a, b) = if c.lo <= c.hi {
        (c.lo, c.hi)
    } else {
        (c.hi, c.lo)
    };
    let (median, a, b) = (
        value(latency, c.median),
        value(latency, a),
        value(latency, b),
    );
    if a == b {
        // One repeat, or repeats that agree to three digits: no range to show.
        esc(&median)
    } else {
        format!("{} <small>[{}-{}]</small>", esc(&median), esc(&a), esc(&b))
    }
}

fn ratio_table_html(h: &mut String, t: &RatioTable) {
    let unit = if t.latency {
        "ns per op (median [min-max], lower is better)"
    } else {
        "ops/s (median [min-max])"
    };
    let _ = write!(h, "<table><tr><th>design</th>");
    for th in &t.threads {
        let _ = write!(
            h,
            "<th>{th} thread{}: {unit}</th>",
            if *th == 1 { "" } else { "s" }
        );
    }
    if t.threads.len() > 1 {
        let _ = write!(
            h,
            "<th>{}T / {}T</th>",
            t.threads[t.threads.len() - 1],
            t.threads[0]
        );
    }
    if let Some(b) = &t.baseline {
        for th in &t.threads {
            let _ = write!(h, "<th>vs {} at {th}T</th>", esc(b));
        }
    }
    h.push_str("</tr>\n");
    for r in &t.rows {
        let dashed = t.baseline.as_deref() == Some(r.design.as_str());
        let _ = write!(
            h,
            "<tr><td>{}{}</td>",
            code(&r.design),
            if dashed {
                " <small>(baseline)</small>"
            } else {
                ""
            }
        );
        for c in &r.cells {
            match c {
                Some(c) => {
                    let _ = write!(h, "<td>{}</td>", cell_text(t.latency, c));
                }
                None => h.push_str("<td>-</td>"),
            }
        }
        if t.threads.len() > 1 {
            let _ = write!(
                h,
                "<td>{}</td>",
                r.scaling.map_or("-".to_string(), units::ratio)
            );
        }
        if t.baseline.is_some() {
            for (v, verdict) in r.vs_baseline.iter().zip(&r.vs_baseline_verdict) {
                let note = match verdict {
                    Some(Verdict::Tie) => " <small>(tie)</small>",
                    Some(Verdict::Unstable) => " <small>(unstable)</small>",
                    _ => "",
                };
                let _ = write!(
                    h,
                    "<td>{}{note}</td>",
                    v.map_or("-".to_string(), units::ratio)
                );
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

fn workload_section(h: &mut String, p: &Page<'_>, w: &str) {
    let _ = writeln!(h, "<section id=\"w-{id}\"><h3>{id}</h3>", id = esc(w));
    if let Some(x) = workload_headline(w, p.ms) {
        let _ = writeln!(h, "<p class=\"verdict\"><b>{}</b></p>", sentence(&x, code));
    }
    match workloads::find(w) {
        Ok(wl) => {
            let _ = writeln!(h, "<p>{}.</p>", esc(wl.about()));
            let _ = writeln!(
                h,
                "<p class=\"mirrors\">Mirrors: {}.</p>",
                esc(wl.mirrors().unwrap_or("no paper figure"))
            );
        }
        Err(_) => {
            let _ = writeln!(
                h,
                "<p>(This <code>aspace</code> does not know this workload; its measurements are \
                 shown as recorded.)</p>"
            );
        }
    }
    if let Some((_, file)) = p.plots.iter().find(|(pw, _)| pw == w) {
        let _ = writeln!(
            h,
            "<p><img src=\"{f}\" alt=\"{w}: each design against threads\"></p>",
            f = esc(file),
            w = esc(w)
        );
    }
    ratio_table_html(h, &ratio_table(w, p.ms));
    let rows: Vec<&Measurement> = p.ms.iter().filter(|m| m.workload == w).collect();
    let repeat = rows.first().map_or(0, |m| m.repeat);
    let _ = writeln!(
        h,
        "<details><summary>Every measurement ({repeat} repeat(s) each) with its extra \
         metrics</summary>\n<table><tr><th>design</th><th>threads</th><th>ops/s median</th>\
         <th>min</th><th>max</th><th>spread</th><th>ns/op</th><th>extra</th></tr>"
    );
    for m in rows {
        let extra = m
            .extra
            .iter()
            .map(|(k, v)| format!("{k}={}", compact(*v)))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}%{}</td>\
             <td>{:.1}</td><td class=\"l\">{}</td></tr>",
            esc(&m.design),
            m.threads,
            units::si(m.ops_per_sec),
            units::si(m.min_ops_per_sec),
            units::si(m.max_ops_per_sec),
            100.0 * m.spread,
            if m.unstable { " unstable" } else { "" },
            m.ns_per_op,
            esc(&extra)
        );
    }
    h.push_str("</table></details></section>\n");
}

fn conflict_section(h: &mut String, p: &Page<'_>) {
    h.push_str("<section id=\"conflicts\"><h2>Cache-line conflicts</h2>\n");
    let Some(rs) = p.conflicts else {
        let _ = writeln!(
            h,
            "<p>This run has no conflict audit ({c} absent). To add one: \
             <code>cargo run --release --features conflicts -- conflicts &lt;workload&gt; \
             --cores 2,16,64,128 --out {d}</code>, then <code>aspace report {d}</code>.</p>\
             </section>",
            c = code(CONFLICTS_JSON),
            d = esc(p.dir)
        );
        return;
    };
    h.push_str(
        "<table><tr><th>workload</th><th>design</th><th>cores</th><th>rounds</th><th>ops</th>\
         <th>conflicts/op (mean)</th><th>max/op</th><th>RCU/op</th><th>top lines (per op)</th>\
         </tr>\n",
    );
    let mut sorted: Vec<&ConflictRecord> = rs.iter().collect();
    // Group by workload and design in file order, cores ascending.
    let mut order: Vec<(&str, &str)> = Vec::new();
    for r in rs {
        if !order.contains(&(r.workload.as_str(), r.design.as_str())) {
            order.push((&r.workload, &r.design));
        }
    }
    sorted.sort_by_key(|r| {
        (
            order
                .iter()
                .position(|k| *k == (r.workload.as_str(), r.design.as_str())),
            r.cores,
        )
    });
    for r in sorted {
        let lines = top_lines(r, 3)
            .iter()
            .map(|l| format!("{} ({})", code(&l.site), units::sig3(l.per_op)))
            .collect::<Vec<_>>()
            .join("<br>");
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"l\">{}</td></tr>",
            esc(&r.workload),
            esc(&r.design),
            r.cores,
            r.rounds,
            r.ops,
            units::sig3(r.conflicts_per_op),
            units::sig3(r.max_conflicts_per_op),
            units::sig3(r.rcu_conflicts_per_op),
            if lines.is_empty() { "-".into() } else { lines }
        );
    }
    h.push_str("</table></section>\n");
}

fn machine_section(h: &mut String, p: &Page<'_>) {
    h.push_str("<section id=\"machine\"><h2>Machine, commit and settings</h2>\n");
    let Some(run) = p.run else {
        let first = p.ms.first();
        let _ = writeln!(
            h,
            "<p>Not recorded ({} absent: the run predates it). From the measurements: {} ms x \
             {} repeat(s) per point.</p></section>",
            code(RUN_JSON),
            first.map_or(0, |m| m.duration_ms),
            first.map_or(0, |m| m.repeat)
        );
        return;
    };
    let m = &run.machine;
    let s = &run.settings;
    let rows = [
        ("CPU", m.cpu_model.clone()),
        ("logical CPUs", m.logical_cpus.to_string()),
        ("kernel", m.kernel.clone()),
        (
            "virtual machine",
            match m.virtualized {
                Some(true) => "yes (hypervisor CPU flag)".into(),
                Some(false) => "no".into(),
                None => "unknown".into(),
            },
        ),
        ("commit", run.commit_text()),
        ("started", run.date_utc.clone()),
        ("settings", run.settings_text()),
        (
            "workload settings",
            format!(
                "rcu-update --update-pct {}, ds-* --intervals {}, readers-writers --writers {}, \
                 fault-load-0pct..-100pct at their levels, fault-load --mmap-pct {}",
                s.update_pct, s.intervals, s.writers, s.mmap_pct
            ),
        ),
    ];
    h.push_str("<table>\n");
    for (k, v) in rows {
        let _ = writeln!(h, "<tr><th>{k}</th><td class=\"l\">{}</td></tr>", esc(&v));
    }
    h.push_str("</table></section>\n");
}

fn files_section(h: &mut String, p: &Page<'_>) {
    h.push_str("<section id=\"files\"><h2>Files</h2>\n<ul>\n");
    let mut files: Vec<(&str, &str)> = vec![
        ("results.csv", "every measurement, one row each"),
        ("results.json", "the same as a JSON array"),
        (
            "headline.md",
            "the headline table in Markdown (for the README)",
        ),
    ];
    if p.run.is_some() {
        files.push((RUN_JSON, "machine, commit and settings"));
    }
    if p.conflicts.is_some() {
        files.push((CONFLICTS_JSON, "the conflict audit"));
    }
    for (f, what) in files {
        let _ = writeln!(h, "<li><a href=\"{f}\">{f}</a>: {what}</li>");
    }
    if let Some(svg) = p.headline_svg {
        let _ = writeln!(
            h,
            "<li><a href=\"{f}\">{f}</a>: the headline plot</li>",
            f = esc(svg)
        );
    }
    for (_, f) in p.plots {
        let _ = writeln!(h, "<li><a href=\"{f}\">{f}</a></li>", f = esc(f));
    }
    let _ = writeln!(
        h,
        "</ul>\n<p><small>Re-render this page with <code>aspace report {}</code>.</small></p>\
         </section>",
        esc(p.dir)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::conflicts::ConflictLine;
    use crate::report::machine::tests::sample;

    fn m(workload: &str, design: &str, threads: usize, ops: f64) -> Measurement {
        let mut m = Measurement::example(workload, design, threads, ops, (ops * 0.9, ops * 1.1));
        m.extra.insert("floor_ns".to_string(), 70.0);
        m
    }

    fn ms() -> Vec<Measurement> {
        vec![
            m("local", "linux", 1, 1e5),
            m("local", "linux", 2, 5e4),
            m("local", "coarse", 1, 4e6),
            m("local", "coarse", 2, 3e6),
            m("rcu-gp", "<memb>", 2, 5e4),
            m("metis", "interval", 2, 10.0),
        ]
    }

    fn page<'a>(
        ms: &'a [Measurement],
        run: Option<&'a RunInfo>,
        conflicts: Option<&'a [ConflictRecord]>,
        plots: &'a [(String, String)],
    ) -> String {
        index_html(&Page {
            title: "aspace results 20261124-090514",
            ms,
            run,
            conflicts,
            dir: "results/20261124-090514",
            headline_svg: Some("headline.svg"),
            plots,
        })
    }

    #[test]
    fn page_has_every_section_in_order_with_links() {
        let ms = ms();
        let run = sample();
        let plots = vec![("local".to_string(), "local.svg".to_string())];
        let html = page(&ms, Some(&run), None, &plots);
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("missing {s}"));
        assert!(at("id=\"takeaway\"") < at("id=\"headline\""));
        assert!(at("id=\"headline\"") < at("id=\"vm\""));
        assert!(at("id=\"vm\"") < at("id=\"w-local\""));
        assert!(at("id=\"w-local\"") < at("id=\"blocks\""));
        assert!(at("id=\"blocks\"") < at("id=\"w-rcu-gp\""));
        assert!(at("id=\"w-rcu-gp\"") < at("id=\"conflicts\""));
        assert!(at("id=\"conflicts\"") < at("id=\"machine\""));
        assert!(at("id=\"machine\"") < at("id=\"files\""));
        for s in [
            "<a href=\"headline.svg\">",
            "<img src=\"local.svg\"",
            "<a href=\"results.csv\">",
            "<a href=\"results.json\">",
            "<a href=\"run.json\">",
            "<a href=\"headline.md\">",
            "Mirrors: RadixVM §5.1, Fig. 5 (local).",
            "AMD EPYC 7B13",
            "84f1f8d (dirty)",
            "500 ms x 3 repeats, threads 1,2",
            // The headline: coarse 60x linux at 2 threads.
            "<code>coarse</code> leads with 3M ops/s, 60x the baseline <code>linux</code>",
            // The takeaway, from the verdicts of the address-space workloads.
            "Address spaces: Of 1 workload compared at 2 threads, <code>coarse</code> wins local.",
            // The ratio table: scaling and vs baseline.
            "<th>vs linux at 2T</th>",
            "<td>0.75x</td>",
            // Ranges: [min-max] of the repeats.
            "3M <small>[2.7M-3.3M]</small>",
            // Latency workloads are shown as latencies.
            "ns per op (median [min-max], lower is better)",
            "20 µs",
            // How to make a conflict audit.
            "--features conflicts -- conflicts &lt;workload&gt; --cores 2,16,64,128 --out \
             results/20261124-090514",
            "aspace report results/20261124-090514",
            // An unknown workload is shown, not dropped.
            "id=\"w-metis\"",
        ] {
            assert!(html.contains(s), "missing {s}");
        }
        assert!(html.contains("&lt;memb&gt;") && !html.contains("<memb>"));
        assert!(!html.contains("<script") && !html.contains("http"));
    }

    #[test]
    fn conflict_table_lists_records_with_their_top_lines() {
        let ms = ms();
        let rec = |cores| ConflictRecord {
            workload: "local".into(),
            design: "interval".into(),
            cores,
            rounds: 4,
            ops: 400,
            conflicts_per_op: 0.25,
            max_conflicts_per_op: 2.0,
            rcu_conflicts_per_op: 0.125,
            lines: vec![ConflictLine {
                site: "skiplist/node.rs:42".into(),
                per_op: 0.2,
            }],
        };
        let rs = vec![rec(16), rec(2)];
        let html = page(&ms, None, Some(&rs), &[]);
        assert!(html.contains("<code>skiplist/node.rs:42</code> (0.2)"));
        assert!(html.contains("<a href=\"conflicts.json\">"));
        assert!(!html.contains("--features conflicts"));
        // Cores ascending within a (workload, design).
        assert!(
            html.find("<td>2</td><td>4</td>").unwrap()
                < html.find("<td>16</td><td>4</td>").unwrap()
        );
        // Without run.json the machine section says so.
        assert!(html.contains("Not recorded"));
    }

    #[test]
    fn page_leads_with_the_takeaway_and_the_vm_workloads_before_the_building_blocks() {
        // Report order puts the building blocks first; the page must not.
        let ms = vec![
            m("rcu-read", "none", 2, 2e7),
            m("rcu-read", "memb", 2, 1.9e7),
            m("ds-map", "btree", 2, 1e6),
            m("ds-map", "skiplist", 2, 2.54e6),
            m("local", "linux", 2, 5e4),
            m("local", "interval", 2, 3e6),
            m("global", "linux", 2, 1e5),
            Measurement::example("global", "coarse", 2, 1.2e6, (1.1e6, 9.3e6)),
            Measurement::example("global", "interval", 2, 10.1e6, (9.0e6, 10.3e6)),
        ];
        let html = page(&ms, None, None, &[]);
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("missing {s}"));
        assert!(at("class=\"takeaway\"") < at("<table>"));
        for vm in ["id=\"w-local\"", "id=\"w-global\""] {
            for block in ["id=\"w-rcu-read\"", "id=\"w-ds-map\""] {
                assert!(at(vm) < at(block), "{vm} after {block}");
            }
        }
        // The headline table appears once, address spaces first; no headline plot on the page.
        assert_eq!(html.matches("<th>verdict (median)</th>").count(), 1);
        assert!(at("<a href=\"#w-local\">") < at("<a href=\"#w-ds-map\">"));
        assert!(!html.contains("<img src=\"headline.svg\""));
        // The takeaway speaks of the VM workloads only, and the tie is a tie.
        let takeaway = &html[at("class=\"takeaway\"")..at("id=\"headline\"")];
        assert!(
            takeaway.contains("<code>interval</code> wins local"),
            "{takeaway}"
        );
        assert!(takeaway.contains("global is a tie"), "{takeaway}");
        assert!(!takeaway.contains("ds-map"), "{takeaway}");
        // No runner-up equal to the baseline.
        assert!(!html.contains("runner-up"));
    }
}
