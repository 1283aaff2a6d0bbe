package shard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/osgm-svm/osgm/internal/svmdata"
	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
)

// FuzzLoad: whatever the text, however many shards it is cut into, and
// whether the file is plain (read range by range in parallel) or gzip
// (streamed once), the shards hold exactly the rows libsvm.Reader reads
// from the whole text (labels, columns and values, in order), or the load
// fails as the reader does, naming the file and the same line.
func FuzzLoad(f *testing.F) {
	for _, text := range []string{
		"1 1:1\n-1 2:1\n\n1 3:1 4:2 # long comment here\n-1\n1 5:1\n-1 6:1",
		"3 1:1 7:1\n3 2:1\n-1 40000:0.3 70000:1.5\n2 5:-3.125\n1 2:0.1 3:1e-30\n1 1:2\n5 20000000:1\n-1 1:1 16777300:2\n\n# nothing\n1 3:0.5\n",
		"+1 1:0.5 3:-2\r\n-1 2:1e3\r\n",
		"1 1:1\n-1 3:oops\n1 2:1\n",
		"1 2:1 1:1\n",
		"1 1:-0 2:0 3:00.50\n-1\t4:1\v\n",
	} {
		for _, n := range []uint8{1, 3, 7, 8 + 3, 16 + 8 + 3} {
			f.Add([]byte(text), n)
		}
	}
	f.Fuzz(func(t *testing.T, text []byte, n uint8) {
		path := svmdata.WriteFile(t, string(text))
		if n&8 != 0 {
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			w.Write(text)
			w.Close()
			path = svmdata.WriteFile(t, z.String())
		}
		ranges := input.Layout(int64(len(text)), int(n%8)+1)
		shards, err := Load(path, ranges, Options{Parallel: 2})
		if n&16 != 0 && n&8 != 0 {
			// The text decompressed once and held, as a coordinator
			// with in-process workers does.
			if _, held, e := input.StatKeep(path, 1<<30); e == nil {
				id, _ := input.Identify(path)
				shared := &Shared{}
				release, _ := shared.Hold(path, id, held)
				shards, err = LoadChecked(path, ranges, Options{Parallel: 2, Shared: shared}, id)
				release()
			}
		}

		var want []libsvm.Row
		var wantErr error
		rd := libsvm.NewReader(bytes.NewReader(text), path)
		for {
			var row libsvm.Row
			if e := rd.Next(&row); e != nil {
				if !errors.Is(e, io.EOF) {
					wantErr = e
				}
				break
			}
			want = append(want, row)
		}
		if err != nil || wantErr != nil {
			if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
				t.Fatalf("load: %v\nreader: %v", err, wantErr)
			}
			if !strings.HasPrefix(err.Error(), path+":") {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		i := 0
		for _, s := range shards {
			for r := 0; r < s.Rows(); r, i = r+1, i+1 {
				if i >= len(want) {
					t.Fatalf("the shards hold more than the reader's %d rows", len(want))
				}
				w := want[i]
				if l := s.Labels[s.LabelOf[r]]; l != w.Label {
					t.Fatalf("row %d: label %v, the reader's %v", i, l, w.Label)
				}
				var idx []uint32
				var val []float64
				for q := s.RowPtr[r]; q < s.RowPtr[r+1]; q++ {
					idx = append(idx, s.Cols.Slice()[s.col(int(q))]+1)
					val = append(val, s.rowValue(int(q)))
				}
				if !equalRow(idx, val, w.Index, w.Value) {
					t.Fatalf("row %d: %v %v, the reader's %v %v", i, idx, val, w.Index, w.Value)
				}
			}
		}
		if i != len(want) {
			t.Fatalf("the shards hold %d rows, the reader %d", i, len(want))
		}
	})
}

func equalRow(idx []uint32, val []float64, wantIdx []uint32, wantVal []float64) bool {
	if len(idx) != len(wantIdx) || len(val) != len(wantVal) {
		return false
	}
	for q := range idx {
		if idx[q] != wantIdx[q] || val[q] != wantVal[q] {
			return false
		}
	}
	return true
}

// TestLoadCountsWhatItReads: Options.Read grows by the bytes a load
// reads, the whole file once at least and not twice, whether plain
// (ranges read in parallel) or gzip (the decompressed stream), so that a
// load that stops reading can be told from a slow one (how far past its
// end a range reads is input's TestLinesReadToTheirLastLine).
func TestLoadCountsWhatItReads(t *testing.T) {
	var text strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&text, "%d 1:%d 7:0.5 %d:1\n", 2*(i%2)-1, i, 10+i%90)
	}
	plain := svmdata.WriteFile(t, text.String())
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(text.String()))
	zw.Close()
	for _, c := range []struct {
		name, path string
		shards     int
	}{{"plain", plain, 7}, {"gzip", svmdata.WriteFile(t, z.String()), 7}, {"plain, one shard", plain, 1}} {
		t.Run(c.name, func(t *testing.T) {
			var read atomic.Int64
			if _, err := Load(c.path, input.Layout(int64(text.Len()), c.shards), Options{Parallel: 2, Read: &read}); err != nil {
				t.Fatal(err)
			}
			if n := read.Load(); n < int64(text.Len()) || n >= 2*int64(text.Len()) {
				t.Fatalf("counted %d bytes read of a %d-byte text", n, text.Len())
			}
		})
	}
}

