//! Draws the fleet benchmark's plots (issue 15) from its committed table:
//!
//! - `docs/bench/propagation.png`: feed edit → each child, p50 and p99, against the number of
//!   child clusters (log-log), one line per way of running the children (a process per
//!   devcluster and agent, or shared `fleet-children` processes), with the issue's targets and
//!   Karmada's published P99 at 100 member clusters beside them;
//! - `docs/bench/hub_memory.png`: the hub's RSS against the number of agents connected.
//!
//! The input is `docs/bench/propagation.csv`, the lines `bench_fleet` prints at its end (see
//! `e2e/examples/bench_fleet.rs`). Text is drawn with `plotters`' pure-Rust `ab_glyph` renderer
//! (no fontconfig or freetype needed to build), from a TrueType font read at run time:
//! `BENCH_PLOTS_FONT`, else DejaVu Sans from `/usr/share/fonts`.
//!
//! ```text
//! cargo run -p atoll-bench --example bench_plots        # [CSV [OUT_DIR]]
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use plotters::prelude::*;

/// Karmada's published propagation P99 at 100 member clusters, ms: pull mode, push mode.
const KARMADA_P99_MS: [(&str, f64); 2] = [("Karmada pull", 989.0), ("Karmada push", 1298.0)];
/// The issue's targets for p99 to every child: (clusters, ms).
const TARGETS: [(f64, f64); 2] = [(100.0, 100.0), (1000.0, 1000.0)];
/// Fonts tried when `BENCH_PLOTS_FONT` is unset.
const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// One line of the CSV.
struct Row {
    n: f64,
    /// `processes` or `shared-<K>`.
    children: String,
    each_p50: f64,
    each_p99: f64,
    hub_rss: f64,
}

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut args = std::env::args().skip(1);
    let csv = args
        .next()
        .map_or_else(|| root.join("docs/bench/propagation.csv"), PathBuf::from);
    let out = args
        .next()
        .map_or_else(|| root.join("docs/bench"), PathBuf::from);
    register_font()?;
    let rows = read(&csv)?;
    let propagation = out.join("propagation.png");
    draw_propagation(&rows, &propagation)?;
    let memory = out.join("hub_memory.png");
    draw_hub_memory(&rows, &memory)?;
    println!("wrote {} and {}", propagation.display(), memory.display());
    Ok(())
}

/// Registers the TrueType font as `sans-serif` for every text drawn.
fn register_font() -> Result<()> {
    let candidates: Vec<PathBuf> = match std::env::var_os("BENCH_PLOTS_FONT") {
        Some(p) => vec![PathBuf::from(p)],
        None => FONTS.iter().map(PathBuf::from).collect(),
    };
    let Some((path, bytes)) = candidates
        .iter()
        .find_map(|p| std::fs::read(p).ok().map(|b| (p, b)))
    else {
        bail!(
            "no TrueType font found (tried {}); set BENCH_PLOTS_FONT to a .ttf file",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    // plotters keeps registered fonts for the whole process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{} is not a usable TrueType font", path.display()))
}

/// The rows of `path` (header and `#` lines skipped), columns as `bench_fleet` prints them.
fn read(path: &Path) -> Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
    let header: Vec<&str> = lines.next().context("empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("no column {name} in {}", path.display()))
    };
    let (n, children, p50, p99, hub) = (
        col("n")?,
        col("children")?,
        col("each_p50_ms")?,
        col("each_p99_ms")?,
        col("hub_rss_mib")?,
    );
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            let num = |i: usize| -> Result<f64> {
                let cell = cells.get(i).context("short line")?;
                cell.trim()
                    .parse()
                    .with_context(|| format!("{cell:?} in {line:?} is not a number"))
            };
            Ok(Row {
                n: num(n)?,
                children: cells.get(children).context("short line")?.to_string(),
                each_p50: num(p50)?,
                each_p99: num(p99)?,
                hub_rss: num(hub)?,
            })
        })
        .collect()
}

/// How a row ran its children: `processes`, or `shared` whatever the children per process
/// (`kube-parent` when shared under a real kube-apiserver parent).
fn mode(row: &Row) -> &str {
    if row.children.starts_with("shared") {
        "shared"
    } else if row.children.starts_with("kube-parent") {
        "kube-parent"
    } else {
        row.children.as_str()
    }
}

