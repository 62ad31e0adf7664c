//! SVG plots (plotters, SVG backend): pure functions from plain data to SVG text.
//!
//! The SVG backend writes `<text>` elements and leaves fonts to the viewer, so no font
//! feature is needed; plotters only estimates text widths for layout. Every plot has a title,
//! axis labels with units and a legend.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::units::human_bytes;

/// Colours that stay apart on screen and in print (the "tab10" set).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The `i`-th colour of the palette (it wraps).
pub(crate) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

const FONT: &str = "sans-serif";

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e:?}")
}

/// One line of points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// Drawn dashed (e.g. eager next to a solid graph line of the same colour).
    pub(crate) dashed: bool,
    /// Index into the palette.
    pub(crate) colour: usize,
}

fn bounds(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    vals.filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

fn draw_legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    pos: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((FONT, 14))
        .draw()
        .map_err(err)
}

/// Time per operation (µs) against message size (bytes), log-x; log-y too when the times
/// span more than a factor of 20.
pub(crate) fn latency_vs_size(title: &str, series: &[Series]) -> anyhow::Result<String> {
    let pts = || series.iter().flat_map(|s| s.points.iter().copied());
    let (xlo, xhi) = bounds(pts().map(|p| p.0).filter(|&x| x > 0.0)).unwrap_or((1.0, 1024.0));
    let (ylo, yhi) = bounds(pts().map(|p| p.1).filter(|&y| y > 0.0)).unwrap_or((1.0, 10.0));
    let (xlo, xhi) = (xlo / 1.5, xhi * 1.5);
    let xticks = pow2_ticks(xlo, xhi, 10);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, (FONT, 22))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80);
        let x = (xlo..xhi).log_scale().with_key_points(xticks);
        if yhi / ylo > 20.0 {
            let y = (ylo / 1.3..yhi * 1.3).log_scale();
            latency_chart(&mut b, x, y, "time per operation (µs, log scale)", series)?;
        } else {
            latency_chart(
                &mut b,
                x,
                0.0..yhi * 1.15,
                "time per operation (µs)",
                series,
            )?;
        }
        root.present().map_err(err)?;
    }
    Ok(buf)
}

/// The latency chart on `b`, message sizes on `x`, times on `y` (linear or log): the mesh,
/// the lines and the legend.
fn latency_chart<DB: DrawingBackend, X, Y>(
    b: &mut ChartBuilder<'_, '_, DB>,
    x: X,
    y: Y,
    y_desc: &str,
    series: &[Series],
) -> anyhow::Result<()>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = b.build_cartesian_2d(x, y).map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log scale)")
        .y_desc(y_desc)
        .x_label_formatter(&|x: &f64| human_bytes(x.round() as u64))
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    draw_lines(&mut chart, series)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// Powers of two in [lo, hi], every 2nd, 4th... so that at most `max` remain.
fn pow2_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let all: Vec<f64> = (0..64)
        .map(|e| 2f64.powi(e))
        .filter(|&v| v >= lo && v <= hi)
        .collect();
    let step = all.len().div_ceil(max.max(1)).max(1);
    all.into_iter().step_by(step).collect()
}

fn draw_lines<'a, DB: DrawingBackend + 'a, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &[Series],
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for s in series {
        let c = colour(s.colour);
        let style = c.stroke_width(2);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .collect();
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))
        };
        // a dashed line's legend is one dash long
        let len = if s.dashed { 8 } else { 20 };
        drawn
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + len, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
    }
    Ok(())
}

/// The parts of one bar (ms). With both `comm_ms` and `compute_ms` the bar is stacked and
/// `full_ms` is drawn as a marker across it; otherwise the bar is the one time present.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Stack {
    pub(crate) comm_ms: Option<f64>,
    pub(crate) compute_ms: Option<f64>,
    pub(crate) full_ms: Option<f64>,
}

impl Stack {
    pub(crate) fn is_empty(&self) -> bool {
        self.comm_ms.is_none() && self.compute_ms.is_none() && self.full_ms.is_none()
    }

    /// Collectives and compute both present: drawn stacked.
    fn stacked(&self) -> bool {
        self.comm_ms.is_some() && self.compute_ms.is_some()
    }

