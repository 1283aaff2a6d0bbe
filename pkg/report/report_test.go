package report

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testSeries() []Series {
	var a, b Series
	a.Name, b.Name = "fast", "slow"
	for i := 1; i <= 50; i++ {
		a.Points = append(a.Points, Point{Iter: i, Elapsed: time.Duration(i) * time.Millisecond, Value: 1 / float64(i*i)})
		b.Points = append(b.Points, Point{Iter: i, Elapsed: time.Duration(2*i) * time.Millisecond, Value: 1 / float64(i)})
	}
	b.Points = append(b.Points, Point{Iter: 51, Value: 0}) // must be skipped on a log axis
	return []Series{a, b}
}

// TestPNG checks the file decodes as an image of the promised size.
func TestPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	if err := Write(path, "test", "gap", testSeries()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	wantW, wantH := int(Width.Dots(96)), int(Height.Dots(96))
	if b.Dx() != wantW || b.Dy() != wantH {
		t.Fatalf("image %dx%d, want %dx%d", b.Dx(), b.Dy(), wantW, wantH)
	}
}

func TestSVGAndBadExtension(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := Write(path, "test", "gap", testSeries()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "fast") {
		t.Fatal("not an SVG with the legend")
	}
	if err := Write(filepath.Join(t.TempDir(), "c.gif"), "t", "y", testSeries()); err == nil {
		t.Fatal("a .gif was accepted")
	}
}
