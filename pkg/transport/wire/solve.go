package wire

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// Solve asks a worker to minimise one problem over every shard of a job
// (osgm.Placer): the worker loads the shards, builds the objective the
// coordinator has (the same shards, classes, folds and constants make
// the same bits) and runs osgm.Solve. The settings cross without their
// callbacks: the worker sends what they would have been given as
// Solving messages. Its chunks' Round is the placement, Shard the
// problem. Gob encodes floats exactly.
type Solve struct {
	Source    Source
	Ranges    []shard.Range
	Order     []float64 // the classes, as SetClasses takes them
	Folds     int
	Constants shard.Constants
	K         int
	X0        []float64
	Problem   osgm.Problem
	Settings  osgm.Settings
	// Snapshots asks for a Solving message at each of the problem's
	// checkpoints (Settings.CheckpointEvery).
	Snapshots bool
}

// Solving is a placement's progress: an iteration's record, or a state
// the coordinator can resume the problem from.
type Solving struct {
	Record   *osgm.Record
	Snapshot *osgm.Snapshot
}

// Solved is a placement's end: the problem's result, or why there is
// none (Interrupted: stopped by KindSolveStop, its state in the last
// Solving).
type Solved struct {
	Result      *osgm.Result
	Err         string
	Interrupted bool
}

// EncodeGob and DecodeGob are the solve messages' bytes.
func EncodeGob(v any) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

// DecodeSolve decodes and checks a Solve.
func DecodeSolve(b []byte) (*Solve, error) {
	var m Solve
	if err := decodeGob(b, &m); err != nil {
		return nil, err
	}
	if len(m.Ranges) == 0 || m.K < 0 || len(m.X0) == 0 || m.Problem.Dim != len(m.X0) || m.Folds < 0 {
		return nil, fmt.Errorf("transport: solve of problem %d with %d shards, %d coordinates (%d in its problem), %d folds", m.K, len(m.Ranges), len(m.X0), m.Problem.Dim, m.Folds)
	}
	return &m, nil
}

// DecodeSolving decodes a Solving.
func DecodeSolving(b []byte) (*Solving, error) {
	var m Solving
	if err := decodeGob(b, &m); err != nil {
		return nil, err
	}
	if (m.Record == nil) == (m.Snapshot == nil) {
		return nil, errors.New("transport: progress with both or neither of a record and a state")
	}
	return &m, nil
}

// DecodeSolved decodes and checks a Solved.
func DecodeSolved(b []byte) (*Solved, error) {
	var m Solved
	if err := decodeGob(b, &m); err != nil {
		return nil, err
	}
	if r := m.Result; r != nil {
		if len(r.X) != 1 || len(r.F) != 1 || len(r.GradNorm) != 1 || len(r.Iters) != 1 || len(r.Converged) != 1 || len(r.Stop) != 1 {
			return nil, errors.New("transport: a placed problem's result is not of one problem")
		}
		if st := r.Stop[0]; st == osgm.Running || st > osgm.Stalled {
			return nil, fmt.Errorf("transport: a placed problem ended for no known reason (%d)", st)
		}
	} else if m.Err == "" && !m.Interrupted {
		return nil, errors.New("transport: a placement ended with neither a result nor an error")
	}
	return &m, nil
}

func decodeGob(b []byte, v any) (err error) {
	if len(b) > MaxMessageSize {
		return ErrLength
	}
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(v); err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	return nil
}
