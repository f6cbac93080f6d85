package plot

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// BenchOptions are the texts around a benchmark plot.
type BenchOptions struct {
	// Title is the first line of the title: the command that measured
	// (`chorus bench allreduce --workers 2 ...`) or the files plotted.
	Title string
	// Date is printed after what all series share ("" when zero).
	Date time.Time
}

// Bench draws recs as one SVG of two panels side by side: bus bandwidth
// (GB/s) against message size, and mean time per call against size, both
// on log axes, one line per series (Group), anchors dashed, the legend
// under both panels.
func Bench(w io.Writer, recs []Record, opt BenchOptions) error {
	series, common := Group(recs)
	if len(series) == 0 {
		return fmt.Errorf("plot: %w: no size rows", ErrNoData)
	}
	var xlo, xhi, tlo, thi, blo, bhi = math.Inf(1), 0.0, math.Inf(1), 0.0, math.Inf(1), 0.0
	for _, s := range series {
		for _, p := range s.Points {
			xlo, xhi = min(xlo, float64(p.Bytes)), max(xhi, float64(p.Bytes))
			tlo, thi = min(tlo, p.TimeUs), max(thi, p.TimeUs)
			if p.BusBW > 0 {
				blo, bhi = min(blo, p.BusBW), max(bhi, p.BusBW)
			}
		}
	}
	// Half a power of two of room on each side of the sizes.
	xlo, xhi = xlo/math.Sqrt2, xhi*math.Sqrt2

	bw := newPanel("bus bandwidth", "message size (bytes)", "bus bandwidth (GB/s)")
	tm := newPanel("time per call (mean)", "message size (bytes)", "time per call")
	for _, p := range []*gplot.Plot{bw, tm} {
		p.X.Scale = gplot.LogScale{}
		p.X.Tick.Marker = gplot.ConstantTicks(bytesTicks(xlo, xhi))
		p.X.Min, p.X.Max = xlo, xhi
		p.Y.Scale = gplot.LogScale{}
	}
	tm.Y.Min, tm.Y.Max = decades(tlo, thi)
	tm.Y.Tick.Marker = decadeTicks(formatUs)
	haveBW := bhi > 0
	if haveBW {
		bw.Y.Min, bw.Y.Max = decades(blo, bhi)
		bw.Y.Tick.Marker = decadeTicks(formatG)
	}

	var entries []legendEntry
	for i, s := range series {
		sty := draw.LineStyle{Color: colour(i), Width: vg.Points(1.4)}
		if s.Anchor {
			sty.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		glyph := draw.GlyphStyle{Color: colour(i), Radius: vg.Points(2.2), Shape: shapes[i%len(shapes)]}
		var bxy, txy plotter.XYs
		for _, p := range s.Points {
			txy = append(txy, plotter.XY{X: float64(p.Bytes), Y: p.TimeUs})
			if p.BusBW > 0 {
				bxy = append(bxy, plotter.XY{X: float64(p.Bytes), Y: p.BusBW})
			}
		}
		add := func(p *gplot.Plot, xy plotter.XYs) ([]gplot.Thumbnailer, error) {
			if len(xy) == 0 {
				return nil, nil
			}
			l, sc, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, fmt.Errorf("plot: series %q: %w", s.Name, err)
			}
			l.LineStyle, sc.GlyphStyle = sty, glyph
			p.Add(l, sc)
			return []gplot.Thumbnailer{l, sc}, nil
		}
		thumbs, err := add(tm, txy)
		if err != nil {
			return err
		}
		if haveBW {
			if _, err := add(bw, bxy); err != nil {
				return err
			}
		}
		entries = append(entries, legendEntry{name: s.Name, thumbs: thumbs})
	}

	title := cleanN(opt.Title, 160)
	sub := common
	if !opt.Date.IsZero() {
		sub = strings.TrimPrefix(sub+"; "+opt.Date.Format("2006-01-02 15:04 MST"), "; ")
	}
	cols := 1
	switch {
	case len(entries) > 12:
		cols = 3
	case len(entries) > 3:
		cols = 2
	}
	const width, panelH = 11 * vg.Inch, 4.4 * vg.Inch
	titleH := vg.Length(0)
	lines := []string{}
	for _, l := range []string{title, sub} {
		if l != "" {
			lines = append(lines, l)
		}
	}
	tsty := textStyle(11)
	tsty.XAlign, tsty.YAlign = draw.XCenter, draw.YTop
	if len(lines) > 0 {
		titleH = tsty.Height(strings.Join(lines, "\n")) + 10
	}
	legH := legendHeight(entries, cols)
	height := titleH + panelH + legH + 8
	return render(w, width, height, func(dc draw.Canvas) error {
		if len(lines) > 0 {
			dc.FillText(tsty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: dc.Max.Y - 6}, strings.Join(lines, "\n"))
		}
		panels := draw.Crop(dc, 0, 0, legH+8, -titleH)
		tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 24, PadLeft: 6, PadRight: 12, PadTop: 4, PadBottom: 4}
		if haveBW {
			bw.Draw(tiles.At(panels, 0, 0))
		} else {
			c := tiles.At(panels, 0, 0)
			msg := textStyle(10)
			msg.XAlign, msg.YAlign = draw.XCenter, draw.YCenter
			c.FillText(msg, c.Center(), "no bus bandwidth: unknown benchmark or worker count")
		}
		tm.Draw(tiles.At(panels, 1, 0))
		leg := draw.Crop(dc, 0, 0, 4, 0)
		leg.Max.Y = leg.Min.Y + legH
		drawLegend(leg, entries, cols)
		return nil
	})
}

var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}
