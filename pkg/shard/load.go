package shard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/reduce"
	"github.com/osgm-svm/osgm/pkg/s3"
)

// Range is a piece of the decompressed input: the lines whose first byte is
// at an offset in [Start, End).
type Range struct {
	ID         int
	Start, End int64
}

// Layout limits, chosen so large files keep shards small enough to move
// between workers quickly, and small files make few shards: every shard
// costs each pass a gather of the point over its columns and a scatter of
// its sums, which on a small wide file outweighs its rows (news20.t, 2.2
// MB and 62,060 features: 16 shards of 256 KB made a pass a third longer
// than 3 of 1 MB; BENCHMARKS.md). A file this small loads in milliseconds
// whatever its shards.
const (
	minShardBytes = 1 << 20
	maxShardBytes = 64 << 20
	targetShards  = 64
)

// Layout cuts size bytes into shard ranges. With n > 0 there are n ranges;
// otherwise the size alone decides. It never depends on the worker count.
//
// Past one group, the automatic count is a whole number of groups: a
// file of 9 shards' worth (a9a) makes 16 smaller ones, two groups of 8,
// rather than a group and a stub. Workers given whole groups send one sum
// each per round instead of a partial per shard.
func Layout(size int64, n int) []Range {
	count := int64(n)
	if n <= 0 {
		per := min(max((size+targetShards-1)/targetShards, minShardBytes), maxShardBytes)
		count = (size + per - 1) / per
		if count > reduce.GroupSize {
			count = (count + reduce.GroupSize - 1) / reduce.GroupSize * reduce.GroupSize
		}
	}
	count = max(1, min(count, size)) // no empty range but an empty file's
	out := make([]Range, count)
	for i := range out {
		out[i] = Range{ID: i, Start: int64(i) * size / count, End: int64(i+1) * size / count}
	}
	return out
}

// Info describes an input file.
type Info struct {
	Compression libsvm.Compression
	Size        int64 // decompressed size, which the ranges cut
	DiskSize    int64
}

// Stat finds the compression and the decompressed size of a file. For a
// compressed file it reads the stream once.
func Stat(path string) (Info, error) {
	info, _, err := StatKeep(path, 0)
	return info, err
}

// streamError names the file and its compression in an error from
// reading its decompressed stream (nil for nil).
func streamError(path string, c libsvm.Compression, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: %s data ends early: the file is truncated", path, c)
	}
	if err != nil {
		return fmt.Errorf("%s: %s data: %w", path, c, err)
	}
	return nil
}

// Options say how Load builds shards.
type Options struct {
	Parallel int  // goroutines reading ranges of a plain file
	Compact  bool // values as codes, wide shards' ids in 3 bytes, where smaller (see Compact)
	// Available, when set and Compact is not, makes the load compact
	// the shards if plain ones would not fit: it is asked after each
	// shard for the memory still free (Available, or a test's), and
	// once the rest of the load would need more than ShardShare of it,
	// the rest are built compact and those built before are compacted.
	Available func() int64
	// Read, when set, counts the bytes the load has read so far: a
	// worker reports it, and a load whose count stops growing is hung
	// (a stalled network mount), not slow.
	Read *atomic.Int64
	// Shared, when set, is what this load shares with the process's
	// other loads (in-process workers): held text, and the memory fit.
	Shared *Shared
}

// Counted counts what r reads into n (nil: it is r).
func Counted(r io.Reader, n *atomic.Int64) io.Reader {
	if n == nil {
		return r
	}
	return &counted{r, n}
}

type counted struct {
	r io.Reader
	n *atomic.Int64
}

func (c *counted) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	c.n.Add(int64(k))
	return k, err
}

// Load reads the given ranges of a file into shards, in the order of ranges.
// Plain files are read range by range in parallel by seeking; compressed
// files are streamed once and lines go to the shard whose range holds them.
func Load(path string, ranges []Range, opt Options) ([]*Shard, error) {
	src := source{path: path}
	if s3.IsURL(path) {
		o, err := openObject(path)
		if err != nil {
			return nil, err
		}
		src.obj = o
	}
	return loadFrom(src, ranges, opt)
}

