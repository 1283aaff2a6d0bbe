package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/cli"
	"github.com/osgm-svm/osgm/pkg/logging"
	"github.com/osgm-svm/osgm/pkg/s3"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
)

// checkpointBucket is the JetStream object store holding copies of
// checkpoints, so a coordinator restarted on another host can resume.
const checkpointBucket = "osgm-checkpoints"

// checkpoints writes and reads a run's checkpoint: a local file, written
// atomically, and in cluster mode a copy in the object store.
type checkpoints struct {
	path    string
	nc      *nats.Conn            // nil without a cluster
	store   jetstream.ObjectStore // the copies on the bus (open); nil: none
	log     *zap.Logger
	written int    // by this run
	objects string // the object store prefix of this run's shards (-objstore)
	// noJetStream: the server has no object store, said once.
	noJetStream bool
}

// noStore notes, and says once, that the NATS server runs without
// JetStream: checkpoints stay on this host, and no save tries the bus.
func (c *checkpoints) noStore() {
	c.store = nil
	if !c.noJetStream {
		c.noJetStream = true
		c.log.Warn("the NATS server runs without JetStream: checkpoints are not copied to an object store, so only this host can resume from them")
	}
}

func (c *checkpoints) save(cp *train.Checkpoint) error {
	cp.Objects = c.objects
	pieces, err := cp.Pieces()
	if err != nil {
		return err
	}
	// The remote copy first: once the local file exists, so does a copy
	// at least as new on the bus, for a coordinator on another host.
	remote := false
	if c.store != nil {
		switch err := c.putRemote(pieces); {
		case err == nil:
			remote = true
		case transport.NoJetStream(err):
			c.noStore()
		case err != nil:
			// A missing remote copy only matters if this host is lost too.
			c.log.Warn("checkpoint not copied to the object store", zap.Error(err))
		}
	}
	err = writeAtomic(c.path, func(w io.Writer) error {
		bufs := net.Buffers(pieces)
		_, err := bufs.WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", c.path, err)
	}
	c.written++
	// The first one is news to an operator (checkpoints work, and where
	// a restart finds them); the rest are routine.
	level := zap.DebugLevel
	if c.written == 1 {
		level = zap.InfoLevel
	}
	c.log.Log(level, "checkpoint written", logging.Event("checkpoint"), zap.String("path", c.path), zap.Int("passes", cp.Opt.Evals),
		zap.Bool("copied to the object store", remote))
	return nil
}

// open makes the checkpoints' bucket, of replicas copies
// (transport.CreateStore), once, before training: a run that cannot keep
// its checkpoints as many times as asked fails at once, not at its first
// checkpoint. A server without JetStream keeps them on this host alone.
func (c *checkpoints) open(ctx context.Context, replicas int) error {
	if c.nc == nil {
		return nil
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return err
	}
	c.store, err = transport.CreateStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: checkpointBucket}, replicas)
	if transport.NoJetStream(err) {
		c.noStore()
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoints' object store: %w", err)
	}
	return nil
}

func (c *checkpoints) putRemote(pieces [][]byte) error {
	ctx := context.Background()
	store := c.store
	name := filepath.Base(c.path)
	return transport.RetryStore(c.log, name, func() error {
		readers := make([]io.Reader, len(pieces))
		for i, p := range pieces {
			readers[i] = bytes.NewReader(p)
		}
		_, err := store.Put(ctx, transport.ObjectMeta(c.nc, name), io.MultiReader(readers...))
		return transport.InBucket(err)
	})
}

// resumeMode is -resume: off, on (the checkpoint must exist), or auto
// (resume from it if it exists, else start): a supervisor that restarts
// a coordinator which died (compose's restart: on-failure) runs the same
// command the first time and every time after.
type resumeMode = cli.Choice[resumeWords]

const (
	resumeOff resumeMode = iota
	resumeOn
	resumeAuto
)

type resumeWords struct{}

func (resumeWords) Words() []string { return []string{"false", "true", "auto"} }

// errNoCheckpoint: neither the file nor a copy in the object store exists.
var errNoCheckpoint = errors.New("no checkpoint there, nor in the object store")

