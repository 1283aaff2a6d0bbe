package shard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/s3"
)

// A compressed file has no offsets to seek to: its size is known only
// once Stat has decompressed it, and each load of its ranges decompresses
// it again from the start, up to the last range it wants. A coordinator
// whose workers run in its own process (the default, and -local) keeps
// the text Stat decompressed instead and holds it for the loads, which
// then read their ranges from memory in parallel, as from a plain file,
// instead of decompressing it again each.

// StatKeep is Stat that also returns the decompressed text of a
// compressed file when it is at most keep bytes (nil otherwise, and for a
// plain file).
func StatKeep(path string, keep int64) (Info, *Decompressed, error) {
	if s3.IsURL(path) {
		o, err := openObject(path)
		if err != nil {
			return Info{}, nil, err
		}
		return Info{Compression: libsvm.Plain, Size: o.Size, DiskSize: o.Size}, nil, nil
	}
	f, err := libsvm.Open(path)
	if err != nil {
		return Info{}, nil, err
	}
	defer f.Close()
	info := Info{Compression: f.Compression, Size: f.Size, DiskSize: f.Size}
	var t *Decompressed
	if f.Compression != libsvm.Plain {
		t = &Decompressed{keep: keep}
		n, err := io.Copy(t, f)
		if err := streamError(path, f.Compression, err); err != nil {
			return Info{}, nil, err
		}
		info.Size = n
		if t.over {
			t = nil
		}
	}
	if info.Size == 0 {
		return Info{}, nil, fmt.Errorf("%s: %w", path, libsvm.ErrNoData)
	}
	return info, t, nil
}

// Decompressed is a file's decompressed text, in chunks of textChunk
// bytes: one slice grown by appending, and the fresh pages it touched,
// took several times as long as the decompression itself.
type Decompressed struct {
	chunks [][]byte
	size   int64
	keep   int64 // while written: the most it keeps
	over   bool  // it passed keep: it only counts
}

const textChunk = 4 << 20

// Write keeps p, or only counts it once the text passes keep bytes.
func (t *Decompressed) Write(p []byte) (int, error) {
	t.size += int64(len(p))
	switch {
	case t.over:
	case t.size > t.keep:
		t.chunks, t.over = nil, true
	default:
		for q := p; len(q) > 0; {
			last := len(t.chunks) - 1
			if last < 0 || len(t.chunks[last]) == textChunk {
				t.chunks = append(t.chunks, make([]byte, 0, textChunk))
				last++
			}
			c := t.chunks[last]
			m := min(len(q), textChunk-len(c))
			t.chunks[last], q = append(c, q[:m]...), q[m:]
		}
	}
	return len(p), nil
}

// reader reads the text from its start, as a file opened would be.
func (t *Decompressed) reader() *textReader { return &textReader{t: t} }

type textReader struct {
	t   *Decompressed
	pos int64
}

func (r *textReader) Read(p []byte) (int, error) {
	if r.pos >= r.t.size {
		return 0, io.EOF
	}
	c := r.t.chunks[r.pos/textChunk]
	n := copy(p, c[r.pos%textChunk:])
	r.pos += int64(n)
	return n, nil
}

func (r *textReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.t.size
	}
	if offset < 0 {
		return 0, errors.New("shard: seek before the start of a text")
	}
	r.pos = offset
	return offset, nil
}

func (r *textReader) Close() error { return nil }

// lines counts the lines before offset.
func (t *Decompressed) lines(offset int64) int {
	n := 1
	for _, c := range t.chunks {
		if offset <= 0 {
			break
		}
		k := min(int64(len(c)), offset)
		n += bytes.Count(c[:k], []byte{'\n'})
		offset -= k
	}
	return n
}

// Shared is what the loads of one process share, passed to them in
// Options: text decompressed once for them (Hold), and the bytes the
// loads under way still need as plain shards (see fit). The zero value
// is ready; a nil *Shared shares nothing.
type Shared struct {
	mu    sync.Mutex
	texts map[heldKey]*Decompressed
	// loaded is every shard the loads built, by file and range: the
	// in-process workers', on which the coordinator also trains whole
	// problems (Loaded).
	loaded  map[heldKey]map[int]*Shard
	pending atomic.Int64 // see fit
	plain   atomic.Int64
}

type heldKey struct {
	path string // absolute
	file FileID
}

// Hold makes loads given s read path, at version file, from t (the file
// decompressed) until release is called.
func (s *Shared) Hold(path string, file FileID, t *Decompressed) (release func(), err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	key := heldKey{abs, file}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.texts == nil {
		s.texts = map[heldKey]*Decompressed{}
	}
	s.texts[key] = t
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.texts, key)
		})
	}, nil
}

// keep records shards loaded from path at version file.
func (s *Shared) keep(path string, file FileID, ranges []Range, shards []*Shard) {
	if s == nil {
		return
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return
	}
	key := heldKey{abs, file}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded == nil {
		s.loaded = map[heldKey]map[int]*Shard{}
	}
	if s.loaded[key] == nil {
		s.loaded[key] = map[int]*Shard{}
	}
	for i, r := range ranges {
		s.loaded[key][r.ID] = shards[i]
	}
}

// Loaded is views (Shard.View) of the n shards of path at version file,
// in order, when the process's loads built every one (nil otherwise):
// the rows are the in-process workers' memory, read only.
func (s *Shared) Loaded(path string, file FileID, n int) []*Shard {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.loaded[heldKey{abs, file}]
	out := make([]*Shard, n)
	for id := range out {
		if got[id] == nil {
			return nil
		}
		out[id] = got[id].View()
	}
	return out
}

// text is the text held for path at version file, or nil.
func (s *Shared) text(path string, file FileID) *Decompressed {
	if s == nil {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.texts[heldKey{abs, file}]
}
