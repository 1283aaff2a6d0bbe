package transport

import (
	"bytes"
	"context"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// PublishShards puts the text of every range of path into a JetStream
// object store, one zstd-compressed object per shard, for workers on hosts
// that cannot see the file. It reads the file once and holds one shard's
// text at a time. It returns the compressed bytes stored.
func PublishShards(ctx context.Context, nc *nats.Conn, bucket, path string, ranges []shard.Range) (int64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	store, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "shards of " + path,
	})
	if err != nil {
		return 0, fmt.Errorf("object store %s: %w", bucket, err)
	}
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return 0, err
	}
	defer zw.Close()
	var total int64
	var buf bytes.Buffer
	err = shard.Text(path, ranges, func(r shard.Range, text []byte) error {
		buf.Reset()
		zw.Reset(&buf)
		zw.Write(text)
		if err := zw.Close(); err != nil {
			return err
		}
		total += int64(buf.Len())
		_, err := store.PutBytes(ctx, ObjectName(r.ID), buf.Bytes())
		return err
	})
	return total, err
}

// DeleteBucket removes a job's object store.
func DeleteBucket(ctx context.Context, nc *nats.Conn, bucket string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return js.DeleteObjectStore(ctx, bucket)
}
