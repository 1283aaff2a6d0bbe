package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"

	"github.com/osgm-svm/osgm/pkg/osgm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// checkpointVersion changes when the checkpoint layout or meaning does
// (2: Newton keeps its preconditioner, taken at the iterate; 3: Newton's
// trust-region radius is LIBLINEAR's, on ||s||_M; 4: the optimiser's
// vectors hold the live coordinates only, when dead ones were left out;
// 5: framed by checkpointMagic and a checksum; L-BFGS keeps its H0
// scale, Gamma; 6: the optimiser's vectors as raw float64 bits; 7: each
// method's state ends in its own CRC-32C, as it came from the process
// that ran the method).
const checkpointVersion = 7

// A checkpoint file is checkpointMagic, the gob-encoded Checkpoint, and
// the SHA-256 of both. The checksum is what stops a damaged copy (a flipped
// bit on disk or in the object store) from resuming into a different
// model without a word: the fingerprints only say which run it belongs to.
const checkpointMagic = "osgm checkpoint\n"

// Checkpoint is what a coordinator needs to continue a run after a crash,
// on this host or another: the optimiser's complete state, and
// fingerprints that tie it to the data and the flags that shaped it.
type Checkpoint struct {
	Version int
	Data    string    // fingerprint of the shards (layout and contents)
	Flags   string    // fingerprint of the flags that change the result
	G0Norm  []float64 // ||grad f(0)|| per problem, for the stopping test
	Opt     osgm.Snapshot
	// Objects names where the run's shards are in an object store (the
	// coordinator's -objstore prefix), for a resumed run to remove what
	// a killed one left. It changes no result, and older checkpoints
	// lack it.
	Objects string
}

// Encode serialises a checkpoint: checkpointMagic, the checkpoint
// without the methods' states (gob), the states (a count, then each as
// its length and bytes), and the SHA-256 of all that.
func (c *Checkpoint) Encode() ([]byte, error) {
	pieces, err := c.Pieces()
	return bytes.Join(pieces, nil), err
}

// Pieces is Encode's bytes in pieces, in order, which view the states
// instead of copying them: they are the bulk (hundreds of MB for many
// classes' L-BFGS), and a writer takes pieces as well as a whole.
func (c *Checkpoint) Pieces() ([][]byte, error) {
	head := *c
	head.Opt.States = nil
	h := bytes.NewBufferString(checkpointMagic)
	if err := gob.NewEncoder(h).Encode(&head); err != nil {
		return nil, err
	}
	pieces := [][]byte{binary.AppendUvarint(h.Bytes(), uint64(len(c.Opt.States)))}
	for _, st := range c.Opt.States {
		pieces = append(pieces, binary.AppendUvarint(nil, uint64(len(st))), st)
	}
	sum := sha256.New()
	for _, p := range pieces {
		sum.Write(p)
	}
	return append(pieces, sum.Sum(nil)), nil
}

// DecodeCheckpoint reads a checkpoint written by Encode. Whether its
// state fits the run is checked when the run resumes from it.
func DecodeCheckpoint(b []byte) (*Checkpoint, error) {
	if !bytes.HasPrefix(b, []byte(checkpointMagic)) {
		return nil, errors.New("not a checkpoint of this format (no header; one written before version 5 cannot be resumed by this build)")
	}
	body, sum := b[:max(len(b)-sha256.Size, 0)], b[max(len(b)-sha256.Size, 0):]
	if want := sha256.Sum256(body); len(body) < len(checkpointMagic) || !bytes.Equal(sum, want[:]) {
		return nil, fmt.Errorf("damaged checkpoint: its checksum does not match its %d bytes", len(b))
	}
	r := bytes.NewReader(body[len(checkpointMagic):])
	var c Checkpoint
	if err := gob.NewDecoder(r).Decode(&c); err != nil {
		return nil, fmt.Errorf("not a checkpoint: %w", err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint version %d, this build reads %d", c.Version, checkpointVersion)
	}
	// The checksum matched: what follows is what Encode wrote, unless a
	// build with the same version wrote it otherwise. Check all the same.
	rest := body[len(body)-r.Len():]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)) {
		return nil, errors.New("not a checkpoint: no count of states")
	}
	rest = rest[k:]
	c.Opt.States = make([][]byte, n)
	for i := range c.Opt.States {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return nil, fmt.Errorf("not a checkpoint: state %d runs past the end", i)
		}
		c.Opt.States[i], rest = rest[k:k+int(l)], rest[k+int(l):]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("not a checkpoint: %d bytes after the states", len(rest))
	}
	return &c, nil
}

// DataFingerprint hashes what the shards hold, in shard order. It depends
// on the file and the shard layout only, never on which worker loaded what.
func DataFingerprint(metas []shard.Meta) string {
	h := sha256.New()
	for _, m := range metas {
		put(h, uint64(m.ID), uint64(m.Rows), uint64(m.NNZ), uint64(m.MaxIndex), math.Float64bits(m.NormSq))
		for i, l := range m.Labels {
			put(h, math.Float64bits(l), uint64(m.LabelCount[i]))
		}
		for c := range m.Cols.All() {
			put(h, uint64(c))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// FlagsFingerprint hashes the settings that change the trajectory. The
// tolerance and the iteration limit only decide where to stop, so a run
// may resume with other values of those.
func FlagsFingerprint(cfg Config) string {
	fp := fmt.Sprintf("c=%v lambda=%v bias=%v method=%s params=%+v init=%v weights=%v holdout=%d",
		cfg.C, cfg.Lambda, cfg.Bias, methodName(cfg.Method), cfg.Params, cfg.Init != nil, cfg.Weights, cfg.Holdout)
	if cfg.Loss != shard.SquaredHinge { // the squared hinge's checkpoints keep their fingerprints
		fp += " loss=" + cfg.Loss.String()
	}
	if cfg.Loss.Regression() {
		fp += fmt.Sprintf(" p=%v", cfg.Epsilon)
	}
	return fp
}

func methodName(m string) string {
	if m == "" {
		return osgm.DefaultMethod
	}
	return m
}

func put(h hash.Hash, vs ...uint64) {
	var b [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
}

// ErrMismatch says a checkpoint belongs to other data or other flags.
var ErrMismatch = errors.New("checkpoint does not match this run")

func (c *Checkpoint) check(data, flags string) error {
	if c.Data != data {
		return fmt.Errorf("%w: it was made for other data (or another shard layout)", ErrMismatch)
	}
	if c.Flags != flags {
		return fmt.Errorf("%w: it was made with %q, this run has %q", ErrMismatch, c.Flags, flags)
	}
	return nil
}