func loadFrom(src source, ranges []Range, opt Options) ([]*Shard, error) {
	f := newFit(opt, ranges)
	defer f.done()
	shards, plain, err := load(src, ranges, opt, f)
	if err != nil || !f.on() {
		return shards, err
	}
	// After the load, when the collector runs again: each shard's plain
	// arrays become garbage as its compact ones are made.
	var late []*Shard
	for i, s := range shards {
		if plain[i] {
			late = append(late, s)
		}
	}
	compact(late)
	return shards, nil
}

// load is Load's reading, with the collector paused; plain says which
// shards were built plain.
func load(src source, ranges []Range, opt Options, fit *fit) (out []*Shard, plain []bool, err error) {
	defer memory.Pause()()
	out, plain = make([]*Shard, len(ranges)), make([]bool, len(ranges))
	build := func(b *builder, i int) *Shard {
		s := b.build()
		plain[i] = !b.compact
		fit.built(s, ranges[i].End-ranges[i].Start)
		return s
	}
	if src.text == nil && src.obj == nil {
		file, err := libsvm.Open(src.path)
		if err != nil {
			return nil, nil, err
		}
		if file.Compression != libsvm.Plain {
			defer file.Close()
			err := loadStream(Counted(file, opt.Read), src.path, ranges, opt, fit, build, out)
			return out, plain, err
		}
		file.Close()
	}
	errs := make([]error, len(ranges))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < max(opt.Parallel, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ld := newLoader(opt)
			for i := range next {
				ld.b.compact = opt.Compact || fit.on()
				if errs[i] = ld.plainRange(src, ranges[i], opt.Read); errs[i] == nil {
					out[i] = build(ld.b, i)
				}
			}
		}()
	}
	for i := range ranges {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs { // the first error in file order
		if err != nil {
			return nil, nil, err
		}
	}
	return out, plain, nil
}

// loader is one loading goroutine's reusable read buffer and builder.
type loader struct {
	br  *bufio.Reader
	b   *builder
	row libsvm.Row
}

func newLoader(opt Options) *loader {
	return &loader{br: bufio.NewReaderSize(nil, 1<<20), b: newBuilder(0, opt.Compact)}
}

// source is what a load reads: the file; or, when text is set, the
// file's decompressed text held in memory (see Hold), read as a plain
// file would be; or, when obj is set, an s3:// object, by range.
type source struct {
	path string
	text *Decompressed
	obj  *s3.Object
}

func (src source) open() (io.ReadSeekCloser, error) {
	switch {
	case src.text != nil:
		return src.text.reader(), nil
	case src.obj != nil:
		return src.obj.Reader(context.Background()), nil
	}
	return os.Open(src.path)
}

// lineAt counts the lines before offset: the error path of a reader that
// started in the middle of a file.
func (src source) lineAt(offset int64) int {
	switch {
	case src.text != nil:
		return src.text.lines(offset)
	case src.obj != nil:
		r := src.obj.Reader(context.Background())
		defer r.Close()
		return linesBefore(r, offset)
	}
	return lineAt(src.path, offset)
}

// plainRange seeks to the range and adds the lines that start in it to
// the loader's builder.
func (ld *loader) plainRange(src source, r Range, read *atomic.Int64) error {
	path := src.path
	f, err := src.open()
	if err != nil {
		return err
	}
	defer f.Close()
	ld.b.reset(r.ID)
	start := r.Start
	if start > 0 {
		start-- // a line starts at Start only if the byte before it ends a line
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return err
	}
	br := ld.br
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
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	rd := libsvm.NewReader(br, path)
	rd.Start(0, start) // line numbers are found on error only
	for rd.Offset() < r.End {
		line, at, err := rd.ReadLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		ok, err := libsvm.ParseLine(line, &ld.row)
		if err != nil {
			return &libsvm.ParseError{File: path, Line: src.lineAt(at), Err: err}
		}
		if ok {
			ld.b.add(ld.row.Label, ld.row.Index, ld.row.Value, ld.row.Decimals)
		}
	}
	return nil
}

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

