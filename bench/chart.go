package bench

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart geometry: the PNG is chartWidthPx wide and at least chartMinHeightPx
// high, taller when the report has more rows than fit at chartRowPitch.
const (
	chartDPI         = 96
	chartWidthPx     = 1400
	chartMinHeightPx = 900

	chartRowPitch   = vg.Length(19) // minimum vertical space per bar
	chartMaxPitch   = vg.Length(34) // maximum vertical space per bar
	chartBarHalf    = vg.Length(7)  // maximum half-thickness of a bar
	chartMargin     = vg.Length(18) // around the image
	chartHeaderH    = vg.Length(50) // title and machine line
	chartPanelTop   = vg.Length(46) // panel title and legend
	chartPanelAxis  = vg.Length(40) // x axis, its label and padding
	chartEmptyPanel = vg.Length(80) // a panel showing only a note
	chartPanelGap   = vg.Length(16)
	chartMaxLabel   = 72 // runes of a bar label before it is shortened
)

var (
	chartSans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	chartSansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}
	chartSansIt   = font.Font{Typeface: "Liberation", Variant: "Sans", Style: xfont.StyleItalic}

	colMeets     = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff} // ratio meets its target
	colMisses    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // ratio misses its target
	colNoTarget  = color.RGBA{R: 0x6b, G: 0x7f, B: 0x99, A: 0xff} // ratio without a target
	colSluice    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // sluice's throughput
	colReference = color.RGBA{R: 0xb0, G: 0xb0, B: 0xb0, A: 0xff} // a reference's throughput
	colInk       = color.RGBA{R: 0x20, G: 0x20, B: 0x20, A: 0xff}
	colMuted     = color.RGBA{R: 0x60, G: 0x60, B: 0x60, A: 0xff}
	colGrid      = color.RGBA{R: 0xe4, G: 0xe4, B: 0xe4, A: 0xff}
)

// Chart renders the report as one PNG at path (about 1400×900 px; taller
// when there are many figures), in two stacked panels:
//
//   - the ratio figures (unit "ratio") of every scenario as horizontal bars
//     labelled "<scenario>: <figure>": the bar is the median, the whisker
//     the min–max over the runs and a dashed tick the target when Target
//     reads ">= X", "> X", "<= X" or "< X"; bars are green when the median
//     meets the target, red when it misses it;
//   - the throughput figures (unit "rows/s") on a log scale, sluice's in
//     blue and the references' in grey, so that each can be read against
//     the others of its scenario. A figure is sluice's when its name
//     mentions sluice or is the numerator of one of the scenario's ratios
//     ("decoder" in "decoder / mariadb-binlog").
//
// The title names the date and the machine. A panel without figures shows a
// note instead, so a report without ratios still gives a valid PNG.
func (r *Report) Chart(path string) error {
	if r == nil {
		return errors.New("bench: chart of a nil report")
	}
	ratios, rates := r.chartRows()

	w := vg.Length(chartWidthPx) * vg.Inch / chartDPI
	panelH := func(n int) vg.Length {
		if n == 0 {
			return chartEmptyPanel
		}
		return chartPanelTop + chartPanelAxis + vg.Length(n)*chartRowPitch
	}
	need := 2*chartMargin + chartHeaderH + chartPanelGap + panelH(len(ratios)) + panelH(len(rates))
	hpx := max(chartMinHeightPx, int(math.Ceil(float64(need/vg.Inch*chartDPI))))
	h := vg.Length(hpx) * vg.Inch / chartDPI

	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
	c := draw.Crop(draw.New(img), chartMargin, -chartMargin, chartMargin, -chartMargin)
	r.drawHeader(c)
	c.Max.Y -= chartHeaderH

	// Share the room left over between the panels' rows, so both have
	// the same bar pitch, up to chartMaxPitch; any rest stays blank below.
	var extra vg.Length
	if n := len(ratios) + len(rates); n > 0 {
		spare := c.Max.Y - c.Min.Y - chartPanelGap - panelH(len(ratios)) - panelH(len(rates))
		extra = min(max(spare/vg.Length(n), 0), chartMaxPitch-chartRowPitch)
	}
	top := c
	top.Min.Y = top.Max.Y - panelH(len(ratios)) - extra*vg.Length(len(ratios))
	bottom := c
	bottom.Max.Y = top.Min.Y - chartPanelGap
	bottom.Min.Y = bottom.Max.Y - panelH(len(rates)) - extra*vg.Length(len(rates))

	// Line both panels' bars up on the wider of their label columns.
	labelW := max(labelWidth(ratios), labelWidth(rates))

	drawPanel(top, panel{
		title: "Ratios to the references (bar: median, whisker: min–max over the runs, dashed tick: target)",
		legend: []legendItem{
			{label: "meets target", fill: colMeets},
			{label: "misses target", fill: colMisses},
			{label: "no target", fill: colNoTarget},
			{label: "target", dashed: true},
		},
		empty:  "No ratio figures in this report.",
		axis:   "ratio",
		rows:   ratios,
		labelW: labelW,
		linear: true,
	})
	drawPanel(bottom, panel{
		title: "Throughput, rows/s (log scale; bar: median, whisker: min–max over the runs)",
		legend: []legendItem{
			{label: "sluice", fill: colSluice},
			{label: "reference", fill: colReference},
		},
		empty:  "No rows/s figures in this report.",
		axis:   "rows/s",
		rows:   rates,
		labelW: labelW,
	})

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: write chart: %w", err)
	}
	return f.Close()
}

