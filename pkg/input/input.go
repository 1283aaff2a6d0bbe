// Package input is what a load reads: a training file cut into ranges
// of its decompressed text (Layout), its compression and size (Stat),
// its version (Identify), a compressed file's text held in memory
// (Held), s3:// objects read by range, and the lines of each range
// (Source.Lines, Stream, Text). Building shards of the lines is
// pkg/shard's.
package input

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/libsvm"
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
