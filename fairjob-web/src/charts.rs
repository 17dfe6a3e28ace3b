//! The charts, drawn on the server as inline SVG: numbers and fixed strings
//! only, no data text, so nothing in them needs escaping.

use std::fmt::Write as _;

/// A bar chart of `values` (oldest first), `width`×`height` pixels.
pub(crate) fn bars_svg(values: &[u64], width: u32, height: u32) -> String {
    let max = values.iter().copied().max().unwrap_or(0).max(1) as f64;
    let bars = values.len().max(1) as f64;
    let bar_width = width as f64 / bars;
    let (w, h) = (width, height);
    let mut out = format!(
        r#"<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="jobs per minute"><rect class="bg" x="0" y="0" width="{w}" height="{h}"/>"#
    );
    for (i, v) in values.iter().enumerate() {
        let bar_height = (*v as f64 / max) * (height as f64 - 2.0);
        let _ = write!(
            out,
            r#"<rect class="bar" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/>"#,
            i as f64 * bar_width + 0.5,
            height as f64 - bar_height,
            (bar_width - 1.0).max(0.5),
            bar_height
        );
    }
    out.push_str("</svg>");
    out
}

/// A stacked bar: runnable (green) then blocked (amber), `width` wide.
pub(crate) fn split_svg(runnable: u64, blocked: u64, width: u32) -> String {
    let total = (runnable + blocked).max(1) as f64;
    let runnable_width = runnable as f64 / total * width as f64;
    let blocked_width = blocked as f64 / total * width as f64;
    let (w, rw, bw) = (width, runnable_width, blocked_width);
    format!(
        r#"<svg class="split" viewBox="0 0 {w} 10" width="{w}" height="10" role="img" aria-label="runnable and blocked"><rect class="bg" x="0" y="0" width="{w}" height="10"/><rect class="ok" x="0" y="0" width="{rw:.1}" height="10"/><rect class="warn" x="{rw:.1}" y="0" width="{bw:.1}" height="10"/></svg>"#
    )
}

/// Planned share (outline) next to measured share (filled), both 0..=1.
pub(crate) fn share_svg(planned: f64, measured: f64, width: u32) -> String {
    let w = width;
    let p = planned.clamp(0.0, 1.0) * width as f64;
    let m = measured.clamp(0.0, 1.0) * width as f64;
    format!(
        r#"<svg class="share" viewBox="0 0 {w} 16" width="{w}" height="16" role="img" aria-label="planned and measured share"><rect class="bg" x="0" y="0" width="{w}" height="16"/><rect class="planned" x="0" y="1" width="{p:.1}" height="6"/><rect class="measured" x="0" y="9" width="{m:.1}" height="6"/></svg>"#
    )
}

/// A wait histogram (bucket counts) as bars, from the first bucket used to
/// the last; empty when no bucket is.
pub(crate) fn histogram_svg(buckets: &[u64], width: u32, height: u32) -> String {
    let last = buckets.iter().rposition(|b| *b > 0).map_or(0, |i| i + 1);
    let first = buckets.iter().position(|b| *b > 0).unwrap_or(0);
    if last == 0 {
        return String::new();
    }
    bars_svg(&buckets[first..last], width, height)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_hold_numbers_only() {
        let s = bars_svg(&[1, 5, 0, 3], 100, 20);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert_eq!(s.matches("class=\"bar\"").count(), 4);
        assert!(split_svg(3, 1, 80).contains("width=\"60.0\""));
    }
}