// chartRow is one bar.
type chartRow struct {
	label       string
	group       int // scenario index, for the separators
	med, lo, hi float64
	op          string // target comparison, "" when none
	target      float64
	color       color.Color
	value       string // drawn right of the bar
}

// chartRows gathers the ratio and the rows/s figures in report order.
func (r *Report) chartRows() (ratios, rates []chartRow) {
	for gi, s := range r.Scenarios {
		var nums, dens []string
		for _, st := range s.Stats {
			if n, d, ok := strings.Cut(st.Name, " / "); ok && st.Unit == "ratio" {
				nums, dens = append(nums, strings.TrimSpace(n)), append(dens, strings.TrimSpace(d))
			}
		}
		for _, st := range s.Stats {
			if !finite(st.Median) {
				continue
			}
			lo, hi := st.Min, st.Max
			if !finite(lo) || lo > st.Median {
				lo = st.Median
			}
			if !finite(hi) || hi < st.Median {
				hi = st.Median
			}
			row := chartRow{label: shorten(s.Name + ": " + st.Name), group: gi, med: st.Median, lo: lo, hi: hi}
			switch st.Unit {
			case "ratio":
				row.value = strconv.FormatFloat(st.Median, 'f', 2, 64)
				row.color = colNoTarget
				if op, x, ok := parseTarget(st.Target); ok {
					row.op, row.target = op, x
					row.value += "   target " + prettyOp(op) + " " + strconv.FormatFloat(x, 'g', -1, 64)
					row.color = colMisses
					if meets(op, st.Median, x) {
						row.color = colMeets
					}
				}
				ratios = append(ratios, row)
			case "rows/s":
				if st.Median <= 0 {
					continue
				}
				if row.lo <= 0 {
					row.lo = st.Median
				}
				row.value = si(st.Median)
				row.color = colReference
				if isSluice(st.Name, nums, dens) {
					row.color = colSluice
				}
				rates = append(rates, row)
			}
		}
	}
	return ratios, rates
}

// isSluice tells sluice's own throughput figures from the references'.
func isSluice(name string, nums, dens []string) bool {
	if strings.Contains(strings.ToLower(name), "sluice") {
		return true
	}
	for _, d := range dens {
		if name == d {
			return false
		}
	}
	for _, n := range nums {
		if name == n || strings.HasPrefix(name, n+" ") {
			return true
		}
	}
	return false
}

// parseTarget reads a target such as ">= 0.6" or "< 2".
func parseTarget(t string) (op string, x float64, ok bool) {
	t = strings.TrimSpace(t)
	for _, o := range []string{">=", "<=", ">", "<"} {
		if rest, found := strings.CutPrefix(t, o); found {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil || !finite(v) {
				return "", 0, false
			}
			return o, v, true
		}
	}
	return "", 0, false
}

func meets(op string, v, x float64) bool {
	switch op {
	case ">=":
		return v >= x
	case ">":
		return v > x
	case "<=":
		return v <= x
	case "<":
		return v < x
	}
	return false
}

func prettyOp(op string) string {
	switch op {
	case ">=":
		return "≥"
	case "<=":
		return "≤"
	}
	return op
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func shorten(s string) string {
	if utf8.RuneCountInString(s) <= chartMaxLabel {
		return s
	}
	return string([]rune(s)[:chartMaxLabel-1]) + "…"
}

// si formats a rate with three significant digits and a k/M/G suffix.
func si(v float64) string {
	units := []struct {
		scale  float64
		suffix string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}}
	for i, u := range units {
		if v >= u.scale*0.9995 || i == len(units)-1 {
			x := v / u.scale
			if x >= 999.5 && i > 0 {
				x, u = v/units[i-1].scale, units[i-1]
			}
			return strconv.FormatFloat(x, 'g', 3, 64) + u.suffix
		}
	}
	return ""
}

