//! report.html in a real browser: headless Chromium renders it, the charts
//! must be in the page, and it must read at a glance — at 1400 and 900
//! pixels wide nothing scrolls sideways, no legend or label sits over a
//! plot, every gated peak is marked with its value and where it comes
//! from, a failure's text is whole. A screenshot at 1400 px is saved
//! under `target/tmp/html-report/` (the test prints where). When Chromium
//! is not installed the test says so and checks the file only (`.ci/run`
//! installs Debian's `chromium`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use oomgate::units::Bytes;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Chromium, headless, with a profile of its own and nothing fetched.
fn browser(name: &str, profile: &Path) -> Command {
    let mut command = Command::new(name);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// A `width`×`height` screenshot of `url` into `png`, by a fresh browser.
fn screenshot(name: &str, url: &str, (width, height): (u32, u32), png: &Path) {
    let profile = tempfile::tempdir().expect("profile dir");
    let status = browser(name, profile.path())
        .args([
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", png.display()),
            url,
        ])
        .output()
        .expect("run chromium");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(name)
        .display()
        .to_string()
}

#[test]
fn the_html_report_renders_with_charts() {
    let suite = format!(
        "[suite]\nname = \"h\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"ok\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"64\", \"--hold\", \"300ms\"]\nbudget = {{ host = \"512 MiB\" }}\n[[case]]\nname = \"oom\"\ncommand = [\"python3\", {fail}, \"--text\", {text}]\n",
        alloc = toml_str(&workload("alloc.py")),
        fail = toml_str(&workload("fail.py")),
        text = toml_str(&fixture("fixtures/oom/pytorch-current.txt")),
    );
    let project = Project::new(&suite);
    project.run(&[]).assert_code(1);
    let report = project.out().join("report.html");
    let html = std::fs::read_to_string(&report).expect("report.html");
    // Self-contained: nothing to fetch (URLs in log text are just text).
    for fetch in ["src=\"http", "href=\"http", "url(http", "<link", "<script"] {
        assert!(!html.contains(fetch), "`{fetch}` in report.html");
    }
    assert_eq!(
        html.matches("<svg").count(),
        3,
        "the overview and one chart per case"
    );
    assert!(html.contains("Diagnosis: gpu-oom"), "{html}");
    // A budget 8 times the peak would flatten the chart: named, not drawn.
    assert!(
        html.contains("host budget 512.0 MiB is far above these figures: not drawn"),
        "{html}"
    );
    assert!(!html.contains(">host budget 512.0 MiB</text>"), "{html}");

    let Some(browser_name) = chromium() else {
        eprintln!("SKIPPED the browser half: no Chromium found (install Debian's `chromium`)");
        return;
    };
    let profile = tempfile::tempdir().expect("profile dir");
    let url = format!("file://{}", report.display());
    let dom = browser(browser_name, profile.path())
        .args(["--dump-dom", &url])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(
        dom.matches("<svg").count(),
        3,
        "charts in the rendered page: {dom}"
    );
    assert!(dom.contains("host RSS"), "chart legend rendered");
    let screenshot = project.out().join("report.png");
    self::screenshot(browser_name, &url, (1100, 1400), &screenshot);
    let size = std::fs::metadata(&screenshot).expect("screenshot").len();
    assert!(
        size > 10_000,
        "a real picture, not an empty page ({size} bytes)"
    );
}

/// A search that passes up to `limit` and reports four probe steps of
/// `batch` MiB more each.
const STEPS: &str = r#"batch=$1
for step in 0 1 2 3; do
  printf '{"event":"step","step":%d,"allocated":%d}\n' "$step" $((batch * 1048576 * (step + 1))) >> "$OOMGATE_METRICS"
done
test "$batch" -le "$2"
"#;

/// The suite of the glance test: a short spike only a high-water mark
/// sees, a flat line under a budget, an OOM with a long message, and a
/// capacity search with a probe.
fn glance_suite(project_dir: &Path, flat_mib: u32, limit: u32) -> String {
    let steps = project_dir.join("steps.sh");
    std::fs::write(&steps, STEPS).expect("write steps.sh");
    let alloc = toml_str(&workload("alloc.py"));
    format!(
        "[suite]\nname = \"glance\"\nsample_interval = \"100ms\"\n\
[[case]]\nname = \"spike\"\ncommand = [\"python3\", \"-c\", \"b = bytearray(96 << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ndel b\\nimport time; time.sleep(0.8)\"]\n\
[[case]]\nname = \"flat\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"{flat_mib}\", \"--hold\", \"700ms\"]\nbudget = {{ host = \"300 MiB\" }}\n\
[[case]]\nname = \"oom\"\ncommand = [\"python3\", {fail}, \"--text\", {text}]\n\
[[case]]\nname = \"fits\"\ncommand = [\"sh\", {steps}, \"{{batch}}\", \"{limit}\"]\nsearch = {{ param = \"batch\", min = 8, max = 128, step = 8 }}\n",
        fail = toml_str(&workload("fail.py")),
        text = toml_str(&fixture("fixtures/oom/pytorch-current.txt")),
        steps = toml_str(&steps.display().to_string()),
    )
}

/// Text as report.html writes it.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The text of one case's section in report.html.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<section id=\"case-{id}\""))
        .unwrap_or_else(|| panic!("a section for {id}"));
    let length = html[start..].find("</section>").expect("its end");
    &html[start..start + length]
}

