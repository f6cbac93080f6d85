package plot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Span is one interval of a timeline: an event on a track (a worker, a
// GPU stream), in nanoseconds on any clock shared by all spans.
type Span struct {
	Track string
	Name  string // event name: one colour per name
	Start int64  // ns
	Dur   int64  // ns, >= 0 (0: an instant, drawn one pixel wide)
}

// TimelineOptions are the texts of a timeline picture.
type TimelineOptions struct {
	Title string
	Date  time.Time
	// Tracks, when given, orders the rows (top first): these tracks
	// first, then any others in the order they first appear. Tracks
	// listed without spans get an empty row.
	Tracks []string
}

// MaxSpans bounds one picture (an SVG of a million bars is no use to
// anyone; summarise or cut the trace first).
const MaxSpans = 200_000

// Timeline draws spans as horizontal bars, one row per track (opt.Tracks
// first, then in the order tracks first appear), one colour per event
// name (legend under the picture), on a time axis from the earliest start
// in us, ms or s.
func Timeline(w io.Writer, spans []Span, opt TimelineOptions) error {
	if len(spans) == 0 {
		return fmt.Errorf("plot: %w: no spans", ErrNoData)
	}
	if len(spans) > MaxSpans {
		return fmt.Errorf("plot: timeline of %d spans: at most %d", len(spans), MaxSpans)
	}
	var tracks, names []string
	trackRow, nameIdx := map[string]int{}, map[string]int{}
	for _, t := range opt.Tracks {
		if _, ok := trackRow[t]; !ok {
			trackRow[t] = len(tracks)
			tracks = append(tracks, clean(t))
		}
	}
	t0, t1 := int64(math.MaxInt64), int64(math.MinInt64)
	for i, s := range spans {
		if s.Dur < 0 || s.Start > math.MaxInt64-s.Dur {
			return fmt.Errorf("plot: span %d (%q on %q): bad duration %d ns", i, s.Name, s.Track, s.Dur)
		}
		if _, ok := trackRow[s.Track]; !ok {
			trackRow[s.Track] = len(tracks)
			tracks = append(tracks, clean(s.Track))
		}
		if _, ok := nameIdx[s.Name]; !ok {
			nameIdx[s.Name] = len(names)
			names = append(names, clean(s.Name))
		}
		t0, t1 = min(t0, s.Start), max(t1, s.Start+s.Dur)
	}
	if t1-t0 > int64(365*24*time.Hour) {
		return errors.New("plot: timeline spans more than a year: not one clock?")
	}
	// Unit: the largest that leaves the whole range at least 2 units long.
	unit, uname := 1e3, "us"
	switch r := float64(t1 - t0); {
	case r >= 2e9:
		unit, uname = 1e9, "s"
	case r >= 2e6:
		unit, uname = 1e6, "ms"
	}
	bars := &barPlotter{rows: len(tracks)}
	for _, s := range spans {
		bars.bars = append(bars.bars, bar{row: len(tracks) - 1 - trackRow[s.Track], x0: float64(s.Start-t0) / unit, x1: float64(s.Start+s.Dur-t0) / unit, c: colour(nameIdx[s.Name])})
	}
	p := newPanel("", fmt.Sprintf("time (%s) from the first event", uname), "")
	p.Add(bars)
	p.X.Min, p.X.Max = 0, max(float64(t1-t0)/unit, 1e-9)
	// Rows bottom-up: the first track on top.
	rev := make([]string, len(tracks))
	for i, t := range tracks {
		rev[len(tracks)-1-i] = t
	}
	p.NominalY(rev...)
	p.Y.Min, p.Y.Max = -0.6, float64(len(tracks))-0.4

	var entries []legendEntry
	for i, n := range names {
		entries = append(entries, legendEntry{name: n, thumbs: []gplot.Thumbnailer{box{colour(i)}}})
	}
	cols := min(4, max(1, (len(entries)+5)/6))
	title := cleanN(opt.Title, 160)
	if !opt.Date.IsZero() {
		if title != "" {
			title += "; "
		}
		title += opt.Date.Format("2006-01-02 15:04 MST")
	}
	tsty := textStyle(11)
	tsty.XAlign, tsty.YAlign = draw.XCenter, draw.YTop
	titleH := vg.Length(0)
	if title != "" {
		titleH = tsty.Height(title) + 10
	}
	const width = 11 * vg.Inch
	plotH := vg.Length(len(tracks))*22 + 70
	legH := legendHeight(entries, cols)
	height := titleH + plotH + legH + 8
	return render(w, width, height, func(dc draw.Canvas) error {
		if title != "" {
			dc.FillText(tsty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: dc.Max.Y - 6}, title)
		}
		pc := draw.Crop(dc, 6, -12, legH+8, -titleH)
		p.Draw(pc)
		leg := draw.Crop(dc, 0, 0, 4, 0)
		leg.Max.Y = leg.Min.Y + legH
		drawLegend(leg, entries, cols)
		return nil
	})
}

type bar struct {
	row    int
	x0, x1 float64
	c      color.Color
}

// barPlotter draws bars in data coordinates: x in time units, y the row.
type barPlotter struct {
	rows int
	bars []bar
}

func (b *barPlotter) Plot(c draw.Canvas, p *gplot.Plot) {
	tx, ty := p.Transforms(&c)
	for _, r := range b.bars {
		x0, x1 := tx(r.x0), tx(r.x1)
		if x1-x0 < 1 {
			x1 = x0 + 1 // an instant or a span shorter than a point
		}
		y0, y1 := ty(float64(r.row)-0.35), ty(float64(r.row)+0.35)
		c.FillPolygon(r.c, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
	}
}

// box is a legend thumbnail: a bar like the ones drawn.
type box struct{ c color.Color }

func (b box) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}}
	c.FillPolygon(b.c, pts)
}
