//! SVG plots of the aggregated results: throughput against file size for the sweeps
//! (the zx paper's figures 4-9: a line per tool) and grouped bars normalised to the
//! best tool for the datasets (paper 003's style).
//!
//! Drawn with `plotters` and only its SVG backend: without its `ttf`/`ab_glyph`
//! features it estimates text extents itself and writes text as SVG `<text>`, so
//! building needs no system font library.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::stats::{dataset_order, size_label, tool_order, Cell, Link};

/// Colours of the data movers, by the tool's position in the tool order, so a tool
/// keeps its colour across every chart of a report (Tableau 10, colour-blind safe).
pub const PALETTE: [RGBColor; 9] = [
    RGBColor(0x1F, 0x77, 0xB4),
    RGBColor(0xFF, 0x7F, 0x0E),
    RGBColor(0x2C, 0xA0, 0x2C),
    RGBColor(0xD6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xBD),
    RGBColor(0x8C, 0x56, 0x4B),
    RGBColor(0xE3, 0x77, 0xC2),
    RGBColor(0xBC, 0xBD, 0x22),
    RGBColor(0x17, 0xBE, 0xCF),
];

/// Colour of a limit (iperf3): grey, so it reads as a reference rather than a rival.
pub const LIMIT_COLOUR: RGBColor = RGBColor(0x55, 0x55, 0x55);

/// Stroke width of a series' line. Axes, ticks and grid are 1 wide, so a series' line
/// is the only `<polyline>` of this width in the SVG.
pub const SERIES_STROKE_WIDTH: u32 = 2;

/// Size of every chart in pixels.
const SIZE: (u32, u32) = (960, 540);
/// Width of the legend strip on the right of a chart: outside the plot, the legend
/// never hides data.
const LEGEND_WIDTH: u32 = 200;
const FONT: &str = "sans-serif";
/// Font sizes as plotters takes them (it writes 1/1.24 of them as the SVG font-size).
const TITLE_SIZE: u32 = 24;
const LABEL_SIZE: u32 = 16;

/// One line of a sweep chart: a tool's median throughput at each file size.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's text.
    pub label: String,
    /// The tool.
    pub tool: String,
    /// Whether the tool is a limit.
    pub is_limit: bool,
    /// (file size in bytes, median Gbit/s), by file size; points where every run
    /// failed are left out.
    pub points: Vec<(u64, f64)>,
}

/// The lines of a sweep chart of `cells`: one per tool, or per (tool, link) when the
/// cells span several links. Tools are in `tools` order (see [`tool_order`]); a series
/// without a single successful run is left out.
pub fn sweep_series(cells: &[Cell], tools: &[String]) -> Vec<Series> {
    let links = distinct_links(cells);
    let mut series = Vec::new();
    for tool in tool_order(cells, tools) {
        for link in &links {
            let mine: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.name() == tool && Link::of(&c.point) == *link)
                .collect();
            if let Some(s) = series_of(&mine, &tool, link, links.len() > 1) {
                series.push(s);
            }
        }
    }
    series
}

/// The series of one tool's cells at one link; `None` if no run succeeded.
fn series_of(cells: &[&Cell], tool: &str, link: &Link, name_link: bool) -> Option<Series> {
    let mut points: Vec<(u64, f64)> = cells
        .iter()
        .filter_map(|c| c.median().map(|m| (c.point.file_size, m)))
        .filter(|&(size, _)| size > 0)
        .collect();
    if points.is_empty() {
        return None;
    }
    points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let is_limit = cells.iter().any(|c| c.is_limit);
    let mut label = tool.to_string();
    if is_limit {
        label.push_str(" (limit)");
    }
    if name_link {
        label = format!("{label}, {}", link.label());
    }
    Some(Series {
        label,
        tool: tool.to_string(),
        is_limit,
        points,
    })
}

/// The links of `cells`, each once, easiest first.
fn distinct_links(cells: &[Cell]) -> Vec<Link> {
    let mut links: Vec<Link> = Vec::new();
    for c in cells {
        let l = Link::of(&c.point);
        if !links.contains(&l) {
            links.push(l);
        }
    }
    links.sort_by(Link::order);
    links
}

