package report

import (
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot sizes in pixels (at 96 dpi) used by the bench commands.
const (
	PlotWidth  = 800
	PlotHeight = 500
)

// ThroughputPlot draws the throughput ratios of comps (metric Throughput;
// others are ignored) against the sharing level, one series per arm pair
// with its bootstrap interval as error bars, and a dashed line at 1, as a
// PNG of w × h pixels.
func ThroughputPlot(out io.Writer, comps []Comparison, w, h int) error {
	p := plot.New()
	p.Title.Text = "Program throughput ratio (geometric mean of paired blocks)"
	p.X.Label.Text = "initial shared-prefix ratio"
	p.Y.Label.Text = "throughput ratio"
	type key struct{ num, den string }
	var keys []key
	series := map[key][]Comparison{}
	for _, c := range comps {
		if c.Metric != Throughput {
			continue
		}
		k := key{c.Num, c.Den}
		if series[k] == nil {
			keys = append(keys, k)
		}
		series[k] = append(series[k], c)
	}
	if len(keys) == 0 {
		return fmt.Errorf("report: throughput plot: no throughput comparisons among %d", len(comps))
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := 1.0, 1.0
	for i, k := range keys {
		cs := series[k]
		// Offset series slightly so intervals at the same share stay apart.
		off := 0.012 * (float64(i) - float64(len(keys)-1)/2)
		pts := errPoints{}
		for _, c := range cs {
			pts.xys = append(pts.xys, plotter.XY{X: c.Share + off, Y: c.Ratio.Point})
			pts.errs = append(pts.errs, struct{ Low, High float64 }{c.Ratio.Point - c.Ratio.Lo, c.Ratio.Hi - c.Ratio.Point})
			xmin, xmax = math.Min(xmin, c.Share), math.Max(xmax, c.Share)
			ymin, ymax = math.Min(ymin, c.Ratio.Lo), math.Max(ymax, c.Ratio.Hi)
		}
		sc, err := plotter.NewScatter(pts.xys)
		if err != nil {
			return fmt.Errorf("report: throughput plot %s/%s: %w", k.num, k.den, err)
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Shape = plotutil.Shape(i)
		sc.GlyphStyle.Radius = vg.Points(4)
		eb, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return fmt.Errorf("report: throughput plot %s/%s: %w", k.num, k.den, err)
		}
		eb.Color = plotutil.Color(i)
		p.Add(eb, sc)
		p.Legend.Add(fmt.Sprintf("%s/%s (%g%% interval)", k.num, k.den, 100*cs[0].Ratio.Level), sc)
	}
	pad := math.Max(0.05, (xmax-xmin)*0.05)
	one, err := plotter.NewLine(plotter.XYs{{X: xmin - pad, Y: 1}, {X: xmax + pad, Y: 1}})
	if err != nil {
		return fmt.Errorf("report: throughput plot: %w", err)
	}
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	one.Color = color.Gray{Y: 100}
	p.Add(one, plotter.NewGrid())
	// Room above the data for the legend, top left.
	span := math.Max(ymax-ymin, 0.02)
	p.X.Min, p.X.Max = xmin-pad, xmax+pad
	p.Y.Min, p.Y.Max = ymin-0.05*span, ymax+0.12*span*float64(len(keys)+1)
	p.Legend.Top, p.Legend.Left = true, true
	return render(out, p, w, h)
}

// errPoints is an XYer and YErrorer for error bars.
type errPoints struct {
	xys  plotter.XYs
	errs plotter.YErrors
}

func (e errPoints) Len() int                        { return len(e.xys) }
func (e errPoints) XY(i int) (float64, float64)     { return e.xys[i].X, e.xys[i].Y }
func (e errPoints) YError(i int) (float64, float64) { return e.errs[i].Low, e.errs[i].High }

// Rank0SharePlot draws rank 0's routing share (percent) of every measured
// row with attention DP (DP ≥ 2 and a known Rank0Share), per dp and arm,
// one point per row so discrete states stay visible, over seed 004's
// ladder: a solid mark at the balanced share 1/dp and dotted marks at the
// rungs 1/(2·dp-k) and 2/(2·dp-k), k = 1..dp-1. PNG of w × h pixels.
func Rank0SharePlot(out io.Writer, rows []Row, w, h int) error {
	p := plot.New()
	p.Title.Text = "Rank-0 routing share per dp and arm"
	p.X.Label.Text = "attention-DP width (dp)"
	p.Y.Label.Text = "rank-0 share of routed requests (%)"
	var arms []string
	var dps []int
	byArm := map[string]plotter.XYs{}
	for i := range rows {
		r := &rows[i]
		if r.M == nil || r.DP < 2 || math.IsNaN(r.M.Rank0Share) {
			continue
		}
		if !slices.Contains(arms, r.Arm) {
			arms = append(arms, r.Arm)
		}
		if !slices.Contains(dps, r.DP) {
			dps = append(dps, r.DP)
		}
		byArm[r.Arm] = append(byArm[r.Arm], plotter.XY{X: float64(r.DP), Y: 100 * r.M.Rank0Share})
	}
	if len(arms) == 0 {
		return fmt.Errorf("report: rank-0 share plot: none of %d rows has dp ≥ 2 and a rank-0 share", len(rows))
	}
	slices.Sort(dps)
	var ticks []plot.Tick
	for _, dp := range dps {
		ticks = append(ticks, plot.Tick{Value: float64(dp), Label: strconv.Itoa(dp)})
		if err := addRungs(p, dp); err != nil {
			return err
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = float64(dps[0])-0.6, float64(dps[len(dps)-1])+0.6
	// Shares start at 0; the top leaves room for the legend above the
	// highest rung (2/(dp+1) at the smallest dp).
	top := 2 / float64(dps[0]+1)
	for _, pts := range byArm {
		for _, pt := range pts {
			top = math.Max(top, pt.Y/100)
		}
	}
	p.Y.Min, p.Y.Max = 0, 100*top*1.25
	for i, arm := range arms {
		pts := byArm[arm]
		off := 0.5 * (float64(i) - float64(len(arms)-1)/2) / float64(len(arms))
		for j := range pts {
			pts[j].X += off
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("report: rank-0 share plot, arm %s: %w", arm, err)
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Shape = plotutil.Shape(i)
		sc.GlyphStyle.Radius = vg.Points(3.5)
		p.Add(sc)
		p.Legend.Add(arm, sc)
	}
	p.Legend.Top = true
	return render(out, p, w, h)
}

// addRungs draws dp's balanced share and ladder rungs as short horizontal
// marks around x = dp.
func addRungs(p *plot.Plot, dp int) error {
	mark := func(share float64, dashed bool) error {
		l, err := plotter.NewLine(plotter.XYs{{X: float64(dp) - 0.4, Y: 100 * share}, {X: float64(dp) + 0.4, Y: 100 * share}})
		if err != nil {
			return fmt.Errorf("report: rank-0 share plot, dp %d: %w", dp, err)
		}
		l.Color = color.Gray{Y: 90}
		if dashed {
			l.Color = color.Gray{Y: 170}
			l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		}
		p.Add(l)
		return nil
	}
	if err := mark(1/float64(dp), false); err != nil {
		return err
	}
	for k := 1; k < dp; k++ {
		d := float64(2*dp - k)
		if err := mark(1/d, true); err != nil {
			return err
		}
		if err := mark(2/d, true); err != nil {
			return err
		}
	}
	return nil
}

// render writes p as a PNG of exactly w × h pixels at 96 dpi.
func render(out io.Writer, p *plot.Plot, w, h int) error {
	if w < 1 || h < 1 {
		return fmt.Errorf("report: plot size %d×%d pixels must be positive", w, h)
	}
	c := vgimg.NewWith(vgimg.UseImage(image.NewRGBA(image.Rect(0, 0, w, h))), vgimg.UseDPI(96))
	p.Draw(draw.New(c))
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(out); err != nil {
		return fmt.Errorf("report: write PNG: %w", err)
	}
	return nil
}
