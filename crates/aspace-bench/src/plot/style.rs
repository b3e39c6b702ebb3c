//! The look shared by every plot: one colour per design (the baseline black and dashed, the
//! others from the Okabe-Ito palette, which stays distinguishable for colour-blind readers), the
//! fonts, and the legend drawn in its own area beside the chart so it never covers data.
//!
//! Colours are assigned by order of appearance among a plot's non-baseline designs; the suite
//! runs designs in the workload's order, so `coarse` and `interval` get the same colours in
//! every address-space plot and in the headline plot.
//!
//! Not for: layout of the charts themselves (`plot.rs`, `plot/headline.rs`).

use plotters::coord::Shift;
use plotters::prelude::*;

/// The baseline's colour.
pub const BASELINE: RGBColor = RGBColor(0x22, 0x22, 0x22);

/// Okabe-Ito colours for the other designs, in order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x88, 0x22, 0x55),
    RGBColor(0x99, 0x99, 0x33),
];

/// Font family of every text.
pub const FONT: &str = "sans-serif";

/// Width of the legend area right of a chart, in pixels.
pub const LEGEND_WIDTH: u32 = 200;

/// The colour of each of `designs` (in order): black for `baseline`, the palette in turn for
/// the others.
pub fn colors(designs: &[&str], baseline: Option<&str>) -> Vec<RGBColor> {
    let mut next = 0;
    designs
        .iter()
        .map(|d| {
            if Some(*d) == baseline {
                BASELINE
            } else {
                let c = PALETTE[next % PALETTE.len()];
                next += 1;
                c
            }
        })
        .collect()
}

/// One legend entry: a label, its colour, and whether its sample line is dashed.
pub struct LegendEntry {
    /// The text.
    pub label: String,
    /// The colour.
    pub color: RGBColor,
    /// Dashed (the baseline) or solid.
    pub dashed: bool,
}

/// Draws `entries` top-down in `area` (the strip beside the chart), then `notes` in grey.
pub fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    notes: &[String],
) -> Result<(), String> {
    let x0 = 8;
    let mut y = 56;
    for e in entries {
        let style = e.color.stroke_width(2);
        if e.dashed {
            for s in [(x0, x0 + 8), (x0 + 12, x0 + 20), (x0 + 24, x0 + 28)] {
                area.draw(&PathElement::new(vec![(s.0, y), (s.1, y)], style))
                    .map_err(|err| err.to_string())?;
            }
        } else {
            area.draw(&PathElement::new(vec![(x0, y), (x0 + 28, y)], style))
                .map_err(|err| err.to_string())?;
        }
        area.draw(&Circle::new((x0 + 14, y), 3, e.color.filled()))
            .map_err(|err| err.to_string())?;
        area.draw(&Text::new(e.label.clone(), (x0 + 36, y - 7), (FONT, 14)))
            .map_err(|err| err.to_string())?;
        y += 22;
    }
    y += 8;
    for n in notes {
        area.draw(&Text::new(
            n.clone(),
            (x0, y),
            (FONT, 12).into_font().color(&RGBColor(0x66, 0x66, 0x66)),
        ))
        .map_err(|err| err.to_string())?;
        y += 16;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_is_black_and_others_take_the_palette_in_order() {
        let c = colors(&["linux", "coarse", "interval"], Some("linux"));
        assert_eq!(c, [BASELINE, PALETTE[0], PALETTE[1]]);
        // The same designs get the same colours whether or not the baseline comes first.
        let c = colors(&["coarse", "interval", "linux"], Some("linux"));
        assert_eq!(c, [PALETTE[0], PALETTE[1], BASELINE]);
    }
}
