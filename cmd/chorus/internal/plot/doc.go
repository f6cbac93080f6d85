// Package plot draws what chorus measured as SVG pictures: benchmark
// curves (bus bandwidth and time per call against message size, log-log,
// one line per backend, algorithm or anchor) from the JSON lines that
// `chorus bench --json` and the anchor scripts under bench/ print, and
// timelines of spans (one row per track, one colour per event name).
//
// Drawing is done by gonum.org/v1/plot (axes, log scales, tick labels,
// legends and font metrics), not by hand-written SVG. Reading is strict:
// a line that is not a size row of a known shape is an error naming the
// file and line, so a bad file is never plotted half-read.
package plot