// load reads the checkpoint from the file, or from the object store when
// the file is not on this host.
func (c *checkpoints) load() (*train.Checkpoint, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%s: %w", c.path, errNoCheckpoint)
		if c.nc != nil {
			switch rb, rerr := c.getRemote(); {
			case rerr == nil:
				c.log.Info("checkpoint read from the object store", zap.String("name", filepath.Base(c.path)))
				b, err = rb, nil
			case transport.NoJetStream(rerr):
				c.noStore()
			case !errors.Is(rerr, jetstream.ErrBucketNotFound) && !errors.Is(rerr, jetstream.ErrObjectNotFound):
				err = fmt.Errorf("%s: not on this host, and the object store: %w", c.path, rerr)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	cp, err := train.DecodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("resume: %s: %w", c.path, err)
	}
	return cp, nil
}

// getRemote reads the copy in the object store, trying again while a
// JetStream cluster gives no answer (electing leaders): a coordinator
// restarted with its server lost would otherwise fail to resume.
func (c *checkpoints) getRemote() ([]byte, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	var b []byte
	err = transport.RetryStore(c.log, checkpointBucket, func() error {
		store, err := js.ObjectStore(context.Background(), checkpointBucket)
		if err != nil {
			return err
		}
		b, err = store.GetBytes(context.Background(), filepath.Base(c.path))
		return transport.InBucket(err)
	})
	return b, err
}

// checkpointShare bounds the time checkpoints take, unless
// -checkpoint-every is given: many one-vs-rest problems' L-BFGS histories
// run to hundreds of MB, and written every 50 passes they can take a
// large share of the run.
const checkpointShare = 0.05

// checkOutputs makes sure, before any loading or training, that the
// files the run will write can be made: a model that cannot be saved
// should cost seconds, not the hours of training before it.
func checkOutputs(o *options) error {
	model := o.model
	if o.folds > 0 {
		model = "" // cross-validation writes no model
	}
	type file struct{ what, path string }
	var seen []file
	for _, out := range []file{{"-checkpoint", o.checkpoint}, {"-plot", o.plot}, {"-trace", o.trace}, {"model file", model}} {
		if out.path == "" {
			continue
		}
		for _, s := range seen {
			if samePath(s.path, out.path) {
				return fmt.Errorf("%s and %s are both %s", s.what, out.what, out.path)
			}
		}
		seen = append(seen, out)
		if s3.IsURL(out.path) {
			if out.what != "model file" {
				return fmt.Errorf("%s %s: only the model may go to S3", out.what, out.path)
			}
			if out.path == o.train || out.path == o.test {
				return fmt.Errorf("model file %s is an input: it would be overwritten", out.path)
			}
			if err := s3.CheckBucket(context.Background(), out.path); err != nil {
				return fmt.Errorf("model file %w", err)
			}
			continue
		}
		if fi, err := os.Stat(out.path); err == nil && fi.IsDir() {
			return fmt.Errorf("%s %s is a directory", out.what, out.path)
		}
		for _, in := range []file{{"the training file", o.train}, {"the -t file", o.test}} {
			if in.path != "" && sameFile(out.path, in.path) {
				return fmt.Errorf("%s %s is %s: it would be overwritten", out.what, out.path, in.what)
			}
		}
		tmp, err := createBeside(out.path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", out.what, out.path, err)
		}
		tmp.Close()
		os.Remove(tmp.Name())
	}
	return nil
}

// samePath reports whether both paths name one file, existing or not.
func samePath(a, b string) bool {
	aa, errA := filepath.Abs(a)
	ab, errB := filepath.Abs(b)
	return errA == nil && errB == nil && aa == ab || sameFile(a, b)
}

// sameFile reports whether both paths name one existing file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// createBeside creates a temporary file in path's directory, for writing
// path atomically; its error names the directory, not the temporary name.
// Its mode is 0666 less the umask, LIBLINEAR's (fopen's): os.CreateTemp's
// 0600 would make a model that a serving process of another user cannot
// read.
func createBeside(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	for {
		name := filepath.Join(dir, "."+filepath.Base(path)+"."+strconv.FormatUint(rand.Uint64(), 36))
		tmp, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("cannot create a file in %s: %w", dir, err)
		}
		return tmp, nil
	}
}

// writeAtomic replaces path with what write writes, so that a crash
// leaves the old file or the new one, never a torn one: temp file, fsync,
// rename, fsync the dir. write streams to the temp file: a model's text
// can be several times its weights, and the end of a run is no place to
// hold it all in memory.
func writeAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := createBeside(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