/// The colour of `tool`: grey for a limit, else its palette entry by its position in
/// `tools` (the report's order, so colours agree between charts).
pub fn tool_colour(tool: &str, is_limit: bool, tools: &[String]) -> RGBColor {
    if is_limit {
        return LIMIT_COLOUR;
    }
    let i = tools.iter().position(|t| t == tool).unwrap_or(tools.len());
    PALETTE[i % PALETTE.len()]
}

/// Colours of `series`: by tool, unless a tool has several series (several links in
/// one chart), where the tool's colour would no longer tell them apart.
fn series_colours(series: &[Series], tools: &[String]) -> Vec<RGBColor> {
    let one_per_tool = series
        .iter()
        .enumerate()
        .all(|(i, s)| series[..i].iter().all(|o| o.tool != s.tool));
    let mut limits_seen = 0;
    series
        .iter()
        .enumerate()
        .map(|(i, s)| match (one_per_tool, s.is_limit) {
            (true, _) => tool_colour(&s.tool, s.is_limit, tools),
            // Several limit lines: shades of the limit's grey, darkest first.
            (false, true) => {
                limits_seen += 1;
                let shade = (LIMIT_COLOUR.0 as usize + 45 * (limits_seen - 1)).min(200) as u8;
                RGBColor(shade, shade, shade)
            }
            (false, false) => PALETTE[i % PALETTE.len()],
        })
        .collect()
}

/// How wide the legend must be for `labels` (plotters estimates text width itself;
/// about 7 px per character at the legend's font size), and never narrower than the
/// default.
fn legend_width<'a>(labels: impl Iterator<Item = &'a String>) -> u32 {
    let longest = labels.map(|l| l.chars().count()).max().unwrap_or(0) as u32;
    (longest * 7 + 40).max(LEGEND_WIDTH)
}

/// Writes to `path` a line chart of median throughput (linear y, Gbit/s) against file
/// size (log2 x) of `cells`, a line per [`sweep_series`]. Meant for the cells of one
/// suite at one link; `tools` fixes the order and the colours.
pub fn sweep_chart(cells: &[Cell], tools: &[String], title: &str, path: &Path) -> Result<()> {
    let series = sweep_series(cells, tools);
    let colours = series_colours(&series, tools);
    let legend_w = legend_width(series.iter().map(|s| &s.label));
    let size = (SIZE.0 - LEGEND_WIDTH + legend_w, SIZE.1);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let (plot, legend) = root.split_horizontally(size.0 - legend_w);
    draw_lines(&plot, &series, &colours, title)?;
    let entries: Vec<(String, RGBColor)> = series
        .iter()
        .map(|s| s.label.clone())
        .zip(colours)
        .collect();
    draw_legend(&legend, &entries)?;
    root.present().map_err(draw_error)
}

/// Draws the axes and the lines of a sweep chart.
fn draw_lines(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &[Series],
    colours: &[RGBColor],
    title: &str,
) -> Result<()> {
    let (x0, x1) = x_range(series);
    let y1 = y_top(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let decimals = axis_decimals(y1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, TITLE_SIZE))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), 0.0..y1)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("file size (bytes)")
        .y_desc("median Gbit/s")
        .x_label_formatter(&|v| size_label(v.round() as u64))
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .light_line_style(TRANSPARENT)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, LABEL_SIZE))
        .draw()
        .map_err(draw_error)?;
    for (s, colour) in series.iter().zip(colours) {
        let points = s.points.iter().map(|&(x, y)| (x as f64, y));
        chart
            .draw_series(LineSeries::new(
                points.clone(),
                colour.stroke_width(SERIES_STROKE_WIDTH),
            ))
            .map_err(draw_error)?;
        chart
            .draw_series(points.map(|p| Circle::new(p, 3, colour.filled())))
            .map_err(draw_error)?;
    }
    Ok(())
}

/// The x range of a sweep chart: the file sizes, a quarter of a doubling wider on
/// each side so the end points stay off the axes (a doubling each side for one size).
fn x_range(series: &[Series]) -> (f64, f64) {
    let sizes = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0 as f64));
    let lo = sizes.clone().fold(f64::INFINITY, f64::min);
    let hi = sizes.fold(0.0, f64::max);
    if !lo.is_finite() || hi <= 0.0 {
        return (1024.0, 1024.0 * 1024.0);
    }
    let pad = if lo == hi { 2.0 } else { 2f64.powf(0.25) };
    (lo / pad, hi * pad)
}

