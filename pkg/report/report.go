// Package report draws convergence curves: a quantity that should fall to
// zero (the relative objective gap, or the gradient norm against the
// stopping tolerance) on a log scale, against iterations and against
// seconds, one line per run, as the OSGM paper's SVM figure does.
package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Point is one iteration of a run.
type Point struct {
	Iter    int
	Elapsed time.Duration
	Value   float64 // > 0; zeros and below are left out of a log plot
}

// Series is one run's curve.
type Series struct {
	Name   string
	Points []Point
}

// Size of the image: two panels side by side.
const (
	Width  = 10 * vg.Inch
	Height = 4 * vg.Inch
)

// Write draws the series against iterations (left) and seconds (right)
// into path; the extension chooses PNG or SVG.
func Write(path, title, ylabel string, series []Series) error {
	byIter, err := panel(title, "iteration", ylabel, series, func(p Point) float64 { return float64(p.Iter) })
	if err != nil {
		return err
	}
	bySec, err := panel("", "seconds", ylabel, series, func(p Point) float64 { return p.Elapsed.Seconds() })
	if err != nil {
		return err
	}
	ext := strings.ToLower(filepath.Ext(path))
	var c vg.CanvasWriterTo
	switch ext {
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(Width, Height)}
	case ".svg":
		c = vgsvg.New(Width, Height)
	default:
		return fmt.Errorf("plot %s: use a .png or .svg file", path)
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	dc := draw.New(c)
	canvases := plot.Align([][]*plot.Plot{{byIter, bySec}}, tiles, dc)
	byIter.Draw(canvases[0][0])
	bySec.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func panel(title, xlabel, ylabel string, series []Series, x func(Point) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = decades{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		var xys plotter.XYs
		for _, pt := range s.Points {
			if pt.Value > 0 && !math.IsInf(pt.Value, 0) {
				xys = append(xys, plotter.XY{X: x(pt), Y: pt.Value})
				lo, hi = math.Min(lo, pt.Value), math.Max(hi, pt.Value)
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(s.Name, line)
	}
	if lo < hi { // whole decades, so the log ticks are readable
		p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	} else {
		p.Y.Min, p.Y.Max = 1e-1, 1e1
	}
	p.BackgroundColor = color.White
	return p, nil
}

// decades labels the powers of ten on a log axis as 1e-6, 1e-5, ...
type decades struct{}

func (decades) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		v := math.Pow(10, float64(e))
		if v >= lo && v <= hi {
			out = append(out, plot.Tick{Value: v, Label: fmt.Sprintf("1e%d", e)})
		}
	}
	return out
}
