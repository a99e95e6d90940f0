//! SVG line charts (plotters' SVG backend), one line per send path.

use plotters::prelude::*;

/// One line.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A fixed colour per path name, so a path looks the same in every chart.
fn colour(name: &str) -> RGBColor {
    const P: [RGBColor; 11] = [
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
        RGBColor(0, 0, 0),
    ];
    // Other names (servers such as `nginx` or `epoll`) take a colour from their bytes.
    let i = sendpath::Strategy::ALL
        .iter()
        .position(|s| s.name() == name)
        .unwrap_or_else(|| name.bytes().map(usize::from).sum::<usize>());
    P[i % P.len()]
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
/// powers of two (256B, 1KiB, ... or 128, 256, ...).
pub(crate) fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    axis: XAxis,
    series: &[Series],
) -> anyhow::Result<String> {
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: match axis {
                XAxis::Linear => s.points.clone(),
                _ => s
                    .points
                    .iter()
                    .map(|&(x, y)| (x.max(1.0).log2(), y))
                    .collect(),
            },
        })
        .collect();
    // A tick's label: whole numbers, or the power of two it stands for on a log axis.
    let label = move |v: &f64| -> String {
        match axis {
            XAxis::Linear => format!("{v:.0}"),
            _ if (v - v.round()).abs() >= 1e-6 => String::new(),
            XAxis::LogBytes => size_label(2f64.powf(v.round())),
            XAxis::LogCount => format!("{:.0}", 2f64.powf(v.round())),
        }
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (660, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let text = [title, x_desc, y_desc];
        draw(&root, text, Bounds::of(&series), &label, &series)?;
        root.present()?;
    }
    Ok(svg)
}

/// The ranges a chart's axes cover.
struct Bounds {
    x: std::ops::Range<f64>,
    y_max: f64,
    /// Whole steps between x ticks, at most about 10 ticks.
    x_ticks: usize,
}

impl Bounds {
    fn of(series: &[Series]) -> Bounds {
        let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
        for &(x, y) in series.iter().flat_map(|s| s.points.iter()) {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1) = (1.0, 2.0);
        }
        if x0 == x1 {
            x0 -= 1.0;
            x1 += 1.0;
        }
        Bounds {
            x: x0..x1,
            y_max: if y1 > 0.0 { y1 * 1.1 } else { 1.0 },
            x_ticks: ((x1 - x0).ceil() as usize + 1).clamp(2, 11),
        }
    }
}

/// Draws `series` on `root`: the title and axis descriptions of `text`, the mesh, a line with
/// points per series in its path's colour, and the legend.
fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    [title, x_desc, y_desc]: [&str; 3],
    b: Bounds,
    label: &dyn Fn(&f64) -> String,
    series: &[Series],
) -> anyhow::Result<()> {
    let mut c = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(b.x, 0f64..b.y_max)?;
    c.configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(b.x_ticks)
        .x_label_formatter(label)
        .light_line_style(WHITE)
        .draw()?;
    for s in series {
        let col = colour(&s.name);
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
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}