    fn top(&self) -> f64 {
        let stacked = self.comm_ms.unwrap_or(0.0) + self.compute_ms.unwrap_or(0.0);
        stacked.max(self.full_ms.unwrap_or(0.0))
    }
}

/// One group of the verify bar chart: an eager and a CUDA-graph bar side by side.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BarGroup {
    /// Up to two lines under the group.
    pub(crate) label: Vec<String>,
    pub(crate) eager: Stack,
    pub(crate) graph: Stack,
}

const COMM: RGBColor = RGBColor(31, 119, 180);
const COMPUTE: RGBColor = RGBColor(255, 127, 14);
const FULL: RGBColor = RGBColor(44, 160, 44);

/// The colour blended halfway to white (eager bars next to graph bars).
fn light(c: RGBColor) -> RGBColor {
    let f = |x: u8| x + ((255 - x) as f64 * 0.55) as u8;
    RGBColor(f(c.0), f(c.1), f(c.2))
}

/// Verify time per record (or sweep point): eager and graph bars side by side; comm-only and
/// compute-only runs stacked, the full run as a black marker (or a bar of its own when it is
/// the only mode). Eager bars are lighter than graph bars.
pub(crate) fn verify_bars(title: &str, groups: &[BarGroup]) -> anyhow::Result<String> {
    let n = groups.len().max(1);
    let width = (220 * n as u32 + 240).clamp(960, 4000);
    // Head room for the legend (up to seven entries) above the tallest bar.
    let ymax = groups
        .iter()
        .map(|g| g.eager.top().max(g.graph.top()))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.6;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (width, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 22))
            .margin(16)
            .x_label_area_size(90)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .x_labels(0)
            .y_desc("time per verify (ms, median)")
            .x_desc("")
            .axis_desc_style((FONT, 16))
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        bar_legend(&mut chart, groups)?;
        for (i, g) in groups.iter().enumerate() {
            for (stack, graph) in [(&g.eager, false), (&g.graph, true)] {
                if !stack.is_empty() {
                    let x0 = i as f64 + if graph { 0.02 } else { -0.02 - BAR_WIDTH };
                    draw_bar(&root, &mut chart, stack, graph, x0, ymax)?;
                }
            }
            let (px, py) = chart.backend_coord(&(i as f64, 0.0));
            for (l, line) in g.label.iter().take(3).enumerate() {
                draw_centred(&root, line, (px, py + 26 + 17 * l as i32), 13)?;
            }
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(err)?;
    }
    Ok(buf)
}

type BarChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Width of one bar, in groups (a group is 1 wide).
const BAR_WIDTH: f64 = 0.36;

/// The legend entries of the bar chart, first (empty series that only carry a label): a graph
/// and an eager entry for each part some bar has, and the marker of the full run.
fn bar_legend<DB: DrawingBackend>(
    chart: &mut BarChart<'_, DB>,
    groups: &[BarGroup],
) -> anyhow::Result<()> {
    let any = |f: &dyn Fn(&Stack) -> bool| groups.iter().any(|g| f(&g.eager) || f(&g.graph));
    let mut legend = |label: &str, c: RGBColor| -> anyhow::Result<()> {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(err)?
            .label(label.to_string())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
        Ok(())
    };
    if any(&|s| s.comm_ms.is_some()) {
        legend("collectives only (mode comm), graph", COMM)?;
        legend("collectives only (mode comm), eager", light(COMM))?;
    }
    if any(&|s| s.compute_ms.is_some()) {
        legend("compute only (mode compute), graph", COMPUTE)?;
        legend("compute only (mode compute), eager", light(COMPUTE))?;
    }
    if any(&|s| s.full_ms.is_some() && !s.stacked()) {
        legend("full verify (mode full), graph", FULL)?;
        legend("full verify (mode full), eager", light(FULL))?;
    }
    if any(&|s| s.full_ms.is_some() && s.stacked()) {
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(err)?
            .label("full verify (mode full), marker")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(3)));
    }
    Ok(())
}

