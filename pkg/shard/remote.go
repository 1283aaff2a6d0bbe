package shard

import (
	"context"
	"fmt"
	"io"

	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/s3"
)

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
