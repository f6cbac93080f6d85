package plot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

func init() {
	// Sans serif reads better at small sizes than gonum's default serif;
	// only this package draws with gonum, so the global is ours to set.
	gplot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
}

// render draws with fn on a new SVG canvas of the given size and writes
// it to w. gonum/plot panics on some inputs (a log axis over values <= 0,
// say); callers check their input first, and a panic left over becomes
// an error here instead of crossing the API.
// newCanvas makes the output canvas (tests may draw PNGs to look at).
var newCanvas = func(w, h vg.Length) vg.CanvasWriterTo { return vgsvg.New(w, h) }

func render(w io.Writer, width, height vg.Length, fn func(dc draw.Canvas) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: drawing failed: %v", r)
		}
	}()
	c := newCanvas(width, height)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if err := fn(dc); err != nil {
		return err
	}
	_, err = c.WriteTo(w)
	return err
}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(gplot.DefaultFont, size), Handler: gplot.DefaultTextHandler}
}

// palette: Okabe-Ito's colour-blind-safe colours (yellow, faint on white,
// last), then hues a golden angle apart.
var okabeIto = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // bluish green
	color.RGBA{204, 121, 167, 255}, // reddish purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{240, 228, 66, 255},  // yellow
}

func colour(i int) color.Color {
	if i < len(okabeIto) {
		return okabeIto[i]
	}
	h := math.Mod(float64(i-len(okabeIto))*137.508, 360)
	return hsv(h, 0.65, 0.8)
}

func hsv(h, s, v float64) color.Color {
	c := v * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := v - c
	var r, g, b float64
	switch {
	case h < 60:
		r, g = c, x
	case h < 120:
		r, g = x, c
	case h < 180:
		g, b = c, x
	case h < 240:
		g, b = x, c
	case h < 300:
		r, b = x, c
	default:
		r, b = c, x
	}
	return color.RGBA{uint8((r + m) * 255), uint8((g + m) * 255), uint8((b + m) * 255), 255}
}

// humanBytes: 512, 1K, 64M, 2G (powers of two; others in bytes).
func humanBytes(b float64) string {
	for _, u := range []struct {
		s string
		v float64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if b >= u.v && math.Mod(b, u.v) == 0 {
			return strconv.FormatFloat(b/u.v, 'f', -1, 64) + u.s
		}
	}
	return strconv.FormatFloat(b, 'f', -1, 64)
}

// bytesTicks marks every power of two and labels every s-th from the
// first inside [lo, hi], s chosen so that at most about eight labels fit
// under a panel.
func bytesTicks(lo, hi float64) []gplot.Tick {
	e0, e1 := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	first := int(math.Ceil(math.Log2(lo)))
	s := 1
	for (e1-e0)/s > 8 {
		s *= 2
	}
	var ts []gplot.Tick
	for e := e0; e <= e1; e++ {
		v := math.Ldexp(1, e)
		t := gplot.Tick{Value: v}
		if e >= first && (e-first)%s == 0 {
			t.Label = humanBytes(v)
		}
		ts = append(ts, t)
	}
	return ts
}

// decades returns the powers of ten around [lo, hi] (lo > 0).
func decades(lo, hi float64) (float64, float64) {
	a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if b <= a {
		b = a + 1
	}
	return math.Pow(10, a), math.Pow(10, b)
}

// decadeTicks labels powers of ten (every other one past eight decades;
// 2 and 5 times them too when the axis spans two decades or less) with
// format and marks 2..9 between them.
func decadeTicks(format func(float64) string) gplot.Ticker {
	return gplot.TickerFunc(func(lo, hi float64) []gplot.Tick {
		a, b := int(math.Round(math.Log10(lo))), int(math.Round(math.Log10(hi)))
		s := 1
		if b-a > 8 {
			s = 2
		}
		few := b-a <= 2
		var ts []gplot.Tick
		for e := a; e <= b; e++ {
			v := math.Pow(10, float64(e))
			t := gplot.Tick{Value: v}
			if (e-a)%s == 0 {
				t.Label = format(v)
			}
			ts = append(ts, t)
			if e < b {
				for k := 2; k < 10; k++ {
					t := gplot.Tick{Value: v * float64(k)}
					if few && (k == 2 || k == 5) {
						t.Label = format(t.Value)
					}
					ts = append(ts, t)
				}
			}
		}
		return ts
	})
}

func formatG(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// formatUs labels a time given in microseconds: 10 us, 1 ms, 1 s.
func formatUs(v float64) string {
	switch {
	case v >= 1e6:
		return formatG(v/1e6) + " s"
	case v >= 1e3:
		return formatG(v/1e3) + " ms"
	}
	return formatG(v) + " us"
}

// newPanel is a plot with chorus's styling: light grid, small fonts.
func newPanel(title, xlabel, ylabel string) *gplot.Plot {
	p := gplot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 11
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	for _, a := range []*gplot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = 10
		a.Tick.Label.Font.Size = 9
	}
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)
	return p
}

// legendColumns draws entries (name and thumbnails) in up to cols
// columns inside c, top left first; it returns the height used.
type legendEntry struct {
	name   string
	thumbs []gplot.Thumbnailer
}

func legendHeight(entries []legendEntry, cols int) vg.Length {
	if len(entries) == 0 {
		return 0
	}
	rows := (len(entries) + cols - 1) / cols
	h := textStyle(9).Rectangle("Ag").Max.Y * 1.35
	return vg.Length(rows)*h + 6
}

func drawLegend(c draw.Canvas, entries []legendEntry, cols int) {
	if len(entries) == 0 {
		return
	}
	rows := (len(entries) + cols - 1) / cols
	w := (c.Max.X - c.Min.X) / vg.Length(cols)
	for col := range cols {
		l := gplot.NewLegend()
		l.Top, l.Left = true, true
		l.TextStyle = textStyle(9)
		l.Padding = textStyle(9).Rectangle("Ag").Max.Y * 0.35
		l.ThumbnailWidth = 28
		for i := col * rows; i < min((col+1)*rows, len(entries)); i++ {
			l.Add(entries[i].name, entries[i].thumbs...)
		}
		sub := c
		sub.Min.X = c.Min.X + vg.Length(col)*w + 8
		sub.Max.X = sub.Min.X + w - 8
		l.Draw(sub)
	}
}
