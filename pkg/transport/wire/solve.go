package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/objective"
	"github.com/osgm-svm/osgm/pkg/osgm"
)

// Solve asks a worker to minimise one problem over every shard of a job
// (osgm.Objective's Place): the worker loads the shards, builds the objective the
// coordinator has (the same shards, classes, folds and constants make
// the same bits) and runs osgm.Solve. The settings cross as they are;
// the coordinator's hooks stay with it, and the worker sends what they
// would have been given as Solving messages. Its chunks' Round is the placement, Shard the
// problem. Floats cross exactly (EncodeSolve).
type Solve struct {
	Source    Source
	Ranges    []input.Range
	Order     []float64 // the classes, as SetClasses takes them
	Folds     int
	Constants objective.Constants
	K         int
	X0        []float64
	Problem   osgm.Problem
	Settings  osgm.Settings
	// Snapshots asks for a Solving message at each of the problem's
	// checkpoints (Settings.CheckpointEvery).
	Snapshots bool
	// Pass, when set, asks for this one pass instead (its Op, Ks, X and
	// At; OpEval or OpEvalDiag), and K, X0, Problem and Settings are
	// not used: the pass that starts a placed problem, made where the
	// problem will run, not as a round.
	Pass *osgm.Pass
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
	Pass        *osgm.Pass // a Pass's F, G and D
	Err         string
	Interrupted bool
}

// SolveMessage is a Solve, Solving or Solved.
type SolveMessage interface {
	encode(e *enc) // solvecodec.go
	decode(d *dec)
}

// EncodeSolve is a solve message's bytes: its fields as solvecodec.go
// lays them out, then the CRC-32C of all that. The chunks' CRCs cannot
// see chunks of two messages put together as one: two copies of a
// placement, on two workers, may number theirs alike.
func EncodeSolve(m SolveMessage) ([]byte, error) {
	var e enc
	m.encode(&e)
	if len(e.b)+crcSize > MaxMessageSize {
		return nil, ErrLength
	}
	return binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, castagnoli)), nil
}

const crcSize = 4

// decodeSolve is EncodeSolve's inverse.
func decodeSolve(b []byte, m SolveMessage) error {
	if len(b) > MaxMessageSize || len(b) < crcSize {
		return ErrLength
	}
	end := len(b) - crcSize
	if crc32.Checksum(b[:end], castagnoli) != binary.LittleEndian.Uint32(b[end:]) {
		return ErrTorn
	}
	d := dec{b: b[:end]}
	d.size = end
	m.decode(&d)
	return d.done()
}

// DecodeSolve decodes and checks a Solve.
func DecodeSolve(b []byte) (*Solve, error) {
	var m Solve
	if err := decodeSolve(b, &m); err != nil {
		return nil, err
	}
	if m.Pass != nil {
		return &m, checkPass(m.Pass, len(m.Ranges))
	}
	if len(m.Ranges) == 0 || m.K < 0 || len(m.X0) == 0 || m.Problem.Dim != len(m.X0) || m.Folds < 0 {
		return nil, fmt.Errorf("transport: solve of problem %d with %d shards, %d coordinates (%d in its problem), %d folds", m.K, len(m.Ranges), len(m.X0), m.Problem.Dim, m.Folds)
	}
	return &m, nil
}

// checkPass checks a Solve's pass: what a worker evaluates.
func checkPass(p *osgm.Pass, shards int) error {
	n := len(p.Ks)
	if shards == 0 || p.Op != osgm.OpEval && p.Op != osgm.OpEvalDiag || n == 0 || len(p.X) != n || len(p.At) != 0 && len(p.At) != n {
		return fmt.Errorf("transport: a placed pass (op %v) of %d problems, %d points, over %d shards", p.Op, n, len(p.X), shards)
	}
	for i, x := range p.X {
		if len(x) == 0 || len(x) != len(p.X[0]) || p.Ks[i] < 0 {
			return errors.New("transport: a placed pass's points are ragged, or a problem is negative")
		}
	}
	return nil
}

// DecodeSolving decodes a Solving.
func DecodeSolving(b []byte) (*Solving, error) {
	var m Solving
	if err := decodeSolve(b, &m); err != nil {
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
	if err := decodeSolve(b, &m); err != nil {
		return nil, err
	}
	if p := m.Pass; p != nil {
		if len(p.F) == 0 || len(p.G) != len(p.F) || len(p.D) != 0 && len(p.D) != len(p.F) {
			return nil, errors.New("transport: a placed pass's values, gradients and diagonals do not match")
		}
		return &m, nil
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
