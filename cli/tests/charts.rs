//! The simulator's charts: every policy has a look of its own (colour,
//! and dash with marker), and a `summary.csv` redraws its charts.

use gputopo::simulate::plot::{look, summary_charts};
use gputopo::simulate::policy::PolicyKind;
use std::collections::BTreeSet;

#[test]
fn every_policy_has_its_own_colour_and_its_own_dash_and_marker() {
    let looks: Vec<_> = PolicyKind::ALL
        .iter()
        .enumerate()
        .map(|(i, p)| look(p.name(), i))
        .collect();
    let colours: BTreeSet<(u8, u8, u8)> = looks
        .iter()
        .map(|l| (l.colour.0, l.colour.1, l.colour.2))
        .collect();
    assert_eq!(colours.len(), PolicyKind::ALL.len(), "{looks:?}");
    let strokes: BTreeSet<String> = looks
        .iter()
        .map(|l| format!("{:?} {:?}", l.dash, l.marker))
        .collect();
    assert_eq!(strokes.len(), PolicyKind::ALL.len(), "{looks:?}");
    // The same policy looks the same wherever it is in a chart.
    assert_eq!(look("gputopo", 0), look("gputopo", 5));
}

#[test]
fn a_summary_csv_redraws_its_charts_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("summary.csv");
    let mut text = String::from(
        "workload,policy,n_seeds,arrived_pct,gpu_alloc_pct_mean,gpu_alloc_pct_min,gpu_alloc_pct_max,frag_over_total_pct_mean,published_gpu_alloc_pct_mean,published_frag_over_total_pct_mean,mean_runtime_s\n",
    );
    for (policy, end) in [("random", 80.0), ("gputopo", 95.0)] {
        for pct in (10..=130).step_by(10) {
            let alloc = f64::from(pct).min(end);
            text.push_str(&format!("w1,{policy},2,{pct},{alloc},0,0,5.0,,,0.1\n"));
        }
    }
    std::fs::write(&csv, text).unwrap();
    let written = summary_charts(&csv).expect("charts drawn");
    let names: Vec<String> = written
        .iter()
        .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        ["plots/w1/gpu-allocation.png", "plots/w1/fragmentation.png"]
    );
    for path in &written {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    }
    // A CSV without the summary's columns says which one is missing.
    std::fs::write(&csv, "workload,policy\nw1,random\n").unwrap();
    let err = summary_charts(&csv).expect_err("not a summary").to_string();
    assert!(err.contains("\"arrived_pct\""), "{err}");
}