/// The figure under a heading of a section.
fn figure_after<'a>(section: &'a str, heading: &str) -> &'a str {
    let start = section
        .find(&format!("<h3>{heading}</h3>"))
        .unwrap_or_else(|| panic!("`{heading}` in {section}"));
    let rest = &section[start..];
    let end = rest.find("</figure>").expect("the figure's end");
    &rest[..end]
}

/// Measures the page as a reader sees it, and writes what it found into
/// the page as JSON (`<pre id="layout-check">`), for `--dump-dom`.
const LAYOUT_CHECK: &str = r#"<script>
(function () {
  const box = (e) => e.getBoundingClientRect();
  const meet = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const text = (e) => e.textContent.trim();
  const found = {
    innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    charts: 0,
    legendOverData: [],
    labelClashes: [],
    labelsInPlot: [],
    whys: [...document.querySelectorAll('.why')].map(text),
  };
  for (const figure of document.querySelectorAll('figure.chart')) {
    const legend = figure.querySelector('ul.legend');
    const plot = figure.querySelector('.plot-area');
    if (!legend || !plot) continue;
    found.charts += 1;
    const data = [plot, ...figure.querySelectorAll('g.series, .level, .mark, .moment, .bar')].map(box);
    for (const item of legend.querySelectorAll('li')) {
      if (data.some((d) => meet(d, box(item)))) found.legendOverData.push(text(item));
    }
    const labels = [...figure.querySelectorAll('.ref-label, .moment-label')];
    labels.forEach((a, i) => {
      if (meet(box(a), box(plot))) found.labelsInPlot.push(text(a));
      labels.slice(i + 1).forEach((b) => {
        if (meet(box(a), box(b))) found.labelClashes.push(text(a) + ' / ' + text(b));
      });
    });
  }
  const out = document.createElement('pre');
  out.id = 'layout-check';
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
})();
</script>"#;