/// The top of a throughput axis: 10 % above the largest value, so the highest point
/// is not on the frame (1 when there are none).
fn y_top(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.fold(0.0, f64::max);
    if max > 0.0 {
        max * 1.1
    } else {
        1.0
    }
}

/// Decimals of the y axis labels, enough to tell the ticks apart at this scale.
fn axis_decimals(top: f64) -> usize {
    match top {
        t if t >= 10.0 => 0,
        t if t >= 1.0 => 1,
        t if t >= 0.1 => 2,
        _ => 3,
    }
}

/// Writes to `path` a grouped bar chart of `cells`: per dataset (by file size), one bar
/// per data mover with its median normalised to the best mover's (the best reaches 1).
/// Limits are left out (they are not normalised) and so are tools that failed. Meant
/// for the cells of one suite at one link; `tools` fixes the order and the colours.
pub fn datasets_chart(cells: &[Cell], tools: &[String], title: &str, path: &Path) -> Result<()> {
    let datasets = dataset_order(cells);
    let movers: Vec<String> = tool_order(cells, tools)
        .into_iter()
        .filter(|t| cells.iter().any(|c| &c.name() == t && !c.is_limit))
        .collect();
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let (plot, legend) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
    draw_bars(&plot, cells, &datasets, &movers, tools, title)?;
    let entries: Vec<(String, RGBColor)> = movers
        .iter()
        .map(|t| (t.clone(), tool_colour(t, false, tools)))
        .collect();
    draw_legend(&legend, &entries)?;
    root.present().map_err(draw_error)
}

/// A bar: (dataset index, tool index, normalised median).
type Bar = (usize, usize, f64);

/// The bars of a datasets chart, one per (dataset, mover) with a normalised median.
fn bars(cells: &[Cell], datasets: &[String], movers: &[String]) -> Vec<Bar> {
    let mut bars = Vec::new();
    for (i, d) in datasets.iter().enumerate() {
        for (j, t) in movers.iter().enumerate() {
            let found = cells
                .iter()
                .find(|c| &c.point.dataset == d && &c.name() == t);
            if let Some(v) = found.and_then(|c| c.normalised) {
                bars.push((i, j, v));
            }
        }
    }
    bars
}

/// Draws the axes and bars of a datasets chart: dataset `i` is centred on x = i, its
/// bars share 80 % of the unit width.
fn draw_bars(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    cells: &[Cell],
    datasets: &[String],
    movers: &[String],
    tools: &[String],
    title: &str,
) -> Result<()> {
    let n = datasets.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, TITLE_SIZE))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..1.1)
        .map_err(draw_error)?;
    let name_at = |v: &f64| dataset_at(datasets, *v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&name_at)
        .x_desc("dataset")
        .y_desc("median, normalised to the best tool")
        .y_label_formatter(&|v| format!("{v:.1}"))
        .light_line_style(TRANSPARENT)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, LABEL_SIZE))
        .draw()
        .map_err(draw_error)?;
    let width = 0.8 / movers.len().max(1) as f64;
    let rects = bars(cells, datasets, movers).into_iter().map(|(i, j, v)| {
        let x0 = i as f64 - 0.4 + j as f64 * width;
        Rectangle::new(
            [(x0, 0.0), (x0 + width, v)],
            tool_colour(&movers[j], false, tools).filled(),
        )
    });
    chart.draw_series(rects).map_err(draw_error)?;
    Ok(())
}

/// The x label at `v` of a datasets chart: the dataset's name at whole numbers, nothing
/// between them.
fn dataset_at(datasets: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    datasets.get(i as usize).cloned().unwrap_or_default()
}

/// Draws a legend, a coloured square and a label per entry, down `area`.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(String, RGBColor)],
) -> Result<()> {
    for (i, (label, colour)) in entries.iter().enumerate() {
        let y = 50 + 24 * i as i32;
        area.draw(&Rectangle::new([(8, y), (22, y + 14)], colour.filled()))
            .map_err(draw_error)?;
        area.draw(&Text::new(label.clone(), (30, y), (FONT, LABEL_SIZE)))
            .map_err(draw_error)?;
    }
    Ok(())
}

