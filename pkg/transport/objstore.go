package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/transport/wire"
)

// PublishShards puts the text of every range of path into the JetStream
// object store src names, one zstd-compressed object per shard, for
// workers on hosts that cannot see the file. It reads the file once and
// holds one shard's text at a time. It returns the compressed bytes
// stored. Requests that get no answer are tried again (RetryStore).
func PublishShards(ctx context.Context, nc *nats.Conn, src wire.Source, path string, ranges []input.Range, log *zap.Logger) (int64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	var store jetstream.ObjectStore
	err = RetryStore(log, src.Bucket, func() (err error) {
		store, err = CreateStore(ctx, js, jetstream.ObjectStoreConfig{
			Bucket:      src.Bucket,
			Description: "the shards of training jobs that ran with -objstore, a job's under its id",
		})
		return err
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
	err = input.Text(path, ranges, func(r input.Range, text []byte) error {
		buf.Reset()
		zw.Reset(&buf)
		zw.Write(text)
		if err := zw.Close(); err != nil {
			return err
		}
		total += int64(buf.Len())
		name := src.ObjectName(r.ID)
		err := RetryStore(log, name, func() error {
			_, err := store.Put(ctx, ObjectMeta(nc, name), bytes.NewReader(buf.Bytes()))
			return InBucket(err)
		})
		if err != nil {
			return fmt.Errorf("object store %s: object %s: %w", src.Bucket, name, err)
		}
		return nil
	})
	return total, err
}

// CreateStore creates an object store, or updates it to cfg, with three
// replicas where JetStream runs clustered, so that a server lost for good
// loses no shard and no checkpoint copy, and one where it cannot place
// three (a single server, a cluster of two). A cluster of three or more
// whose servers are still joining its JetStream cannot place three for
// a moment: it is asked again for up to peersWait before the store takes
// one (a later run's CreateStore scales it up).
func CreateStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	cfg.Replicas = 3
	wait := time.Time{}
	if len(js.Conn().Servers()) >= cfg.Replicas {
		wait = time.Now().Add(peersWait)
	}
	for {
		store, err := js.CreateOrUpdateObjectStore(ctx, cfg)
		var api *jetstream.APIError
		if err == nil || !errors.As(err, &api) || !slices.Contains(cannotReplicate, api.ErrorCode) {
			return store, err
		}
		if api.ErrorCode == notClustered || !time.Now().Before(wait) {
			cfg.Replicas = 1
			return js.CreateOrUpdateObjectStore(ctx, cfg)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(peersWait / 20):
		}
	}
}

// peersWait bounds the wait for a forming cluster's servers.
const peersWait = 10 * time.Second

// cannotReplicate are the server's answers to three replicas it cannot
// place: not clustered, no suitable peers, not the resources.
var cannotReplicate = []jetstream.ErrorCode{notClustered, 10005, 10023}

const notClustered jetstream.ErrorCode = 10074

// ObjectMeta names an object to put, in chunks that fit the server's
// max_payload: the store's own 128 KB do not fit a server that allows
// less, which then refuses every put.
func ObjectMeta(nc *nats.Conn, name string) jetstream.ObjectMeta {
	const room = 1024 // for the chunk's headers
	chunk := max(min(128<<10, nc.MaxPayload()-room), room)
	return jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(chunk)}}
}

// DeleteShards removes a job's shards from the object store, and says
// how many were there.
func DeleteShards(ctx context.Context, nc *nats.Conn, src wire.Source, ranges []input.Range) (int, error) {
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

// storeRetries space the attempts at an object store request that failed
// for want of an answer: after a JetStream server is lost, its streams
// and the cluster's meta layer elect new leaders, which takes seconds
// (about 15 s of attempts in all).
var storeRetries = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// NoJetStream reports whether err says the NATS server (or the account)
// runs without JetStream, so that there is no object store at all.
func NoJetStream(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

// errStreamNotReady: a request to a bucket that exists got no responder.
var errStreamNotReady = errors.New("the bucket's stream has no responder yet")

// InBucket classifies err from a request to a bucket known to exist.
// Reads and puts there go straight to the bucket's stream (direct gets),
// which has no responder until its replicas are placed: just after the
// bucket is made, or while a lost leader is replaced. That is a moment's
// wait, not a server without JetStream, so the error no longer says
// "no responders" and RetryStore tries again.
func InBucket(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w (%v)", errStreamNotReady, err)
	}
	return err
}

// final reports whether err is an answer of the object store that no
// attempt changes: nothing there, no JetStream, a message too large.
func final(err error) bool {
	return errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || NoJetStream(err) || errors.Is(err, nats.ErrMaxPayload)
}

// RetryStore runs op until it succeeds, fails in a way no attempt
// changes (the bucket or the object is not there, JetStream is off), or
// storeRetries are spent, logging each failure it tries again after.
func RetryStore(log *zap.Logger, what string, op func() error) error {
	err := op()
	for _, d := range storeRetries {
		if err == nil || final(err) {
			return err
		}
		log.Warn("object store: trying again", zap.String("what", what), zap.Duration("after", d), zap.Error(err))
		time.Sleep(d)
		err = op()
	}
	return err
}
