//! A chart per scenario: a panel per mode, a line per tenant group (the
//! fraction of the group's jobs started over time), and the end of contention.

use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use crate::metrics::Metrics;
use crate::scenario::Scenario;

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(110, 110, 110),
];

pub(crate) fn draw(path: &Path, s: &Scenario, ms: &[Metrics]) -> Result<()> {
    let w = 330 * ms.len().max(1) as u32;
    let root = SVGBackend::new(path, (w, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "fairjob fairness, {}: fraction of each group's jobs started over time (dashed: end of contention)",
        s.title
    );
    let body = root.titled(&title, ("sans-serif", 17))?;
    let panels = body.split_evenly((1, ms.len().max(1)));
    let groups = s.groups();
    for (panel, m) in panels.iter().zip(ms) {
        let x_max = m.makespan.max(0.01) * 1.02;
        let mut chart = ChartBuilder::on(panel)
            .caption(m.label, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(0f64..x_max, 0f64..1.02)?;
        chart
            .configure_mesh()
            .x_desc("s after the first start")
            .y_desc("fraction started")
            .draw()?;
        for (name, pts) in &m.curves {
            let i = groups.iter().position(|g| g == name).unwrap_or(0);
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        if let Some([_, end]) = m.contention {
            chart.draw_series(DashedLineSeries::new(
                [(end, 0.0), (end, 1.02)],
                5,
                4,
                BLACK.stroke_width(1),
            ))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
