//! The job's page, drawn from made-up ranks to show what it must and must not do.

use super::*;
use crate::event::soak::FailureKind;

/// Rank `rank` on `host`, failed on stale progress, standing at `signature`.
fn row(rank: u32, host: &str, signature: &str) -> RankRow {
    RankRow {
        rank: Some(rank),
        host: host.into(),
        node: None,
        soak_id: format!("s{rank}"),
        run: Some("1".into()),
        status: "failed".into(),
        failure_kind: Some(FailureKind::StaleProgress),
        started_at: START,
        ended_at: Some(START + WEEK),
        ended: Some("recorded"),
        last_progress_at: Some(START + WEEK - 60.0),
        last_step: None,
        last_phase: None,
        median_step_seconds: None,
        peak_tree_pss_bytes: Some(1 << 30),
        gpu_utilization_mean: Some(97.0),
        signature: Some(signature.into()),
        top_frames: vec![Frame {
            function: signature.into(),
            file: Some("dist.py".into()),
            line: Some(41),
        }],
        tripped_at: Some(START + WEEK - 5.0),
        reason: Some("no progress".into()),
        gpus: Vec::new(),
        pace: crate::read::job::suspect::Pace {
            sample_interval_seconds: Some(10.0),
            ..crate::read::job::suspect::Pace::default()
        },
        collectives: Vec::new(),
    }
}

const START: f64 = 1_796_479_200.0;
const WEEK: f64 = 7.0 * 86_400.0;

/// A week of samples every 10 s, the PSS of rank `rank` spiking once.
fn week(rank: u32) -> RankSeries {
    let mut series = RankSeries::default();
    series.spawned_at((START * 1e6) as i64);
    let samples = (WEEK / 10.0) as i64;
    for i in 0..samples {
        let pss = if i == samples / 3 { 8 << 30 } else { 1 << 30 };
        series.add(
            i * 10_000_000,
            (i as u64) * 1024 + u64::from(rank),
            Some(pss),
            None,
        );
    }
    series
}

fn page(rows: Vec<RankRow>, series: BTreeMap<SeriesKey, RankSeries>) -> String {
    let view = JobView::of("llama", rows, None);
    render(
        &view,
        series,
        &["cannot read the log of host `n9`".to_owned()],
    )
}

#[test]
fn a_week_of_64_ranks_makes_a_page_of_bounded_size_naming_every_rank() {
    let rows: Vec<RankRow> = (0..64)
        .map(|r| {
            row(
                r,
                &format!("n{}", r / 8),
                if r == 5 { "load_batch" } else { "all_reduce" },
            )
        })
        .collect();
    let series = rows
        .iter()
        .map(|r| {
            (
                (r.host.clone(), r.soak_id.clone()),
                week(r.rank.unwrap_or(0)),
            )
        })
        .collect();
    let html = page(rows, series);
    assert!(html.len() < 2_500_000, "{} bytes", html.len());
    for rank in 0..64 {
        let host = format!("n{}", rank / 8);
        let odd = if rank == 5 { " (odd one out)" } else { "" };
        let title = format!("<title>rank {rank} on {host}{odd}</title></path>");
        assert_eq!(
            html.matches(&title).count(),
            2,
            "rank {rank} on both charts"
        );
    }
    assert!(html.contains("The odd one out: <strong>rank 5 on n0</strong>"));
    assert!(html.contains("cannot read the log of host `n9`"));
    // The spike of 8 GiB is drawn: the memory axis reaches it.
    assert!(html.contains(">8 GiB</text>"), "the spike sets the axis");
}

#[test]
fn text_from_the_record_is_escaped_on_the_page() {
    let rows = vec![
        row(0, "<b>n0</b>", "all_reduce"),
        row(1, "n1", "<script>alert(1)</script>"),
    ];
    let html = page(rows, BTreeMap::new());
    assert!(!html.contains("<b>n0</b>"), "{html}");
    assert!(!html.contains("<script>alert(1)"), "{html}");
    assert!(html.contains("&lt;b&gt;n0&lt;/b&gt;"));
}

#[test]
fn a_job_without_samples_says_so_and_carries_no_script() {
    let html = page(vec![row(0, "n0", "all_reduce")], BTreeMap::new());
    assert!(html.contains("no samples to draw"));
    assert!(!html.contains("<script"), "no charts, no script");
    assert!(html.contains("<h2>Ranks</h2>"));
}