/// What the layout check found at this window width.
fn layout_at(browser_name: &str, page: &Path, width: u32) -> serde_json::Value {
    let profile = tempfile::tempdir().expect("profile dir");
    let dom = browser(browser_name, profile.path())
        .arg(format!("--window-size={width},1000"))
        .args(["--dump-dom", &format!("file://{}", page.display())])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let start = dom
        .find("<pre id=\"layout-check\">")
        .unwrap_or_else(|| panic!("the layout check ran at {width} px: {dom}"))
        + "<pre id=\"layout-check\">".len();
    let end = start + dom[start..].find("</pre>").expect("its end");
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn the_report_reads_at_a_glance() {
    let project = Project::new("");
    std::fs::write(project.suite(), glance_suite(project.path(), 72, 96)).expect("suite");
    project.run(&[]).assert_code(1);
    let locked = project.lock(&[
        "--from",
        &project.out().join("results.json").display().to_string(),
        "--filter",
        "spike",
        "--filter",
        "flat",
        "--filter",
        "fits",
    ]);
    locked.assert_code(0);
    // Then the flat case grows past its baseline and the capacity shrinks.
    std::fs::write(project.suite(), glance_suite(project.path(), 200, 56)).expect("suite");
    let run = project.run(&[]);
    run.assert_code(1);
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("report.html");

    // The overview: a row per case, the regression and the failures red.
    let overview = &html[html.find("<h2>Overview</h2>").expect("an overview")
        ..html.find("<table").expect("the table")];
    for id in ["flat", "oom", "fits"] {
        assert!(
            overview.contains(&format!("<g class=\"row bad\"><title>{id}:")),
            "{id} is red in {overview}"
        );
    }
    assert!(
        overview.contains("<g class=\"row\"><title>spike:"),
        "{overview}"
    );
    assert!(overview.contains("class=\"baseline\"") && overview.contains("class=\"budget\""));

    // The failure's text is whole in its status cell.
    let message = run.message("oom");
    assert!(message.len() > 60, "{message}");
    let table = &html[html.find("<table").expect("table")..html.find("</table>").expect("end")];
    assert!(
        table.contains(&format!("<span class=\"why\">{}</span>", escaped(&message))),
        "{table}"
    );

    // Every chart's y axis starts at 0.
    for id in ["spike", "flat", "oom", "fits"] {
        let case = section(&html, id);
        for figure in case.split("<figure class=\"chart\">").skip(1) {
            assert!(
                figure.contains("text-anchor=\"end\" fill=\"#444\">0</text>"),
                "{id}: an axis from 0 in {figure}"
            );
        }
    }

    // Each gated host peak is marked with its value: at its moment when a
    // sample reached it, else as a level named by its source.
    for id in ["spike", "flat"] {
        let case = run.case(id);
        let peak = case["host_peak_bytes"].as_u64().expect("a host peak");
        let timeline = read_json(
            &project
                .out()
                .join(case["timeline"].as_str().expect("timeline")),
        );
        let line_top = timeline["points"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["host_bytes"].as_u64())
            .max()
            .unwrap_or(0);
        let source = case["host_peak_source"].as_str().unwrap_or_default();
        let sampled = matches!(source, "cgroup-anon-shmem" | "pss-sum");
        let label = format!("host peak {}", Bytes(peak));
        let memory = figure_after(section(&html, id), "Memory over time");
        if line_top == peak || sampled {
            assert!(
                memory.contains(&format!("{label} at ")),
                "{id}: `{label} at` in {memory}"
            );
            assert!(memory.contains("class=\"mark\""), "{memory}");
        } else {
            let name = match source {
                "vmhwm" => "VmHWM",
                "rusage-maxrss" => "ru_maxrss",
                "pss-anon-shmem" => "PSS anon+shmem",
                other => panic!("{id}: unexpected source {other}"),
            };
            assert!(
                memory.contains(&format!("{label} ({name})")),
                "{id}: the peak above every sample, {label} ({name}), in {memory}"
            );
        }
    }
    let flat = figure_after(section(&html, "flat"), "Memory over time");
    assert!(flat.contains(">host budget 300.0 MiB<"), "{flat}");
    assert!(flat.contains(">host baseline "), "{flat}");

    // The capacity curve draws the locked capacity beside the one found.
    let fits = run.case("fits");
    let found = fits["capacity"]["value"].as_u64().expect("a capacity");
    let curve = figure_after(
        section(&html, "fits"),
        "Peak memory against the searched value",
    );
    assert!(
        curve.contains(&format!("capacity: batch = {found}")),
        "{curve}"
    );
    assert!(curve.contains("locked: batch = 96"), "{curve}");
    assert!(
        curve.contains(&format!("capacity lost since the lock: batch 96 → {found}")),
        "{curve}"
    );

    // The probe chart: a labelled series per search probe, each from its
    // first step (four steps: the axis ends at 3, no staircase).
    let probes = fits["capacity"]["probes"].as_array().expect("probes").len();
    let steps = figure_after(section(&html, "fits"), "What the probe reported");
    assert_eq!(
        steps.matches("<g class=\"series\">").count(),
        probes.min(8),
        "{steps}"
    );
    assert!(
        steps.contains(&format!("batch = {found} (the capacity)")),
        "{steps}"
    );
    assert!(
        steps.contains(">3</text>") && !steps.contains(">4</text>"),
        "{steps}"
    );
    // And the case's own probe figures are its capacity probe's alone.
    assert_eq!(
        fits["probe"]["peak_allocated"].as_u64(),
        Some(found * MIB * 4),
        "{fits:#}"
    );

    let Some(browser_name) = chromium() else {
        eprintln!("SKIPPED the browser half: no Chromium found (install Debian's `chromium`)");
        return;
    };
    // The check runs in a copy: report.html itself has no script.
    let checked = project.path().join("checked.html");
    let page = html.replace("</body>", &format!("{LAYOUT_CHECK}</body>"));
    std::fs::write(&checked, page).expect("write the checked copy");
    for width in [1400, 900] {
        let found = layout_at(browser_name, &checked, width);
        let (scroll, window) = (found["scrollWidth"].as_f64(), found["innerWidth"].as_f64());
        assert!(
            scroll.is_some() && scroll <= window,
            "{width} px: the page scrolls sideways: {found:#}"
        );
        assert!(found["charts"].as_u64() >= Some(6), "{width} px: {found:#}");
        for key in ["legendOverData", "labelClashes", "labelsInPlot"] {
            assert_eq!(
                found[key],
                serde_json::json!([]),
                "{width} px: {key}: {found:#}"
            );
        }
        let whys = found["whys"].to_string();
        assert!(!whys.contains('…'), "{width} px: a cut message: {whys}");
        assert!(
            whys.contains(&serde_json::Value::from(message.as_str()).to_string()),
            "{whys}"
        );
    }
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("html-report");
    std::fs::create_dir_all(&shots).expect("screenshot folder");
    let screenshot = shots.join("report-1400.png");
    let url = format!("file://{}", project.out().join("report.html").display());
    self::screenshot(browser_name, &url, (1400, 2400), &screenshot);
    std::fs::copy(project.out().join("report.html"), shots.join("report.html"))
        .expect("keep the page");
    eprintln!("report.html at 1400 px: {}", screenshot.display());
}

/// A case held against its run history: the "Over its last runs" chart
/// draws the past runs, this run, the ratchet, the creep limit and the
/// step, and reads at 1400 and 900 px with no label over the data or
/// over another label.
#[test]
fn the_trend_chart_reads_at_both_widths() {
    let suite = |mib: u32| {
        format!(
            "[suite]\nname = \"trend\"\nsample_interval = \"20ms\"\nhistory = \"h.sqlite\"\n\
             creep = {{ limit = \"10%\", action = \"warn\" }}\n\n\
             [[case]]\nname = \"grow\"\ncommand = [\"python3\", {}, \"--mib\", \"{mib}\", \"--hold\", \"50ms\"]\n",
            toml_str(&workload("alloc.py"))
        )
    };
    let project = Project::new(&suite(200));
    for mib in [200, 201, 199, 260] {
        std::fs::write(project.suite(), suite(mib)).expect("suite");
        project
            .run(&["--gpu", "off", "--no-baseline", "--branch", "main"])
            .assert_code(0);
    }
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("report");
    let trend = figure_after(
        section(&html, "grow"),
        "Over its last runs (the run history)",
    );
    for drawn in ["ratchet", "creep limit", "this run:", "step: this run"] {
        assert!(trend.contains(drawn), "{drawn} in {trend}");
    }
    let Some(browser_name) = chromium() else {
        eprintln!("SKIPPED the browser half: no Chromium found (install Debian's `chromium`)");
        return;
    };
    let checked = project.path().join("checked.html");
    let page = html.replace("</body>", &format!("{LAYOUT_CHECK}</body>"));
    std::fs::write(&checked, page).expect("write the checked copy");
    for width in [1400, 900] {
        let found = layout_at(browser_name, &checked, width);
        let (scroll, window) = (found["scrollWidth"].as_f64(), found["innerWidth"].as_f64());
        assert!(
            scroll.is_some() && scroll <= window,
            "{width} px: the page scrolls sideways: {found:#}"
        );
        for key in ["legendOverData", "labelClashes", "labelsInPlot"] {
            assert_eq!(
                found[key],
                serde_json::json!([]),
                "{width} px: {key}: {found:#}"
            );
        }
    }
}
