// The run's inputs, checked before any loading: the training and -t
// files, a warm start's model, -check's probe.

package main

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/memory"
	"github.com/osgm-svm/osgm/pkg/s3"
	"github.com/osgm-svm/osgm/pkg/shard"
	"github.com/osgm-svm/osgm/pkg/train"
	"github.com/osgm-svm/osgm/pkg/transport"
)

// checkTestFile opens the -t file, an s3:// object's metadata.
func checkTestFile(name string) error {
	if s3.IsURL(name) {
		_, err := s3.Open(context.Background(), name)
		return err
	}
	f, err := libsvm.Open(name)
	if err != nil {
		return err
	}
	return f.Close()
}

// checkReadable reads a byte of the training file: an s3:// object is
// opened as a load would, so that a missing bucket or key, or refused
// credentials, are found here.
func checkReadable(name string) error {
	if s3.IsURL(name) {
		_, err := input.Identify(name)
		return err
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkOnly finishes -check: the training file can be read and the NATS
// server accepts the credentials. What it finds wrong, a restart would
// find again, so a supervisor runs it once before it starts the
// coordinator with a restart policy.
func checkOnly(o *options, log *zap.Logger) error {
	if err := checkReadable(o.train); err != nil {
		return fmt.Errorf("training file: %w", err)
	}
	if o.backend.natsURL != "" {
		auth, err := o.backend.auth.FromEnv()
		if err != nil {
			return err
		}
		if err := transport.CheckConnect(o.backend.natsURL, "coordinator check", auth, log); err != nil {
			return err
		}
	}
	log.Info("check passed", zap.String("train", o.train), zap.String("model", o.model))
	return nil
}

// checkInputs reads the initial model and opens the test file before any
// data is read: a typo must not cost a load, or a training.
func checkInputs(o *options) (*libsvm.Model, error) {
	var init *libsvm.Model
	if o.initModel != "" {
		var err error
		if init, err = readModel(o.initModel, o.cfg.Loss); err != nil {
			return nil, fmt.Errorf("-i: %w", err)
		}
		if err := train.CheckBias(init, o.cfg.Bias); err != nil {
			return nil, fmt.Errorf("-i %s: %w", o.initModel, err)
		}
	}
	if o.test != "" {
		if err := checkTestFile(o.test); err != nil {
			return nil, fmt.Errorf("-t: %w", err)
		}
	}
	return init, nil
}

// readModel reads a warm start's model, which must be of the problem of
// loss l.
func readModel(path string, l shard.Loss) (*libsvm.Model, error) {
	m, err := libsvm.ReadModelFile(path)
	if err != nil {
		return nil, err
	}
	if ml, ok := train.LossOf(m); !ok || ml != l {
		// Any w would do as a start, but a model of another problem is
		// more likely a wrong file than a wish.
		s := train.SolverOf(l)
		return nil, fmt.Errorf("%s: solver_type %s; a warm start needs a model of this problem, %s (LIBLINEAR -s %d)", path, m.Solver, s.About, s.Type)
	}
	return m, nil
}

// statAndHold is input.Stat that, when the loads run in this process,
// holds a compressed file's text for them (Shared.Hold) until release:
// Stat decompresses it anyway, and each load would again. The text is
// kept only if it takes at most an eighth of the free memory, and held
// only if the file did not change while it was read.
func statAndHold(o *options, shared *shard.Shared) (info input.Info, release func(), err error) {
	keep := int64(0)
	if o.backend.local || o.backend.natsURL == "" && !o.backend.objectStore {
		keep = memory.Available() / 8
	}
	before, _ := input.Identify(o.train)
	info, text, err := input.StatKeep(o.train, keep)
	if err != nil {
		return input.Info{}, nil, err
	}
	if after, err := input.Identify(o.train); text != nil && err == nil && after == before {
		release, err = shared.Hold(o.train, after, text)
		return info, release, err
	}
	return info, func() {}, nil
}
