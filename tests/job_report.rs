//! `job report`: a job's page — what `job show` says, and every rank's progress and memory on
//! one time axis — from the real soaks of a ring whose one rank hangs, and in a real browser.

use std::path::Path;

use serde_json::Value;

use crate::common::*;

const WORLD: u32 = 4;
const HUNG: u32 = 2;

/// The page's embedded data: the charts, their lines and their values.
fn page_data(html: &str) -> Value {
    let open = "<script type=\"application/json\" id=\"soak-data\">";
    let at = html.find(open).expect("the page's data") + open.len();
    let end = html[at..].find("</script>").unwrap() + at;
    serde_json::from_str(&html[at..end]).unwrap()
}

/// The static chart `id`: its `<section>`.
fn chart_section<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("<section class=\"chart\" id=\"chart-{id}\">"))
        .unwrap_or_else(|| panic!("no chart `{id}`"));
    &html[at..at + html[at..].find("</section>").unwrap()]
}

/// Four ranks of a ring, rank 2 hung: `job report J --output` writes one self-contained page
/// that names rank 2 the odd one out as `job show` does, has a line of every rank on both the
/// progress and the memory chart (in the static SVG and in the zoomable charts' data, each with
/// values of its own), marks the alarm, and loads nothing from elsewhere. An unknown job is
/// refused with exit 3, and so is an output that cannot be written, before anything is read; an
/// unreadable host log is a warning on the page.
#[test]
fn job_report_draws_every_rank_of_a_ring_side_by_side() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-report-");
    // Rank 2 hangs after 20 steps. The tree is kept a while after a capture, so that every
    // rank's capture finds the ring as it stood (see `job_show_names_the_hung_rank_of_a_ring`).
    failed_ring(&root, dir.path(), (WORLD, HUNG, 20), None, |_| {
        vec![
            "--stale-progress",
            "3s",
            "--sample-interval",
            "0.2",
            "--dump-signal",
            "WINCH",
            "--dump-wait",
            "4s",
        ]
    });
    let shown: Value = serde_json::from_slice(
        &root
            .unilab()
            .args(["--json", "job", "show", "J"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(shown["odd_ranks"], serde_json::json!([HUNG]), "{shown:#}");
    let host = shown["ranks"][HUNG as usize]["host"]
        .as_str()
        .unwrap()
        .to_owned();

    // Another host's log that cannot be read: a warning, on the page too.
    let uid = nix::unistd::getuid().as_raw().to_string();
    let other = root.root().join("other-node").join(&uid);
    private_dir_all(&other);
    std::fs::write(other.join("events.redb"), b"not a log").unwrap();

    let page = dir.path().join("page.html");
    let written = root
        .unilab()
        .args(["job", "report", "J", "--output"])
        .arg(&page)
        .output()
        .unwrap();
    assert!(written.status.success(), "{written:?}");
    let html = std::fs::read_to_string(&page).unwrap();

    // At a glance: the verdict, the alarm, the odd rank named; the warning.
    assert!(html.contains("<h1>job J</h1>"), "{html}");
    assert!(html.contains("tripped first: stale_progress"));
    assert!(html.contains("<h2>The alarm</h2>"));
    let odd = format!("rank {HUNG} on {host}");
    assert!(
        html.contains(&format!("The odd one out: <strong>{odd}</strong>")),
        "the odd rank named"
    );
    assert!(html.contains("cannot read the log of host `other-node`"));
    // The table: a row a rank.
    assert_eq!(
        html.matches("<span class=\"swatch\"").count(),
        WORLD as usize
    );

    // Every rank's line on both charts, static and zoomable.
    let data = page_data(&html);
    let specs = data["specs"].as_array().unwrap();
    let ids: Vec<&str> = specs.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["progress", "memory"]);
    // Its ranks do not beat: no step-time chart.
    for spec in specs {
        let id = spec["id"].as_str().unwrap();
        let series = spec["series"].as_array().unwrap();
        let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
        for rank in 0..WORLD {
            let name = names
                .iter()
                .find(|n| n.starts_with(&format!("rank {rank} on ")))
                .unwrap_or_else(|| panic!("no line of rank {rank} on `{id}`: {names:?}"));
            assert_eq!(name.ends_with("(odd one out)"), rank == HUNG, "{name}");
            // The static chart draws it, the legend names it.
            let section = chart_section(&html, id);
            assert!(
                section.contains(&format!("<title>{name}</title></path>")),
                "{id}: no path of {name}"
            );
        }
        for line in series {
            let column = line["column"].as_u64().unwrap() as usize;
            let values = data["data"][column + 1].as_array().unwrap();
            let known: Vec<f64> = values.iter().filter_map(Value::as_f64).collect();
            assert!(known.len() >= 2, "{id} {}: {values:?}", line["name"]);
            assert!(known.iter().any(|v| *v > 0.0), "{id} {}", line["name"]);
        }
    }
    // The progress of each rank grew while the ring ran.
    let times = data["data"][0].as_array().unwrap();
    assert!(times.len() >= 4, "{times:?}");
    for column in 1..=WORLD as usize {
        let values: Vec<f64> = data["data"][column]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        assert!(
            values.last() > values.first(),
            "column {column}: {values:?}"
        );
    }
    // The alarm's moment marked, wider than the ranks' own trips.
    let markers = data["markers"].as_array().unwrap();
    assert!(markers.iter().any(|m| m["width"] == 2.5), "{markers:?}");
    assert!(markers.iter().filter(|m| m["width"] == 1.0).count() >= WORLD as usize);

    // One file: nothing loaded from elsewhere.
    for external in ["<link", " src=", "href=", "url(", "@import"] {
        assert!(!html.contains(external), "the page loads `{external}`");
    }

    // Refused: an existing page without --force, an output that cannot be written, an unknown
    // job.
    root.unilab()
        .args(["job", "report", "J", "--output"])
        .arg(&page)
        .assert()
        .code(3)
        .stderr(predicates::str::contains("already exists"));
    root.unilab()
        .args(["job", "report", "J", "--force", "--output"])
        .arg(&page)
        .assert()
        .success();
    root.unilab()
        .args(["job", "report", "J", "--output"])
        .arg(dir.path().join("missing").join("page.html"))
        .assert()
        .code(3)
        .stderr(predicates::str::contains("cannot write the report"));
    root.unilab()
        .args(["job", "report", "nope", "--output"])
        .arg(dir.path().join("nope.html"))
        .assert()
        .code(3)
        .stderr(predicates::str::contains("no soak of job `nope`"));
    assert!(!dir.path().join("nope.html").exists());

    browser_check(&root, &html, dir.path());
}

/// The page in headless Chromium at a wide and a narrow window: with script every chart is the
/// zoomable one and nothing errs; without, the static charts are there. The page and its
/// screenshots are kept in the target directory (when the user can write it).
fn browser_check(root: &TestRoot, html: &str, dir: &Path) {
    let Some(browser) = chromium() else {
        eprintln!("skipped the browser check: no chromium on this host");
        return;
    };
    let shots = screenshot_dir("job-report-screenshots", dir);
    let page = shots.join("job-report.html");
    std::fs::write(&page, html).unwrap();
    let without_script = dir.join("static.html");
    std::fs::write(&without_script, strip_scripts(html)).unwrap();
    let probed = dir.join("probed.html");
    std::fs::write(&probed, html.replace("</body>", RANKS_PROBE)).unwrap();
    for (width, name) in [(1400, "wide"), (700, "narrow")] {
        let shot = shots.join(format!("job-report-{name}.png"));
        screenshot(&browser, root.root(), &page, (width, 2600), &shot);
        // The rank table fits the window: nothing of it is scrolled out of sight. (At 700 px
        // its ten columns ran 36 px past it, each cell wrapped to three lines.)
        let dom = chromium_dom(&browser, root.root(), &probed, width);
        assert!(
            dom.contains("data-ranks-fit=\"true\""),
            "the rank table at {width} px: {}",
            dom.split("data-ranks-fit=")
                .nth(1)
                .unwrap_or("no probe")
                .chars()
                .take(80)
                .collect::<String>()
        );
        let dom = chromium_dom(&browser, root.root(), &page, width);
        assert_eq!(dom.matches("<section class=\"chart\"").count(), 2);
        assert_eq!(dom.matches("class=\"uplot").count(), 2, "at {width} px");
        let dom = chromium_dom(&browser, root.root(), &without_script, width);
        assert_eq!(dom.matches("<svg class=\"chart\"").count(), 2);
        assert!(!dom.contains("class=\"uplot"));
    }
    eprintln!("screenshots of the job's page: {}", shots.display());
}

/// A script that says, on the page's body, whether its rank table fits its box (nothing
/// scrolled out of sight), with the widths measured.
const RANKS_PROBE: &str = "<script>(function(){var r=document.querySelector('.ranks');\
var fit=r.scrollWidth<=r.clientWidth;document.body.setAttribute('data-ranks-fit',String(fit));\
document.body.setAttribute('data-ranks-widths',r.scrollWidth+'/'+r.clientWidth);})();</script></body>";

/// Two ranks of a job that beat, rank 1 a step three times slower: `job report` draws a
/// step-time chart with a line of each (a job of ranks that do not beat has none: see
/// [`job_report_draws_every_rank_of_a_ring_side_by_side`]), rank 1's above rank 0's.
#[test]
fn ranks_that_beat_have_a_step_time_chart() {
    let root = TestRoot::new();
    let dir = private_tempdir("unilab-job-report-steps-");
    for (rank, steps) in [(0, "train:30:0.05"), (1, "train:10:0.15")] {
        let (mut cmd, _) = job_rank_soak(&root, dir.path(), "S", rank);
        let status = cmd
            .args(["--sample-interval", "0.2", "--shutdown-grace", "0.5"])
            .args(["--allow-no-progress", "--py-spy", "off", "--", "python3"])
            .arg(fixtures_dir().join("heartbeat_trainer.py"))
            .arg(steps)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "rank {rank}: {status}");
    }
    let page = dir.path().join("page.html");
    root.unilab()
        .args(["job", "report", "S", "--output"])
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    let data = page_data(&html);
    let spec = data["specs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "step")
        .unwrap_or_else(|| panic!("no step-time chart: {}", data["specs"]));
    let series = spec["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "{spec:#}");
    // The middle of a line's values: a loaded machine may slow one step of either.
    let middle = |line: &Value| -> f64 {
        let column = line["column"].as_u64().unwrap() as usize;
        let mut values: Vec<f64> = data["data"][column + 1]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let (fast, slow) = (middle(&series[0]), middle(&series[1]));
    assert!(fast > 0.0 && slow > 2.0 * fast, "{fast} {slow}");
    assert!(chart_section(&html, "step").contains("<title>rank 1 on "));
    root.unilab().args(["log", "verify"]).assert().success();
}
