//! SVG line charts (plotters' SVG backend), one line per send path.

use plotters::prelude::*;

/// One line.
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
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
    let log_x = axis != XAxis::Linear;
    let transformed: Vec<Series>;
    let series = if log_x {
        transformed = series
            .iter()
            .map(|s| Series {
                name: s.name.clone(),
                points: s
                    .points
                    .iter()
                    .map(|&(x, y)| (x.max(1.0).log2(), y))
                    .collect(),
            })
            .collect();
        &transformed[..]
    } else {
        series
    };
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in pts {
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
    // Whole steps between ticks, at most about 10 ticks.
    let x_ticks = ((x1 - x0).ceil() as usize + 1).clamp(2, 11);
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (660, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64);
        macro_rules! draw {
            ($chart:expr, $fmt:expr) => {{
                let mut c = $chart;
                c.configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_labels(x_ticks)
                    .x_label_formatter(&$fmt)
                    .light_line_style(WHITE)
                    .draw()?;
                for s in series {
                    let col = colour(&s.name);
                    c.draw_series(LineSeries::new(s.points.clone(), col.stroke_width(2)))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2))
                        });
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
            }};
        }
        if log_x {
            draw!(b.build_cartesian_2d(x0..x1, 0f64..y1)?, |v: &f64| {
                if (v - v.round()).abs() >= 1e-6 {
                    String::new()
                } else if axis == XAxis::LogBytes {
                    size_label(2f64.powf(v.round()))
                } else {
                    format!("{:.0}", 2f64.powf(v.round()))
                }
            });
        } else {
            draw!(b.build_cartesian_2d(x0..x1, 0f64..y1)?, |v: &f64| format!(
                "{v:.0}"
            ));
        }
        root.present()?;
    }
    Ok(svg)
}
