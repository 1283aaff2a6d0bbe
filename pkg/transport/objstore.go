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
// workers on hosts that cannot see the file, in a store of replicas
// copies (CreateStore). It reads the file once and
// holds one shard's text at a time. It returns the compressed bytes
// stored. Requests that get no answer are tried again (RetryStore).
func PublishShards(ctx context.Context, nc *nats.Conn, src wire.Source, path string, ranges []input.Range, replicas int, log *zap.Logger) (int64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	var store jetstream.ObjectStore
	err = RetryStore(log, src.Bucket, func() (err error) {
		store, err = CreateStore(ctx, js, jetstream.ObjectStoreConfig{
			Bucket:      src.Bucket,
			Description: "the shards of training jobs that ran with -objstore, a job's under its id",
		}, replicas)
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

// CreateStore opens an object store of at least replicas copies, making
// it, or scaling it up, to cfg: each shard and checkpoint then outlives
// replicas-1 servers lost for good. Replicas 0 (AutoReplicas) is as many
// as the servers the client knows of, at most three, which a single
// server makes one. A cluster whose servers are still joining its
// JetStream cannot place them for a moment: CreateStore asks again until
// it can, for up to StoreWait (or ctx's end), then fails saying so: a
// store never takes fewer copies than asked without a word. A store
// that has its copies is opened as it is, so a coordinator restarted
// while one of its servers is down still finds its checkpoints.
func CreateStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig, replicas int) (jetstream.ObjectStore, error) {
	wait := time.Now().Add(StoreWait)
	cfg.Replicas = replicas
	if replicas <= AutoReplicas {
		cfg.Replicas = 3
	}
	if store, err := js.ObjectStore(ctx, cfg.Bucket); err == nil {
		if st, err := store.Status(ctx); err == nil && st.Replicas() >= cfg.Replicas {
			return store, nil
		}
	}
	if replicas <= AutoReplicas {
		cfg.Replicas = min(3, knownServers(ctx, js.Conn(), wait))
	}
	for {
		store, err := js.CreateOrUpdateObjectStore(ctx, cfg)
		var api *jetstream.APIError
		if err == nil || !errors.As(err, &api) || !slices.Contains(cannotReplicate, api.ErrorCode) {
			return store, err
		}
		if api.ErrorCode == notClustered || !time.Now().Before(wait) {
			return nil, replicasError(cfg, err)
		}
		select {
		case <-ctx.Done():
			return nil, replicasError(cfg, fmt.Errorf("%w, after %w", ctx.Err(), err))
		case <-time.After(time.Second / 2):
		}
	}
}

// knownServers is how many servers the client knows of: those it was
// given and those the cluster told it of. A server in a cluster tells
// of the others as they join its routes, so in a cluster of fewer than
// three known it waits for more, until wait.
func knownServers(ctx context.Context, nc *nats.Conn, wait time.Time) int {
	for {
		n := len(nc.Servers())
		if n >= 3 || nc.ConnectedClusterName() == "" || !time.Now().Before(wait) {
			return max(n, 1)
		}
		select {
		case <-ctx.Done():
			return max(n, 1)
		case <-time.After(time.Second / 4):
		}
	}
}

func replicasError(cfg jetstream.ObjectStoreConfig, err error) error {
	return fmt.Errorf("%w %d copies of bucket %s (%w): the NATS servers are still joining, or fewer than %d run JetStream; start them, or give -objstore-replicas 1 to keep one copy",
		ErrReplicas, cfg.Replicas, cfg.Bucket, err, cfg.Replicas)
}

// StoreReplicas is how many copies bucket keeps.
func StoreReplicas(ctx context.Context, nc *nats.Conn, bucket string) (int, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	store, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return 0, err
	}
	st, err := store.Status(ctx)
	if err != nil {
		return 0, err
	}
	return st.Replicas(), nil
}

// AutoReplicas asks CreateStore for as many copies as there are servers,
// at most three.
const AutoReplicas = 0

// StoreWait bounds CreateStore's wait for JetStream to place a store's
// copies: a cluster's servers join its JetStream in seconds.
const StoreWait = 30 * time.Second

// ErrReplicas is CreateStore's error where JetStream could not place the
// copies asked for.
var ErrReplicas = errors.New("JetStream could not place")

// cannotReplicate are the server's answers to replicas it cannot place:
// not clustered, no suitable peers, not the resources.
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
		errors.Is(err, jetstream.ErrStreamNotFound) || NoJetStream(err) || errors.Is(err, nats.ErrMaxPayload) ||
		errors.Is(err, ErrReplicas)
}

// RetryStore runs op until it succeeds, fails in a way no attempt
// changes (the bucket or the object is not there, JetStream is off), or
// storeRetries are spent, logging each failure it tries again after.
func RetryStore(log *zap.Logger, what string, op func() error) error {
	return retryStore(log, what, op, time.Sleep)
}

// retryStore is RetryStore waiting with sleep: its test's clock.
func retryStore(log *zap.Logger, what string, op func() error, sleep func(time.Duration)) error {
	err := op()
	for _, d := range storeRetries {
		if err == nil || final(err) {
			return err
		}
		log.Warn("object store: trying again", zap.String("what", what), zap.Duration("after", d), zap.Error(err))
		sleep(d)
		err = op()
	}
	return err
}