/// One bar from `x0`: collectives and compute stacked (the full run a marker across them), or
/// the one time present; outlined, its value on top and eager/graph underneath.
fn draw_bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut BarChart<'_, DB>,
    stack: &Stack,
    graph: bool,
    x0: f64,
    ymax: f64,
) -> anyhow::Result<()> {
    let x1 = x0 + BAR_WIDTH;
    let shade = |c: RGBColor| {
        if graph {
            c.filled()
        } else {
            light(c).filled()
        }
    };
    let mut rects = vec![];
    let mut y = 0.0;
    if stack.stacked() {
        let c = stack.comm_ms.unwrap_or(0.0);
        rects.push(Rectangle::new([(x0, 0.0), (x1, c)], shade(COMM)));
        y = c + stack.compute_ms.unwrap_or(0.0);
        rects.push(Rectangle::new([(x0, c), (x1, y)], shade(COMPUTE)));
    } else if let Some((t, c)) = [
        (stack.full_ms, FULL),
        (stack.comm_ms, COMM),
        (stack.compute_ms, COMPUTE),
    ]
    .into_iter()
    .find_map(|(t, c)| Some((t?, c)))
    {
        // the one time present, the full run's first
        rects.push(Rectangle::new([(x0, 0.0), (x1, t)], shade(c)));
        y = t;
    }
    rects.push(Rectangle::new(
        [(x0, 0.0), (x1, y)],
        BLACK.mix(0.6).stroke_width(1),
    ));
    chart.draw_series(rects).map_err(err)?;
    let mut top = y;
    if stack.stacked() {
        if let Some(f) = stack.full_ms {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x0 - 0.03, f), (x1 + 0.03, f)],
                    BLACK.stroke_width(3),
                )))
                .map_err(err)?;
            top = top.max(f);
        }
    }
    // The bar's value on top, and eager/graph underneath.
    let shown = stack.full_ms.unwrap_or(y);
    let mid = (x0 + x1) / 2.0;
    let centred = anchored(12, HPos::Center, VPos::Bottom);
    chart
        .draw_series(std::iter::once(Text::new(
            format!("{shown:.2}"),
            (mid, top + ymax * 0.01),
            centred,
        )))
        .map_err(err)?;
    let (px, py) = chart.backend_coord(&(mid, 0.0));
    draw_centred(
        root,
        if graph { "graph" } else { "eager" },
        (px, py + 6),
        12,
    )
}

fn draw_centred<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    text: &str,
    at: (i32, i32),
    size: u32,
) -> anyhow::Result<()> {
    let style = anchored(size, HPos::Center, VPos::Top);
    root.draw(&Text::new(text.to_string(), at, style))
        .map_err(err)
}

/// The plots' font at `size`, the text placed at its point by `h` and `v`.
fn anchored(size: u32, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(Pos::new(h, v))
}

/// One speculation setting of the tokens/s plot: tokens/s = 1000 tau / cycle_ms.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpeedLine {
    pub(crate) label: String,
    pub(crate) cycle_ms: f64,
    /// tau* where the line crosses the baseline.
    pub(crate) breakeven: f64,
}

/// One answer of `explain` at its accept length: its tokens/s and their range (an error bar).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpeedPoint {
    pub(crate) label: String,
    pub(crate) accept_length: f64,
    pub(crate) tokens_per_s: f64,
    pub(crate) range: Option<[f64; 2]>,
}

