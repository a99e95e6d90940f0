//! SVG line charts (plotters' SVG backend), one line per send path.

use plotters::prelude::*;

/// One line.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// The min..max over rounds at each point (same order as `points`), drawn as a bar;
    /// empty when not known.
    pub(crate) spread: Vec<(f64, f64)>,
}

/// The palette: as many clearly different hues as there are paths, so that no two paths share
/// a colour (in `Strategy::ALL` order: copy, serialize, gather, msg-zerocopy, uring, uring-zc,
/// vmsplice, adaptive, read-send, mmap-send, sendfile, splice, uring-splice).
const PALETTE: [RGBColor; 14] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(127, 127, 127), // grey
    RGBColor(188, 189, 34),  // olive
    RGBColor(214, 39, 40),   // red
    RGBColor(44, 160, 44),   // green
    RGBColor(148, 103, 189), // purple
    RGBColor(227, 119, 194), // pink
    RGBColor(0, 0, 0),       // black
    RGBColor(255, 127, 14),  // orange
    RGBColor(140, 86, 75),   // brown
    RGBColor(23, 190, 207),  // cyan
    RGBColor(0, 0, 128),     // navy
    RGBColor(128, 0, 64),    // wine
    RGBColor(0, 110, 90),    // teal
];

/// A fixed colour per path name, so a path looks the same in every chart and no two paths
/// share one.
fn colour(name: &str) -> RGBColor {
    // Other names (servers such as `nginx` or `epoll`) take a colour from their bytes.
    let i = sendpath::Strategy::ALL
        .iter()
        .position(|s| s.name() == name)
        .unwrap_or_else(|| name.bytes().map(usize::from).sum::<usize>());
    PALETTE[i % PALETTE.len()]
}

/// How the x axis is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum XAxis {
    /// Linear, labelled with whole numbers.
    Linear,
    /// Log scale labelled as byte sizes (256B, 1KiB, ...).
    LogBytes,
    /// Log scale labelled as counts (100, 1000, ...).
    LogCount,
}

fn size_label(v: f64) -> String {
    crate::units::fmt_size(v.round().max(1.0) as usize)
}

