package shard

import (
	"bufio"
	"io"
	"sync"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/memory"
)

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
	limits limits // storage's bounds (storage); zero: the defaults
}

// Load reads the given ranges of a file into shards, in the order of ranges.
// Plain files are read range by range in parallel by seeking; compressed
// files are streamed once and lines go to the shard whose range holds them.
func Load(path string, ranges []input.Range, opt Options) ([]*Shard, error) {
	src, err := input.Open(path)
	if err != nil {
		return nil, err
	}
	return loadFrom(src, ranges, opt)
}

func loadFrom(src input.Source, ranges []input.Range, opt Options) ([]*Shard, error) {
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
	compact(late, opt.storage())
	return shards, nil
}

// load is Load's reading, with the collector paused; plain says which
// shards were built plain.
func load(src input.Source, ranges []input.Range, opt Options, fit *fit) (out []*Shard, plain []bool, err error) {
	defer memory.Pause()()
	out, plain = make([]*Shard, len(ranges)), make([]bool, len(ranges))
	build := func(b *builder, i int) *Shard {
		s := b.build()
		plain[i] = !b.compact
		fit.built(s, ranges[i].End-ranges[i].Start)
		return s
	}
	if src.Text == nil && src.Obj == nil {
		// A file on disk: a compressed one is streamed once, from the
		// reader that found its compression.
		file, err := libsvm.Open(src.Path)
		if err != nil {
			return nil, nil, err
		}
		if file.Compression != libsvm.Plain {
			defer file.Close()
			err := loadStream(input.Counted(file, opt.Read), src.Path, ranges, opt, fit, build, out)
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
	return &loader{br: bufio.NewReaderSize(nil, 1<<20), b: newBuilder(0, opt)}
}

// plainRange adds the lines of a seekable source's range to the
// loader's builder.
func (ld *loader) plainRange(src input.Source, r input.Range, read *atomic.Int64) error {
	ld.b.reset(r.ID)
	return src.Lines(r, ld.br, read, func(line []byte, at int64) error {
		ok, err := libsvm.ParseLine(line, &ld.row)
		if err != nil {
			return &libsvm.ParseError{File: src.Path, Line: src.LineAt(at), Err: err}
		}
		if ok {
			ld.b.add(ld.row.Label, ld.row.Index, ld.row.Value, ld.row.Decimals)
		}
		return nil
	})
}

// loadStream reads a decompressed stream once, keeping the lines that fall
// in the wanted ranges (which must be in increasing order) in out.
func loadStream(r io.Reader, path string, ranges []input.Range, opt Options, fit *fit, build func(*builder, int) *Shard, out []*Shard) error {
	lines := input.NewStream(r, path)
	var row libsvm.Row
	b := newBuilder(0, opt)
	for i, rg := range ranges {
		b.reset(rg.ID)
		b.compact = opt.Compact || fit.on()
		err := lines.Range(rg, func(line []byte) error {
			ok, err := libsvm.ParseLine(line, &row)
			if err != nil {
				return &libsvm.ParseError{File: path, Line: lines.Line(), Err: err}
			}
			if ok {
				b.add(row.Label, row.Index, row.Value, row.Decimals)
			}
			return nil
		})
		if err != nil {
			return err
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
	b := newBuilder(id, Options{}) // Compact follows, one shard at a time
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
func ReadEach(ranges []input.Range, opt Options, read func(input.Range) (*Shard, error)) ([]*Shard, error) {
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
			compact([]*Shard{s}, opt.storage())
		} else {
			plain++
		}
		out = append(out, s)
		f.built(s, r.End-r.Start)
	}
	if f.on() {
		compact(out[:plain], opt.storage())
	}
	return out, nil
}

// LoadChecked is Load for a file that must be the version want, before
// and after reading.
func LoadChecked(path string, ranges []input.Range, opt Options, want input.FileID) ([]*Shard, error) {
	src, check, err := input.OpenChecked(path, want, opt.Shared.held())
	if err != nil {
		return nil, err
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