func style(f font.Font, size vg.Length, c color.Color, xa draw.XAlignment, ya draw.YAlignment) text.Style {
	f.Size = size
	return text.Style{Color: c, Font: f, XAlign: xa, YAlign: ya, Handler: plot.DefaultTextHandler}
}

// drawHeader writes the title (date) and the machine's description.
func (r *Report) drawHeader(c draw.Canvas) {
	when := "undated"
	if !r.Time.IsZero() {
		when = r.Time.UTC().Format("2006-01-02 15:04 MST")
	}
	c.FillText(style(chartSansBold, 17, colInk, draw.XLeft, draw.YTop), vg.Point{X: c.Min.X, Y: c.Max.Y}, "sluice benchmark, "+when)

	m := r.Machine
	var parts []string
	if m.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d CPUs", m.CPUs))
	}
	if m.CPUModel != "" {
		parts = append(parts, m.CPUModel)
	}
	if m.MemBytes > 0 {
		parts = append(parts, fmt.Sprintf("%.0f GiB RAM", float64(m.MemBytes)/(1<<30)))
	}
	for _, p := range []string{m.OS, m.Go} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "machine not described")
	}
	c.FillText(style(chartSans, 12, colMuted, draw.XLeft, draw.YTop), vg.Point{X: c.Min.X, Y: c.Max.Y - 26}, strings.Join(parts, " · "))
}

type legendItem struct {
	label  string
	fill   color.Color
	dashed bool
}

type panel struct {
	title  string
	legend []legendItem
	empty  string
	axis   string
	rows   []chartRow
	labelW vg.Length // width of the widest bar label of all panels
	linear bool      // a linear X axis from 0; otherwise log scale
}

func tickStyle() text.Style { return style(chartSans, 11, colInk, draw.XRight, draw.YCenter) }

func labelWidth(rows []chartRow) vg.Length {
	st := tickStyle()
	var w vg.Length
	for _, r := range rows {
		w = max(w, st.Width(r.label))
	}
	return w
}

var (
	targetLine  = draw.LineStyle{Color: colInk, Width: vg.Points(1.6), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}
	whiskerLine = draw.LineStyle{Color: colInk, Width: vg.Points(1)}
	groupLine   = draw.LineStyle{Color: color.RGBA{R: 0xc8, G: 0xc8, B: 0xc8, A: 0xff}, Width: vg.Points(0.8)}
)

// drawPanel draws a panel's title and legend, then its bars, or its note
// when it has none.
func drawPanel(c draw.Canvas, p panel) {
	c.FillText(style(chartSansBold, 13, colInk, draw.XLeft, draw.YTop), vg.Point{X: c.Min.X, Y: c.Max.Y}, p.title)
	if len(p.rows) == 0 {
		c.FillText(style(chartSansIt, 12, colMuted, draw.XCenter, draw.YCenter), vg.Point{X: c.Center().X, Y: c.Max.Y - 45}, p.empty)
		return
	}
	drawLegend(c, vg.Point{X: c.Min.X, Y: c.Max.Y - 28}, p.legend)
	c.Max.Y -= chartPanelTop

	pl := plot.New()
	pl.BackgroundColor = nil
	labels := make([]string, len(p.rows))
	for i, row := range p.rows {
		labels[len(p.rows)-1-i] = row.label
	}
	pl.NominalY(labels...)
	pl.Y.Tick.Label = tickStyle()
	pl.Y.Padding = 0
	pl.Y.Min, pl.Y.Max = -0.5, float64(len(p.rows))-0.5
	pl.X.Padding = 0
	pl.X.Tick.Label = style(chartSans, 11, colInk, draw.XCenter, draw.YTop)
	pl.X.Label.Text = p.axis
	pl.X.Label.TextStyle = style(chartSans, 11, colMuted, draw.XCenter, draw.YBottom)

	bars := &hbars{rows: p.rows, text: style(chartSans, 10, colInk, draw.XLeft, draw.YCenter)}
	hi := 0.0
	lo := math.Inf(1)
	for _, row := range p.rows {
		hi = max(hi, row.hi, row.med)
		lo = min(lo, row.lo, row.med)
		if row.op != "" {
			hi = max(hi, row.target)
		}
	}
	if p.linear {
		if hi <= 0 {
			hi = 1
		}
		pl.X.Min, pl.X.Max = min(0, lo*1.04), hi*1.04
		bars.base = 0
	} else {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.TickerFunc(logTicks)
		pl.X.Min = math.Pow10(int(math.Floor(math.Log10(lo))))
		if lo/pl.X.Min < 1.05 {
			pl.X.Min /= 10
		}
		pl.X.Max = math.Pow10(int(math.Ceil(math.Log10(hi))))
		if pl.X.Max <= pl.X.Min {
			pl.X.Max = pl.X.Min * 10
		}
		bars.base = pl.X.Min
	}
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	grid.Vertical = draw.LineStyle{Color: colGrid, Width: vg.Points(0.8)}
	pl.Add(grid, bars)
	// Add widens the ranges to the data; keep ours.
	pl.Y.Min, pl.Y.Max = -0.5, float64(len(p.rows))-0.5
	if p.linear {
		pl.X.Min = min(0, lo*1.04)
	} else {
		pl.X.Min = bars.base
	}
	pl.Draw(draw.Crop(c, p.labelW-labelWidth(p.rows), 0, 0, 0))
}

