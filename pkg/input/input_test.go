package input

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/reduce"
)

// linesOf is every line the ranges of src hand on, in order, and the
// bytes they read.
func linesOf(t *testing.T, src Source, ranges []Range) (string, int64) {
	var (
		b    strings.Builder
		read atomic.Int64
	)
	br := bufio.NewReaderSize(nil, 1<<20)
	for _, r := range ranges {
		err := src.Lines(r, br, &read, func(text []byte, at int64) error {
			if at < r.Start || at >= r.End {
				t.Fatalf("range %+v handed on a line at %d", r, at)
			}
			b.Write(text)
			b.WriteByte('\n')
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String(), read.Load()
}

// TestLinesReadToTheirLastLine: the ranges of a file hand on each of its
// lines once, lines far longer than what a range reads past its end
// among them; and of short lines they read the file once, give or take
// windowTail a range (a range that filled the reader's 1 MB buffer read
// a small file several times over).
func TestLinesReadToTheirLastLine(t *testing.T) {
	for _, long := range []bool{false, true} {
		var text strings.Builder
		for i := range 400 {
			fmt.Fprintf(&text, "%d", 2*(i%2)-1)
			n := 10
			if long && i%40 == 39 {
				n = 9000 + 900*(i%10) // 5 to 10 windowTails
			}
			for j := range n {
				fmt.Fprintf(&text, " %d:%d", j+1, (i+j)%7+1)
			}
			text.WriteByte('\n')
		}
		path := svmdata.WriteFile(t, text.String())
		size := int64(text.Len())
		for _, n := range []int{1, 3, 7, 16} {
			got, read := linesOf(t, Source{Path: path}, Layout(size, n))
			if got != text.String() {
				t.Fatalf("long lines %v, %d ranges: the lines differ from the file's", long, n)
			}
			if !long && (read < size || read > size+int64(n*windowTail)) {
				t.Fatalf("%d ranges read %d bytes of a %d-byte file", n, read, size)
			}
		}
	}
}

// TestHeldTextReadsAsTheFile: a compressed file's text, kept by StatKeep
// and held, hands on the lines the plain file does, ranges crossing the
// text's chunks, with the same line numbers; and Held gives it only for
// the file's version, until released.
func TestHeldTextReadsAsTheFile(t *testing.T) {
	var text strings.Builder
	for i := 0; text.Len() < 2*textChunk+textChunk/2; i++ {
		fmt.Fprintf(&text, "%d 1:%d 7:0.5 %d:1\n", 2*(i%2)-1, i%1000, 10+i%90)
	}
	plain := svmdata.WriteFile(t, text.String())
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write([]byte(text.String()))
	w.Close()
	gz := filepath.Join(t.TempDir(), "data.gz")
	if err := os.WriteFile(gz, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	info, kept, err := StatKeep(gz, 1<<30)
	if err != nil || kept == nil || info.Size != int64(text.Len()) || kept.Size() != info.Size {
		t.Fatalf("StatKeep: %+v, %v, kept %v", info, err, kept != nil)
	}
	if _, over, _ := StatKeep(gz, info.Size-1); over != nil {
		t.Fatal("a text over keep was kept")
	}
	ranges := Layout(info.Size, 7)
	want, _ := linesOf(t, Source{Path: plain}, ranges)
	if got, _ := linesOf(t, Source{Path: gz, Text: kept}, ranges); got != want {
		t.Fatal("the held text's lines differ from the file's")
	}
	for _, at := range []int64{0, 1, textChunk - 1, textChunk, textChunk + 1, info.Size} {
		if got, want := (Source{Text: kept}).LineAt(at), (Source{Path: plain}).LineAt(at); got != want {
			t.Fatalf("line at %d: %d in the held text, %d in the file", at, got, want)
		}
	}
	var h Held
	id, _ := Identify(gz)
	release, err := h.Hold(gz, id, kept)
	if err != nil || h.Text(gz, id) != kept || h.Text(gz, FileID{Size: 1}) != nil || h.Text(plain, id) != nil {
		t.Fatal("Held gave a text for another file or version, or not the one held")
	}
	release()
	if h.Text(gz, id) != nil || (*Held)(nil).Text(gz, id) != nil {
		t.Fatal("a released text is still held")
	}
}

// TestLayoutTiles: ranges tile the file in order, as many as asked for (or
// bytes, if fewer), and an automatic count past one group is a whole
// number of groups.
func TestLayoutTiles(t *testing.T) {
	for _, c := range []struct {
		size int64
		n    int
	}{{0, 0}, {1, 0}, {100, 0}, {100, 16}, {5, 9}, {2329875, 0}, {3478238, 0}, {871587, 0}, {134603135, 0}, {10 << 30, 0}, {4500 << 20, 0}, {1 << 20, 3}} {
		r := Layout(c.size, c.n)
		want := int64(c.n)
		if c.n > 0 && want > c.size {
			want = c.size
		}
		if c.n > 0 && int64(len(r)) != max(want, 1) {
			t.Errorf("size %d, %d asked: %d ranges", c.size, c.n, len(r))
		}
		if c.n == 0 && len(r) > reduce.GroupSize && len(r)%reduce.GroupSize != 0 {
			t.Errorf("size %d: %d ranges, not whole groups", c.size, len(r))
		}
		end := int64(0)
		for i, g := range r {
			if g.ID != i || g.Start != end || g.End < g.Start || (g.End == g.Start && c.size > 0) {
				t.Fatalf("size %d: range %d is %+v after %d", c.size, i, g, end)
			}
			end = g.End
		}
		if end != c.size {
			t.Errorf("size %d: ranges end at %d", c.size, end)
		}
	}
}