/// Tokens/s against accept length tau in [1, k+1], one line per verify time, the plain-decode
/// baseline as a dashed line, each break-even point (tau*, baseline) marked, and the answers of
/// `explain` (`points`) at their accept length with their ranges.
pub(crate) fn tokens_vs_accept(
    title: &str,
    lines: &[SpeedLine],
    points: &[SpeedPoint],
    baseline_tps: f64,
    k: u64,
) -> anyhow::Result<String> {
    let tmax = (k + 1) as f64;
    let ymax = lines
        .iter()
        .map(|l| 1000.0 * tmax / l.cycle_ms)
        .chain(
            points
                .iter()
                .map(|p| p.range.map_or(p.tokens_per_s, |r| r[1])),
        )
        .fold(baseline_tps, f64::max)
        * 1.1;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 22))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(1.0..tmax, 0.0..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("accept length tau (tokens per cycle, bonus token included)")
            .y_desc("tokens/s (batch 1)")
            .axis_desc_style((FONT, 16))
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(1.0, baseline_tps), (tmax, baseline_tps)],
                10,
                6,
                BLACK.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("without speculation: {baseline_tps:.1} tok/s"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        for (i, l) in lines.iter().enumerate() {
            let c = colour(i);
            let pts: Vec<(f64, f64)> = (0..=40)
                .map(|j| {
                    let t = 1.0 + (tmax - 1.0) * j as f64 / 40.0;
                    (t, 1000.0 * t / l.cycle_ms)
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(err)?
                .label(l.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            if (1.0..=tmax).contains(&l.breakeven) {
                let p = (l.breakeven, baseline_tps);
                chart
                    .draw_series([
                        Circle::new(p, 6, c.filled()),
                        Circle::new(p, 6, BLACK.stroke_width(1)),
                    ])
                    .map_err(err)?;
                let style = anchored(13, HPos::Left, VPos::Top).color(&c);
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!("tau* {:.2}", l.breakeven),
                        (l.breakeven, baseline_tps - ymax * 0.02),
                        style,
                    )))
                    .map_err(err)?;
            }
        }
        for (i, p) in points.iter().enumerate() {
            let c = colour(lines.len() + i);
            let t = p.accept_length.clamp(1.0, tmax);
            let [lo, hi] = p.range.unwrap_or([p.tokens_per_s, p.tokens_per_s]);
            chart
                .draw_series([
                    PathElement::new(vec![(t, lo), (t, hi)], c.stroke_width(2)),
                    PathElement::new(vec![(t - 0.03, lo), (t + 0.03, lo)], c.stroke_width(2)),
                    PathElement::new(vec![(t - 0.03, hi), (t + 0.03, hi)], c.stroke_width(2)),
                ])
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Cross::new(
                    (t, p.tokens_per_s),
                    6,
                    c.stroke_width(2),
                )))
                .map_err(err)?
                .label(p.label.clone())
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, c.stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(err)?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_plot_has_title_axes_and_legend() {
        let s = vec![
            Series {
                label: "all_reduce graph".into(),
                points: vec![(8192.0, 10.0), (43008.0, 12.0), (1048576.0, 60.0)],
                dashed: false,
                colour: 0,
            },
            Series {
                label: "all_reduce eager".into(),
                points: vec![(8192.0, 20.0), (43008.0, 22.0), (1048576.0, 70.0)],
                dashed: true,
                colour: 0,
            },
        ];
        let svg = latency_vs_size("Collective latency", &s).unwrap();
        for t in [
            "Collective latency",
            "message size (bytes, log scale)",
            "time per operation (µs)",
            "all_reduce graph",
            "all_reduce eager",
            "<svg",
        ] {
            assert!(svg.contains(t), "missing {t}");
        }
    }

    #[test]
    fn bars_and_tokens_plots_render() {
        let g = BarGroup {
            label: vec!["run a".into()],
            eager: Stack {
                comm_ms: Some(3.0),
                compute_ms: Some(9.0),
                full_ms: Some(13.0),
            },
            graph: Stack {
                full_ms: Some(10.0),
                ..Default::default()
            },
        };
        let svg = verify_bars("Verify time", &[g]).unwrap();
        for t in [
            "Verify time",
            "time per verify (ms, median)",
            "eager",
            "graph",
            "run a",
        ] {
            assert!(svg.contains(t), "missing {t}");
        }
        let svg = tokens_vs_accept(
            "Tokens per second",
            &[SpeedLine {
                label: "T_verify 19 ms".into(),
                cycle_ms: 19.0,
                breakeven: 19.0 / 12.2,
            }],
            &[SpeedPoint {
                label: "x.json: with a CUDA graph 141.5 tok/s (98.0-146.4)".into(),
                accept_length: 2.5,
                tokens_per_s: 141.5,
                range: Some([98.0, 146.4]),
            }],
            1000.0 / 12.2,
            3,
        )
        .unwrap();
        for t in [
            "Tokens per second",
            "tokens/s (batch 1)",
            "accept length",
            "tau* 1.56",
            "without speculation",
            "x.json: with a CUDA graph 141.5 tok/s (98.0-146.4)",
        ] {
            assert!(svg.contains(t), "missing {t}");
        }
    }
}