/// Turns a plotters error into ours, saying that drawing failed (the caller adds which
/// file).
fn draw_error<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing a plot: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Meta, Mode, Point, Record, ToolInfo};
    use crate::stats::aggregate;

    fn record(tool: &str, file_size: u64, rtt_ms: Option<f64>, seconds: f64) -> Record {
        Record {
            point: Point {
                suite: "sweep-bulk".into(),
                dataset: size_label(file_size),
                file_size,
                files: 1,
                bytes: 1_000_000_000,
                rtt_ms,
                loss: 0.0,
                rate_bps: 0,
                cc: "default".into(),
                write_rate_bps: None,
            },
            tool: tool.into(),
            iteration: 1,
            seconds,
            ok: true,
            error: None,
            started_unix: 0,
            mode: Mode::Bulk,
            lag: None,
            writer_seconds: None,
            complete_seconds: None,
        }
    }

    fn meta() -> Meta {
        let info = |name: &str, is_limit| ToolInfo {
            name: name.into(),
            is_limit,
            ..ToolInfo::default()
        };
        Meta {
            tools: vec![info("a", false), info("b", false), info("iperf3", true)],
            ..Meta::default()
        }
    }

    fn names(meta: &Meta) -> Vec<String> {
        meta.tools.iter().map(|t| t.name.clone()).collect()
    }

    #[test]
    fn one_series_per_tool_at_one_link() {
        let records = [
            record("b", 4096, None, 4.0),
            record("a", 1 << 20, None, 1.0),
            record("a", 4096, None, 2.0),
            record("iperf3", 4096, None, 0.5),
        ];
        let cells = aggregate(&records, &meta());
        let series = sweep_series(&cells, &names(&meta()));
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["a", "b", "iperf3 (limit)"]);
        // 1 GB in 2 s and in 1 s: 4 and 8 Gbit/s, sorted by file size.
        assert_eq!(series[0].points, [(4096, 4.0), (1 << 20, 8.0)]);
    }

    #[test]
    fn series_per_tool_and_link_across_links() {
        let records = [
            record("a", 4096, Some(100.0), 2.0),
            record("a", 4096, Some(1.0), 1.0),
        ];
        let cells = aggregate(&records, &meta());
        let series = sweep_series(&cells, &names(&meta()));
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["a, RTT 1 ms", "a, RTT 100 ms"]);
        let colours = series_colours(&series, &names(&meta()));
        assert_ne!(colours[0], colours[1]);
    }

    #[test]
    fn streaming_runs_are_a_series_of_their_own() {
        let mut streaming = record("a", 4096, None, 4.0);
        streaming.mode = Mode::Streaming;
        let records = [record("a", 4096, None, 2.0), streaming];
        let cells = aggregate(&records, &meta());
        let tools = crate::stats::tool_order(&cells, &names(&meta()));
        let series = sweep_series(&cells, &tools);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["a", "a (streaming)"]);
        assert_eq!(series[1].points, [(4096, 2.0)]);
        let colours = series_colours(&series, &tools);
        assert_ne!(colours[0], colours[1]);
    }

    #[test]
    fn colours_follow_the_tool_order() {
        let tools = names(&meta());
        assert_eq!(tool_colour("b", false, &tools), PALETTE[1]);
        assert_eq!(tool_colour("iperf3", true, &tools), LIMIT_COLOUR);
    }

    #[test]
    fn axis_helpers() {
        assert_eq!(axis_decimals(25.0), 0);
        assert_eq!(axis_decimals(2.0), 1);
        assert_eq!(axis_decimals(0.5), 2);
        assert_eq!(axis_decimals(0.05), 3);
        assert!((y_top([1.0, 2.0].into_iter()) - 2.2).abs() < 1e-12);
        assert_eq!(y_top(std::iter::empty()), 1.0);
        let d = ["x".to_string(), "y".to_string()];
        assert_eq!(dataset_at(&d, 1.0), "y");
        assert_eq!(dataset_at(&d, 0.5), "");
        assert_eq!(dataset_at(&d, 2.0), "");
    }
}
