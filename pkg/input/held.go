package input

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"sync"
)

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

// Size is the text's length in bytes.
func (t *Decompressed) Size() int64 { return t.size }

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
		return 0, errors.New("input: seek before the start of a text")
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

// Held is the text of compressed files, decompressed once by StatKeep,
// for the loads of one process. A compressed file has no offsets to seek
// to, so each load of its ranges would decompress it again from the
// start, up to the last range it wants; a coordinator whose workers run
// in its process (the default, and -local) holds the text instead, and
// the loads read their ranges from memory in parallel, as from a plain
// file. The zero value is ready.
type Held struct {
	mu    sync.Mutex
	texts map[Version]*Decompressed
}

// Version names a file at one version, by its absolute path: what the
// process's loads share is keyed by it.
type Version struct {
	Path string
	File FileID
}

// VersionOf is path's Version at file.
func VersionOf(path string, file FileID) (Version, error) {
	abs, err := filepath.Abs(path)
	return Version{abs, file}, err
}

// Hold makes loads given h read path, at version file, from t (the file
// decompressed) until release is called.
func (h *Held) Hold(path string, file FileID, t *Decompressed) (release func(), err error) {
	key, err := VersionOf(path, file)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.texts == nil {
		h.texts = map[Version]*Decompressed{}
	}
	h.texts[key] = t
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.texts, key)
		})
	}, nil
}

// Text is the text held for path at version file, or nil.
func (h *Held) Text(path string, file FileID) *Decompressed {
	if h == nil {
		return nil
	}
	key, err := VersionOf(path, file)
	if err != nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.texts[key]
}
