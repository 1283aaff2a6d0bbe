package libsvm

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// ParseError locates a problem in an input file.
type ParseError struct {
	File string
	Line int // one-based; 0 when the problem is not on a line
	Err  error
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Compression is the container format of an input file, found from its
// first bytes, never from its name.
type Compression int

const (
	Plain Compression = iota
	Gzip
	Zstd
	Bzip2
)

func (c Compression) String() string {
	return [...]string{"plain", "gzip", "zstd", "bzip2"}[c]
}

// Detect names the compression of data starting with head.
func Detect(head []byte) Compression {
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return Gzip
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return Zstd
	case len(head) >= 4 && bytes.HasPrefix(head, []byte("BZh")) && head[3] >= '1' && head[3] <= '9':
		return Bzip2
	}
	return Plain
}

// File is an opened input: the decompressed stream and how it was stored.
type File struct {
	io.Reader
	Name        string
	Compression Compression
	Size        int64 // size on disk
	f           *os.File
	closers     []func()
}

// Close releases the file and any decompressor.
func (f *File) Close() error {
	for _, c := range f.closers {
		c()
	}
	return f.f.Close()
}

// Open opens a data file for streaming, decompressing gzip, zstd or bzip2
// input detected by its magic bytes.
func Open(name string) (*File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: is a directory, not a data file", name)
	}
	head := make([]byte, 4)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := &File{Name: name, Size: st.Size(), f: f, Compression: Detect(head[:n])}
	if out.Compression == Plain {
		// NewReader buffers it; a caller that only wanted to know the
		// compression allocates nothing.
		out.Reader = f
		return out, nil
	}
	br := bufio.NewReaderSize(f, 1<<20)
	switch out.Compression {
	case Gzip:
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		out.Reader = zr
		out.closers = append(out.closers, func() { zr.Close() })
	case Zstd:
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: zstd: %w", name, err)
		}
		out.Reader = zr
		out.closers = append(out.closers, zr.Close)
	case Bzip2:
		out.Reader = bzip2.NewReader(br)
	}
	return out, nil
}

// Reader streams rows from LIBSVM text. It holds one line at a time, so
// input of any size reads in constant memory.
type Reader struct {
	name   string
	br     *bufio.Reader
	line   int   // number of the line last read
	offset int64 // stream offset of the next line
	long   []byte
}

// NewReader reads LIBSVM text from r; name is used in error messages.
func NewReader(r io.Reader, name string) *Reader {
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < 1<<16 {
		br = bufio.NewReaderSize(r, 1<<20)
	}
	return &Reader{name: name, br: br}
}

// Start sets the line number and stream offset of the next line, for a
// reader that begins inside a file.
func (r *Reader) Start(line int, offset int64) { r.line, r.offset = line-1, offset }

// Line is the number of the line last returned.
func (r *Reader) Line() int { return r.line }

// Offset is the stream offset of the next line.
func (r *Reader) Offset() int64 { return r.offset }

// ReadLine returns the next line without its line end, and the stream
// offset where it starts. The slice is valid until the next call.
func (r *Reader) ReadLine() (line []byte, start int64, err error) {
	start = r.offset
	b, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], b...)
		for err == bufio.ErrBufferFull {
			b, err = r.br.ReadSlice('\n')
			r.long = append(r.long, b...)
		}
		b = r.long
	}
	if err != nil && err != io.EOF {
		return nil, start, r.fail(fmt.Errorf("reading: %w", err))
	}
	if len(b) == 0 && err == io.EOF {
		return nil, start, io.EOF
	}
	r.offset += int64(len(b))
	r.line++
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return b, start, nil
}

// Next fills row with the next data line, skipping blank and comment lines.
// It returns io.EOF at the end and a *ParseError for malformed input.
func (r *Reader) Next(row *Row) error {
	for {
		b, _, err := r.ReadLine()
		if err != nil {
			return err
		}
		ok, err := ParseLine(b, row)
		if err != nil {
			return r.fail(err)
		}
		if ok {
			return nil
		}
	}
}

func (r *Reader) fail(err error) error {
	var pe *ParseError
	if errors.As(err, &pe) {
		return err
	}
	return &ParseError{File: r.name, Line: r.line, Err: err}
}