/// A line chart. On a log axis x is plotted as log2(x) on a linear axis, so ticks fall on
/// powers of two (256B, 1KiB, ... or 128, 256, ...); with `y_log`, y is plotted as log10(y),
/// ticks on powers of ten, and points at or below 0 are left out.
pub(crate) fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    axis: XAxis,
    y_log: bool,
    series: &[Series],
) -> anyhow::Result<String> {
    let series: Vec<Series> = series.iter().map(|s| scaled(s, axis, y_log)).collect();
    // A tick's label: whole numbers, or the power of two it stands for on a log axis.
    let label = move |v: &f64| -> String {
        match axis {
            XAxis::Linear => format!("{v:.0}"),
            _ if (v - v.round()).abs() >= 1e-6 => String::new(),
            XAxis::LogBytes => size_label(2f64.powf(v.round())),
            XAxis::LogCount => format!("{:.0}", 2f64.powf(v.round())),
        }
    };
    let y_label = move |v: &f64| -> String {
        match y_log {
            false => number(*v),
            true if (v - v.round()).abs() >= 1e-6 => String::new(),
            // 10^k written out: 0.01, 0.1, 1, 10, 100.
            true => format!(
                "{:.*}",
                (-v.round()).max(0.0) as usize,
                10f64.powf(v.round())
            ),
        }
    };
    // What hovering a point shows: its line, and its x and y as measured.
    let hover = move |name: &str, x: f64, y: f64| {
        let x = match axis {
            XAxis::Linear => number(x),
            XAxis::LogBytes => size_label(2f64.powf(x)),
            XAxis::LogCount => format!("{:.0}", 2f64.powf(x)),
        };
        let y = if y_log { 10f64.powf(y) } else { y };
        // Three significant digits or more: 1234, 12.5, 0.875.
        let digits = match y.abs() {
            a if a >= 100.0 => 0,
            a if a >= 10.0 => 1,
            a if a >= 1.0 => 2,
            _ => 3,
        };
        format!("{name}: {x}, {y:.digits$}")
    };
    let mut svg = String::new();
    let spots = {
        let root = SVGBackend::with_string(&mut svg, (660, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let text = [title, x_desc, y_desc];
        let b = Bounds::of(&series, y_log);
        let spots = draw(&root, text, b, [&label, &y_label], &series, &hover)?;
        root.present()?;
        spots
    };
    Ok(with_hover(svg, &spots))
}

/// `svg` with an invisible target over each point whose title (shown on hover) says its
/// values.
fn with_hover(svg: String, spots: &[((i32, i32), String)]) -> String {
    let Some(end) = svg.rfind("</svg>") else {
        return svg;
    };
    let mut out = svg[..end].to_string();
    for ((x, y), text) in spots {
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!(
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"7\" fill=\"transparent\"><title>{}</title></circle>\n",
                super::esc(text)
            ),
        );
    }
    out.push_str(&svg[end..]);
    out
}

/// A linear axis' tick: as many decimals as its size needs.
fn number(v: f64) -> String {
    match v.abs() {
        a if a >= 10.0 || a == 0.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        _ => format!("{v:.3}"),
    }
}

/// `s` in the axes' coordinates: log2 of x on a log x axis, log10 of y with `y_log` (points,
/// and spread bars, at or below 0 left out there).
fn scaled(s: &Series, axis: XAxis, y_log: bool) -> Series {
    let x = |x: f64| match axis {
        XAxis::Linear => x,
        _ => x.max(1.0).log2(),
    };
    let y = |y: f64| {
        if y_log {
            (y > 0.0).then(|| y.log10())
        } else {
            Some(y)
        }
    };
    let mut out = Series {
        name: s.name.clone(),
        points: Vec::new(),
        spread: Vec::new(),
    };
    for (i, &(px, py)) in s.points.iter().enumerate() {
        let Some(py) = y(py) else { continue };
        out.points.push((x(px), py));
        if let Some(&(lo, hi)) = s.spread.get(i) {
            out.spread.extend(y(lo).zip(y(hi)));
        }
    }
    if out.spread.len() != out.points.len() {
        out.spread.clear();
    }
    out
}

/// The ranges a chart's axes cover.
struct Bounds {
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    /// Whole steps between x ticks, at most about 10 ticks.
    x_ticks: usize,
    /// y ticks: on a log axis one per power of ten.
    y_ticks: usize,
}

impl Bounds {
    fn of(series: &[Series], y_log: bool) -> Bounds {
        let (mut x0, mut x1) = (f64::MAX, f64::MIN);
        let (mut y0, mut y1) = (f64::MAX, f64::MIN);
        let ys = series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.spread.iter().flat_map(|&(lo, hi)| [lo, hi]))
        });
        for y in ys {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        for &(x, _) in series.iter().flat_map(|s| s.points.iter()) {
            x0 = x0.min(x);
            x1 = x1.max(x);
        }
        if x0 > x1 {
            (x0, x1) = (1.0, 2.0);
        }
        if x0 == x1 {
            x0 -= 1.0;
            x1 += 1.0;
        }
        let y = match (y_log, y0 <= y1) {
            // Whole powers of ten around the data.
            (true, true) => y0.floor()..(y1.ceil().max(y0.floor() + 1.0)),
            (true, false) => 0.0..1.0,
            (false, _) => 0.0..if y1 > 0.0 { y1 * 1.1 } else { 1.0 },
        };
        Bounds {
            x: x0..x1,
            y_ticks: if y_log {
                ((y.end - y.start) as usize + 1).clamp(2, 11)
            } else {
                10
            },
            y,
            x_ticks: ((x1 - x0).ceil() as usize + 1).clamp(2, 11),
        }
    }
}

/// The upper corner over the lower data (points and the tops of their bars in the third of the
/// x range under it), so that the legend covers as little as it can: left for values that rise
/// with size (throughput), right for values that fall (calls or switches per MiB).
fn legend_corner(series: &[Series], x: &std::ops::Range<f64>) -> SeriesLabelPosition {
    let third = (x.end - x.start) / 3.0;
    let top = |near: &dyn Fn(f64) -> bool| {
        series
            .iter()
            .flat_map(|s| {
                s.points.iter().enumerate().map(move |(i, &(px, py))| {
                    (px, s.spread.get(i).map_or(py, |&(_, hi)| hi.max(py)))
                })
            })
            .filter(|&(px, _)| near(px))
            .map(|(_, y)| y)
            .fold(f64::MIN, f64::max)
    };
    let left = top(&|px| px <= x.start + third);
    let right = top(&|px| px >= x.end - third);
    if right < left {
        SeriesLabelPosition::UpperRight
    } else {
        SeriesLabelPosition::UpperLeft
    }
}