/// Four ranks that passed, rank 2 slower a step: the page names it at a glance and in its own
/// section, and the table gives every rank's last step and step time.
#[test]
fn a_straggler_is_named_on_the_page() {
    let rows: Vec<RankRow> = [0.1, 0.1, 0.3, 0.1]
        .into_iter()
        .zip(0..)
        .map(|(median, rank)| RankRow {
            status: "passed".into(),
            failure_kind: None,
            tripped_at: None,
            last_step: Some(30 + u64::from(rank)),
            median_step_seconds: Some(median),
            ..row(rank, "n0", "all_reduce")
        })
        .collect();
    let html = page(rows, BTreeMap::new());
    assert!(
        html.contains("<dt>straggler</dt><dd>rank 2 on n0, 3.00×</dd>"),
        "{html}"
    );
    assert!(html.contains("<h2>Stragglers</h2>"), "{html}");
    assert!(
        html.contains(
            "<li>rank 2 on n0 straggles: its median step 300ms is 3.00× the job&#39;s 100ms</li>"
        ),
        "{html}"
    );
    assert!(
        html.contains(
            "<td data-label=\"step\">32</td><td data-label=\"phase\">-</td>\
<td data-label=\"step time\">300ms</td>"
        ),
        "{html}"
    );
    assert!(html.contains("<tr class=\"slow\">"), "{html}");
}

/// Rank 2 of four hung in `data` while the others wait in `train`: the page names it the
/// suspect first, at a glance and in the banner, marks its row and gives every rank's phase;
/// the ranks that beat have a step-time chart, a line each, and a job without beats has none.
#[test]
fn the_suspect_leads_the_page_and_beating_ranks_have_a_step_chart() {
    let rows: Vec<RankRow> = (0..4)
        .map(|rank| RankRow {
            last_step: Some(3),
            last_phase: Some(if rank == 2 { "data" } else { "train" }.into()),
            median_step_seconds: Some(0.05),
            signature: None,
            top_frames: Vec::new(),
            ..row(rank, "n0", "all_reduce")
        })
        .collect();
    let series: BTreeMap<SeriesKey, RankSeries> = rows
        .iter()
        .map(|r| {
            let mut series = RankSeries::default();
            series.spawned_at((START * 1e6) as i64);
            for i in 0..20_i64 {
                let step = 0.05 * (1.0 + f64::from(r.rank.unwrap_or(0)) / 10.0);
                series.add(i * 1_000_000, i as u64, Some(1 << 30), Some(step));
            }
            ((r.host.clone(), r.soak_id.clone()), series)
        })
        .collect();
    let html = page(rows.clone(), series);
    let glance = html
        .find("<dt>suspect</dt>")
        .expect("the suspect at a glance");
    assert!(glance < html.find("<dt>ranks</dt>").unwrap(), "first");
    assert!(
        html.contains(
            "<dd>rank 2 on n0 (other_phase): its last beat is in phase `data`, every other \
rank&#39;s in `train`</dd>"
        ),
        "{html}"
    );
    assert!(
        html.contains("<span class=\"kind\">failed</span> rank 2 on n0 is the suspect: "),
        "the banner leads with it"
    );
    assert_eq!(html.matches("<tr class=\"suspect\">").count(), 1);
    assert!(html.contains("<span class=\"tag\">suspect</span>"));
    assert_eq!(
        html.matches("<td data-label=\"phase\">train</td>").count(),
        3
    );
    let step = html
        .find("<section class=\"chart\" id=\"chart-step\">")
        .expect("a step-time chart");
    let step = &html[step..step + html[step..].find("</section>").unwrap()];
    for rank in 0..4 {
        assert!(
            step.contains(&format!("<title>rank {rank} on n0</title></path>")),
            "rank {rank}'s steps"
        );
    }
    let unbeaten: BTreeMap<SeriesKey, RankSeries> = rows
        .iter()
        .map(|r| {
            let mut series = RankSeries::default();
            series.add(0, 1, Some(1), None);
            series.add(1_000_000, 2, Some(1), None);
            ((r.host.clone(), r.soak_id.clone()), series)
        })
        .collect();
    let html = page(rows, unbeaten);
    assert!(html.contains("id=\"chart-progress\""));
    assert!(
        !html.contains("id=\"chart-step\""),
        "no beats, no step chart"
    );
}
