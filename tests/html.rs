//! report.html in a real browser: headless Chromium renders it, the charts
//! must be in the page, and a screenshot is saved under the out dir. When
//! Chromium is not installed the test says so and checks the file only
//! (`.ci/run` installs Debian's `chromium`).

mod common;

use std::process::Command;

use common::*;

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

#[test]
fn the_html_report_renders_with_charts() {
    let suite = format!(
        "[suite]\nname = \"h\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"ok\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"64\", \"--hold\", \"300ms\"]\nbudget = {{ host = \"512 MiB\" }}\n[[case]]\nname = \"oom\"\ncommand = [\"python3\", {fail}, \"--text\", {text}]\n",
        alloc = toml_str(&workload("alloc.py")),
        fail = toml_str(&workload("fail.py")),
        text = toml_str(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/oom/pytorch-current.txt")
                .display()
                .to_string()
        ),
    );
    let project = Project::new(&suite);
    project.run(&[]).assert_code(1);
    let report = project.out().join("report.html");
    let html = std::fs::read_to_string(&report).expect("report.html");
    // Self-contained: nothing to fetch (URLs in log text are just text).
    for fetch in ["src=\"http", "href=\"http", "url(http", "<link", "<script"] {
        assert!(!html.contains(fetch), "`{fetch}` in report.html");
    }
    assert_eq!(html.matches("<svg").count(), 2, "one chart per case");
    assert!(html.contains("Diagnosis: gpu-oom"), "{html}");
    // A budget 8 times the peak would flatten the chart: named, not drawn.
    assert!(
        html.contains("host budget 512.0 MiB is far above these figures: not drawn"),
        "{html}"
    );
    assert!(!html.contains(">host budget</text>"), "{html}");

    let Some(browser) = chromium() else {
        eprintln!("SKIPPED the browser half: no Chromium found (install Debian's `chromium`)");
        return;
    };
    let profile = tempfile::tempdir().expect("profile dir");
    let url = format!("file://{}", report.display());
    let common_flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ];
    let dom = Command::new(browser)
        .args(common_flags)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &url])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(
        dom.matches("<svg").count(),
        2,
        "charts in the rendered page: {dom}"
    );
    assert!(dom.contains("host RSS"), "chart legend rendered");
    let screenshot = project.out().join("report.png");
    let status = Command::new(browser)
        .args(common_flags)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args([
            "--window-size=1100,1400",
            &format!("--screenshot={}", screenshot.display()),
            &url,
        ])
        .output()
        .expect("run chromium");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let size = std::fs::metadata(&screenshot).expect("screenshot").len();
    assert!(
        size > 10_000,
        "a real picture, not an empty page ({size} bytes)"
    );
}
