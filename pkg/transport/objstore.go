package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// PublishShards puts the text of every range of path into the JetStream
// object store src names, one zstd-compressed object per shard, for
// workers on hosts that cannot see the file. It reads the file once and
// holds one shard's text at a time. It returns the compressed bytes
// stored.
func PublishShards(ctx context.Context, nc *nats.Conn, src Source, path string, ranges []shard.Range) (int64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	store, err := CreateStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket:      src.Bucket,
		Description: "the shards of training jobs that ran with -objstore, a job's under its id",
	})
	if err != nil {
		return 0, fmt.Errorf("object store %s: %w", src.Bucket, err)
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
		_, err := store.PutBytes(ctx, src.ObjectName(r.ID), buf.Bytes())
		return err
	})
	return total, err
}

// CreateStore creates an object store, or updates it to cfg, with three
// replicas where JetStream runs clustered, so that a server lost for good
// loses no shard and no checkpoint copy, and one where it cannot place
// three (a single server, a cluster of two).
func CreateStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	cfg.Replicas = 3
	store, err := js.CreateOrUpdateObjectStore(ctx, cfg)
	var api *jetstream.APIError
	if err != nil && errors.As(err, &api) && slices.Contains(cannotReplicate, api.ErrorCode) {
		cfg.Replicas = 1
		store, err = js.CreateOrUpdateObjectStore(ctx, cfg)
	}
	return store, err
}

// cannotReplicate are the server's answers to three replicas it cannot
// place: not clustered, no suitable peers, not the resources.
var cannotReplicate = []jetstream.ErrorCode{10074, 10005, 10023}

// DeleteShards removes a job's shards from the object store, and says
// how many were there.
func DeleteShards(ctx context.Context, nc *nats.Conn, src Source, ranges []shard.Range) (int, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	store, err := js.ObjectStore(ctx, src.Bucket)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, r := range ranges {
		switch err := store.Delete(ctx, src.ObjectName(r.ID)); {
		case err == nil:
			n++
		case !errors.Is(err, jetstream.ErrObjectNotFound):
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