// rowsOf prints the shards' rows: label, then global columns and values.
func rowsOf(shards []*Shard) string {
	var b strings.Builder
	for _, s := range shards {
		cols := s.Cols.Slice()
		for r := range s.Rows() {
			fmt.Fprint(&b, s.Labels[s.LabelOf[r]])
			for q := s.RowPtr[r]; q < s.RowPtr[r+1]; q++ {
				fmt.Fprintf(&b, " %d:%g", cols[s.col(int(q))], s.rowValue(int(q)))
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// TestHeldTextLoadsAsTheFile: a compressed file's text, kept by
// input.StatKeep and held, loads into the shards the file itself gives,
// with the same error for a bad line (the file and the line);
// LoadChecked reads the held text while it is held and the file once it
// is released; and a text over keep is not kept.
func TestHeldTextLoadsAsTheFile(t *testing.T) {
	var text strings.Builder
	for i := 0; text.Len() < 1<<20; i++ {
		fmt.Fprintf(&text, "%d 1:%d 7:0.5 %d:1 %d:0.25\n", 2*(i%2)-1, i%1000, 10+i%90, 100+i%7)
	}
	gz := func(s string) string {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write([]byte(s))
		w.Close()
		return svmdata.WriteFile(t, z.String())
	}
	path := gz(text.String())
	info, held, err := input.StatKeep(path, 1<<30)
	if err != nil || held == nil {
		t.Fatalf("input.StatKeep: %v, text kept: %v", err, held != nil)
	}
	if want, _ := input.Stat(path); info != want {
		t.Fatalf("input.StatKeep's info %+v, input.Stat's %+v", info, want)
	}
	if _, over, _ := input.StatKeep(path, int64(text.Len()-1)); over != nil {
		t.Fatal("a text over keep was kept")
	}
	ranges := input.Layout(info.Size, 7)
	want, err := Load(path, ranges, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := input.Identify(path)
	shared := &Shared{}
	release, _ := shared.Hold(path, id, held)
	got, err := LoadChecked(path, ranges, Options{Parallel: 2, Shared: shared}, id)
	if err != nil {
		t.Fatal(err)
	}
	if rowsOf(got) != rowsOf(want) {
		t.Fatal("the held text's shards differ from the file's")
	}
	// A decoy held in the file's place is what LoadChecked reads.
	_, decoy, _ := input.StatKeep(gz("1 1:1\n-1 2:1\n"), 1<<30)
	release()
	release, _ = shared.Hold(path, id, decoy)
	if got, _ := LoadChecked(path, input.Layout(decoy.Size(), 1), Options{Shared: shared}, id); rowsOf(got) != "1 0:1\n-1 1:1\n" {
		t.Fatalf("LoadChecked did not read the held text: %q", rowsOf(got))
	}
	if got, _ := LoadChecked(path, ranges, Options{}, id); rowsOf(got) != rowsOf(want) {
		t.Fatal("a load not given the Shared read its held text")
	}
	release()
	if got, _ := LoadChecked(path, ranges, Options{Shared: shared}, id); rowsOf(got) != rowsOf(want) {
		t.Fatal("LoadChecked read a released text")
	}

	bad := gz(text.String() + "1 1:1 2:x\n" + text.String())
	_, held, _ = input.StatKeep(bad, 1<<30)
	id, _ = input.Identify(bad)
	ranges = input.Layout(held.Size(), 7)
	_, wantErr := Load(bad, ranges, Options{})
	release, _ = shared.Hold(bad, id, held)
	defer release()
	_, err = LoadChecked(bad, ranges, Options{Parallel: 2, Shared: shared}, id)
	if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
		t.Fatalf("held text: %v\nfile: %v", err, wantErr)
	}
	t.Log(err)
}