func drawLegend(c draw.Canvas, at vg.Point, items []legendItem) {
	st := style(chartSans, 11, colInk, draw.XLeft, draw.YCenter)
	x := at.X
	for _, it := range items {
		if it.dashed {
			c.StrokeLine2(targetLine, x+6, at.Y-7, x+6, at.Y+7)
		} else {
			c.FillPolygon(it.fill, []vg.Point{{X: x, Y: at.Y - 6}, {X: x + 12, Y: at.Y - 6}, {X: x + 12, Y: at.Y + 6}, {X: x, Y: at.Y + 6}})
		}
		c.FillText(st, vg.Point{X: x + 17, Y: at.Y}, it.label)
		x += 17 + st.Width(it.label) + 22
	}
}

// logTicks marks each power of ten with a label and the multiples between
// them without.
func logTicks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		d := math.Pow10(int(e))
		for m := 1; m < 10; m++ {
			v := d * float64(m)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = si(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// hbars draws horizontal bars from base to each row's median, with the
// min–max whisker, the target tick and the value; row 0 is at the top.
type hbars struct {
	rows []chartRow
	base float64
	text text.Style
}

const valuePad = vg.Length(6)

func (b *hbars) y(i int) float64 { return float64(len(b.rows) - 1 - i) }

// right is where a row's value text starts, in data units.
func (b *hbars) right(r chartRow) float64 {
	x := max(r.med, r.hi)
	if r.op != "" {
		x = max(x, r.target)
	}
	return x
}

func (b *hbars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	half := min((trY(1)-trY(0))*0.32, chartBarHalf)
	for i := 1; i < len(b.rows); i++ {
		if b.rows[i].group != b.rows[i-1].group {
			y := trY(b.y(i) + 0.5)
			c.StrokeLine2(groupLine, c.Min.X, y, c.Max.X, y)
		}
	}
	for i, r := range b.rows {
		y := trY(b.y(i))
		x0, x1 := trX(b.base), trX(r.med)
		c.FillPolygon(r.color, c.ClipPolygonX([]vg.Point{{X: x0, Y: y - half}, {X: x1, Y: y - half}, {X: x1, Y: y + half}, {X: x0, Y: y + half}}))
		if r.hi > r.lo {
			l, h := trX(r.lo), trX(r.hi)
			c.StrokeLine2(whiskerLine, l, y, h, y)
			c.StrokeLine2(whiskerLine, l, y-half*0.6, l, y+half*0.6)
			c.StrokeLine2(whiskerLine, h, y-half*0.6, h, y+half*0.6)
		}
		if r.op != "" {
			t := trX(r.target)
			c.StrokeLine2(targetLine, t, y-half-4, t, y+half+4)
		}
		c.FillText(b.text, vg.Point{X: trX(b.right(r)) + valuePad, Y: y}, r.value)
	}
}

func (b *hbars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = b.base, b.base
	for _, r := range b.rows {
		xmax = max(xmax, b.right(r))
	}
	return xmin, xmax, -0.5, float64(len(b.rows)) - 0.5
}

// GlyphBoxes makes room right of the bars for the values.
func (b *hbars) GlyphBoxes(p *plot.Plot) []plot.GlyphBox {
	boxes := make([]plot.GlyphBox, len(b.rows))
	for i, r := range b.rows {
		w, h := b.text.Width(r.value), b.text.Height(r.value)
		boxes[i] = plot.GlyphBox{
			X: p.X.Norm(b.right(r)),
			Y: p.Y.Norm(b.y(i)),
			Rectangle: vg.Rectangle{
				Min: vg.Point{X: valuePad, Y: -h / 2},
				Max: vg.Point{X: valuePad + w, Y: h / 2},
			},
		}
	}
	return boxes
}