/// The ways of running the children present in `rows`, in a fixed order, each with a label
/// naming the children per process of its rows.
fn modes(rows: &[Row]) -> Vec<(String, String)> {
    let mut modes: Vec<String> = rows.iter().map(|r| mode(r).to_string()).collect();
    modes.sort();
    modes.dedup();
    modes
        .into_iter()
        .map(|m| {
            let label = if m == "shared" {
                let per: Vec<String> = rows
                    .iter()
                    .filter(|r| mode(r) == "shared")
                    .filter_map(|r| {
                        let k = r.children.strip_prefix("shared-")?;
                        Some(format!("{k} at N={}", r.n))
                    })
                    .collect();
                format!("children shared per process ({})", per.join(", "))
            } else if m == "kube-parent" {
                "real kube-apiserver parent, children shared per process".to_string()
            } else {
                "a process per devcluster and per agent".to_string()
            };
            (m, label)
        })
        .collect()
}

/// `(n, value)` of the rows of one mode, by n.
fn series(rows: &[Row], wanted: &str, value: impl Fn(&Row) -> f64) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| mode(r) == wanted)
        .map(|r| (r.n, value(r)))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

fn draw_propagation(rows: &[Row], path: &Path) -> Result<()> {
    let area = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    area.fill(&WHITE)?;
    let n_max = rows.iter().map(|r| r.n).fold(1000.0, f64::max) * 1.5;
    let y_max = rows
        .iter()
        .map(|r| r.each_p99)
        .chain(KARMADA_P99_MS.iter().map(|k| k.1))
        .fold(1000.0, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(&area)
        .caption(
            "atoll: feed edit -> object readable in each child (2-core machine)",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((5.0..n_max).log_scale(), (5.0..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("child clusters (N), each with its own API server and agent")
        .y_desc("ms")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    let palette = [BLUE, RED, GREEN, MAGENTA];
    for (i, (mode, label)) in modes(rows).iter().enumerate() {
        let color = palette[i % palette.len()];
        for (value, what, dashed) in [
            (
                Box::new(|r: &Row| r.each_p50) as Box<dyn Fn(&Row) -> f64>,
                "p50",
                false,
            ),
            (Box::new(|r: &Row| r.each_p99), "p99", true),
        ] {
            let points = series(rows, mode, value);
            let style = if dashed {
                color.stroke_width(2)
            } else {
                color.stroke_width(3)
            };
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(format!("{what}, {label}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
            if dashed {
                chart.draw_series(
                    points
                        .iter()
                        .map(|p| TriangleMarker::new(*p, 6, color.filled())),
                )?;
            } else {
                chart.draw_series(points.iter().map(|p| Circle::new(*p, 5, color.filled())))?;
            }
        }
    }
    chart
        .draw_series(
            TARGETS
                .iter()
                .map(|t| Cross::new(*t, 8, BLACK.stroke_width(2))),
        )?
        .label("issue 15 target for p99 (100 ms at 100, 1 s at 1,000)")
        .legend(|(x, y)| Cross::new((x + 12, y), 6, BLACK.stroke_width(2)));
    for (name, ms) in KARMADA_P99_MS {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(95.0, ms * 0.97), (105.0, ms * 1.03)],
            RGBColor(120, 120, 120).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{name} P99 ({ms:.0} ms, published, own hardware)"),
            (110.0, ms),
            ("sans-serif", 14),
        )))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    area.present()?;
    Ok(())
}

fn draw_hub_memory(rows: &[Row], path: &Path) -> Result<()> {
    let area = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    area.fill(&WHITE)?;
    let n_max = rows.iter().map(|r| r.n).fold(100.0, f64::max) * 1.1;
    let y_max = rows.iter().map(|r| r.hub_rss).fold(50.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(&area)
        .caption(
            "atoll hub: resident memory against connected agents (fleet benchmark)",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..n_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("agents (one per child cluster)")
        .y_desc("hub RSS, MiB")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    let palette = [BLUE, RED, GREEN, MAGENTA];
    for (i, (mode, label)) in modes(rows).iter().enumerate() {
        let color = palette[i % palette.len()];
        let points = series(rows, mode, |r| r.hub_rss);
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 5, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    area.present()?;
    Ok(())
}
