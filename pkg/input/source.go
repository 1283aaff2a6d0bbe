package input

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/s3"
)

// Source is what a load reads: the file; or, when Text is set, the
// file's decompressed text held in memory (see Held), read as a plain
// file would be; or, when Obj is set, an s3:// object, by range.
type Source struct {
	Path string
	Text *Decompressed
	Obj  *s3.Object
}

// Open is path's Source: an s3:// object by range, else the file.
func Open(path string) (Source, error) {
	src := Source{Path: path}
	if s3.IsURL(path) {
		o, err := openObject(path)
		if err != nil {
			return Source{}, err
		}
		src.Obj = o
	}
	return src, nil
}

// OpenChecked is Open for a file that must be the version want, read
// from held's text when it holds it: check reports whether the file is
// still want (an object's every read is pinned to its version).
func OpenChecked(path string, want FileID, held *Held) (src Source, check func() error, err error) {
	src = Source{Path: path, Text: held.Text(path, want)}
	check = func() error {
		got, err := Identify(path)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: %w (size %d, expected %d)", path, ErrChanged, got.Size, want.Size)
		}
		return nil
	}
	if s3.IsURL(path) {
		// Checked once: every read is pinned to the version's ETag, so
		// one replaced meanwhile fails the load (s3.ErrChanged).
		o, err := s3.Open(context.Background(), path)
		if err != nil {
			return Source{}, nil, err
		}
		if objectID(o) != want {
			return Source{}, nil, fmt.Errorf("%s: %w (size %d, expected %d)", path, ErrChanged, o.Size, want.Size)
		}
		src.Obj, check = o, func() error { return nil }
	}
	return src, check, nil
}

func (src Source) open() (io.ReadSeekCloser, error) {
	switch {
	case src.Text != nil:
		return src.Text.reader(), nil
	case src.Obj != nil:
		return src.Obj.Reader(context.Background()), nil
	}
	return os.Open(src.Path)
}

// LineAt counts the lines before offset: the error path of a reader
// that started in the middle of a file.
func (src Source) LineAt(offset int64) int {
	switch {
	case src.Text != nil:
		return src.Text.lines(offset)
	case src.Obj != nil:
		r := src.Obj.Reader(context.Background())
		defer r.Close()
		return linesBefore(r, offset)
	}
	return lineAt(src.Path, offset)
}

// Lines seeks to r (in a plain file, a held text or an object) and
// calls line with each line that starts in it, and the line's offset
// (for LineAt); br is the caller's buffer, kept from range to range, and
// read counts the bytes read (nil: none).
func (src Source) Lines(r Range, br *bufio.Reader, read *atomic.Int64, line func(text []byte, at int64) error) error {
	f, err := src.open()
	if err != nil {
		return err
	}
	defer f.Close()
	start := r.Start
	if start > 0 {
		start-- // a line starts at Start only if the byte before it ends a line
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return err
	}
	br.Reset(Counted(&window{r: f, pos: start, end: r.End}, read))
	defer br.Reset(nil) // hold no file
	if r.Start > 0 {
		skipped, err := br.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			start += int64(len(skipped))
			skipped, err = br.ReadSlice('\n')
		}
		start += int64(len(skipped))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src.Path, err)
		}
	}
	rd := libsvm.NewReader(br, src.Path)
	rd.Start(0, start) // line numbers are found on error only
	for rd.Offset() < r.End {
		text, at, err := rd.ReadLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := line(text, at); err != nil {
			return err
		}
	}
	return nil
}

// Stream reads a decompressed stream once, range after range.
type Stream struct{ rd *libsvm.Reader }

// NewStream reads r, path's decompressed text, from its start.
func NewStream(r io.Reader, path string) *Stream {
	return &Stream{rd: libsvm.NewReader(r, path)}
}

// Range calls line with each line that starts in rg. The ranges a
// stream is asked for must come in increasing order.
func (s *Stream) Range(rg Range, line func(text []byte) error) error {
	for s.rd.Offset() < rg.End {
		text, at, err := s.rd.ReadLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if at < rg.Start {
			continue
		}
		if err := line(text); err != nil {
			return err
		}
	}
	return nil
}

// Line is the number of the line Range last handed on.
func (s *Stream) Line() int { return s.rd.Line() }

// window reads a range's file no further than the range's end, and then
// in small steps: past its end a range needs only the rest of its last
// line. Filling the reader's whole buffer read a small file's every byte
// several times over.
type window struct {
	r        io.Reader
	pos, end int64
}

// windowTail is the most a read past the range's end asks for.
const windowTail = 16 << 10

func (w *window) Read(b []byte) (int, error) {
	limit := max(w.end-w.pos, windowTail)
	if int64(len(b)) > limit {
		b = b[:limit]
	}
	n, err := w.r.Read(b)
	w.pos += int64(n)
	return n, err
}

// lineAt counts the lines of a file before offset.
func lineAt(path string, offset int64) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return linesBefore(f, offset)
}

func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

// Text streams the raw text of each range to emit, in order, reading the
// file once: what an object store holds for workers without the file.
func Text(path string, ranges []Range, emit func(r Range, text []byte) error) error {
	f, err := libsvm.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rd := libsvm.NewReader(f, path)
	var buf []byte
	i := 0
	for {
		line, at, err := rd.ReadLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		for i < len(ranges) && at >= ranges[i].End {
			if err := emit(ranges[i], buf); err != nil {
				return err
			}
			buf = buf[:0]
			i++
		}
		if i < len(ranges) && at >= ranges[i].Start {
			buf = append(buf, line...)
			buf = append(buf, '\n')
		}
	}
	for ; i < len(ranges); i++ {
		if err := emit(ranges[i], buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	return nil
}

// openObject opens an s3:// training file. Only plain text is read by
// range: a compressed object would have to be read whole by every
// worker, which is what -objstore's copy already does better.
func openObject(name string) (*s3.Object, error) {
	o, err := s3.Open(context.Background(), name)
	if err != nil {
		return nil, err
	}
	if o.Size == 0 {
		return nil, fmt.Errorf("%s: %w", name, libsvm.ErrNoData)
	}
	r := o.Reader(context.Background())
	defer r.Close()
	head := make([]byte, min(o.Size, 8))
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	if c := libsvm.Detect(head); c != libsvm.Plain {
		return nil, fmt.Errorf("%s: a %s object cannot be read by range: store it decompressed, or copy it to a path or -objstore", name, c)
	}
	return o, nil
}

// objectID is an object's FileID: its size and ETag.
func objectID(o *s3.Object) FileID { return FileID{Size: o.Size, ETag: o.ETag} }

// linesBefore counts the lines before offset in r: an error's line
// number, for a reader that started in the middle.
func linesBefore(r io.Reader, offset int64) int {
	n, buf := 1, make([]byte, 1<<16)
	for offset > 0 {
		k, err := r.Read(buf[:min(int64(len(buf)), offset)])
		n += countLines(buf[:k])
		offset -= int64(k)
		if err != nil {
			break
		}
	}
	return n
}