/// Draws `series` on `root`: the title and axis descriptions of `text`, the mesh, a line with
/// points per series in its path's colour, and the legend. Where each point landed, with what
/// `hover` says of it.
fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    [title, x_desc, y_desc]: [&str; 3],
    b: Bounds,
    [x_label, y_label]: [&dyn Fn(&f64) -> String; 2],
    series: &[Series],
    hover: &dyn Fn(&str, f64, f64) -> String,
) -> anyhow::Result<Vec<((i32, i32), String)>> {
    let corner = legend_corner(series, &b.x);
    let mut c = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        // Room for the last x label, centred on the right edge of the plot.
        .margin_right(30)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(b.x, b.y)?;
    c.configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(b.x_ticks)
        .x_label_formatter(x_label)
        .y_labels(b.y_ticks)
        .y_label_formatter(y_label)
        .light_line_style(WHITE)
        .draw()?;
    for s in series {
        // Two runs of one path (`compare`: "copy (A)", "copy (B)") share its colour, the
        // earlier run faded.
        let (path, faded) = match s.name.strip_suffix(" (A)") {
            Some(p) => (p, true),
            None => (s.name.strip_suffix(" (B)").unwrap_or(&s.name), false),
        };
        let col = colour(path).mix(if faded { 0.4 } else { 1.0 });
        // The min..max over rounds at each point.
        c.draw_series(s.points.iter().zip(&s.spread).map(|(&(x, y), &(lo, hi))| {
            ErrorBar::new_vertical(x, lo, y, hi, col.mix(0.6).stroke_width(1), 6)
        }))?;
        c.draw_series(LineSeries::new(s.points.clone(), col.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        c.draw_series(
            s.points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 3, col.filled())),
        )?;
    }
    c.configure_series_labels()
        .position(corner)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    let spots = series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|&(x, y)| (c.backend_coord(&(x, y)), hover(&s.name, x, y)))
    });
    Ok(spots.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hovering_a_point_shows_its_values() {
        let s = Series {
            name: "uring".into(),
            points: vec![(4096.0, 12.5), (65536.0, 30.0)],
            spread: Vec::new(),
        };
        let svg = line_chart(
            "t",
            "x",
            "y",
            XAxis::LogBytes,
            false,
            &[Series {
                name: s.name.clone(),
                points: s.points.clone(),
                spread: Vec::new(),
            }],
        )
        .unwrap();
        assert!(svg.contains("<title>uring: 4KiB, 12.5</title>"), "{svg}");
        assert!(svg.contains("<title>uring: 64KiB, 30.0</title>"), "{svg}");
        let log = line_chart("t", "x", "y", XAxis::LogBytes, true, &[s]).unwrap();
        assert!(log.contains("<title>uring: 4KiB, 12.5</title>"), "{log}");
        assert!(log.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn the_legend_sits_over_the_lower_end_of_the_data() {
        let line = |pts: Vec<(f64, f64)>| Series {
            name: "copy".into(),
            points: pts,
            spread: Vec::new(),
        };
        let rising = [line(vec![(8.0, 1.0), (20.0, 40.0)])];
        let falling = [line(vec![(8.0, 4000.0), (20.0, 1.0)])];
        let x = 8.0..20.0;
        assert!(matches!(
            legend_corner(&rising, &x),
            SeriesLabelPosition::UpperLeft
        ));
        assert!(matches!(
            legend_corner(&falling, &x),
            SeriesLabelPosition::UpperRight
        ));
    }

    #[test]
    fn every_path_has_a_colour_of_its_own() {
        let c: std::collections::BTreeSet<(u8, u8, u8)> = sendpath::Strategy::ALL
            .iter()
            .map(|s| colour(s.name()))
            .map(|RGBColor(r, g, b)| (r, g, b))
            .collect();
        assert_eq!(c.len(), sendpath::Strategy::ALL.len());
    }

    #[test]
    fn a_log_axis_spans_whole_decades_and_drops_what_it_cannot_draw() {
        let s = Series {
            name: "copy".into(),
            points: vec![(256.0, 2.0), (4096.0, 0.04), (65536.0, 0.0)],
            spread: vec![(1.5, 2.5), (0.03, 0.05), (0.0, 0.0)],
        };
        let t = scaled(&s, XAxis::LogBytes, true);
        assert_eq!(t.points.len(), 2, "0 has no logarithm");
        assert_eq!(t.spread.len(), 2);
        assert_eq!(t.points[0].0, 8.0, "log2(256)");
        let b = Bounds::of(&[t], true);
        assert_eq!((b.y.start, b.y.end), (-2.0, 1.0), "0.03 .. 2.5 in decades");
        let svg = line_chart("t", "x", "y", XAxis::LogBytes, true, &[s]).unwrap();
        let flat: String = svg.split_whitespace().collect();
        for tick in [">0.01<", ">0.1<", ">1<", ">10<"] {
            assert!(flat.contains(tick), "no tick {tick} in {svg}");
        }
    }
}
