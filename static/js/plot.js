// Plotly as every view uses it (the vendored static/vendor/plotly-*.min.js defines the global
// `Plotly`): one base layout, legible on a 1280×720 projector, and one config.

/** Common Plotly layout pieces. */
export const baseLayout = {
  margin: { l: 48, r: 16, t: 8, b: 36 },
  font: { family: "system-ui, sans-serif", size: 13 },
  paper_bgcolor: "rgba(0,0,0,0)",
  plot_bgcolor: "rgba(0,0,0,0)",
};

export const plotConfig = { displaylogo: false, responsive: true };

/**
 * Draw (or redraw) a figure: `layout` on top of the base layout, its `margin` on top of the
 * base margin, with the shared config.
 */
export function react(div, data, layout = {}) {
  const margin = { ...baseLayout.margin, ...layout.margin };
  return Plotly.react(div, data, { ...baseLayout, ...layout, margin }, plotConfig);
}