func lineAt(path string, offset int64) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return linesBefore(f, offset)
}

func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

// loadStream reads a decompressed stream once, keeping the lines that fall
// in the wanted ranges (which must be in increasing order) in out.
func loadStream(r io.Reader, path string, ranges []Range, opt Options, fit *fit, build func(*builder, int) *Shard, out []*Shard) error {
	rd := libsvm.NewReader(r, path)
	var row libsvm.Row
	b := newBuilder(0, opt.Compact)
	for i, rg := range ranges {
		b.reset(rg.ID)
		b.compact = opt.Compact || fit.on()
		for {
			if rd.Offset() >= rg.End {
				break
			}
			line, at, err := rd.ReadLine()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if at < rg.Start {
				continue
			}
			ok, err := libsvm.ParseLine(line, &row)
			if err != nil {
				return &libsvm.ParseError{File: path, Line: rd.Line(), Err: err}
			}
			if ok {
				b.add(row.Label, row.Index, row.Value, row.Decimals)
			}
		}
		out[i] = build(b, i)
	}
	return nil
}

// Read builds shard id from a stream holding exactly its lines (as stored
// in an object store); name is used in errors, with lines counted from 1
// within the shard.
func Read(r io.Reader, name string, id int) (*Shard, error) {
	rd := libsvm.NewReader(r, name)
	b := newBuilder(id, false) // Compact follows, one shard at a time
	var row libsvm.Row
	for {
		err := rd.Next(&row)
		if err == io.EOF {
			return b.build(), nil
		}
		if err != nil {
			return nil, err
		}
		b.add(row.Label, row.Index, row.Value, row.Decimals)
	}
}

// ReadEach builds the shards of ranges one at a time with read (from an
// object store's objects, say, through Read), storing them compact as opt
// says: each is built plain, then compacted if it must be, so at most one
// plain copy is held beyond those kept plain.
func ReadEach(ranges []Range, opt Options, read func(Range) (*Shard, error)) ([]*Shard, error) {
	f := newFit(opt, ranges)
	defer f.done()
	out := make([]*Shard, 0, len(ranges))
	plain := 0 // out[:plain] were kept plain
	for _, r := range ranges {
		s, err := read(r)
		if err != nil {
			return nil, err
		}
		if opt.Compact || f.on() {
			compact([]*Shard{s})
		} else {
			plain++
		}
		out = append(out, s)
		f.built(s, r.End-r.Start)
	}
	if f.on() {
		compact(out[:plain])
	}
	return out, nil
}

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

// FileID identifies one version of a file: a file that is rewritten while
// a job reads it changes size or modification time.
type FileID struct {
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime"`          // Unix nanoseconds
	ETag    string `json:"etag,omitempty"` // an s3:// object's
}

// Identify reads a file's FileID.
func Identify(path string) (FileID, error) {
	if s3.IsURL(path) {
		o, err := s3.Open(context.Background(), path)
		if err != nil {
			return FileID{}, err
		}
		return objectID(o), nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return FileID{}, err
	}
	return FileID{Size: st.Size(), ModTime: st.ModTime().UnixNano()}, nil
}

// ErrChanged reports a file that is not the version the job started with.
var ErrChanged = errors.New("the file changed while the job was reading it")

// LoadChecked is Load for a file that must be the version want, before
// and after reading.
func LoadChecked(path string, ranges []Range, opt Options, want FileID) ([]*Shard, error) {
	src := source{path: path, text: opt.Shared.text(path, want)}
	check := func() error {
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
			return nil, err
		}
		if objectID(o) != want {
			return nil, fmt.Errorf("%s: %w (size %d, expected %d)", path, ErrChanged, o.Size, want.Size)
		}
		src.obj, check = o, func() error { return nil }
	}
	if err := check(); err != nil {
		return nil, err
	}
	shards, err := loadFrom(src, ranges, opt)
	if err != nil {
		return nil, err
	}
	if err := check(); err != nil {
		return nil, err
	}
	opt.Shared.keep(path, want, ranges, shards)
	return shards, nil
}
